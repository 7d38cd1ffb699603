"""Math benchmarks as dataset tasks: GSM8K, MATH / MATH-500, DAPO-Math-17k, AIME.

Each is a ``DatasetTask`` with other defaults (columns, verifier, template, splits); every
default can be overridden in ``task_options``. The column defaults follow the public
releases: ``openai/gsm8k`` (question, answer with a ``#### N`` line),
``HuggingFaceH4/MATH-500`` (problem, answer; for the original MATH the answer is the last
``\\boxed{}`` of ``solution``), ``BytedTsinghua-SIA/DAPO-Math-17k`` (prompt as chat
messages, reward_model.ground_truth) and AIME 2024/2025 sets (problem, answer).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from rlvr.tasks.dataset_task import DatasetTask

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{{}}."


def _preset(name: str, doc: str, **defaults: Any) -> type[DatasetTask]:
    """A DatasetTask subclass called ``name`` whose constructor defaults are ``defaults``."""
    signature = inspect.signature(DatasetTask.__init__)
    unknown = set(defaults) - set(signature.parameters)
    if unknown:
        raise TypeError(f"unknown DatasetTask options {sorted(unknown)}")
    parameters = [
        p.replace(default=defaults[p.name]) if p.name in defaults else p
        for p in signature.parameters.values()
    ]

    @functools.wraps(DatasetTask.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = inspect.Signature(parameters).bind(self, *args, **kwargs)
        bound.apply_defaults()
        DatasetTask.__init__(*bound.args, **bound.kwargs)

    __init__.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return type(
        f"{name.title().replace('_', '')}Task",
        (DatasetTask,),
        {
            "name": name,
            "__init__": __init__,
            "__doc__": doc,
            "default_template": defaults.get("template", DatasetTask.default_template),
        },
    )


GSM8KTask = _preset(
    "gsm8k",
    "GSM8K word problems; the gold answer is the solution's ``#### N`` line.",
    prompt_field="question",
    answer_field="answer",
    verifier="gsm8k",
    template="{prompt}" + BOXED_INSTRUCTION,
    dev_size=200,
)
MathTask = _preset(
    "math",
    "MATH / MATH-500: answers compared symbolically with math-verify.",
    prompt_field="problem",
    answer_field="answer",
    verifier="math",
    template="{prompt}" + BOXED_INSTRUCTION,
    dev_size=100,
)
DapoMathTask = _preset(
    "dapo_math",
    "DAPO-Math-17k: deduplicated (conflicting answers dropped), 200 held-out dev problems;"
    " scored like DAPO's prompts ask: the last ``Answer: X`` line, else the last ``\\boxed{}``.",
    prompt_field="prompt",
    answer_field="reward_model.ground_truth",
    verifier="dapo_math",
    template="{prompt}",
    dev_size=200,
    dedupe=True,
)
AimeTask = _preset(
    "aime",
    "AIME 2024 / 2025: integer answers 0-999; every row is an eval problem.",
    prompt_field="problem",
    answer_field="answer",
    verifier="aime",
    template="{prompt}" + BOXED_INSTRUCTION,
    eval_only=True,
)

DATA_TASKS: dict[str, type[DatasetTask]] = {
    cls.name: cls for cls in (DatasetTask, GSM8KTask, MathTask, DapoMathTask, AimeTask)
}
