"""A chat template that drops `tools=` (SmolLM2's does) is warned about once per task:
the model would never be told about its tools (issue 40's trial: 0 tool calls in 52
episodes, no warning). A template that declares them, or a system prompt that already
names every tool, is not warned about."""

from __future__ import annotations

import warnings

import pytest
from hf_testlib import CHAT_TEMPLATE, QWEN_TOOLS_TEMPLATE, build_tokenizer

from rlvr.models.hf_policy import chat_formatted
from rlvr.models.policy_options import PolicyOptions
from rlvr.models.tokenizer import HFTokenizer
from rlvr.tasks.base import Problem

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


class _Task:
    def problems(self, split):
        return [Problem(f"t/{split}/0", "What is 12 * 34?", "408", " \\boxed{408}")]


def _tokenizer(template: str) -> HFTokenizer:
    return HFTokenizer(build_tokenizer(["What is 12 * 34? calc tool"] * 3, template))


def _formatted(template: str, system_prompt: str | None = None, tools=(CALC,)):
    options = PolicyOptions.from_dict({"chat_template": True, "system_prompt": system_prompt})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = chat_formatted(_Task(), _tokenizer(template), options, list(tools) or None)
    dropped = [w for w in caught if "ignores tools=" in str(w.message)]
    return task.problems("train")[0].prompt, dropped


def test_a_template_that_drops_tools_is_warned_about_once():
    prompt, dropped = _formatted(CHAT_TEMPLATE)
    assert "calc" not in prompt  # the premise: the declaration is gone
    assert len(dropped) == 1 and dropped[0].category is UserWarning
    message = str(dropped[0].message)
    assert "the tools ['calc']" in message and "policy.system_prompt" in message


def test_a_template_that_declares_tools_is_not_warned_about():
    prompt, dropped = _formatted(QWEN_TOOLS_TEMPLATE)
    assert '"name": "calc"' in prompt and not dropped


def test_a_system_prompt_naming_every_tool_silences_it():
    system = 'Call calc as <tool_call>{"name": "calc", "arguments": {"expression": "1+1"}}'
    prompt, dropped = _formatted(CHAT_TEMPLATE, system_prompt=system)
    assert "calc" in prompt and not dropped
    _, dropped = _formatted(CHAT_TEMPLATE, system_prompt="You are a helpful assistant.")
    assert len(dropped) == 1


@pytest.mark.parametrize("template", [CHAT_TEMPLATE, QWEN_TOOLS_TEMPLATE])
def test_no_tools_no_warning(template):
    _, dropped = _formatted(template, tools=())
    assert not dropped
