"""A tiny chat model (byte-level BPE, Qwen-style tools template) calling a tool through
its own template, end to end: the tools are declared in the prompt, `<tool_call>` turns
are parsed (malformed ones answered and counted), results come back as the template's
tool message, forced and out of every count, the trainer scores what the sampler drew,
and a resumed run equals an uninterrupted one. The turns are scripted
(`chat_tool_policy.py` says why); everything after the sampler is rlvr's."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from chat_tool_policy import (
    ToolCallingEngine,
    build_chat_model,
    tool_config,
    use_tool_calling_engine,
)
from rounding_testlib import logprob_atol
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.envs.chat_tools import ChatFrame
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer
from rlvr.train.run import run_training


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("chat_model"))


def test_tool_calls_through_the_chat_template_train(model_dir, tmp_path, monkeypatch):
    use_tool_calling_engine(monkeypatch)
    trainer = Trainer(resolve_config(tool_config(model_dir, tmp_path)))
    prompt = trainer.pool.problems[0].prompt  # as the sampler sees it:
    assert '<tools>\n{"type": "function", "function": {"name": "calc"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    collected = trainer._collect()
    rollout, generated = collected.rollout, collected.generated
    frame = ChatFrame.from_tokenizer(trainer.tokenizer.hf_tokenizer, False, [])
    # Sample 0 of each group called calc: its forced tokens are the frame around "2i".
    row = 0
    ids = generated.response_ids[row][generated.response_mask[row] > 0].tolist()
    forced = generated.forced_mask[row][generated.response_mask[row] > 0].tolist()
    observed = [i for i, f in zip(ids, forced, strict=True) if f]
    asked = trainer.tokenizer.decode(generated.prompt_ids[row])
    apples = int(asked.split("Tom has ")[1].split()[0])
    assert observed == trainer.tokenizer.encode(frame.wrap(str(2 * apples)))
    assert generated.texts[row].endswith(f"\\boxed{{{2 * apples}}}")
    # per group: one valid call, two malformed ones (bad JSON, unknown tool), one answer
    episodes = generated.episodes
    assert [(e.tool_calls, e.invalid_calls) for e in episodes[:4]] == [
        (1, 0),
        (0, 1),
        (0, 1),
        (0, 0),
    ]
    # Observations are context: out of the loss mask, and the trainer's log-probs equal
    # the sampler's on every policy token, those after an observation included.
    observation = rollout.forced_mask > 0
    assert observation.any() and (rollout.loss_mask[observation] == 0).all()
    recomputed = trainer._logprobs(trainer.model, rollout)
    policy = rollout.loss_mask > 0
    assert (policy & (rollout.forced_mask.cumsum(-1) > 0)).any()
    ratio = (recomputed[policy] - rollout.sampler_logprobs[policy]).exp()
    # Sampler and trainer add in other orders: ratios within e^τ − 1 of 1 (rounding_testlib).
    bound = math.expm1(logprob_atol(trainer.model.config))
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=bound, rtol=0)
    metrics = trainer.train_step()
    assert metrics["env/valid_call_rate"] == pytest.approx(1 / 3)  # 1 of 3 attempts per group
    assert metrics["env/tool_calls"] == 0.25 and metrics["env/tool_success_rate"] == 1.0
    assert metrics["reward/accuracy"] == 0.25  # the calc sample is right, the rest wrong
    assert metrics["train/update_skipped"] == 0.0


def _metrics(out) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    timed = ("time/", "env/tool_latency_s")  # wall-clock, the one thing a resume changes
    return [{k: v for k, v in json.loads(x).items() if not k.startswith(timed)} for x in lines]


def test_a_resumed_tool_run_equals_an_uninterrupted_one(model_dir, tmp_path, monkeypatch):
    use_tool_calling_engine(monkeypatch)
    values = tool_config(model_dir, tmp_path, steps=2, save_every=1, eval_every=1, eval_size=2)
    whole = resolve_config({**values, "out": str(tmp_path / "whole")})
    run_training(whole)
    first = resolve_config({**values, "steps": 1, "out": str(tmp_path / "part")})
    run_training(first)
    run_training(replace(first, steps=2), mode="resume")
    assert _metrics(tmp_path / "part") == _metrics(tmp_path / "whole")
    a = load_file(str(tmp_path / "whole" / "checkpoint" / "policy" / "model.safetensors"))
    b = load_file(str(tmp_path / "part" / "checkpoint" / "policy" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_rlvr_eval_runs_the_runs_tools_or_none(model_dir, tmp_path, monkeypatch, capsys):
    """`rlvr eval --run` evaluates in the run's episodes, tools declared and tool use
    reported with CIs; `--tools off` evaluates the same checkpoint in one turn."""
    use_tool_calling_engine(monkeypatch)
    import rlvr.parts.build

    monkeypatch.setattr(
        rlvr.parts.build,
        "make_engine",
        lambda policy, tokenizer, engine, options, fp32_head: ToolCallingEngine(policy, tokenizer),
    )
    out = tmp_path / "run"
    run_training(resolve_config(tool_config(model_dir, tmp_path, steps=1, eval_size=2)))
    items = tmp_path / "items.jsonl"
    common = ["eval", "--run", str(out), "--k", "4", "--size", "2", "--items", str(items), "--json"]
    assert main(common) == 0
    metrics = json.loads(capsys.readouterr().out)
    # every item: sample 0 calls calc (2 turns), 1 and 2 make malformed calls (2 turns),
    # 3 answers at once (1 turn); so per episode 1/4 valid calls, 2/4 malformed, 7/4 turns,
    # the same for each item: the CI is the point
    expected = {"tool_calls": 0.25, "invalid_calls": 0.5, "tool_errors": 0.0, "turns": 1.75}
    for name, value in expected.items():
        assert metrics[f"eval/{name}"] == value
        assert metrics[f"eval/{name}_ci_low"] == metrics[f"eval/{name}_ci_high"] == value
    record = json.loads(items.read_text().splitlines()[0])
    assert "<tools>" in record["prompt"] and record["tool_calls"] == 0.25
    assert main([*common, "--tools", "off"]) == 0
    one_turn = json.loads(capsys.readouterr().out)
    assert "eval/tool_calls" not in one_turn
    # the calc sample (1 in 4) is right only with the tool; the direct answer i + 1 is
    # right in both (for i = 1)
    assert metrics["eval/avg@4"] - one_turn["eval/avg@4"] == 0.25
    assert "<tools>" not in json.loads(items.read_text().splitlines()[0])["prompt"]
