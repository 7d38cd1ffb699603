"""`episode.env_isolation: process`: hostile environments cost their sample, never the run,
and leave no process behind; a well-behaved environment plays the same episodes isolated
or not."""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import asdict
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))
sys.path.insert(0, str(Path(__file__).parents[1] / "train"))

from local_model import local_policy_dir, local_trainer
from scripted_engine import EOS, ScriptedEngine

import rlvr.envs.isolated as isolated
from rlvr.envs import Environment, EpisodeBudgets, Reply
from rlvr.envs.attach import attach_environment
from rlvr.envs.isolated import IsolatedEnvironment, WorkerFailed, WorkerPool
from rlvr.models import CharTokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task
from rlvr.train.config import resolve_config

ROOT = Path(__file__).parents[2]


def _bomb() -> Reply:
    chunks = [bytearray(64 * 2**20) for _ in range(16)]  # 1 GiB: only reached with no limit
    return Reply(str(len(chunks)))


def _garbage_on_the_pipe() -> Reply:
    for pipe in (o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed):
        pipe.send_bytes(b"\xff\x00 not json")
    return Reply("fine")


def _grandchild_then_hang(pid_file: str) -> Reply:
    child = subprocess.Popen(["sleep", "300"])
    Path(pid_file).write_text(str(child.pid))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        pass


def _segfault() -> Reply:
    faulthandler.disable()  # pytest's dump of the worker's stack is noise here
    return ctypes.string_at(0)


def _spin_with_the_alarm_blocked() -> Reply:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:  # neither the alarm nor a thread can stop this in the trainer's process
        pass


HOSTILE = {
    "os_exit": lambda env: os._exit(3),
    "segfault": lambda env: _segfault(),
    "blocked_alarm": lambda env: _spin_with_the_alarm_blocked(),
    "sys_exit": lambda env: sys.exit(2),  # SystemExit passes `except Exception` in-process
    "memory_bomb": lambda env: _bomb(),
    "not_a_reply": lambda env: 42,
    "unsendable": lambda env: Reply(observation=object()),
    "bad_flag": lambda env: Reply("x", done="yes"),
    "nan_reward": lambda env: Reply("x", reward=float("nan")),
    "garbage_on_the_pipe": lambda env: _garbage_on_the_pipe(),
    "grandchild": lambda env: _grandchild_then_hang(env.pid_file),
}
"""How each hostile environment misbehaves on a turn that says 'boom'."""


class Hostile(Environment):
    """Echoes a turn as `[turn]`, except that a turn saying `trigger` ("": every turn)
    gets `HOSTILE[how]`."""

    stop = ("</x>",)

    def __init__(self, how: str = "", trigger: str = "boom", pid_file: str = "") -> None:
        self.how, self.trigger, self.pid_file = how, trigger, pid_file

    def step(self, turn: str) -> Reply:
        if self.how and self.trigger in turn:
            return HOSTILE[self.how](self)
        return Reply(f"[{turn}]")


def whoami(text: str) -> str:
    """The process a tool runs in."""
    return f"{text}@{os.getpid()}"


def _policy(context: str, k: int) -> str:
    """Sample 0 says boom, sample 1 calm; after an observation, the answer."""
    if context.endswith("]"):
        return " done" + EOS
    return "<x>boom</x>" if k == 0 else "<x>calm</x>"


