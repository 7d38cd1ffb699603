"""Every committed study is a valid matrix with a pre-registered hypothesis of ≥ 5 seeds,
but prediction studies (no verdict: `rlvr compare --predict` judges early fits against the
rest of the runs), whose header gives that command and the question asked beforehand."""

from pathlib import Path

import pytest

from rlvr.compare.matrix import load_spec
from rlvr.compare.verdict import hypothesis_from_dict

MATRICES = sorted((Path(__file__).parents[2] / "studies").glob("*/matrix.yaml"))
STUDIES = [p for p in MATRICES if load_spec(p).hypothesis is not None]
PREDICTION_STUDIES = [p for p in MATRICES if p not in STUDIES]


def test_there_are_at_least_five_studies():
    assert len(STUDIES) >= 5


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.parent.name)
def test_study_is_preregistered(path, tmp_path):
    spec = load_spec(path)
    assert spec.hypothesis is not None
    hypothesis = hypothesis_from_dict(spec.hypothesis, spec.labels())
    assert hypothesis.min_seeds >= 5 and len(spec.seeds) >= hypothesis.min_seeds
    assert hypothesis.evalsize.startswith("rlvr evalsize")
    assert spec.cells(tmp_path)  # every cell's config resolves
    assert path.parent.name in (path.parents[1] / "README.md").read_text()


@pytest.mark.parametrize("path", PREDICTION_STUDIES, ids=lambda p: p.parent.name)
def test_a_study_without_a_hypothesis_is_a_preregistered_prediction_study(path, tmp_path):
    header = path.read_text().split("\nbase:")[0]
    assert "Pre-registered" in header and "Question" in header
    assert f"--matrix {path.relative_to(path.parents[2])}" in header and "--predict" in header
    assert load_spec(path).cells(tmp_path)
    assert path.parent.name in (path.parents[1] / "README.md").read_text()


METRICS_DOC = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.parent.name)
def test_study_can_fail_where_its_mechanism_is_idle(path):
    """Issue 32: every replication prediction is gated by a manipulation check on a
    documented metric, and every study names the fields it compares."""
    spec = load_spec(path)
    hypothesis = hypothesis_from_dict(spec.hypothesis, spec.labels())
    assert spec.compares, "declare `compares:` so the difference check can tick or cross"
    for prediction in hypothesis.predictions:
        if prediction.kind == "replication":
            gates = (*hypothesis.mechanisms, *prediction.mechanisms)
            assert gates, f"{prediction.describe()} has no manipulation check"
            for mechanism in gates:
                assert f"`{mechanism.metric}`" in METRICS_DOC, mechanism.metric
