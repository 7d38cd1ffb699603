"""The agent builder's trial (issue 42, shared/reports/agent-builder-trial.md), replayed:
every mistake of its tables gets the message the user needs, and none passes silently.

- §1d, mistakes in the environment class: the ones every episode would meet (a wrong
  `step`/`reset` signature, an abstract `step`, a class that is no Environment, a bad
  `environment_options` key) are refused when the run starts, in one line naming the
  field; the ones only a call shows (`step` returns a `str`, `Reply(42)`, `step` raises)
  are printed the first time, with the exception and the user's file and line, under
  every `episode.env_errors` mode, and then only counted.
- §1e, tools: a wrong signature is refused when the run starts; a tool that raises is
  printed once with where it raised.
- §1a/§1b: the CLI imports the user's module from the current directory; a config that
  leaves the one-turn budget on a multi-turn environment is warned about.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "rollout"))

from scripted_engine import EOS, ScriptedEngine

from rlvr.envs.attach import attach_environment
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.runlog.progress import StepBar
from rlvr.tasks import make_task
from rlvr.train.config import resolve_config

BAD_ENVS = """
import re
from rlvr.envs import Environment, Reply


class Numberle(Environment):
    stop = ("}",)

    def __init__(self, max_tries: int = 3) -> None:
        self.max_tries = max_tries

    def reset(self, problem) -> None:
        self.secret = str(problem.answer)

    def step(self, turn: str) -> Reply:
        return Reply(" +-:", tool_call=True)


class NoTurnArg(Numberle):
    def step(self):
        return Reply(done=True)


class ResetNoProblem(Numberle):
    def reset(self):
        pass


class Typo(Environment):
    def stepp(self, turn):
        return Reply(done=True)


class NotAnEnv:
    def step(self, turn):
        return Reply(done=True)


class ReturnsString(Numberle):
    def step(self, turn):
        return " try again:"


class ReturnsInt(Numberle):
    def step(self, turn):
        return Reply(42, done=True)


class Raises(Numberle):
    def step(self, turn):
        raise KeyError("secret not found")
