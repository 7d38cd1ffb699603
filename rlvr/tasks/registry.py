"""Tasks by name, and ``make_task`` that builds one from config options with clear errors."""

from __future__ import annotations

import inspect
from typing import Any

from rlvr.tasks.alfworld import AlfworldTask
from rlvr.tasks.arithmetic import ArithmeticTask
from rlvr.tasks.base import Task
from rlvr.tasks.calculator import CalculatorTask
from rlvr.tasks.countdown import CountdownTask
from rlvr.tasks.guess_number import GuessNumberTask
from rlvr.tasks.household import HouseholdTask
from rlvr.tasks.lookup import LookupTask
from rlvr.tasks.math_data import DATA_TASKS
from rlvr.tasks.shapes import ShapesTask
from rlvr.tasks.worked import WorkedArithmeticTask

TASKS: dict[str, type[Task]] = {
    ArithmeticTask.name: ArithmeticTask,
    CountdownTask.name: CountdownTask,
    CalculatorTask.name: CalculatorTask,
    LookupTask.name: LookupTask,
    GuessNumberTask.name: GuessNumberTask,
    HouseholdTask.name: HouseholdTask,
    AlfworldTask.name: AlfworldTask,
    WorkedArithmeticTask.name: WorkedArithmeticTask,
    ShapesTask.name: ShapesTask,
    **DATA_TASKS,
}


def task_options(name: str) -> list[str]:
    """The option names a task's constructor accepts."""
    parameters = inspect.signature(_task_class(name)).parameters.values()
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks are: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def make_task(name: str, **options: Any) -> Task:
    """Build the task called ``name`` with ``options`` (e.g. ``digits=3``)."""
    cls = _task_class(name)
    valid = task_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"for task {name!r}; valid options are: {', '.join(valid)}"
        )
    return cls(**options)
