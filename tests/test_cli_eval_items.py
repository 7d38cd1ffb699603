"""`rlvr eval --items FILE` without `--k` used to write nothing and say nothing (issue 40's
trial): it is refused in one line that says what selects the per-item records."""

from __future__ import annotations

from rlvr.cli import main


def test_items_without_k_is_refused_before_anything_loads(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    code = main(["eval", "--model", "no/such-model", "--items", str(items)])
    err = capsys.readouterr().err
    assert code != 0 and not items.exists()
    assert f"--items {items}: the per-item records are written by the pass@k evaluation" in err
    assert "add --k 1" in err
    assert len(err.strip().splitlines()) == 1
