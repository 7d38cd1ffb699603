"""Multi-turn environments and tools (docs/agentic.md): an episode alternates policy turns
and environment replies; tools are plain functions behind `ToolEnvironment`."""

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import ENDINGS, ENV_ERRORS, EpisodeBudgets
from rlvr.envs.tools import ToolEnvironment, tool_schema

__all__ = [
    "ENDINGS",
    "ENV_ERRORS",
    "Environment",
    "EpisodeBudgets",
    "Reply",
    "ToolEnvironment",
    "tool_schema",
]
