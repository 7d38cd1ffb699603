"""The python sandbox against hostile code, and in normal use; after each call no process of
the sandbox may be left (none of its uids in /proc, zombies included)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from rlvr.envs.tools import ToolEnvironment, tool_schema
from rlvr.tools import (
    SandboxLimits,
    make_python_tool,
    neutralise,
    python,
    python_sandbox,
    run_python,
)
from rlvr.tools.python_sandbox import UID_COUNT, observation
from rlvr.tools.special_tokens import COMMON_TOKENS, tokenizer_tokens

ROOT = Path(__file__).resolve().parents[2]
FIRST, LAST = SandboxLimits().first_uid, SandboxLimits().first_uid + UID_COUNT


def sandbox_processes() -> list[str]:
    """'pid uid state' of every process running as a sandbox uid."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = dict(
                line.split(":", 1) for line in Path(f"/proc/{name}/status").read_text().splitlines()
            )
        except (OSError, ValueError):
            continue
        uid = int(status["Uid"].split()[0])
        if FIRST <= uid < LAST:
            found.append(f"{name} {uid} {status['State'].strip()}")
    return found


@pytest.fixture(autouse=True)
def no_process_left():
    """No sandbox process outlives the test. A call that another pytest worker is making
    at the same moment is a sandbox process too, and ends within its own time limit (20 s
    at most, tests/security's included): wait that long before calling what remains a
    leftover."""
    yield
    deadline = time.monotonic() + 30
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_processes() == []


STOPPED = {"timeout_s": 2}
"""For code that runs until it is stopped; other code gets 10 s, on a loaded machine too."""


def run(code: str, **limits) -> tuple[str, object]:
    chosen = SandboxLimits(**{"timeout_s": 10, **limits})
    result = run_python(code, chosen)
    return observation(result, chosen), result


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the hostile tests are run as root")


# --- hostile code -------------------------------------------------------------------------


@as_root
def test_a_fork_storm_is_capped_and_killed():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    text, result = run(code, max_processes=8, **STOPPED)
    assert result.timed_out
    assert text.endswith("[timed out after 2 s: the program was stopped]")


@as_root
def test_an_infinite_loop_is_stopped_at_the_wall_clock_limit():
    started = time.monotonic()
    text, result = run("while True:\n    pass", **STOPPED)
    assert result.timed_out and text == "[timed out after 2 s: the program was stopped]"
    assert time.monotonic() - started < 6


@as_root
def test_cpu_time_is_limited_per_process():
    text, result = run("while True:\n    pass", timeout_s=20, cpu_s=1)
    assert not result.timed_out and result.exit_code == 128 + 24  # SIGXCPU
    assert text == "[killed: over its CPU time limit of 1 s]"


@as_root
def test_huge_output_stops_the_program_and_is_cut():
    text, result = run("while True:\n    print('x' * 10000)", max_output_bytes=100_000)
    assert result.output_exceeded and not result.timed_out
    assert len(result.output) == 100_000  # read up to the cap, not beyond
    # 100,000 characters shown as 1,000 + the cut line + 1,000
    assert "[... 98000 characters cut ...]" in text
    assert text.endswith("[stopped: the program printed more than 100000 bytes]")
    assert len(text) < 2000 + 100


@as_root
def test_a_memory_bomb_gets_a_memory_error():
    text, result = run("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))")
    assert result.exit_code == 1
    assert "MemoryError: the program ran out of its 512 MB" in text
    text, _ = run("x = bytearray(4 * 1024**3)", memory_mb=256)
    assert "MemoryError: the program ran out of its 256 MB" in text


@as_root
def test_it_cannot_write_outside_its_directory():
    host_tmp = Path("/tmp") / f"rlvr-sandbox-test-{uuid.uuid4().hex}"
    repo_file = ROOT / f"sandbox-test-{uuid.uuid4().hex}"
    code = (
        f"open({str(host_tmp)!r}, 'w').write('x')\n"  # its own /tmp: allowed, private
        "open('here.txt', 'w').write('y')\n"
        "import os\n"
        "print(sorted(os.listdir('.')), os.getcwd())\n"
        "for path in [{!r}, '/etc/rlvr-test', '/var/tmp/rlvr-test']:\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('wrote', path)\n"
        "    except OSError as error:\n"
        "        print(type(error).__name__, error.errno)\n"
    ).replace("{!r}", repr(str(repo_file)))
    text, result = run(code)
    assert result.exit_code == 0
    lines = text.splitlines()
    assert lines[0] == "['here.txt'] /tmp/work"
    assert lines[2:] == ["OSError 30", "FileNotFoundError 2"]  # EROFS; no /var in its root
    # The repo: read-only (EROFS), or, for a clone under /tmp, a directory of the sandbox's
    # fresh /tmp that only root may write (EACCES).
    assert lines[1] in ("OSError 30", "PermissionError 13")
    assert not host_tmp.exists() and not repo_file.exists()


