"""Loading a model from a directory prints nothing of transformers' own: no per-shard
"Loading weights" bar (the agent-builder replay found it on `rlvr eval` of a checkpoint)."""

from hf_testlib import build_tiny_hf_model
from transformers.utils import logging as hf_logging

from rlvr.models.load import load_pretrained


def test_loading_a_directory_shows_no_transformers_bar(tmp_path, capfd):
    model_dir = build_tiny_hf_model(tmp_path / "model")
    hf_logging.enable_progress_bar()  # as on a user's machine; the test must see the bar
    capfd.readouterr()
    load_pretrained(str(model_dir))
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err
    assert hf_logging.is_progress_bar_enabled()  # restored for the caller
