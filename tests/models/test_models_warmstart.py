"""Warm start in a reduced setting: stopping rule, cache hit, atomic writes, determinism;
and `load_policy` for the embedded model, local directories and bad names."""

import json
import os
import subprocess
import sys

import pytest
import torch

from rlvr.models import CharTokenizer, HFTokenizer
from rlvr.models import tokenizer as tokenizer_module
from rlvr.tasks import ArithmeticTask
from rlvr.warmstart import load_policy, supervised, warm_start

TASK = {"digits": 1, "ops": "+", "seed": 0, "train_size": 40, "dev_size": 8, "eval_size": 4}
SMALL = {"hidden": 16, "layers": 1, "heads": 2, "kv_heads": 2, "intermediate": 32}
REDUCED = {"max_steps": 4, "eval_every": 2, "batch_size": 8, "model_options": SMALL}


def run(cache_dir, seed=0, progress=False, **overrides):
    settings = {**REDUCED, "target_accuracy": 1.0, **overrides}
    return warm_start("arithmetic", TASK, seed, cache_dir=cache_dir, progress=progress, **settings)


def same_weights(a, b):
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_runs_to_max_steps_writes_meta_and_hits_the_cache(tmp_path):
    model, tokenizer, info = run(tmp_path)
    assert (info["steps"], info["cache_hit"], info["reached_target"]) == (4, False, False)
    meta = json.loads(
        (tmp_path / "warmstart" / info["cache_path"].rsplit("/", 1)[1] / "meta.json").read_text()
    )
    assert meta["steps"] == 4 and meta["dev_accuracy"] == info["dev_accuracy"]
    cached, cached_tokenizer, cached_info = run(tmp_path)
    assert cached_info["cache_hit"] and cached_info["steps"] == 4
    assert same_weights(model, cached) and cached.training
    assert cached_tokenizer.characters == tokenizer.characters


def test_stops_at_the_first_check_that_reaches_the_target(tmp_path):
    _, _, info = run(tmp_path, target_accuracy=0.0)
    assert info["steps"] == 2 and info["reached_target"]


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    a, _, _ = run(tmp_path / "a")
    b, _, _ = run(tmp_path / "b")
    c, _, _ = run(tmp_path / "c", seed=1)
    assert same_weights(a, b) and not same_weights(a, c)


def test_interrupted_save_leaves_no_cache_entry(tmp_path, monkeypatch):
    def fail(self, directory):
        raise KeyboardInterrupt

    monkeypatch.setattr(tokenizer_module.CharTokenizer, "save", fail)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path)
    assert list((tmp_path / "warmstart").iterdir()) == []


def test_settings_are_validated(tmp_path):
    with pytest.raises(ValueError, match="target_accuracy"):
        run(tmp_path, target_accuracy=1.5)
    with pytest.raises(ValueError, match="eval_every"):
        run(tmp_path, eval_every=0)


def test_load_policy_embedded_and_from_a_directory(tmp_path):
    model, _, info = load_policy(
        "embedded",
        "arithmetic",
        TASK,
        0,
        cache_dir=tmp_path,
        progress=False,
        target_accuracy=1.0,
        **REDUCED,
    )
    loaded, tokenizer, _ = load_policy(info["cache_path"], "arithmetic", TASK, 0)
    assert isinstance(tokenizer, CharTokenizer) and same_weights(model, loaded)


def test_load_policy_wraps_hf_tokenizers(tmp_path, word_level_hf_tokenizer):
    model, _, _ = run(tmp_path / "cache")
    model.save_pretrained(tmp_path / "hf")
    word_level_hf_tokenizer(with_pad=False).save_pretrained(tmp_path / "hf")
    _, tokenizer, info = load_policy(str(tmp_path / "hf"), "arithmetic", TASK, 0)
    # transformers 5 picks the tokenizer class from the model type (Qwen2Tokenizer here), so
    # only the EOS id of this word-level vocabulary is expected to survive the round trip.
    assert isinstance(tokenizer, HFTokenizer) and tokenizer.eos_token_id == 1
    assert info["parameters"] == model.num_parameters()


def test_load_policy_names_a_bad_value(tmp_path):
    with pytest.raises(ValueError, match="no-such-model"):
        load_policy(str(tmp_path / "no-such-model"), "arithmetic", TASK, 0)
    with pytest.raises(ValueError, match="only apply to model='embedded'"):
        load_policy(str(tmp_path), "arithmetic", TASK, 0, max_steps=3)


BUILD = """
import hashlib, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from rlvr.warmstart import warm_start
task = {"digits": 2, "ops": "+", "train_size": 200, "dev_size": 8, "eval_size": 4}
model, _, _ = warm_start("arithmetic", task, 0, cache_dir=sys.argv[2], progress=False,
                         max_steps=3, eval_every=3, target_accuracy=1.0)
digest = hashlib.sha256()
for tensor in model.state_dict().values():
    digest.update(tensor.numpy().tobytes())
print(digest.hexdigest(), torch.get_num_threads())
"""


def test_weights_do_not_depend_on_the_building_process_thread_count(tmp_path):
    # The default model size: its matmuls split their reductions differently on 1 and 2
    # threads, which moved the stopping step of the real warm start between machines.
    outputs = []
    for threads in (1, 2):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        done = subprocess.run(
            [sys.executable, "-c", BUILD, str(threads), str(tmp_path / f"cache{threads}")],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outputs.append(done.stdout.split())
    (digest1, threads1), (digest2, threads2) = outputs
    assert digest1 == digest2
    assert (threads1, threads2) == ("1", "2")  # the caller's thread count is restored


def test_dev_gate_is_a_function_of_the_weights(tmp_path, monkeypatch):
    # Every check samples with a generator seeded the same way: the same weights give the
    # same dev accuracy at every check, so an extra check cannot move the stopping step.
    seen = []
    original = supervised.dev_accuracy

    def record(model, tokenizer, task, problems, generator, max_new_tokens):
        seen.append(generator.initial_seed())
        return original(model, tokenizer, task, problems, generator, max_new_tokens)

    monkeypatch.setattr(supervised, "dev_accuracy", record)
    run(tmp_path, max_steps=6, eval_every=2)
    assert seen == [supervised.DEV_SEED_OFFSET] * 3


def test_trains_on_train_and_gates_on_dev_never_eval(tmp_path, monkeypatch):
    requested = []
    original = ArithmeticTask.problems

    def spy(self, split):
        requested.append(split)
        return original(self, split)

    monkeypatch.setattr(ArithmeticTask, "problems", spy)
    run(tmp_path)
    assert sorted(set(requested)) == ["dev", "train"]


def test_progress_is_printed_as_lines_off_a_terminal(tmp_path, capsys):
    run(tmp_path, progress=True)
    first, *lines, last = capsys.readouterr().err.splitlines()
    # what it stops at; 4 steps with a check every 2: two lines, e.g. "... step 2/4 loss
    # 4.123 dev_acc 0.000 ..."; and where it is cached
    assert first.startswith("warm start arithmetic: stops at dev accuracy ")
    assert first.endswith(" or 4 steps (dev checked every 2; cached for the next run)")
    assert [line.split(" loss ")[0] for line in lines] == [
        "warm start arithmetic: step 2/4",
        "warm start arithmetic: step 4/4",
    ]
    assert all(" dev_acc " in line and " elapsed " in line for line in lines)
    assert lines[0].endswith("s to go")  # the ETA to the cap
    assert "dev accuracy" in last and f"cached at {tmp_path}" in last
