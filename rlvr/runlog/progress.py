"""Progress of long work. `StepBar`: a tqdm bar over training steps showing reward and
held-out accuracy (with ETA), and for multi-turn runs the episodes' turns and failed
fraction; the warning a run whose episodes mostly run out of tokens gets once.
`Progress`: any other long work (`rlvr eval`, `rlvr compare`), a bar on a terminal and
periodic lines with an ETA elsewhere, opened with what it stops at and closed with a line."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

BUDGET_WARNING = 0.5
"""The fraction of a step's episodes cut by the token budget past which a run is warned."""


class StepBar:
    def __init__(self, total: int, enabled: bool, desc: str, initial: int = 0) -> None:
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="step",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        self._warned = False

    def update(self, metrics: dict[str, float], eval_accuracy: float) -> None:
        episodes = {}
        if "env/turns" in metrics:  # a multi-turn run: how its episodes go
            episodes = {
                "turns": f"{metrics['env/turns']:.2f}",
                "failed": f"{metrics.get('env/failed_frac', 0.0):.2f}",
            }
        self._bar.set_postfix(
            reward=f"{metrics.get('reward/mean', 0.0):.3f}",
            eval_acc=f"{eval_accuracy:.3f}",
            refill=int(metrics.get("rollout/refill_rounds", 0)),
            **episodes,
            refresh=False,
        )
        self._bar.update(1)
        self._warn_budget(metrics)

    def _warn_budget(self, metrics: dict[str, float]) -> None:
        """Once per run: most episodes ended at the token budget, not by answering."""
        cut = metrics.get("env/ended_budget", 0.0)
        if self._warned or cut <= BUDGET_WARNING:
            return
        self._warned = True
        tqdm.write(
            f"rlvr: warning: {cut:.0%} of this step's episodes ran out of tokens before they "
            f"ended (env/ended_budget): an episode's turns and observations share one "
            f"max_new_tokens; raise it (or lower episode.max_turns)",
            file=sys.stderr,
        )

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, enabled: bool, desc: str = "train", initial: int = 0) -> StepBar:
    """A bar over `total` steps that starts at `initial` (a resumed run's finished steps)."""
    return StepBar(total, enabled, desc, initial)


def _seconds(value: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    value = round(value)
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60:02d} s"
    return f"{value // 3600} h {value % 3600 // 60:02d} min"


class Progress:
    """Long work, seen as it goes: on a terminal a tqdm bar (with its ETA); elsewhere (logs,
    CI, pipes) an opening line that says what it stops at, a line every `every_s` seconds
    with the count, the elapsed time and the ETA, and a closing line. Disabled: silent.

    `target` says what ends the work, when not only its count does: "dev accuracy 0.30"
    reads "stops at dev accuracy 0.30 or 3000 steps"; the ETA is then to the count, an
    upper bound."""

    def __init__(
        self,
        desc: str,
        total: int,
        unit: str = "step",
        enabled: bool = True,
        target: str | None = None,
        every_s: float = 30.0,
        file=None,
    ) -> None:
        self.desc, self.total, self.unit, self.enabled = desc, total, unit, enabled
        self.file = file or sys.stderr
        self.every_s, self.done = every_s, 0
        self.started = self.last_line = time.perf_counter()
        self.lines = enabled and not _is_terminal(self.file)
        self._bar = tqdm(
            total=total,
            desc=desc,
            unit=unit,
            disable=not enabled or self.lines,
            file=self.file,
            dynamic_ncols=True,
        )
        stops = f"stops at {target} or {total} {unit}s" if target else f"{total} {unit}s"
        self.say(f"{desc}: {stops}")

    def say(self, text: str) -> None:
        """One line, above the bar on a terminal."""
        if self.enabled:
            tqdm.write(text, file=self.file)

    def update(self, n: int = 1, **postfix: object) -> None:
        self.done += n
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(n)
        now = time.perf_counter()
        if self.lines and now - self.last_line >= self.every_s and self.done < self.total:
            self.last_line = now
            self.say(f"{self.desc}: {self.status()}" + _postfix(postfix))

    def status(self) -> str:
        """'120/300 steps, 1 min 02 s elapsed, ETA 1 min 33 s'."""
        elapsed = time.perf_counter() - self.started
        head = f"{self.done}/{self.total} {self.unit}s, {_seconds(elapsed)} elapsed"
        if not self.done or self.done >= self.total:
            return head
        return head + f", ETA {_seconds(elapsed / self.done * (self.total - self.done))}"

    def close(self, closing: str = "") -> None:
        """End the bar; the closing line says how much was done, in how long, and
        `closing` (e.g. "cached at …")."""
        self._bar.close()
        elapsed = _seconds(time.perf_counter() - self.started)
        self.say(
            f"{self.desc}: done, {self.done} {self.unit}s in {elapsed}"
            + (f"; {closing}" if closing else "")
        )


def _postfix(values: dict[str, object]) -> str:
    return "".join(f", {k} {v}" for k, v in values.items())


def _is_terminal(file) -> bool:
    return bool(getattr(file, "isatty", None)) and file.isatty()
