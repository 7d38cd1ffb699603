"""Tools called through a chat model's own template (Qwen, Hermes): `<tool_call>` in, a
`tool` message out.

A chat model that was taught tools expects them declared in its prompt
(`apply_chat_template(messages, tools=[schema, ...])`), calls one as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes / Qwen2.5 / Qwen3) or
`<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>`
(Qwen3-Coder / Qwen3.5), and reads the result as a `role: tool` message. Three pieces:

- `TOOL_CALL_FORMATS`: the call syntaxes by name (`tool_format` in a config); a format is
  its tags and a parser, so another one is a dict entry.
- `ChatToolEnvironment`: the policy's turn ends at the closing tag; the call is parsed and
  the tool run under `tools.call_tool`'s time limit. A call that cannot be parsed, names
  no tool or has wrong arguments is answered with an error observation and counted
  (`Reply.invalid_call`); a tool that raises or hangs, likewise (`Reply.tool_error`).
- `ChatFrame`: the tokens the template puts around a tool message, appended after the
  policy's turn: the end of the assistant turn, the tool message's opening, the result,
  its closing and the next assistant turn's opening (with the empty think block a
  template adds when `enable_thinking` is false). It is computed once, from a fixed
  dummy conversation, never from the real one: templates rewrite earlier assistant turns
  (Qwen3 drops their think blocks), so the text of `[..., assistant, tool]` need not
  extend the text of `[..., assistant]`; what follows the assistant's content does not
  depend on that content. Chat control tokens printed by a tool (`<|im_end|>`) are
  neutralised, so tool output cannot end a turn or forge one.
"""

from __future__ import annotations

import inspect
import json
import re
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.envs.tools import call_tool
from rlvr.tools.special_tokens import neutralise, tokenizer_tokens
from rlvr.verify.timeout import VerifierTimeout


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


class MalformedCall(ValueError):
    """A tool call whose text cannot be read; the message is the policy's error observation."""


def parse_hermes(body: str) -> ToolCall:
    """`{"name": "search", "arguments": {"query": "..."}}` (arguments may be a JSON string,
    as some models write it)."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as error:
        raise MalformedCall(f"the tool call is not valid JSON ({error.msg})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise MalformedCall('the tool call must be a JSON object with a "name" string')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise MalformedCall('"arguments" must be a JSON object') from None
    if not isinstance(arguments, dict):
        raise MalformedCall('"arguments" must be a JSON object')
    return ToolCall(call["name"], arguments)


_FUNCTION = re.compile(r"\s*<function=([^>\s]+)>(.*)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)</parameter>", re.DOTALL)


def parse_qwen_xml(body: str) -> ToolCall:
    """`<function=search><parameter=query>\\nwho\\n</parameter></function>`: values are
    text (one newline either side is the format's, not the value's)."""
    match = _FUNCTION.fullmatch(body)
    if match is None:
        raise MalformedCall("the tool call must be <function=NAME>...</function>")
    name, inner = match.groups()
    arguments = {k: v.removeprefix("\n").removesuffix("\n") for k, v in _PARAMETER.findall(inner)}
    if _PARAMETER.sub("", inner).strip():
        raise MalformedCall("only <parameter=KEY>value</parameter> may be inside <function>")
    return ToolCall(name, arguments)


@dataclass(frozen=True)
class ToolCallFormat:
    open: str
    close: str
    parse: Callable[[str], ToolCall]
    """The text between the tags → the call; raises `MalformedCall`."""


TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {
    "hermes": ToolCallFormat("<tool_call>", "</tool_call>", parse_hermes),
    "qwen_xml": ToolCallFormat("<tool_call>", "</tool_call>", parse_qwen_xml),
}
"""`tool_format` name → how a call is written (add an entry for another model family)."""


def tool_call_format(name: str) -> ToolCallFormat:
    if name not in TOOL_CALL_FORMATS:
        raise ValueError(
            f"tool_format {name!r} is unknown; valid: tags (rlvr's <name>argument</name>), "
            + ", ".join(TOOL_CALL_FORMATS)
        )
    return TOOL_CALL_FORMATS[name]


class ChatToolEnvironment(Environment):
    """An environment whose actions are `tools` called in `format`; see the module
    docstring. Observations are the tools' results as text; `ChatFrame` frames them."""

    def __init__(
        self,
        tools: dict[str, Callable[..., Any]] | list[Callable[..., Any]],
        format: str = "hermes",
        timeout_s: float | dict[str, float] = 5.0,
    ) -> None:
        """`timeout_s`: every call's time limit, or each tool's by name."""
        self.tools = tools if isinstance(tools, dict) else {fn.__name__: fn for fn in tools}
        self.format = tool_call_format(format)
        self.timeout_s = timeout_s
        self.stop = (self.format.close,)

    def step(self, turn: str) -> Reply:
        if not turn.endswith(self.format.close):
            return Reply(done=True)  # no tool call: the turn was the answer
        opening = turn.rfind(self.format.open)
        if opening < 0:
            return _invalid(f"{self.format.close} without {self.format.open}")
        body = turn[opening + len(self.format.open) : -len(self.format.close)]
        try:
            call = self.format.parse(body.strip())
        except MalformedCall as error:
            return _invalid(str(error), body.strip())
        fn = self.tools.get(call.name)
        if fn is None:
            return _invalid(f"no tool {call.name!r}; tools: {', '.join(self.tools)}", body.strip())
        try:
            arguments = _bound(fn, call.arguments)
        except (TypeError, ValueError) as error:
            return _invalid(f"{call.name}: {error}", body.strip())
        return replace(self._run(call.name, fn, arguments), call=body.strip())

    def _run(self, name: str, fn: Callable[..., Any], arguments: dict[str, Any]) -> Reply:
        limit = self.timeout_s[name] if isinstance(self.timeout_s, dict) else self.timeout_s
        started = time.perf_counter()
        try:
            result = call_tool(fn, json.dumps(arguments), limit)
        except VerifierTimeout:
            if time.perf_counter() - started < limit:
                raise  # the episode's own limit (env_timeout_s) ran out first: not the tool's
            text = f"error: {name} timed out after {limit:g}s"
            return Reply(text, tool_call=True, tool_error="timeout")
        except Exception as error:  # the tool's failure is an observation, not a crash
            self.last_error = error  # where it raised: rlvr.envs.notices shows it
            return Reply(
                f"error: {type(error).__name__}: {error}", tool_call=True, tool_error="error"
            )
        return Reply(result, tool_call=True)


