"""studies/household_credit/study.py: its pre-registration parses (the hypothesis names the
three arms, the compare matrix and TEMPO's config are valid) and the critic's error drop,
TEMPO's manipulation check, is worked by hand. The study itself is not run here: it needs
the 22-minute household warm start (studies/household_credit/README.md)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

STUDY = Path(__file__).parents[2] / "studies" / "household_credit" / "study.py"


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("household_credit_study", STUDY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_error_drop_is_the_first_five_td_steps_minus_the_last_five(study):
    warmup = [{"step": -1, "critic/abs_error": 9.0}, {"step": 0, "critic/abs_error": 9.0}]
    errors = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0]
    td = [{"step": i, "critic/abs_error": e} for i, e in enumerate(errors, 1)]
    # first five: (0.9 + 0.8 + 0.7 + 0.6 + 0.5)/5 = 0.7; last five: (0.2 + 0.1)/5 = 0.06
    assert study.error_drop(warmup + td) == pytest.approx(0.64, abs=1e-12)  # float sums
    # three TD steps: halves of one step each, 0.5 − 0.2
    three = [{"step": i, "critic/abs_error": e} for i, e in enumerate([0.5, 0.9, 0.2], 1)]
    assert study.error_drop(three) == pytest.approx(0.3, abs=1e-12)
    assert math.isnan(study.error_drop(warmup))  # no TD step: no drop, the check fails


def test_the_preregistration_parses(study, tmp_path):
    from rlvr.compare.matrix import spec_from_dict
    from rlvr.compare.verdict import hypothesis_from_dict

    plan = study.load_study()
    hypothesis = hypothesis_from_dict(plan["hypothesis"], study.LABELS)
    assert [(p.treatment, p.control) for p in hypothesis.predictions] == [
        ("agent_opsd", "grpo"),
        ("tempo", "grpo"),
    ]
    assert all(p.mechanisms for p in hypothesis.predictions)  # each gated by its own check
    spec = spec_from_dict(plan["compare"])
    cells = spec.cells(tmp_path)
    assert [c.label for c in cells] == ["grpo", "agent_opsd"]
    assert spec.budget.mode == "tokens" and spec.budget.value == plan["tokens"]
    tempo = study.load_tempo()
    config = tempo.Config(**plan["tempo"], max_sampled_tokens=plan["tokens"])
    assert config.max_steps == plan["compare"]["base"]["task_options"]["max_steps"] == 12


def test_a_report_without_its_run_records_names_what_is_missing(study, tmp_path):
    """A fresh clone's --report-only on a directory without the runs stopped with a
    traceback from deep in the report; it now says what is missing and what to do."""
    with pytest.raises(SystemExit, match=r"lacks 15 run record\(s\), e\.g\. .*grpo-seed0"):
        study.main(["--out", str(tmp_path / "run"), "--report-only"])


def test_the_committed_run_holds_every_record_the_report_reads(study):
    run = STUDY.parent / "run"
    assert all(f.is_file() for f in study.run_records(5, run))