def _children() -> set[int]:
    """Live (non-zombie) processes whose parent is this one."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Bytes: a process's name (in brackets) may be any bytes, not UTF-8.
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != b"Z":
            found.add(int(stat.parent.name))
    return found


def _new_children(before: set[int], expected: set[int], wait_s: float = 10.0) -> set[int]:
    """This process's children that `before` lacks, once they equal `expected` or after
    `wait_s`: a worker killed from another thread ends a moment later, and other tests'
    pools (in the same pytest worker) may end theirs at any time, so only new ones count."""
    deadline = time.monotonic() + wait_s
    while (new := _children() - before) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return new


def _assert_only_idle_workers_left(before: set[int], pool, idle: int) -> None:
    """The pool holds `idle` workers, and they are this process's only new children;
    closing the pool ends them."""
    assert len(pool.idle) == idle
    assert _new_children(before, {w.pid for w in pool.idle}) == {w.pid for w in pool.idle}
    pool.close()
    assert _new_children(before, set()) == set()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _episodes(how: str, episode: dict, **options):
    """One arithmetic prompt, 2 scripted episodes with a `Hostile(how)` environment."""
    task = make_task("arithmetic", digits=2, ops="+")
    settings = {"max_turns": 3, "env_timeout_s": 2.0, **episode}
    options = {"how": how, **options}
    attach_environment(task, "test_env_isolation:Hostile", options, [], settings)
    engine = ScriptedEngine(CharTokenizer(), _policy)
    params = SamplingParams(group_size=2, max_new_tokens=40)
    problem = task.problems("train")[0]
    gen = generate_for(engine, task, [problem], params, torch.Generator())
    return gen, getattr(task.environment, "pool", None)


@pytest.mark.parametrize(
    ("how", "failure"),
    [
        ("os_exit", "error: WorkerFailed: the environment's worker process died (exit 3)"),
        (
            "segfault",
            "error: WorkerFailed: the environment's worker process died (killed by SIGSEGV)",
        ),
        ("blocked_alarm", "timeout: step ran past 1s"),
        ("sys_exit", "error: WorkerFailed: SystemExit: 2"),
        ("not_a_reply", "error: TypeError: step returned int, not a Reply"),
        (
            "unsendable",
            "error: TypeError: step returned what is not plain data (Object of type object",
        ),
        ("bad_flag", "error: TypeError: Reply.done is str: 'yes'"),
        ("nan_reward", "type: Reply.reward is nan, not a finite number"),
        ("garbage_on_the_pipe", "error: WorkerFailed: the environment's worker sent garbage"),
    ],
)
def test_a_hostile_environment_costs_its_sample_only(how, failure):
    before = _children()
    # The garbage sender scans the worker's objects for its pipe, which under load took
    # over 1 s once (a timeout reported instead of the garbage); the others fail at once or
    # hang until the timeout.
    timeout = 10.0 if how == "garbage_on_the_pipe" else 1.0
    gen, pool = _episodes(how, {"env_isolation": "process", "env_timeout_s": timeout})
    hostile, calm = gen.episodes
    assert hostile.env_failed.startswith(failure) and hostile.ended_by == "env_failed"
    assert gen.texts[0] == "<x>boom</x>"  # the turn stays; the failure ends the episode
    # The other episode of the group plays on: observation, then its answer.
    assert gen.texts[1] == "<x>calm</x>[<x>calm</x>] done"
    assert (calm.env_failed, calm.ended_by, calm.turns) == (None, "answer", 2)
    # A worker that failed is killed; one whose reply the episode loop refused ("type:")
    # ended its episode healthy and waits for the next, with the calm one's.
    _assert_only_idle_workers_left(before, pool, 2 if failure.startswith("type:") else 1)


def test_a_memory_bomb_hits_the_workers_limit():
    before = _children()
    gen, pool = _episodes("memory_bomb", {"env_isolation": "process", "env_memory_mb": 256})
    assert gen.episodes[0].env_failed == "error: MemoryError: "
    assert gen.episodes[1].ended_by == "answer"
    _assert_only_idle_workers_left(before, pool, 1)


def test_the_workers_process_group_dies_with_it(tmp_path):
    """A process the environment started is killed with its worker on timeout."""
    pid_file = tmp_path / "grandchild"
    gen, pool = _episodes(
        "grandchild", {"env_isolation": "process", "env_timeout_s": 1.0}, pid_file=str(pid_file)
    )
    pool.close()
    assert gen.episodes[0].env_failed == "timeout: step ran past 1s"
    assert not _alive(int(pid_file.read_text()))


def test_without_isolation_the_same_failure_is_flagged_in_process():
    """A Python-level failure is flagged the same way in the trainer's process."""
    gen, _ = _episodes("not_a_reply", {})
    assert gen.episodes[0].env_failed == "type: step returned int, not a Reply"
    assert gen.texts[1] == "<x>calm</x>[<x>calm</x>] done"


def test_isolated_episodes_on_a_worker_thread_are_limited_too():
    """Off the main thread (no alarm), the proxy's own deadline kills a hung worker."""
    before, out = _children(), {}
    thread = threading.Thread(
        target=lambda: out.update(run=_episodes("blocked_alarm", {"env_isolation": "process"}))
    )
    started = time.monotonic()
    thread.start()
    thread.join(30)
    # env_timeout_s 2: the episode loop's thread strategy and the proxy's deadline agree.
    gen, pool = out["run"]
    assert gen.episodes[0].env_failed == "timeout: step ran past 2s"
    assert time.monotonic() - started < 10
    _assert_only_idle_workers_left(before, pool, 1)


