"""The limits of one episode, and what happens when each is reached (docs/agentic.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from rlvr.checks import check_field_types
from rlvr.envs.isolated import isolation_problem

ENV_ERRORS = ("drop", "keep", "stop")
"""What an environment failure (its `step` raised or ran past `env_timeout_s`) costs:
"drop" leaves the prompt group out of the update, "keep" trains on the episode as it ended
(scored by the verifier), "stop" ends the run. The sample is flagged and counted always."""

ENV_ISOLATION = ("none", "process")
"""Where an environment runs: "none" in the trainer's process (a time limit by alarm),
"process" in a worker process per episode (`rlvr.envs.isolated`): a crash, `os._exit`, a
blocked alarm or (with `env_memory_mb`) a memory bomb then costs the sample, not the run."""

ENDINGS = ("answer", "env", "max_turns", "max_tool_calls", "budget", "env_failed")
"""Why an episode ended: the policy answered (EOS), the environment said done, the turn or
tool-call limit, the trajectory's token budget (`max_new_tokens`: truncated), or the
environment failed."""


@dataclass(frozen=True)
class EpisodeBudgets:
    """Limits of an episode; the trajectory's total (policy and observation tokens) is the
    run's `max_new_tokens`."""

    max_turns: int = 4
    """Policy turns; the episode ends after the last one, answered or not."""
    max_tool_calls: int = 3
    """Tool calls the environment runs; the episode ends at the next one."""
    max_turn_tokens: int | None = None
    """Tokens of one policy turn (None: what is left of the trajectory)."""
    max_observation_tokens: int = 64
    """Tokens of one observation; a longer one is cut and ends with `cut_marker`."""
    cut_marker: str = "..."
    """Ends an observation that was cut."""
    env_timeout_s: float = 10.0
    """Time limit of one `Environment.step` call (0: none)."""
    env_errors: str = "drop"
    """What an environment failure costs: one of `ENV_ERRORS`."""
    env_isolation: str = "none"
    """Where the environment runs: one of `ENV_ISOLATION`."""
    env_memory_mb: int | None = None
    """With `env_isolation: process`: MiB of address space the worker may add to the
    trainer's it was forked from (RLIMIT_AS, Linux); None: no limit."""

    def __post_init__(self) -> None:
        check_field_types(self)
        for name, least in (("max_turns", 1), ("max_tool_calls", 0), ("max_observation_tokens", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"episode.{name} must be ≥ {least}, got {getattr(self, name)!r}")
        if self.max_turn_tokens is not None and self.max_turn_tokens < 1:
            raise ValueError(
                f"episode.max_turn_tokens must be ≥ 1 or null, got {self.max_turn_tokens!r}"
            )
        if self.env_timeout_s < 0:
            raise ValueError(
                f"episode.env_timeout_s must be ≥ 0 (0: none), got {self.env_timeout_s!r}"
            )
        if self.env_errors not in ENV_ERRORS:
            raise ValueError(
                f"episode.env_errors must be one of {', '.join(ENV_ERRORS)}, got {self.env_errors!r}"
            )
        self._check_isolation()

    def _check_isolation(self) -> None:
        if self.env_isolation not in ENV_ISOLATION:
            raise ValueError(
                f"episode.env_isolation must be one of {', '.join(ENV_ISOLATION)}, got "
                f"{self.env_isolation!r}"
            )
        if self.env_memory_mb is not None and self.env_isolation != "process":
            raise ValueError(
                f"episode.env_memory_mb={self.env_memory_mb!r} limits an isolated "
                f"environment's worker; set episode.env_isolation: process"
            )
        if self.env_memory_mb is not None and self.env_memory_mb < 1:
            raise ValueError(
                f"episode.env_memory_mb must be ≥ 1 or null, got {self.env_memory_mb!r}"
            )
        problem = isolation_problem(self.env_memory_mb) if self.env_isolation == "process" else None
        if problem:
            raise ValueError(f"episode.env_isolation: process cannot take effect here: {problem}")

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> EpisodeBudgets:
        """Budgets from a config mapping; unknown keys are named with the valid ones."""
        values = dict(values or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ValueError(f"episode: unknown key(s) {unknown}; valid keys: {', '.join(valid)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
