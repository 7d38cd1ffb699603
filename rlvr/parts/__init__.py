"""A run's parts, resolved once, in one place: the task with its environment or tools
(`build_task`), the policy dressed for it — policy options, chat template, the tools
declared to the template (`dress_policy`) — and the engine that samples from it
(`make_engine`, `open_engine`). `rlvr train`, `rlvr eval` (and `--k`) and the service
all call these, so a run's parts go down the floors once and never come back up.

Below `train`, `eval` and `service`; above `models`, `tasks`, `envs`, `rollout` and
`warmstart`, whose pieces it puts together."""

from rlvr.parts.build import (
    ENGINES,
    HF_ENGINE_OPTIONS,
    build_task,
    check_model_options,
    dress_policy,
    interrupted,
    longest_prompt,
    make_engine,
    open_engine,
    with_episodes,
)
from rlvr.parts.spec import Episodes, ModelSpec

__all__ = [
    "ENGINES",
    "HF_ENGINE_OPTIONS",
    "Episodes",
    "ModelSpec",
    "build_task",
    "check_model_options",
    "dress_policy",
    "interrupted",
    "longest_prompt",
    "make_engine",
    "open_engine",
    "with_episodes",
]