def test_workers_end_with_their_episodes_and_on_an_exception():
    before = _children()
    alive = []

    def policy(context, k):
        alive.append(len(_children() - before))
        if context.endswith("]"):
            raise RuntimeError("the engine broke")  # the trainer fails mid-batch
        return "<x>calm</x>"

    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, "test_env_isolation:Hostile", {}, [], {"env_isolation": "process"})
    engine = ScriptedEngine(CharTokenizer(), policy)
    params = SamplingParams(group_size=3, max_new_tokens=40)
    with pytest.raises(RuntimeError, match="the engine broke"):
        generate_for(engine, task, task.problems("train")[:1], params, torch.Generator())
    assert alive[0] == 3  # one worker per live episode
    gc.collect()  # the episodes' proxies: their workers, mid-episode, are killed
    assert _new_children(before, set()) == set() and task.environment.pool.idle == []


def test_a_killed_trainer_leaves_no_worker(tmp_path):
    """SIGKILL the trainer: its workers die with it (PR_SET_PDEATHSIG)."""
    script = textwrap.dedent(
        """
        import time
        from rlvr.envs import Environment, Reply
        from rlvr.envs.isolated import IsolatedEnvironment, WorkerPool

        class Calm(Environment):
            def step(self, turn):
                return Reply("ok")

        env = IsolatedEnvironment(WorkerPool(lambda problem: Calm()), None, 5.0)
        print(env._worker.pid, flush=True)
        time.sleep(300)
        """
    )
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT)
    worker = int(trainer.stdout.readline())
    assert _alive(worker)
    trainer.kill()
    trainer.wait()
    deadline = time.monotonic() + 5
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker)