def _invalid(reason: str, call: str | None = None) -> Reply:
    return Reply(f"error: {reason}", invalid_call=True, call=call)


def _bound(fn: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments` checked against `fn`'s signature (missing or unknown names raise
    TypeError, an unknown one named with the valid ones); text given for a number, bool,
    list or dict parameter is read as JSON."""
    parameters = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        unknown = [k for k in arguments if k not in parameters]
        if unknown:
            raise TypeError(f"no argument {unknown[0]!r}; it takes {', '.join(parameters)}")
    inspect.signature(fn).bind(**arguments)
    hints = typing.get_type_hints(fn)
    bound = dict(arguments)
    for key, value in arguments.items():
        wanted = hints.get(key, str)
        if isinstance(value, str) and wanted in (int, float, bool, list, dict):
            try:
                bound[key] = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"argument {key!r} must be {wanted.__name__}") from None
    return bound


_ASSISTANT = "rlvrAssistantTurn"
_OBSERVATION = "rlvrToolResult"
_OTHER_OBSERVATION = "rlvrOtherResult"


@dataclass(frozen=True)
class ChatFrame:
    """The text a chat template puts around a tool result appended after the policy's turn
    (see the module docstring): `head + result + tail`."""

    head: str
    """Closes the assistant turn and opens the tool message."""
    tail: str
    """Closes the tool message and opens the next assistant turn (its generation prompt)."""
    controls: tuple[str, ...] = ()
    """The tokenizer's special and added tokens (`<|im_end|>`, `<tool_call>`...)."""

    def wrap(self, result: str) -> str:
        return self.head + result + self.tail

    def neutralise(self, text: str) -> str:
        """`text` with each control token (and the common chat ones) broken by a space
        after its first character (`rlvr.tools.special_tokens`): read as the characters
        it shows, never as the token."""
        return neutralise(text, self.controls)

    @classmethod
    def from_tokenizer(
        cls, hf_tokenizer: Any, enable_thinking: bool | None = None, tools: list | None = None
    ) -> ChatFrame:
        """The frame of `hf_tokenizer`'s chat template; errors name what the template did."""

        def render(messages: list[dict[str, str]], generation: bool) -> str:
            extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
            try:
                return hf_tokenizer.apply_chat_template(
                    messages, tools=tools, tokenize=False, add_generation_prompt=generation, **extra
                )
            except Exception as error:  # jinja's own errors ("roles must alternate", ...)
                raise ValueError(
                    f"tool_format: the chat template cannot render a tool message after an "
                    f"assistant turn ({type(error).__name__}: {error}); use a template that "
                    f"takes role 'tool', or tool_format: tags"
                ) from None

        user = {"role": "user", "content": "rlvrQuestion"}
        frames = []
        for result in (_OBSERVATION, _OTHER_OBSERVATION):
            messages = [user, {"role": "assistant", "content": _ASSISTANT}]
            text = render([*messages, {"role": "tool", "content": result}], True)
            if text.count(_ASSISTANT) != 1 or text.count(result) != 1:
                raise ValueError(
                    "tool_format: the chat template does not show an assistant turn and a "
                    "tool result once each, so the tokens around a tool result are unknown"
                )
            after = text[text.index(_ASSISTANT) + len(_ASSISTANT) :]
            head, _, tail = after.partition(result)
            frames.append((head, tail))
        if frames[0] != frames[1]:
            raise ValueError("tool_format: the chat template frames tool results by content")
        head, tail = frames[0]
        opening = render([user], True).removeprefix(render([user], False))
        if not tail.endswith(opening):
            raise ValueError(
                f"tool_format: after a tool result the chat template does not open an "
                f"assistant turn as its generation prompt does ({opening!r})"
            )
        return cls(head, tail, tokenizer_tokens(hf_tokenizer))


def declare_chat_tools(task: Any, tokenizer: Any, enable_thinking: bool | None) -> None:
    """Give `task` the `observation_frame` of `tokenizer`'s chat template when its tools
    are called through it (`task.tool_schemas`, set by `attach_environment`)."""
    schemas = getattr(task, "tool_schemas", None)
    if schemas:
        hf = getattr(tokenizer, "hf_tokenizer", tokenizer)
        task.observation_frame = ChatFrame.from_tokenizer(hf, enable_thinking, schemas)
