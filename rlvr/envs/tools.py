"""Tools are plain Python functions; `ToolEnvironment` lets the policy call them.

A tool call is the text `<name>argument</name>` at the end of a policy turn (the closing
tag is a `stop` string, so the turn ends right there). The argument is passed as the
tool's one string parameter, or, when it is a JSON object, as keyword arguments. The
tool's return value, as text, is the observation, wrapped by `observation_format`.
A tool that raises or runs past its time limit answers with an error observation and is
counted (`Reply.tool_error`); a call that names no tool or cannot be parsed is an
invalid call, answered the same way; so is a call of a tool the environment lacks
(`<calc>...</calc>` with no `calc`): its closing tag ends the turn too (`stops_in`), so
it is never taken as the answer. A turn without a tool call is the final answer.

`tool_schema(fn)` describes a tool from its type hints and docstring (the JSON schema chat
templates take as `tools=`), as TRL does.
"""

from __future__ import annotations

import inspect
import json
import re
import time
import typing
from collections.abc import Callable
from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.verify.timeout import VerifierTimeout, alarm_usable, call_with_timeout

_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """`{"type": "function", "function": {name, description, parameters}}` of `fn`: the
    docstring's first paragraph describes it, type hints give each parameter's JSON type,
    parameters without a default are required."""
    hints = typing.get_type_hints(fn)
    properties, required = {}, []
    for name, parameter in inspect.signature(fn).parameters.items():
        properties[name] = {"type": _JSON_TYPES.get(hints.get(name, str), "string")}
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
    description = (inspect.getdoc(fn) or "").split("\n\n")[0].replace("\n", " ")
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def call_tool(fn: Callable[..., Any], argument: str, timeout_s: float) -> str:
    """`fn(argument)` (or `fn(**json)` for a JSON object) as text, within `timeout_s`.

    Tools run in-process under an alarm on the main thread (a thread elsewhere): they are
    the project's or the user's own functions, trusted to be importable but not to be
    quick; untrusted code runs in a sandboxed tool of its own (the python tool)."""
    kwargs = None
    if argument.strip().startswith("{"):
        try:
            kwargs = json.loads(argument)
        except json.JSONDecodeError:
            kwargs = None
    args = (kwargs,) if isinstance(kwargs, dict) else (argument,)
    call = _call_kwargs if isinstance(kwargs, dict) else _call_text
    mode = "alarm" if alarm_usable() else "thread"
    return str(call_with_timeout(call, (fn, *args), timeout_s, mode))


def _call_text(fn: Callable[..., Any], argument: str) -> Any:
    return fn(argument)


def _call_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return fn(**kwargs)


CLOSING_TAG = re.compile(r"</([A-Za-z_][A-Za-z0-9_]*)>")
NOT_CALLS = ("think", "answer")
"""Tags a policy writes that are not tool calls: a reasoning model's thoughts, an answer."""


class ToolEnvironment(Environment):
    """An environment whose only actions are calls of `tools`; see the module docstring."""

    def __init__(
        self,
        tools: dict[str, Callable[..., Any]] | list[Callable[..., Any]],
        observation_format: str = "<result>{result}</result>",
        timeout_s: float = 5.0,
    ) -> None:
        self.tools = tools if isinstance(tools, dict) else {fn.__name__: fn for fn in tools}
        for name in self.tools:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"tool name {name!r} must be an identifier (it becomes a tag)")
        self.observation_format = observation_format
        self.timeout_s = timeout_s
        self.stop = tuple(f"</{name}>" for name in self.tools)
        self.last_error: BaseException | None = None
        """The exception of the last tool that raised (`rlvr.envs.notices` shows where)."""

    def stops_in(self, text: str) -> tuple[str, ...]:
        """The closing tags in `text`, after their opening tag, of names that are not tools
        (nor `NOT_CALLS`): a call of a tool this environment lacks ends the turn, like a
        known one's, and is answered with an error (`step`), never taken as the answer."""
        found = []
        for match in CLOSING_TAG.finditer(text):
            name = match.group(1)
            call = name not in self.tools and name not in NOT_CALLS
            if call and f"<{name}>" in text[: match.start()]:
                found.append(match.group(0))
        return tuple(dict.fromkeys(found))

    def step(self, turn: str) -> Reply:
        name = next((n for n in self.tools if turn.endswith(f"</{n}>")), None)
        if name is None:
            return self._unknown(turn) or Reply(done=True)  # no call: the turn was the answer
        opening = turn.rfind(f"<{name}>")
        if opening < 0:
            return Reply(self._wrap(f"error: </{name}> without <{name}>"), invalid_call=True)
        argument = turn[opening + len(name) + 2 : -(len(name) + 3)]
        call = turn[opening:]
        started = time.perf_counter()
        try:
            result = call_tool(self.tools[name], argument, self.timeout_s)
        except VerifierTimeout:
            if time.perf_counter() - started < self.timeout_s:
                raise  # the episode's own limit (env_timeout_s) ran out first: not the tool's
            text = f"error: {name} timed out after {self.timeout_s:g}s"
            return Reply(self._wrap(text), tool_call=True, tool_error="timeout", call=call)
        except Exception as error:  # the tool's failure is an observation, not a crash
            self.last_error = error
            text = f"error: {type(error).__name__}: {error}"
            return Reply(self._wrap(text), tool_call=True, tool_error="error", call=call)
        return Reply(self._wrap(result), tool_call=True, call=call)

    def _unknown(self, turn: str) -> Reply | None:
        """The error a call of a tool this environment lacks is answered with (None: the
        turn makes no such call)."""
        closing = CLOSING_TAG.search(turn[turn.rfind("</") :]) if "</" in turn else None
        if closing is None or not turn.endswith(closing.group(0)):
            return None
        name = closing.group(1)
        if name in NOT_CALLS or turn.rfind(f"<{name}>") < 0:
            return None
        text = f"error: no tool {name!r}; tools: {', '.join(self.tools)}"  # as chat formats say
        return Reply(self._wrap(text), invalid_call=True, call=turn[turn.rfind(f"<{name}>") :])

    def _wrap(self, result: str) -> str:
        return self.observation_format.format(result=result)
