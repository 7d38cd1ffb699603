"""Tasks: prompts, a prompt template and a verifier, one file per family."""

from rlvr.tasks.arithmetic import ArithmeticTask
from rlvr.tasks.base import BUDGET_SLACK, SPLITS, Problem, SyntheticTask, Task
from rlvr.tasks.countdown import CountdownTask
from rlvr.tasks.registry import TASKS, make_task, task_options

__all__ = [
    "BUDGET_SLACK",
    "SPLITS",
    "TASKS",
    "ArithmeticTask",
    "CountdownTask",
    "Problem",
    "SyntheticTask",
    "Task",
    "make_task",
    "task_options",
]
