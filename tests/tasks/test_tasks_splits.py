"""Properties every synthetic task must have, checked for several difficulty settings."""

import re

import pytest

from rlvr.tasks import (
    BUDGET_SLACK,
    SPLITS,
    TASKS,
    ArithmeticTask,
    CountdownTask,
    Problem,
    make_task,
)
from rlvr.tasks.calculator import CalculatorTask
from rlvr.tasks.countdown import parse_prompt
from rlvr.tasks.guess_number import GuessNumberTask
from rlvr.tasks.lookup import LookupTask
from rlvr.tasks.worked import WorkedArithmeticTask

SETTINGS = [
    (ArithmeticTask, {"digits": 2, "ops": "+"}),
    (ArithmeticTask, {"digits": 2, "ops": "+-*"}),
    (ArithmeticTask, {"digits": 3, "ops": "-", "answer_format": "tagged"}),
    (ArithmeticTask, {"digits": 5, "ops": "*"}),
    (CountdownTask, {"num_count": 3, "max_number": 25}),
    (CountdownTask, {"num_count": 2, "max_number": 50, "max_target": 100}),
    (CountdownTask, {"num_count": 4, "max_number": 10}),
    (CalculatorTask, {}),
    (CalculatorTask, {"tools": False, "digits": 3}),
    (LookupTask, {}),
    (LookupTask, {"hops": 1, "tools": False}),
    (GuessNumberTask, {}),
    (GuessNumberTask, {"high": 40, "max_guesses": 6}),
    (WorkedArithmeticTask, {"wrong_frac": 0.0}),  # wrong targets are tested in their file
    (WorkedArithmeticTask, {"min_terms": 2, "max_terms": 5, "short_frac": 0.0, "wrong_frac": 0}),
]
SIZES = {"train_size": 500, "dev_size": 50, "eval_size": 100}


def _ids(param):
    return (
        param.__name__
        if isinstance(param, type)
        else ",".join(f"{k}={v}" for k, v in param.items())
    )


@pytest.mark.parametrize(("cls", "options"), SETTINGS, ids=_ids)
def test_every_problem_is_solved_by_its_target(cls, options):
    task = cls(**options, **SIZES)
    for split in SPLITS:
        for problem in task.problems(split):
            verdict = task.verify(problem, problem.target)
            assert verdict.correct and verdict.formatted, (problem, verdict)


@pytest.mark.parametrize(("cls", "options"), SETTINGS, ids=_ids)
def test_splits_have_requested_sizes_and_are_disjoint(cls, options):
    task = cls(**options, **SIZES)
    sizes = {split: len(task.problems(split)) for split in SPLITS}
    assert sizes == {"train": 500, "dev": 50, "eval": 100}
    prompts = {split: {p.prompt for p in task.problems(split)} for split in SPLITS}
    assert sum(map(len, prompts.values())) == 650  # no duplicates within a split either
    assert not prompts["train"] & prompts["eval"]
    assert not prompts["train"] & prompts["dev"]
    assert not prompts["dev"] & prompts["eval"]


@pytest.mark.parametrize(("cls", "options"), SETTINGS, ids=_ids)
def test_alphabet_covers_prompts_and_targets(cls, options):
    task = cls(**options, **SIZES)
    alphabet = set(task.alphabet)
    assert task.alphabet == "".join(sorted(alphabet))
    for split in SPLITS:
        for problem in task.problems(split):
            assert set(problem.prompt + problem.target) <= alphabet, problem


@pytest.mark.parametrize("cls", [ArithmeticTask, CountdownTask])
def test_same_seed_same_problems_different_seed_differs(cls):
    first = cls(seed=3, train_size=200, dev_size=20, eval_size=30)
    again = cls(seed=3, train_size=200, dev_size=20, eval_size=30)
    other = cls(seed=4, train_size=200, dev_size=20, eval_size=30)
    for split in SPLITS:
        assert first.problems(split) == again.problems(split)
        assert first.problems(split) != other.problems(split)


