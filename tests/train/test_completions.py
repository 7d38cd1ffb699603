"""The completions table: hand-worked segments, turns and row values; the schema of a real
run's rows (one turn and multi-turn); logging leaves training unchanged; bounded size;
a resumed run rewrites the steps it redoes."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from local_model import local_policy_dir, local_trainer

from rlvr.algo import PreparedBatch
from rlvr.rollout.episodes import EpisodeRecord
from rlvr.runlog.completions import read_completions
from rlvr.train.collect import Collected
from rlvr.train.config import resolve_config
from rlvr.train.records.completion_rows import (
    MAX_CHARS,
    choose_rows,
    completion_rows,
    segments,
    turns,
)
from rlvr.train.records.rollout_record import Rollout
from rlvr.train.run import run_training

LETTERS = "abcdefghijklmnopqrstuvwxyz"
ECHO = {
    "environment": "user_envs:Echo",
    "episode": {"max_turns": 4, "max_turn_tokens": 3},
    "max_new_tokens": 24,
}
KEYS = {
    "step": int,
    "prompt": str,
    "completion": str,
    "group": int,
    "sample": int,
    "reward": float,
    "rewards": dict,
    "correct": bool,
    "formatted": (bool, type(None)),
    "advantage": (float, type(None)),
    "length": int,
    "truncated": bool,
    "kept": bool,
    "segments": list,
    "turns": (list, type(None)),
    "env_failed": (str, type(None)),
    "tool_errors": (int, type(None)),
    "invalid_calls": (int, type(None)),
    "shaped_reward": (float, type(None)),
    "cut": bool,
}
KINDS = {"policy", "observation", "forced", "masked"}


def letters(ids: list[int]) -> str:
    return "".join(LETTERS[i] for i in ids)


def test_segments_split_the_text_at_each_change_of_token_class():
    kinds = ["policy", "policy", "observation", "observation", "policy"]
    parts = segments([0, 1, 2, 3, 4], kinds, "abcde", letters)
    assert parts == [
        {"kind": "policy", "text": "ab"},
        {"kind": "observation", "text": "cd"},
        {"kind": "policy", "text": "e"},
    ]


def test_segments_concatenate_to_the_text_when_a_prefix_does_not_decode_to_a_prefix():
    # A byte-level BPE: ids 0..2 encode one character whose prefixes decode to '\ufffd'.
    def decode(ids):
        return "é" if ids[:3] == [0, 1, 2] else "\ufffd" * len(ids)

    parts = segments([0, 1, 2], ["policy", "observation", "policy"], "é", decode)
    assert "".join(p["text"] for p in parts) == "é"


def test_turns_pair_each_policy_text_with_the_observation_that_answers_it():
    parts = [
        {"kind": "policy", "text": "ab"},
        {"kind": "observation", "text": "[ab]"},
        {"kind": "masked", "text": "cd"},
        {"kind": "observation", "text": "[cd]"},
        {"kind": "policy", "text": "e"},
    ]
    got = turns(parts, EpisodeRecord(turns=3, ended_by="max_turns"))
    assert [(t["turn"], t["policy"], t["observation"], t["ended"]) for t in got] == [
        (0, "ab", "[ab]", None),
        (1, "cd", "[cd]", None),
        (2, "e", None, "max_turns"),
    ]
    assert [t["tool_call"] for t in got] == [None, None, None]  # a record without calls


def test_turns_carry_the_call_the_environment_read_in_each_turn():
    parts = [
        {"kind": "policy", "text": "x <calc>6*7</calc>"},
        {"kind": "observation", "text": "=42"},
        {"kind": "policy", "text": " done"},
    ]
    record = EpisodeRecord(turns=2, ended_by="answer", calls=["<calc>6*7</calc>"])
    got = turns(parts, record)
    assert [(t["policy"], t["tool_call"], t["observation"]) for t in got] == [
        ("x <calc>6*7</calc>", "<calc>6*7</calc>", "=42"),
        (" done", None, None),
    ]


def test_rows_are_whole_groups_in_batch_order_and_leave_the_training_rng_alone():
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    rows = choose_rows(group_ids, 5, seed=3, step=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert rows == choose_rows(group_ids, 5, seed=3, step=7)  # deterministic in (seed, step)
    assert len(rows) == 5 and rows == sorted(rows)
    whole = [g for g in range(3) if sum(int(group_ids[r]) == g for r in rows) == 3]
    assert len(whole) == 1  # one whole group of 3, then 2 rows of another
    assert {tuple(choose_rows(group_ids, 3, seed=3, step=s)) for s in range(20)} == {
        (0, 1, 2),
        (3, 4, 5),
        (6, 7, 8),
    }


def _hand_batch():
    """Two groups of two; group 0 (all wrong) was dropped by dynamic sampling, group 1
    kept, its second response truncated and filtered (mask 0)."""
    generated = Rollout(
        prompt_ids=[[0, 1]] * 4,
        response_ids=torch.tensor([[2, 3, 0], [4, 0, 0], [5, 6, 7], [8, 9, 10]]),
        response_mask=torch.tensor([[1.0, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]]),
        sampler_logprobs=torch.zeros(4, 3),
        truncated=torch.tensor([False, False, False, True]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        problem_uids=["p0", "p0", "p1", "p1"],
        texts=["cd", "e", "fgh", "ijk"],
        correct=torch.tensor([0.0, 0, 1, 0]),
        formatted=torch.tensor([1.0, 0, 1, 1]),
        rewards=torch.tensor([0.0, 0, 1.5, 0.5]),
        reward_values=[{"f": 0.0, "g": None}, {"f": 0.0, "g": 0.0}, {"f": 1.0, "g": 0.5}, {}],
    )
    kept = generated.select(torch.tensor([2, 3]))
    prepared = PreparedBatch(
        keep=torch.tensor([True, True]),
        shaped_rewards=torch.tensor([1.5, 0.25]),
        response_mask=torch.tensor([[1.0, 1, 0], [0, 0, 0]]),
        advantages=torch.tensor([[1.0, 3.0, 9.0], [0.0, 0, 0]]),
        loss_weights=torch.zeros(2, 3),
        nll_weights=None,
        returns=None,
    )
    collected = Collected(generated, kept, 0, 0.0, 0.0, {})
    return collected, prepared


def test_row_values_come_from_the_batch_the_update_used():
    collected, prepared = _hand_batch()
    rows = completion_rows(collected, prepared, letters, step=4, seed=0, count=4)
    by_text = {r["completion"]: r for r in rows}
    dropped, trained, filtered = by_text["cd"], by_text["fgh"], by_text["ijk"]
    assert (dropped["kept"], dropped["advantage"], dropped["shaped_reward"]) == (False, None, None)
    assert dropped["segments"] == [{"kind": "masked", "text": "cd"}]
    # Mean advantage over the trained tokens: (1 + 3) / 2 = 2; the third token is masked.
    assert trained["advantage"] == 2.0 and trained["kept"] is True
    assert trained["segments"] == [
        {"kind": "policy", "text": "fg"},
        {"kind": "masked", "text": "h"},
    ]
    assert (trained["group"], trained["sample"], trained["length"]) == (1, 0, 3)
    assert (trained["reward"], trained["shaped_reward"]) == (1.5, 1.5)
    assert trained["rewards"] == {"f": 1.0, "g": 0.5}
    assert (trained["correct"], trained["formatted"], trained["truncated"]) == (True, True, False)
    assert (filtered["kept"], filtered["truncated"], filtered["sample"]) == (False, True, 1)
    assert filtered["prompt"] == "ab" and dropped["rewards"] == {"f": 0.0, "g": None}


def test_long_texts_are_cut_and_the_segments_with_them():
    collected, prepared = _hand_batch()
    long = "x" * (MAX_CHARS + 500)
    collected.generated.texts[2] = long
    collected.generated.prompt_ids[2] = [0] * (MAX_CHARS + 10)
    row = next(
        r
        for r in completion_rows(collected, prepared, letters, 1, 0, 4)
        if r["group"] == 1 and r["sample"] == 0
    )
    assert row["cut"] is True
    assert row["completion"] == long[:MAX_CHARS]
    assert "".join(p["text"] for p in row["segments"]) == row["completion"]
    assert len(row["prompt"]) == MAX_CHARS and row["prompt"].startswith("…")


def _check_schema(row: dict) -> None:
    assert set(row) == set(KEYS)
    for key, kind in KEYS.items():
        assert isinstance(row[key], kind), (key, row[key])
    assert all(isinstance(v, float | type(None)) for v in row["rewards"].values())
    assert all(p["kind"] in KINDS and p["text"] for p in row["segments"])
    assert "".join(p["text"] for p in row["segments"]) == row["completion"]


def test_multi_turn_rows_classify_observation_tokens(tmp_path):
    trainer = local_trainer(tmp_path, **ECHO)
    trainer.train_step()
    collected, prepared = trainer.last_batch
    decode = lambda ids: trainer.tokenizer.decode(ids, skip_special=True)  # noqa: E731
    rows = completion_rows(collected, prepared, decode, step=1, seed=0, count=8)
    assert len(rows) == 8
    observations = 0
    for row in rows:
        _check_schema(row)
        gen_row = next(
            r
            for r in range(len(collected.generated))
            if int(collected.generated.group_ids[r]) == row["group"]
            and collected.generated.texts[r] == row["completion"]
        )
        forced = collected.generated.forced_mask[gen_row]
        seen = [p["text"] for p in row["segments"] if p["kind"] == "observation"]
        ids = collected.generated.response_ids[gen_row]
        # The observation segments are exactly the decoded runs of forced tokens.
        runs, current = [], []
        for t in range(row["length"]):
            if forced[t] > 0:
                current.append(int(ids[t]))
            elif current:
                runs, current = [*runs, decode(current)], []
        runs += [decode(current)] if current else []
        assert seen == runs
        observations += len(seen)
        assert [t["observation"] for t in row["turns"] if t["observation"]] == seen
        assert row["turns"][-1]["ended"] == collected.generated.episodes[gen_row].ended_by
    assert observations > 0


def _config(tmp_path, name, **overrides):
    return resolve_config(
        {
            "model": local_policy_dir(tmp_path),
            "task_options": {"digits": 2, "ops": "+"},
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 8,
            "eval_size": 4,
            "eval_every": 10,  # evaluations before the first and after the last step only
            "progress": False,
            "report_to": [],
            "out": str(tmp_path / name),
            **overrides,
        }
    )


def _without_time(path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_logging_completions_does_not_change_training(tmp_path):
    run_training(_config(tmp_path, "on", steps=2, completions_every=1, completions_rows=5))
    run_training(_config(tmp_path, "off", steps=2, completions_every=0))
    assert _without_time(tmp_path / "on" / "metrics.jsonl") == _without_time(
        tmp_path / "off" / "metrics.jsonl"
    )
    index = json.loads((tmp_path / "on" / "completions" / "index.json").read_text())
    assert index == {"schema": 1, "every": 1, "rows_per_step": 5, "steps": [1, 2]}
    for step in (1, 2):
        rows = read_completions(tmp_path / "on", step)
        assert len(rows) == 5 and all(r["step"] == step for r in rows)
        for row in rows:
            _check_schema(row)
    assert not (tmp_path / "off" / "completions").exists()


def test_a_resumed_run_rewrites_the_steps_it_redoes(tmp_path):
    settings = {"steps": 3, "save_every": 2, "completions_every": 1, "completions_rows": 4}
    run_training(_config(tmp_path, "whole", **settings))
    run_training(_config(tmp_path, "cut", **settings))
    cut = tmp_path / "cut"
    # As if killed after logging step 3, before its checkpoint: step 2's is the newest.
    shutil.rmtree(cut / "checkpoint")
    (cut / "summary.json").unlink()
    folder = cut / "completions"
    (folder / "step_000003.jsonl").write_text('{"stale": true}\n')
    (folder / "step_000004.jsonl").write_text('{"stale": true}\n')  # a longer first attempt
    run_training(_config(tmp_path, "cut", **settings), mode="resume")
    for step in (1, 2, 3):
        assert read_completions(cut, step) == read_completions(tmp_path / "whole", step)
    assert not (folder / "step_000004.jsonl").exists()
    assert json.loads((folder / "index.json").read_text())["steps"] == [1, 2, 3]


def test_the_table_settings_are_checked():
    with pytest.raises(ValueError, match="completions_every must be an integer ≥ 0, got -1"):
        resolve_config({"completions_every": -1})
    with pytest.raises(ValueError, match="completions_rows=4 applies to the completions table"):
        resolve_config({"completions_every": 0, "completions_rows": 4})