@as_root
def test_file_size_is_limited():
    code = "open('big', 'wb').write(b'x' * 3 * 1024 * 1024)"
    text, result = run(code, file_size_mb=1)
    assert result.exit_code == 1 and "File too large" in text


@as_root
def test_it_cannot_read_the_parents_environment(monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    code = (
        "import os\n"
        "print(dict(os.environ))\n"
        f"for pid in ['1', {str(os.getpid())!r}, 'self']:\n"
        "    try:\n"
        "        print(pid, open(f'/proc/{pid}/environ').read())\n"
        "    except OSError as error:\n"
        "        print(pid, type(error).__name__)\n"
    )
    text, result = run(code)
    assert result.exit_code == 0
    assert secret not in text and "RLVR_TEST_SECRET" not in text
    assert f"{os.getpid()} FileNotFoundError" in text  # the test process is not in its /proc


@as_root
def test_sleeping_forever_is_stopped():
    started = time.monotonic()
    _, result = run("import time\ntime.sleep(10**6)", **STOPPED)
    assert result.timed_out and time.monotonic() - started < 6


DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open('/dev/null', 'w')
        time.sleep(1000)
    os._exit(0)
print('parent done')
"""


@as_root
def test_a_setsid_double_forked_daemon_dies_with_the_call():
    text, result = run(DAEMON)
    assert result.exit_code == 0 and text == "parent done"
    # the autouse fixture then finds no process left


@as_root
def test_a_daemon_dies_when_the_call_times_out():
    _, result = run(DAEMON + "time.sleep(1000)\n", **STOPPED)
    assert result.timed_out


@as_root
def test_printing_the_end_of_turn_token_does_not_end_the_turn():
    text, _ = run("print('<|im_end|>', '<|eot_id|>')\n'</tool_call>'")
    assert text == "< |im_end|> < |eot_id|>\n'< /tool_call>'"


@as_root
def test_an_alarm_during_the_call_waits_for_the_clean_up():
    # ToolEnvironment's 0.5 s alarm fires during a 1.5 s sleep; the sandbox finishes and
    # kills everything first, then the alarm reports the tool's time-out
    tool = make_python_tool(timeout_s=1.5)
    env = ToolEnvironment([tool], timeout_s=0.5)
    started = time.monotonic()
    reply = env.step("<python>" + DAEMON + "time.sleep(1000)\n</python>")
    assert reply.tool_error == "timeout" and reply.observation == (
        "<result>error: python timed out after 0.5s</result>"
    )
    assert 1.5 < time.monotonic() - started < 8


# --- normal use ---------------------------------------------------------------------------


def test_print_and_the_last_expression():
    assert run("x = 6\nprint('x is', x)\nx * 7")[0] == "x is 6\n42"
    assert run("'text'")[0] == "'text'"  # its repr, as a notebook shows it
    assert run("print('only')\nNone")[0] == "only"  # None is not shown
    assert run("for i in range(2):\n    i")[0] == ""  # not a bare expression at the end


def test_installed_packages_import_unless_site_packages_is_off():
    assert run("import numpy\nint(numpy.arange(5).sum())")[0] == "10"
    text, _ = run("import numpy", site_packages=False)
    assert "ModuleNotFoundError: No module named 'numpy'" in text


def test_a_syntax_error():
    text, result = run("def f(:\n    pass")
    assert result.exit_code == 1
    assert text.splitlines()[0] == '  File "<cell>", line 1'
    assert "SyntaxError: invalid syntax" in text and text.endswith("[exit code 1]")


def test_a_traceback_shows_the_cells_frames_only():
    text, _ = run("def f(x):\n    return 1 / x\n\nf(0)")
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        '  File "<cell>", line 4, in <module>',
        "    f(0)",
        '  File "<cell>", line 2, in f',
        "    return 1 / x",
        "           ~~^~~",
        "ZeroDivisionError: division by zero",
        "[exit code 1]",
    ]


def test_exit_code():
    assert run("import sys\nprint('bye')\nsys.exit(3)")[0] == "bye\n[exit code 3]"


def test_long_output_keeps_head_and_tail():
    # 2,500 a + 2,500 b + newline = 5,001 characters; 2,000 kept: 1,000 head, 1,000 tail
    # (999 b and the newline, which the observation strips)
    text, _ = run("print('a' * 2500 + 'b' * 2500)")
    assert text == "a" * 1000 + "\n[... 3001 characters cut ...]\n" + "b" * 999


def test_code_that_cannot_be_passed_is_refused_unrun():
    text = python("x = 1\0")
    assert text == "error: the code contains a null byte; it was not run"
    assert python("#" * 100_001).startswith("error: the code is over 100000 bytes")


def test_the_tool_through_tool_environment():
    env = ToolEnvironment([python])
    reply = env.step("Let me compute. <python>sum(range(10))</python>")
    assert reply.tool_call and reply.tool_error is None
    assert reply.observation == "<result>45</result>"
    reply = env.step('<python>{"code": "print(2 ** 10)"}</python>')
    assert reply.observation == "<result>1024</result>"
    schema = tool_schema(python)["function"]
    assert schema["name"] == "python" and schema["parameters"]["required"] == ["code"]
    assert schema["description"].startswith("Run Python code and return what it printed")


def test_limits_are_checked_by_name():
    with pytest.raises(ValueError, match=r"timeout_s must be in \(0, 30\], got 31"):
        SandboxLimits(timeout_s=31)
    with pytest.raises(ValueError, match=r"SandboxLimits\.memory_mb must be a positive integer"):
        SandboxLimits(memory_mb=0)
    with pytest.raises(ValueError, match=r"unknown sandbox limits \['memory'\]"):
        make_python_tool(memory=100)


def test_concurrent_calls_get_their_own_uids():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        outputs = list(pool.map(lambda _: run("import os\nos.getuid()")[0], range(3)))
    assert len(set(outputs)) == 3 and all(FIRST <= int(o) < LAST for o in outputs)


# --- special tokens -----------------------------------------------------------------------


def test_neutralise_breaks_every_occurrence():
    assert neutralise("a<|im_end|>b</s>[INST]") == "a< |im_end|>b< /s>[ INST]"
    assert neutralise("<<|im_end|>|im_end|>") == "<< |im_end|>|im_end|>"
    assert neutralise("<|mine|>", ["<|mine|>"]) == "< |mine|>"
    for token in COMMON_TOKENS:
        assert token not in neutralise(f"x{token}{token}y")


def test_neutralised_text_does_not_tokenize_to_the_special_token():
    sys.path.insert(0, str(ROOT / "tests"))
    from hf_testlib import build_tokenizer

    tokenizer = build_tokenizer(["hello world, print the result"])
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end in tokenizer.encode("done<|im_end|>")  # the danger: text becomes the token
    tokens = tokenizer_tokens(tokenizer)
    assert {"<|im_end|>", "<|im_start|>", "<|pad|>"} <= set(tokens)
    tool = make_python_tool(timeout_s=10, extra_tokens=tokens)
    text = tool("print('done<|pad|>', '<|im_end|>')")
    assert text == "done< |pad|> < |im_end|>"
    ids = tokenizer.encode(text)
    assert not {end, tokenizer.pad_token_id} & set(ids)


# --- where less can be enforced -----------------------------------------------------------


def processes_running(marker: str) -> list[str]:
    """Pids of processes whose command line holds `marker` (the code travels in it)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace"):
                found.append(name)
        except OSError:
            continue
    return found


@as_root
def test_the_trainer_sweeps_itself_when_the_launcher_does_not_stop(monkeypatch):
    monkeypatch.setattr(python_sandbox, "STOP_GRACE_S", 0)  # it never answers in time
    _, result = run(DAEMON + "time.sleep(1000)\n", **STOPPED)
    assert result.timed_out  # the fixture: the process-group kill and the sweep left none


@as_root
def test_without_namespaces_the_uid_still_contains_it(monkeypatch):
    # as in a container that refuses unshare: no namespaces, so the interpreter must be one
    # others may enter (this machine's pyenv sits in a 0700 /root: the system python)
    system = Path("/usr/bin/python3")
    if not system.exists() or not os.access(system, os.X_OK):
        pytest.skip("no system python to run without namespaces")
    original = python_sandbox._config
    monkeypatch.setattr(
        python_sandbox,
        "_config",
        lambda limits, uid: {
            **original(limits, uid),
            "namespaces": False,
            "python": str(system),
            "reveal": ["/usr"],
        },
    )
    monkeypatch.setattr(python_sandbox, "_warned", set())
    host_tmp = Path("/tmp") / f"rlvr-sandbox-test-{uuid.uuid4().hex}"
    try:
        with pytest.warns(RuntimeWarning, match="no namespaces: the network is reachable"):
            text, result = run(
                f"open({str(host_tmp)!r}, 'w')\nopen({str(ROOT / 'sandbox-test')!r}, 'w')",
                site_packages=False,
            )
        kept = ("namespaces", "uid", "no_new_privs", "seccomp")
        assert {k: result.enforced[k] for k in kept} == {
            "namespaces": False,
            "uid": True,
            "no_new_privs": True,
            "seccomp": True,
        }
        assert "PermissionError: [Errno 13]" in text  # the repo: root's, not the uid's
        assert host_tmp.exists()  # the known gap: world-writable places stay writable
    finally:
        host_tmp.unlink(missing_ok=True)
    text, result = run(DAEMON, site_packages=False)  # the sweep kills the setsid'd daemon
    assert text == "parent done"
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    _, result = run(code, site_packages=False, max_processes=8, **STOPPED)
    assert result.timed_out


@as_root
def test_in_a_user_namespace_as_a_non_root_trainer_would(monkeypatch):
    # not root: no uid of its own, the namespaces inside a user namespace (simulated here:
    # root mapped to uid 1000 inside, so no process limit, which a real user would have)
    @contextlib.contextmanager
    def no_uid(first_uid, settled):
        yield None

    monkeypatch.setattr(python_sandbox, "sandbox_uid", no_uid)
    monkeypatch.setattr(python_sandbox, "_warned", set())
    marker = uuid.uuid4().hex
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    code = (
        f"# {marker}\n"
        "import os, socket\n"
        "print(os.getuid(), os.getcwd(), sorted(os.listdir('/proc'))[:2])\n"
        "for path in ['/tmp/x', 'x', '/etc/x']:\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('wrote', path)\n"
        "    except OSError as error:\n"
        "        print(error.errno)\n"
        "try:\n"
        "    socket.create_connection(('10.0.0.1', 80), timeout=1)\n"
        "except OSError as error:\n"
        "    print(error.errno)\n"
        "print(dict(os.environ))\n"
    )
    with pytest.warns(RuntimeWarning, match="not root"):
        text, result = run(code + DAEMON)
    assert result.enforced["namespaces"] and not result.enforced["uid"]
    lines = text.splitlines()
    assert lines[:5] == [
        "1000 /tmp/work ['1', '2']",  # its own /proc: init and itself
        "wrote /tmp/x",
        "wrote x",
        "30",  # EROFS
        "101",  # ENETUNREACH: no route out of its network namespace
    ]
    assert secret not in text and lines[-1] == "parent done"
    assert processes_running(marker) == []
    _, result = run(f"# {marker}\n" + DAEMON + "time.sleep(1000)\n", **STOPPED)
    assert result.timed_out and processes_running(marker) == []


FORGETFUL_LAUNCHER = """
import json, os, sys, time
config = json.loads(sys.argv[1])
if "sweep" in config:  # the trainer's own sweep: the real launcher's
    os.execv(sys.executable, [sys.executable, "-I", "-S", REAL, sys.argv[1]])
ready, told = os.pipe()
child = os.fork()
if child == 0:  # a process of the call's uid that this launcher forgets to kill
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.setsid()
    os.setgid(config["uid"])
    os.setuid(config["uid"])
    os.write(told, b"1")
    time.sleep(1000)
    os._exit(0)
os.read(ready, 1)
with open(PID_FILE, "w") as f:
    f.write(str(child))
report = {"namespaces": True, "uid": True, "read_only_root": True, "seccomp": True,
          "memory_cgroup": True}
os.write(2, (json.dumps(report) + "\\n").encode())
"""


@as_root
def test_the_trainer_sweeps_what_a_launcher_left(monkeypatch, tmp_path):
    # a launcher that ends normally but leaves a process of the uid behind: the call
    # returns only once the uid is empty (its lock is then free for the next call)
    pid_file = tmp_path / "pid"
    script = tmp_path / "launcher.py"
    script.write_text(
        f"REAL = {python_sandbox.LAUNCHER!r}\nPID_FILE = {str(pid_file)!r}\n" + FORGETFUL_LAUNCHER
    )
    monkeypatch.setattr(python_sandbox, "LAUNCHER", str(script))
    run("print('hi')")
    pid = int(pid_file.read_text())
    status = Path(f"/proc/{pid}/status")
    assert not status.exists() or "\nState:\tZ" in status.read_text()
