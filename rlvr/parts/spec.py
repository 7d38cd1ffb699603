"""What names a run's parts: its episodes (environment or tools and their budgets) and how
its model is loaded and sampled from. Plain frozen values, filled from a training config,
a run's config.yaml (`rlvr eval --run`) or the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.models.load import EMBEDDED

EPISODE_FIELDS = ("environment", "environment_options", "tools", "tool_format", "episode")


@dataclass(frozen=True)
class Episodes:
    """The multi-turn fields of a run: `environment` (module:Class) with its
    `environment_options`, or `tools`, called in `tool_format`, under `episode` budgets
    (docs/agentic.md). All empty: the task as it is."""

    environment: str | None = None
    environment_options: dict[str, Any] = field(default_factory=dict)
    tools: list[Any] = field(default_factory=list)
    tool_format: str = "tags"
    episode: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, source: Any) -> Episodes:
        """The fields of `source`: an object with them as attributes (a TrainConfig), a
        mapping (a run's episode fields), or None (none)."""
        if source is None:
            return cls()
        get = source.get if isinstance(source, dict) else lambda name: getattr(source, name)
        return cls(
            environment=get("environment"),
            environment_options=get("environment_options") or {},
            tools=get("tools") or [],
            tool_format=get("tool_format") or "tags",
            episode=get("episode") or {},
        )


@dataclass(frozen=True)
class ModelSpec:
    """How a policy is loaded and sampled from; `rlvr eval --run` fills it from the run's
    config so that a checkpoint is evaluated as it was trained."""

    model: str = EMBEDDED
    """'embedded', a directory such as runs/demo/checkpoint/policy, or a hub id."""
    policy: dict[str, Any] = field(default_factory=dict)
    """`PolicyOptions` of a Hugging Face policy (chat_template, dtype, device, ...)."""
    engine: str = "hf"
    """'hf' (in-process) or 'vllm'."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    fp32_head: bool = True
    """The in-process engine computes the LM head in float32 (the recipe's choice)."""
    think_budget: int | None = None
    """Forced length interruption after this many tokens (`rlvr.rollout.interrupt`)."""
    interrupt_phrase: str = " Final answer:"
