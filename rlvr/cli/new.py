"""`rlvr new env|tool|reward NAME`: the shortest path to your own part is one command.

It writes three files into the current directory (or `--dir`): `NAME.py`, a working
skeleton to edit; `NAME.yaml`, a config that trains it on the embedded arithmetic task
(`rlvr train --config NAME.yaml`); and `test_NAME.py`, a test that passes as written
(`python -m pytest test_NAME.py`) and runs the checks a run makes when it starts. The
`rlvr` command imports `NAME` from the current directory. Nothing is overwritten.
"""

from __future__ import annotations

import argparse
import keyword
from pathlib import Path

from rlvr.cli.common import fail

KINDS = ("env", "tool", "reward")

ENV = '''"""{name}: a multi-turn environment (docs/extending.md, "Your own environment").

The policy answers in \\\\boxed{{N}}; a wrong answer hears " higher" or " lower" and may try
again, up to `max_tries`. The task's verifier scores the episode's last answer.
Edit `step` to make it yours: it hears each policy turn that ends with one of `stop`.
"""

import re

from rlvr.envs import Environment, Reply


class {cls}(Environment):
    stop = ("}}",)  # a boxed answer ends the policy's turn

    def __init__(self, max_tries: int = 3) -> None:
        self.max_tries = max_tries

    def reset(self, problem) -> None:
        self.answer, self.tries = int(problem.answer), 0

    def step(self, turn: str) -> Reply:
        found = re.search(r"\\\\boxed\\{{(-?\\d+)\\}}$", turn)
        if found is None:  # no answer: the episode ends
            return Reply(done=True)
        self.tries += 1
        guess = int(found.group(1))
        if guess == self.answer:
            return Reply(done=True, tool_call=True, call=found.group(0))
        hint = " higher" if guess < self.answer else " lower"
        return Reply(hint, done=self.tries >= self.max_tries, tool_call=True, call=found.group(0))
'''

ENV_CONFIG = """# rlvr train --config {name}.yaml   (rlvr show runs/{name} to look at it)
recipe: grpo
task: arithmetic
task_options: {{digits: 2, ops: "+"}}
model: embedded
environment: {name}:{cls}
environment_options: {{max_tries: 3}}
episode: {{max_turns: 3}}
max_new_tokens: 64     # the whole episode's budget: every turn and observation share it
steps: 10
eval_every: 5
eval_size: 100
out: runs/{name}
"""

ENV_TEST = '''"""python -m pytest test_{name}.py: {cls} answers as it should, and the config passes
the checks `rlvr train` makes when it starts."""

from pathlib import Path

from {name} import {cls}

from rlvr.tasks import make_task
from rlvr.train.config import load_yaml, resolve_config


def test_a_wrong_answer_hears_a_hint_and_a_right_one_ends_the_episode():
    problem = make_task("arithmetic", digits=2, ops="+").problems("train")[0]
    env = {cls}(max_tries=3)
    env.reset(problem)
    answer = int(problem.answer)
    wrong = env.step(f"\\\\boxed{{{{{{answer - 1}}}}}}")
    assert wrong.observation == " higher" and not wrong.done
    right = env.step(f"\\\\boxed{{{{{{answer}}}}}}")
    assert right.done and right.observation == ""


def test_the_config_passes_the_start_checks():
    cfg = resolve_config(load_yaml(Path(__file__).with_name("{name}.yaml")))
    assert cfg.environment == "{name}:{cls}"
'''

TOOL = '''"""{name}: a tool the policy calls as <{name}>argument</{name}> (docs/agentic.md).

The text between the tags arrives as `expression`; what the function returns is the
observation (wrapped as <result>...</result>). A tool that raises answers with the error
as the observation, and the first failure is printed. Edit it to make it yours.
"""

import ast
import operator

OPERATORS = {{ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}}


def {name}(expression: str) -> str:
    """Evaluate integer +, - and * (e.g. "12*7")."""
    return str(_value(ast.parse(expression.strip(), mode="eval").body))


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError(f"not integer arithmetic: {{ast.unparse(node)}}")
'''

TOOL_CONFIG = """# rlvr train --config {name}.yaml   (rlvr show runs/{name} to look at it)
recipe: grpo
task: arithmetic
task_options: {{digits: 2, ops: "*"}}
model: embedded
tools: [{name}:{name}]
episode: {{max_turns: 3, max_tool_calls: 2}}
max_new_tokens: 64     # the whole episode's budget: every turn and observation share it
steps: 10
eval_every: 5
eval_size: 100
out: runs/{name}
"""

