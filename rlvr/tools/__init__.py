"""Tool functions a policy can call through `rlvr.envs.ToolEnvironment`."""

from rlvr.tools.python_sandbox import SandboxLimits, make_python_tool, python, run_python
from rlvr.tools.search import Passage, SearchBackend, make_search_tool
from rlvr.tools.special_tokens import neutralise, tokenizer_tokens

__all__ = [
    "Passage",
    "SandboxLimits",
    "SearchBackend",
    "make_python_tool",
    "make_search_tool",
    "neutralise",
    "python",
    "run_python",
    "tokenizer_tokens",
]