"""

MY_TOOLS = '''
def calc() -> str:
    return "1"


def convert(expression: str) -> str:
    """Convert a quantity."""
    if "km" in expression:
        raise OverflowError("no kilometres here")
    return expression
'''


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """bad_envs.py and my_tools.py in a directory on sys.path, as a user writes them."""
    (tmp_path / "bad_envs.py").write_text(BAD_ENVS)
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("bad_envs", "my_tools"):
        sys.modules.pop(name, None)
    return tmp_path


BASE = {"task": "arithmetic", "task_options": {"digits": 2, "ops": "+"}, "max_new_tokens": 64}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"environment": "bad_envs:NoTurnArg"},
            "environment 'bad_envs:NoTurnArg': NoTurnArg.step(self) cannot be called as "
            "step(turn); define it as `def step(self, turn) -> Reply`",
        ),
        (
            {"environment": "bad_envs:ResetNoProblem"},
            "ResetNoProblem.reset(self) cannot be called as reset(problem); define it as "
            "`def reset(self, problem)`",
        ),
        (
            {"environment": "bad_envs:Typo"},
            "Typo does not define step, which every Environment must (step(self, turn: str) "
            "-> Reply); it defines 'stepp': a typo for 'step'?",
        ),
        (
            {"environment": "bad_envs:NotAnEnv"},
            "NotAnEnv does not subclass rlvr.envs.Environment; define it as "
            "`class NotAnEnv(Environment)`",
        ),
        (
            {"environment": "bad_envs:Numberle", "environment_options": {"max_trys": 3}},
            "environment_options: environment 'bad_envs:Numberle' takes no option 'max_trys' "
            "(did you mean 'max_tries'?); it takes: max_tries",
        ),
        (
            {"tools": ["my_tools:calc"]},
            "tools[0] 'my_tools:calc': calc() -> str cannot be called: a tags tool is called "
            "with the text between its tags, calc(text), or with a JSON object's keys",
        ),
    ],
)
def test_mistakes_every_episode_would_meet_are_refused_when_the_run_starts(
    user_modules, values, message
):
    with pytest.raises(ValueError) as refused:
        resolve_config({**BASE, **values})
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)  # one line


def _episodes(task, mode: str, rounds: int = 2) -> list:
    """`rounds` batches of 2 episodes whose policy answers `\\boxed{1}` and then EOS."""
    problem = task.problems("train")[0]

    def policy(context, k):
        return "\\boxed{1}" if context.endswith("A:") else " done" + EOS

    engine = ScriptedEngine(CharTokenizer(), policy)
    params = SamplingParams(group_size=2, max_new_tokens=40)
    records = []
    for _ in range(rounds):
        gen = generate_for(engine, task, [problem], params, torch.Generator())
        records += gen.episodes
    return records


@pytest.mark.parametrize("mode", ["drop", "keep", "stop"])
@pytest.mark.parametrize(
    ("cls", "headline", "line"),
    [
        ("ReturnsString", "failed in step: step returned str, not a Reply", 40),
        ("ReturnsInt", "failed in step: Reply.observation is int, not a str", 45),
        ("Raises", "failed in step: KeyError: 'secret not found'", 51),
    ],
)
def test_the_first_failure_is_printed_with_where_it_came_from_under_every_mode(
    user_modules, capsys, mode, cls, headline, line
):
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, f"bad_envs:{cls}", {}, [], {"env_errors": mode})
    records = _episodes(task, mode)
    assert all(r.env_failed for r in records)  # flagged and counted, as before
    err = capsys.readouterr().err
    assert err.count("rlvr: the environment") == 1, err  # 4 failures, printed once
    assert f"rlvr: the environment bad_envs:{cls} {headline}" in err
    assert f"  at {user_modules / 'bad_envs.py'}:{line}, in " in err  # the user's own line
    assert f"episode.env_errors={mode!r}" in err
    further = "Further environment failures are counted (env/failed_frac), not printed"
    assert (further in err) == (mode != "stop")  # under stop there are none: the run ends


def test_a_failing_tool_is_printed_once_with_the_line_that_raised(user_modules, capsys):
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, None, {}, ["my_tools:convert"], {})
    env = task.environment(task.problems("train")[0])
    first = env.step("<convert>3 km</convert>")
    env.step("<convert>4 km</convert>")
    assert first.observation == "<result>error: OverflowError: no kilometres here</result>"
    err = capsys.readouterr().err
    assert err.count("rlvr: the tool") == 1
    assert "the tool convert of tools [my_tools:convert] failed (error): OverflowError" in err
    assert (
        f"at {user_modules / 'my_tools.py'}:9, in convert" in err
        and "<convert>3 km</convert>" in err
    )
    assert "env/tool_error_rate" in err


def test_the_cli_imports_user_modules_from_the_current_directory(tmp_path, monkeypatch):
    from rlvr.checks import resolve_callable
    from rlvr.cli.main import importable_here

    (tmp_path / "here_envs.py").write_text("def make():\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(ValueError) as missing:
        resolve_callable("here_envs:make", "environment")
    assert f"imports your modules from the current directory, {tmp_path}" in str(missing.value)
    importable_here()
    assert resolve_callable("here_envs:make", "environment")() == 1


def test_the_one_turn_budget_with_an_environment_is_warned_about(user_modules):
    from rlvr.cli.train import budget_warning

    values = {**BASE, "environment": "bad_envs:Numberle", "episode": {"max_turns": 4}}
    del values["max_new_tokens"]
    cfg = resolve_config(values)
    assert cfg.max_new_tokens == 17  # 2-digit addition's one-turn default
    warning = budget_warning(cfg, budget_set=False)
    assert "makes episodes of up to 4 turns, but max_new_tokens is left at the one-turn " in warning
    assert "default of task 'arithmetic' (17 tokens)" in warning
    assert warning.endswith("--set max_new_tokens=68")  # 17 × 4 turns
    assert budget_warning(cfg, budget_set=True) is None
    assert budget_warning(resolve_config(BASE), budget_set=False) is None  # one-turn


def test_the_bar_shows_turns_and_failed_and_warns_once_when_most_episodes_run_out(capsys):
    bar = StepBar(total=2, enabled=False, desc="t")
    metrics = {"env/turns": 1.5, "env/failed_frac": 0.25, "env/ended_budget": 0.625}
    bar.update(metrics, 0.4)
    bar.update(metrics, 0.4)
    bar.close()
    err = capsys.readouterr().err
    assert err.count("rlvr: warning: 62% of this step's episodes ran out of tokens") == 1
    assert "raise it (or lower episode.max_turns)" in err
    assert bar._bar.postfix is None or "turns=1.50" in str(bar._bar.postfix)


def test_an_unknown_tool_name_with_tags_is_an_error_observation_not_the_answer(capsys):
    # The trial's §1e: tools [mul], the model writes <calc>50*48</calc> and answers. Before,
    # only </mul> ended a turn, so the call ran on into the final answer, counted nowhere.
    from rlvr.envs import EpisodeBudgets
    from rlvr.envs.tools import ToolEnvironment

    def mul(expression: str) -> str:
        a, b = expression.split("*")
        return str(int(a) * int(b))

    task = make_task("arithmetic", digits=2, ops="*")
    problem = task.problems("train")[0]
    task.environment = lambda p: ToolEnvironment([mul])
    task.episode_budgets = EpisodeBudgets(max_turns=3)

    def policy(context, k):
        if "error" in context:
            return " \\boxed{2400}" + EOS
        return "<calc>50*48</calc> \\boxed{2400}" + EOS

    engine = ScriptedEngine(CharTokenizer(), policy)
    params = SamplingParams(group_size=1, max_new_tokens=200)
    gen = generate_for(engine, task, [problem], params, torch.Generator())
    error = "<result>error: no tool 'calc'; tools: mul</result>"
    assert gen.texts == [f"<calc>50*48</calc>{error} \\boxed{{2400}}"]
    record = gen.episodes[0]
    assert (record.turns, record.invalid_calls, record.tool_calls) == (2, 1, 0)
    assert record.calls == ["<calc>50*48</calc>"]


def test_an_isolated_tool_environment_ends_the_turn_at_an_unknown_tool_too(user_modules):
    # The same call through env_isolation: process: the worker's ToolEnvironment finds the
    # unknown tool's closing tag, so the turn ends there and the call is answered with an
    # error, never run on into the answer.
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, None, {}, ["my_tools:convert"], {"env_isolation": "process"})
    env = task.environment(task.problems("train")[0])
    try:
        assert env.stops_in("<calc>1+2</calc> \\boxed{3}") == ("</calc>",)
        assert env.stops_in("\\boxed{3}") == ()
        reply = env.step("<calc>1+2</calc>")
        assert "error: no tool 'calc'; tools: convert" in reply.observation
    finally:
        env.close()


def test_a_config_tool_env_says_the_first_unknown_call(user_modules, capsys):
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, None, {}, ["my_tools:convert"], {})
    env = task.environment(task.problems("train")[0])
    assert env.stops_in("<calc>1+2</calc> \\boxed{3}") == ("</calc>",)
    env.step("<calc>1+2</calc>")
    env.step("<calc>1+3</calc>")
    err = capsys.readouterr().err
    assert err.count("rlvr: the policy made a call") == 1
    assert err.splitlines()[0] == (  # the trial's 1e: `tools: [my_tools:mul]`, model calls calc
        "rlvr: the policy made a call that tools [my_tools:convert] could not run: "
        "<result>error: no tool 'calc'; tools: convert</result>"
    )


def test_an_isolated_environments_failure_is_printed_by_the_trainer(user_modules, capsys):
    # The worker's own output goes nowhere (security audit F13): the trainer prints it,
    # naming the user's method, since the worker's traceback does not come back.
    task = make_task("arithmetic", digits=2, ops="+")
    episode = {"env_isolation": "process", "env_errors": "keep"}
    attach_environment(task, "bad_envs:Raises", {}, [], episode)
    try:
        records = _episodes(task, "keep")
    finally:
        task.environment.pool.close()
    assert all(r.env_failed == "error: KeyError: 'secret not found'" for r in records)
    err = capsys.readouterr().err
    assert err.count("rlvr: the environment") == 1
    assert "bad_envs:Raises failed in step: KeyError: 'secret not found'" in err
    assert f"at {user_modules / 'bad_envs.py'}:50, in Raises.step" in err


def test_a_chat_tool_call_names_the_argument_the_tool_lacks_and_its_failure(user_modules, capsys):
    # The trial's §1f: a hermes call passing `units` read "missing a required argument:
    # 'unit'", not naming the argument that was wrong.
    from rlvr.envs.attach import environment_factory
    from rlvr.envs.notices import FailureNotices, Watched

    env = Watched(
        environment_factory(None, {}, ["my_tools:convert"], "hermes")(), FailureNotices("t", "drop")
    )
    wrong = env.step('<tool_call>{"name": "convert", "arguments": {"expr": "1"}}</tool_call>')
    assert wrong.observation == "error: convert: no argument 'expr'; it takes expression"
    failed = env.step(
        '<tool_call>{"name": "convert", "arguments": {"expression": "2 km"}}</tool_call>'
    )
    assert failed.observation == "error: OverflowError: no kilometres here"
    err = capsys.readouterr().err
    assert "rlvr: the tool convert of t failed (error): OverflowError: no kilometres here" in err
    assert f"at {user_modules / 'my_tools.py'}:9, in convert" in err


def test_the_eval_counts_episodes_whose_environment_failed(user_modules):
    # The trial's §1d: "eval/accuracy is 0.375 for Raises ... No eval/ metric counts
    # environment failures". Two items × 2 samples, every episode failed: 1.0 per item.
    from rlvr.eval.evaluate import evaluate_policy

    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, "bad_envs:Raises", {}, [], {})
    engine = ScriptedEngine(CharTokenizer(), lambda context, k: "\\boxed{1}")
    problems = task.problems("eval")[:2]
    result = evaluate_policy(
        engine, task, problems, samples=2, temperature=1.0, max_new_tokens=40, seed=0
    )
    assert result.metrics["eval/env_failed"] == 1.0
    assert (
        result.metrics["eval/env_failed_ci_low"] == result.metrics["eval/env_failed_ci_high"] == 1.0
    )


def test_the_no_update_notice_is_one_clean_line(capsys):
    """The trial's 'no policy update' came as `rlvr/train/run.py:239: UserWarning: …`
    with a source line, in the middle of the bar: now one notice line, naming the cause
    and the way to stop at the first failure."""
    from types import SimpleNamespace

    from rlvr.algo import get_recipe
    from rlvr.train import no_update

    cfg = SimpleNamespace(reward_errors="drop", reward_funcs=[])
    metrics = {"rollout/generated_responses": 16.0, "env/failed_frac": 1.0}
    no_update.say(no_update.explain(2, metrics, get_recipe("grpo"), cfg))
    assert capsys.readouterr().err == (
        "rlvr: warning: no policy update in the first 2 steps (train/update_skipped = 1 each "
        "step): the environment failed on 100% of the episodes and their groups are left out "
        "under episode.env_errors='drop' (env/failed_frac; the first failure is printed above, "
        "and episode.env_errors: stop ends the run at it)\n"
    )


def test_a_run_stopped_by_its_environment_says_why_on_a_line_of_its_own(user_modules, capsys):
    """The replay's 1d under env_errors: stop: the error line was glued to the open
    progress bar ("grpo arithmetic:   0%|…|rlvr: error: …"); the bar now closes first."""
    from rlvr.cli import main

    small = ["prompts_per_step=2", "group_size=4", "eval_size=4", "max_new_tokens=64"]
    argv = ["train", "--task", "arithmetic", "--steps", "2", "--out", str(user_modules / "run")]
    argv += ["--set", "environment=bad_envs:Raises", "--set", "episode.env_errors=stop"]
    argv += [f"--set={s}" for s in small]
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()  # splits at the bar's \r too
    assert "  (episode.env_errors='stop': the run ends; RLVR_DEBUG=1 prints the traceback)" in lines
    assert any(line.startswith("grpo arithmetic:") for line in lines)  # the bar was open
    error = [line for line in lines if "rlvr: error:" in line]
    assert len(error) == 1
    assert re.fullmatch(  # how many of the 8 episodes reached step() is the model's choice
        r"rlvr: error: the environment of task 'arithmetic' failed \(error: KeyError: 'secret "
        r"not found'\) on [1-8] of 8 episodes; env_errors='stop' ends the run \('drop' or "
        r"'keep' would flag the sample and go on\) \(set RLVR_DEBUG=1 for the traceback\)",
        error[0],
    )


def test_a_set_value_yaml_cannot_read_is_named_not_a_traceback():
    # The replay's `--set task_options.ops=*` (YAML reads * as an alias) ended in a
    # yaml.scanner.ScannerError traceback.
    with pytest.raises(ValueError) as caught:
        resolve_config({}, ["task_options.ops=*"])
    assert str(caught.value) == (
        "--set task_options.ops=*: '*' cannot be read as a YAML value; quote it as a string: "
        "--set 'task_options.ops=\"*\"'"
    )
    assert resolve_config({}, ['task_options.ops="*"']).task_options["ops"] == "*"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["tools=[my_tools:convert]", "tool_format=qwen"],
            "tool_format 'qwen' is unknown; valid: tags (rlvr's <name>argument</name>), hermes, "
            "qwen_xml",
        ),
        (["tool_format=hermes"], "tool_format 'hermes' applies to tools; set tools"),
        (
            ["tools=[my_tools:convert]", "tool_format=hermes"],
            "tool_format 'hermes' calls tools through the chat template; set "
            "policy.chat_template: true (a Hugging Face chat model), or tool_format: tags",
        ),
        (
            ["tools=[my_tools:nosuch]"],
            "tools[0] 'my_tools:nosuch': my_tools has no class or function 'nosuch'",
        ),
        (
            ["tools=my_tools:convert"],
            "tools must be a list of 'module:function', got 'my_tools:convert'",
        ),
        (
            ["tools=[my_tools:convert]", "environment=bad_envs:Raises"],
            "set environment or tools, not both: tools run inside rlvr's ToolEnvironment; a "
            "custom environment calls its own tools",
        ),
        (
            ["environment=bad_envs:Raises", "episode.max_turn=3"],
            "episode: unknown key(s) ['max_turn']; valid keys: max_turns, max_tool_calls, "
            "max_turn_tokens, max_observation_tokens, cut_marker, env_timeout_s, env_errors, "
            "env_isolation, env_memory_mb",
        ),
        (
            ["reward_funcs=[my_tools:nosuch]"],
            "reward function 'my_tools:nosuch': my_tools has no function 'nosuch' (set "
            "RLVR_DEBUG=1 for the traceback)",
        ),
    ],
)
def test_the_trials_config_mistakes_are_refused_in_one_line(user_modules, capsys, sets, message):
    """The trial's 1c, replayed through the CLI: exit 2 and one line naming the mistake."""
    from rlvr.cli import main

    argv = ["train", "--task", "arithmetic", "--out", str(user_modules / "run")]
    argv += [f"--set={s}" for s in ["max_new_tokens=64", *sets]]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"rlvr: error: {message}"
