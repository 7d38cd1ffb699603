"""Fair comparisons: an experiment matrix, statistics, compute-curve fits and a report."""

from rlvr.compare.matrix import (
    Budget,
    Cell,
    MatrixSpec,
    load_spec,
    spec_from_dict,
    spec_from_options,
)
from rlvr.compare.report import Report, build_report
from rlvr.compare.runner import MatrixRun, run_matrix

__all__ = [
    "Budget",
    "Cell",
    "MatrixRun",
    "MatrixSpec",
    "Report",
    "build_report",
    "load_spec",
    "run_matrix",
    "spec_from_dict",
    "spec_from_options",
]