@pytest.mark.parametrize("cls", [ArithmeticTask, CountdownTask])
def test_eval_split_does_not_depend_on_train_size(cls):
    small = cls(train_size=10, dev_size=20, eval_size=30)
    large = cls(train_size=300, dev_size=20, eval_size=30)
    assert small.problems("eval") == large.problems("eval")
    assert small.problems("dev") == large.problems("dev")


def test_global_random_state_is_untouched():
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    ArithmeticTask(train_size=50, dev_size=5, eval_size=5).problems("train")
    CountdownTask(train_size=50, dev_size=5, eval_size=5).problems("train")
    assert random.random() == expected


def test_uids_are_stable_and_named_by_split():
    task = ArithmeticTask(train_size=3, dev_size=2, eval_size=1)
    assert [p.uid for p in task.problems("train")] == [
        "arithmetic/train/0",
        "arithmetic/train/1",
        "arithmetic/train/2",
    ]
    assert [p.uid for p in task.problems("eval")] == ["arithmetic/eval/0"]


def test_problems_returns_a_copy():
    task = ArithmeticTask(train_size=3, dev_size=0, eval_size=0)
    task.problems("train").clear()
    assert len(task.problems("train")) == 3


def test_unknown_split_is_named():
    with pytest.raises(ValueError, match=r"unknown split 'test'.*train, dev, eval"):
        ArithmeticTask(train_size=1).problems("test")


def test_too_small_problem_space_says_what_to_do():
    task = ArithmeticTask(digits=1, ops="+", train_size=200, dev_size=0, eval_size=0)
    with pytest.raises(ValueError, match="only 55 distinct problems"):
        task.problems("train")


@pytest.mark.parametrize("field", ["train_size", "dev_size", "eval_size"])
def test_bad_sizes_are_named(field):
    with pytest.raises(ValueError, match=f"{field} must be an integer ≥ 0, got -1"):
        CountdownTask(**{field: -1})


@pytest.mark.parametrize("cls", [ArithmeticTask, CountdownTask])
def test_hostile_completions_give_verdicts(cls):
    task = cls(train_size=5, dev_size=0, eval_size=0)
    problem = task.problems("train")[0]
    hostile = [
        "x" * 2_000_000,
        "\\boxed{" + "(" * 10_000 + "1" + ")" * 10_000 + "}",
        "\\boxed{" + "-" * 150 + "1}",
        "\\boxed{" + "9" * 5000 + "}",
        "\\boxed{" + "*".join(["99"] * 60) + "}",
        "\\boxed{\u202e\U0001f600\x00\udcff١٢٣}",
        "<answer>" * 10_000,
        "\\boxed{" * 10_000,
        "",
        None,
        b"\\boxed{1}",
    ]
    for completion in hostile:
        verdict = task.verify(problem, completion)
        assert not verdict.correct


def test_verify_with_a_foreign_problem_is_a_verdict():
    task = CountdownTask(train_size=1, dev_size=0, eval_size=0)
    foreign = Problem("x/train/0", "Q: 1+1=? A:", "2", " \\boxed{2}")
    verdict = task.verify(foreign, " \\boxed{2}")
    assert not verdict.correct and "not a countdown prompt" in verdict.reason


def _arithmetic_key(problem):
    a, op, b = re.fullmatch(r"Q: ([0-9]+)([-+*])([0-9]+)=\? A:", problem.prompt).groups()
    return (min(a, b), op, max(a, b)) if op in "+*" else (a, op, b)


def _countdown_key(problem):
    numbers, target = parse_prompt(problem.prompt)
    return (tuple(sorted(numbers)), target)


def _lookup_key(problem):
    return re.fullmatch(r"Q: (?:parent of )+([a-z]{4})\? A:", problem.prompt).group(1)


def _game_key(problem):  # the game's number; its secret is not in the prompt
    return re.fullmatch(r"Q: game ([0-9]{4}), 1-[0-9]+\? A:", problem.prompt).group(1)