def test_a_normal_environment_plays_the_same_episodes_isolated_or_not(tmp_path):
    """The embedded model's shape (a random tiny Qwen2), the same seed: same tokens, same
    observations, same records, same rewards."""
    model_dir = local_policy_dir(tmp_path)
    from transformers import AutoModelForCausalLM

    engine = HFEngine(AutoModelForCausalLM.from_pretrained(model_dir), CharTokenizer())
    results = []
    for isolation in ("none", "process"):
        task = make_task("arithmetic", digits=2, ops="+")
        episode = {"max_turns": 3, "max_turn_tokens": 5, "env_isolation": isolation}
        attach_environment(task, "user_envs:Echo", {}, [], episode)
        problems = task.problems("train")[:2]
        params = SamplingParams(group_size=2, max_new_tokens=24)
        gen = generate_for(engine, task, problems, params, torch.Generator().manual_seed(7))
        rewards = [task.verify(problems[i // 2], t).correct for i, t in enumerate(gen.texts)]
        records = [{**asdict(e), "env_seconds": 0} for e in gen.episodes]
        results.append((gen.response_ids, gen.forced_mask, gen.texts, records, rewards))
        if isolation == "process":
            task.environment.pool.close()
    (ids, forced, texts, records, rewards), isolated_run = results
    assert torch.equal(ids, isolated_run[0]) and torch.equal(forced, isolated_run[1])
    assert texts == isolated_run[2] and records == isolated_run[3] and rewards == isolated_run[4]
    assert sum(r["observation_tokens"] for r in records) > 0  # the environment did answer


def test_tools_run_in_the_worker():
    """A tools-only config (rlvr's ToolEnvironment) runs its tools in the worker: the same
    episodes, except for the process the tool reports."""
    tool = "test_env_isolation:whoami"
    texts = {}
    for isolation in ("none", "process"):
        task = make_task("arithmetic", digits=2, ops="+")
        attach_environment(task, None, {}, [tool], {"env_isolation": isolation})
        policy = lambda context, k: " \\boxed{1}" + EOS if "@" in context else "<whoami>hi</whoami>"  # noqa: E731
        engine = ScriptedEngine(CharTokenizer(), policy)
        params = SamplingParams(group_size=2, max_new_tokens=60)
        gen = generate_for(engine, task, task.problems("train")[:1], params, torch.Generator())
        assert [e.tool_calls for e in gen.episodes] == [1, 1]
        texts[isolation] = gen.texts
        if isolation == "process":
            task.environment.pool.close()
    here = f"<whoami>hi</whoami><result>hi@{os.getpid()}</result> \\boxed{{1}}"
    assert texts["none"] == [here] * 2
    workers = [t.split("@")[1].split("<")[0] for t in texts["process"]]
    assert len(set(workers)) == 2 and str(os.getpid()) not in workers  # one per episode
    assert [
        t.replace(w, str(os.getpid())) for t, w in zip(texts["process"], workers, strict=True)
    ] == [here] * 2


def test_a_segfaulting_environment_costs_samples_and_the_run_goes_on(tmp_path):
    """A training step whose every environment step segfaults: the episodes are flagged
    and counted (kept: env_errors keep), the step trains, no worker is left."""
    before = _children()
    trainer = local_trainer(
        tmp_path,
        environment="test_env_isolation:Hostile",
        environment_options={"how": "segfault", "trigger": ""},
        episode={
            "max_turns": 2,
            "max_turn_tokens": 4,
            "env_isolation": "process",
            "env_errors": "keep",
        },
        max_new_tokens=12,
    )
    assert hasattr(trainer.task.environment, "isolated")
    metrics = trainer.train_step()
    # A random model ends a turn at its 4-token budget (the environment is asked, and
    # crashes) unless it emitted EOS first (the episode ended by its answer).
    assert metrics["env/failed_frac"] == metrics["env/ended_env_failed"] > 0
    assert metrics["env/failed_frac"] + metrics["env/ended_answer"] == 1.0
    assert math.isfinite(metrics["loss/policy"])  # the step trained on what it kept
    pool = trainer.task.environment.pool
    # Only the workers of episodes that ended by their answer wait for the next batch.
    _assert_only_idle_workers_left(before, pool, len(pool.idle))


@pytest.mark.parametrize(
    ("episode", "message"),
    [
        (
            {"env_isolation": "docker"},
            r"episode.env_isolation must be one of none, process, got 'docker'",
        ),
        ({"env_memory_mb": 512}, r"env_memory_mb=512 limits .* set episode.env_isolation: process"),
        (
            {"env_isolation": "process", "env_memory_mb": 0},
            r"env_memory_mb must be ≥ 1 or null, got 0",
        ),
        ({"env_isolation": "process", "env_memory_mb": 1.5}, r"env_memory_mb must be int or None"),
    ],
)
def test_isolation_settings_that_cannot_take_effect_are_refused(episode, message):
    with pytest.raises(ValueError, match=message):
        resolve_config({"tools": ["rlvr.tasks.calculator:calc"], "episode": episode})


def test_a_platform_without_fork_refuses_isolation(monkeypatch):
    monkeypatch.delattr(os, "fork")
    with pytest.raises(ValueError, match=r"cannot take effect here: .* has no fork"):
        EpisodeBudgets(env_isolation="process")


def test_an_oversized_answer_is_garbage(monkeypatch):
    monkeypatch.setattr(isolated, "MAX_MESSAGE_BYTES", 1000)
    env = IsolatedEnvironment(WorkerPool(lambda problem: Hostile()), None, 2.0)
    assert env.step("short").observation == "[short]"
    with pytest.raises(WorkerFailed, match="sent garbage"):
        env.step("x" * 2000)
    assert not env._worker.alive


class Counter(Environment):
    stop = ("</x>",)

    def __init__(self) -> None:
        self.steps = 0

    def step(self, turn: str) -> Reply:
        self.steps += 1
        return Reply(f"[{self.steps}@{os.getpid()}]")


def test_a_worker_serves_the_next_episode_with_a_fresh_environment():
    """Batch after batch, the same workers; each episode's environment is made anew."""
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, "test_env_isolation:Counter", {}, [], {"env_isolation": "process"})
    engine = ScriptedEngine(CharTokenizer(), _policy)
    params = SamplingParams(group_size=2, max_new_tokens=40)
    batches = [
        generate_for(engine, task, task.problems("train")[:1], params, torch.Generator()).texts
        for _ in range(2)
    ]
    workers = {str(w.pid) for w in task.environment.pool.idle}
    for texts in batches:  # each episode's environment answers its first step: [1@pid]
        seen = [re.search(r"\[(\d+)@(\d+)\]", t).groups() for t in texts]
        assert sorted(seen) == sorted(("1", pid) for pid in workers)
    task.environment.pool.close()
