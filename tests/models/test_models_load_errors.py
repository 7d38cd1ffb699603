"""Loading a model by path says what is wrong in one line: a local path that does not
exist (not a hub connection failure), or a directory without tokenizer files (not an
empty tokenizer built from config.json alone)."""

from __future__ import annotations

import shutil

import pytest
from hf_testlib import build_tiny_hf_model

from rlvr.models.load import load_pretrained


@pytest.mark.parametrize("name", ["./models/qwen", "/no/such/dir/qwen", "~/no-such-model"])
def test_a_missing_local_path_is_named_as_such(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as err:
        load_pretrained(name)
    message = str(err.value)
    assert f"model={name!r}: the local path" in message and "does not exist" in message
    assert "\n" not in message and "connect" not in message and "Repo id" not in message


def test_a_directory_without_tokenizer_files_is_refused_in_one_line(tmp_path):
    full = build_tiny_hf_model(tmp_path / "full")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):  # weights, no tokenizer
        shutil.copy(full / name, bare / name)
    with pytest.raises(ValueError) as err:
        load_pretrained(str(bare))
    message = str(err.value)
    assert message.startswith(f"model={str(bare)!r}: the directory has no tokenizer files")
    assert "tokenizer.json" in message and "tokenizer_config.json" in message
    assert "\n" not in message
    _, tokenizer, _ = load_pretrained(str(full))  # the complete directory loads
    assert tokenizer.vocab_size > 1