def _worked_key(problem):
    # The multiset of signed products: 3+4*2-5, 2*4+3-5 and 3-5+4*2 are one problem.
    expression = re.fullmatch(r"Q: (.*)=\? A:", problem.prompt).group(1)
    terms = re.findall(r"([-+]?)([0-9*]+)", expression)
    signed = ((sign or "+", tuple(sorted(map(int, p.split("*"))))) for sign, p in terms)
    return tuple(sorted(signed))


# Every registered task with the settings to check; its key maps a problem and its mirrors
# (37+85 and 85+37; the numbers of a countdown in any order) to one value.
LEAK_SETTINGS = {
    "arithmetic": (
        _arithmetic_key,
        [{"ops": ops} for ops in ("+", "-", "*", "+-", "+*", "-*", "+-*")]
        + [{"digits": 3, "ops": "+*"}],
    ),
    "countdown": (_countdown_key, [{}, {"num_count": 4, "max_number": 10}]),
    "calculator": (_arithmetic_key, [{}, {"tools": False}, {"digits": 3}]),
    "worked": (_worked_key, [{}, {"min_terms": 3, "max_terms": 5, "max_number": 5}]),
    "lookup": (_lookup_key, [{}, {"hops": 2}, {"tools": False}]),
    "guess_number": (_game_key, [{}, {"high": 40}]),
    "household": (lambda problem: problem.answer, [{}]),  # the game id: task type and seed
    "shapes": (lambda problem: problem.pixel_values.numpy().tobytes(), [{}]),  # the picture
}


def test_every_registered_task_has_a_leak_check():
    from test_tasks_datasets import DATASET_LEAK_TASKS  # file-backed tasks, checked there

    # alfworld's splits are ALFWorld's own folders: tests/envs/test_alfworld_task.py.
    assert set(LEAK_SETTINGS) | set(DATASET_LEAK_TASKS) | {"alfworld"} == set(TASKS)


@pytest.mark.parametrize(
    ("name", "options"),
    [(name, options) for name, (_, settings) in LEAK_SETTINGS.items() for options in settings],
    ids=lambda p: p if isinstance(p, str) else _ids(p),
)
def test_no_eval_item_or_its_mirror_is_in_train_or_dev(name, options):
    # Default split sizes: the ones the warm start (train, dev) and RL (train, eval) use.
    task = make_task(name, **options)
    key = LEAK_SETTINGS[name][0]
    keys = {split: [key(p) for p in task.problems(split)] for split in SPLITS}
    assert not set(keys["eval"]) & (set(keys["train"]) | set(keys["dev"]))
    assert not set(keys["dev"]) & set(keys["train"])
    for split in SPLITS:
        assert len(set(keys[split])) == len(keys[split]), split  # no mirror pair within a split


def test_addition_mirror_is_the_same_problem():
    # 1-digit addition has 10·11/2 = 55 problems up to order (0+0 .. 9+9), not 100.
    task = ArithmeticTask(digits=1, ops="+", train_size=55, dev_size=0, eval_size=0)
    assert len(task.problems("train")) == 55
    with pytest.raises(ValueError, match="only 55 distinct problems"):
        ArithmeticTask(digits=1, ops="+", train_size=56, dev_size=0, eval_size=0).problems("dev")


@pytest.mark.parametrize(("cls", "options"), SETTINGS, ids=_ids)
def test_reference_completions_fit_the_default_budget(cls, options):
    task = cls(**options, **SIZES)
    longest = max(len(p.target) for split in SPLITS for p in task.problems(split))
    assert longest <= task.longest_target_chars
    assert longest + 1 + BUDGET_SLACK <= task.default_max_new_tokens  # answer, EOS, slack


def test_default_budgets_by_hand():
    # " \boxed{198}" is 12 characters, + EOS + 4 of slack = 17.
    assert ArithmeticTask().default_max_new_tokens == 17
    # " \boxed{(25-24)*23}" is 9 + 10 = 19 characters, + EOS + 4 = 24.
    assert CountdownTask().default_max_new_tokens == 24
    # " <answer>-999</answer>" (3-digit subtraction) is 22 characters, + EOS + 4 = 27.
    assert ArithmeticTask(digits=3, ops="-", answer_format="tagged").default_max_new_tokens == 27
