"""A tiny chat policy that calls a tool through its chat template, for end-to-end tests.

The model is `hf_testlib`'s random Qwen2 with a Qwen-style tools template. A random model
never writes a well-formed `<tool_call>`, and teaching it one takes minutes of CPU, so the
turns are scripted while everything else is real: `ToolCallingEngine` emits the scripted
turn's tokens with the model's own log-probs of them (so the trainer's recomputed
log-probs equal the sampler's), and the episode runner, the environment, the chat frame,
the masks, the update and the checkpoints are rlvr's. Per group, sample k mod 4: a valid
Hermes call to `calc`, a call that is not JSON, a call of an unknown tool, and a direct
answer; after a tool result the policy boxes what it read."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
from hf_testlib import QWEN_TOOLS_TEMPLATE, build_tiny_hf_model, gsm8k_rows, write_jsonl

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))

from scripted_engine import EOS, ScriptedEngine

from rlvr.models.logprobs import response_logprobs

TOOLS = ["rlvr.tasks.calculator:calc"]


def call_text(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def script(context: str, k: int) -> str:
    """The policy's next turn given the decoded context (special tokens skipped)."""
    apples = int(re.findall(r"Tom has (\d+) apples", context)[-1])
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", context, re.DOTALL)
    if results:  # box what the tool said (0 after an error)
        return f"\\boxed{{{results[-1] if results[-1].isdigit() else 0}}}" + EOS
    kind = k % 4
    if kind == 0:
        return call_text("calc", {"expression": f"{apples}+{apples}"})
    if kind == 1:
        return '<tool_call>\n{"name": calc}\n</tool_call>'
    if kind == 2:
        return call_text("search", {"query": "apples"})
    return f"\\boxed{{{apples + 1}}}" + EOS  # a wrong direct answer


class ToolCallingEngine(ScriptedEngine):
    """`script`'s turns, scored by `model` at the sampling temperature."""

    def __init__(self, model, tokenizer, fp32_head: bool = True) -> None:
        super().__init__(tokenizer, script)
        self.model, self.fp32_head = model, fp32_head

    def generate_ids(self, prompts, params, generator):
        gen = super().generate_ids(prompts, params, generator)
        with torch.no_grad():
            logprobs = response_logprobs(
                self.model,
                gen.prompt_ids,
                gen.response_ids,
                gen.response_mask,
                self.tokenizer.pad_token_id,
                params.temperature,
                self.fp32_head,
            )
        gen.sampler_logprobs = logprobs * gen.response_mask
        return gen

    def score_ids(self, prompt_ids, response_ids) -> list[torch.Tensor]:
        """The weight-sync probe's log-probs: the model's own, at temperature 1."""
        width = max(map(len, response_ids))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in response_ids])
        mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in response_ids])
        with torch.no_grad():
            scored = response_logprobs(self.model, prompt_ids, ids, mask, pad, 1.0, self.fp32_head)
        return [scored[row, : len(r)] for row, r in enumerate(response_ids)]


def use_tool_calling_engine(monkeypatch) -> None:
    """Every Trainer made from now on in this test samples through `ToolCallingEngine`."""
    import rlvr.train.loop

    def make_engine(model, tokenizer, engine, engine_options, fp32_head):
        return ToolCallingEngine(model, tokenizer, fp32_head)

    monkeypatch.setattr(rlvr.train.loop, "make_engine", make_engine)


def build_chat_model(directory: Path) -> Path:
    texts = tuple(call_text("calc", {"expression": f"{i}+{i}"}) for i in range(1, 20))
    return build_tiny_hf_model(directory, chat_template=QWEN_TOOLS_TEMPLATE, extra_texts=texts)


def tool_config(model_dir: Path, tmp_path: Path, **extra) -> dict:
    """A GRPO run of the chat model with `calc` declared to, and called through, its
    template."""
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(24))
    return {
        "model": str(model_dir),
        "task": "gsm8k",
        "task_options": {"data": data, "dev_size": 2, "eval_size": 4},
        "recipe": "grpo",
        "steps": 2,
        "prompts_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 128,
        "eval_size": 4,
        "eval_every": 2,
        "lr": 1e-3,
        "progress": False,
        "out": str(tmp_path / "run"),
        "policy": {"chat_template": True, "enable_thinking": False},
        "tools": TOOLS,
        "tool_format": "hermes",
        "episode": {"max_turns": 3, "max_tool_calls": 2, "max_observation_tokens": 24},
        **extra,
    }
