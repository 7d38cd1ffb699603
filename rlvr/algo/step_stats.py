"""Additive step statistics: sums and (numerator, denominator) pairs that merge exactly
across micro-batches and ranks, then finalize into the logged metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepStats:
    """Sums (`add`) and ratios (`add_ratio`) accumulated over micro-batches."""

    sums: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, tuple[float, float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value)

    def add_ratio(self, name: str, numerator: float, denominator: float) -> None:
        num, den = self.ratios.get(name, (0.0, 0.0))
        self.ratios[name] = (num + float(numerator), den + float(denominator))

    def merge(self, other: StepStats) -> StepStats:
        for name, value in other.sums.items():
            self.add(name, value)
        for name, (num, den) in other.ratios.items():
            self.add_ratio(name, num, den)
        return self

    def finalize(self) -> dict[str, float]:
        """Sums as they are; ratios as num/den (0 when nothing was counted)."""
        out = dict(self.sums)
        out.update({k: (n / d if d else 0.0) for k, (n, d) in self.ratios.items()})
        return out
