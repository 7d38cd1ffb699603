"""Warm start in a reduced setting: stopping rule, cache hit, atomic writes, determinism;
and `load_policy` for the embedded model, local directories and bad names."""

import json

import pytest
import torch

from rlvr.models import CharTokenizer, HFTokenizer, load_policy, warm_start
from rlvr.models import tokenizer as tokenizer_module

TASK = {"digits": 1, "ops": "+", "seed": 0, "train_size": 40, "dev_size": 8, "eval_size": 4}
SMALL = {"hidden": 16, "layers": 1, "heads": 2, "kv_heads": 2, "intermediate": 32}
REDUCED = {"max_steps": 4, "eval_every": 2, "batch_size": 8, "model_options": SMALL}


def run(cache_dir, seed=0, **overrides):
    settings = {**REDUCED, "target_accuracy": 1.0, **overrides}
    return warm_start("arithmetic", TASK, seed, cache_dir=cache_dir, progress=False, **settings)


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