TOOL_TEST = '''"""python -m pytest test_{name}.py: the tool computes, a call through rlvr's tool
environment answers with its result, and the config passes the start checks."""

from pathlib import Path

import pytest
from {name} import {name}

from rlvr.envs import ToolEnvironment
from rlvr.train.config import load_yaml, resolve_config


def test_the_tool_computes():
    assert {name}("12*7") == "84"
    with pytest.raises(ValueError, match="not integer arithmetic"):
        {name}("2**8")


def test_a_call_is_answered_with_the_result():
    env = ToolEnvironment([{name}])
    reply = env.step("<{name}>12*7</{name}>")
    assert reply.observation == "<result>84</result>" and reply.tool_call


def test_the_config_passes_the_start_checks():
    cfg = resolve_config(load_yaml(Path(__file__).with_name("{name}.yaml")))
    assert cfg.tools == ["{name}:{name}"]
'''

REWARD = '''"""{name}: a reward function (README, "reward functions"), called once per batch with
TRL's convention: lists of prompts and completions, the verifier's `correct`, and the
dataset's columns. Return one number per completion (None: does not apply).
"""


def {name}(prompts, completions, correct, **columns):
    """1 for a correct answer, less 0.01 per character past 20 (never below 0.5)."""
    return [
        max(0.5, 1.0 - 0.01 * max(0, len(text) - 20)) if ok else 0.0
        for text, ok in zip(completions, correct, strict=True)
    ]
'''

REWARD_CONFIG = """# rlvr train --config {name}.yaml   (rlvr show runs/{name} to look at it)
recipe: grpo
task: arithmetic
task_options: {{digits: 2, ops: "+"}}
model: embedded
reward_funcs:
  - {{func: {name}:{name}, weight: 1.0}}
steps: 10
eval_every: 5
eval_size: 100
out: runs/{name}
"""

REWARD_TEST = '''"""python -m pytest test_{name}.py: the reward by hand, and the config passes the
checks `rlvr train` makes when it starts (the function's signature among them)."""

from pathlib import Path

from {name} import {name}

from rlvr.train.config import load_yaml, resolve_config


def test_the_reward_by_hand():
    short, long = " \\\\boxed{{5}}", " " + "x" * 30 + " \\\\boxed{{5}}"
    # the long one has 1 + 30 + 1 + 9 = 41 characters: 21 past 20 → 1 − 0.21 = 0.79
    rewards = {name}(["Q"] * 3, [short, long, short], correct=[True, True, False])
    assert rewards[0] == 1.0 and abs(rewards[1] - 0.79) < 1e-12 and rewards[2] == 0.0


def test_the_config_passes_the_start_checks():
    cfg = resolve_config(load_yaml(Path(__file__).with_name("{name}.yaml")))
    assert cfg.reward_funcs[0]["func"] == "{name}:{name}"
'''

TEMPLATES = {
    "env": (ENV, ENV_CONFIG, ENV_TEST),
    "tool": (TOOL, TOOL_CONFIG, TOOL_TEST),
    "reward": (REWARD, REWARD_CONFIG, REWARD_TEST),
}


def class_name(name: str) -> str:
    """`number_game` → `NumberGame`."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def skeleton(kind: str, name: str) -> dict[str, str]:
    """File name → text of the three files `rlvr new KIND NAME` writes."""
    code, config, test = TEMPLATES[kind]
    values = {"name": name, "cls": class_name(name)}
    return {
        f"{name}.py": code.format(**values),
        f"{name}.yaml": config.format(**values),
        f"test_{name}.py": test.format(**values),
    }


def check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or not name.islower():
        raise ValueError(
            f"NAME {name!r} must be a lower-case Python identifier (it becomes the module "
            f"{name}.py and the config's reference), e.g. number_game"
        )
    if not class_name(name).isidentifier():
        raise ValueError(f"NAME {name!r} gives no class name; use letters, e.g. number_game")


def cmd_new(args: argparse.Namespace) -> int:
    try:
        check_name(args.name)
    except ValueError as err:
        return fail(str(err))
    folder = Path(args.dir)
    files = skeleton(args.kind, args.name)
    there = [name for name in files if (folder / name).exists()]
    if there:
        return fail(f"{', '.join(str(folder / n) for n in there)} exist already; nothing written")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    shown = ", ".join(str(folder / n) for n in files)
    go = f"cd {folder} && " if folder != Path(".") else ""
    print(f"wrote {shown}")
    print(f"next: {go}python -m pytest test_{args.name}.py && rlvr train --config {args.name}.yaml")
    return 0


def add_new_parser(sub) -> None:
    p = sub.add_parser(
        "new",
        help="write a working skeleton of your own environment, tool or reward function, "
        "its config and a test that passes",
    )
    p.add_argument(
        "kind",
        choices=KINDS,
        help="env: an Environment class; tool: a function the policy calls; reward: a "
        "reward function",
    )
    p.add_argument("name", help="a lower-case Python identifier, e.g. number_game")
    p.add_argument("--dir", default=".", help="where to write the files (default: here)")
    p.set_defaults(func=cmd_new)
