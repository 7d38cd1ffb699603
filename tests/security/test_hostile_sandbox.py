"""The python sandbox against the attacks of the security audit (F2–F8, F10, F11), each run
as the audit ran it, on the path a root trainer takes and, where the audit found that path
failing too, on the one a non-root trainer takes (a user namespace). Held means: the call
returns what it should, and the attack's effect is absent."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import itertools
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sandbox_testlib import (
    FIRST,
    ROOT,
    as_a_non_root_trainer,
    as_root,
    run,
    wait_until_none_left,
    without_namespaces,
)

from rlvr.tools import SandboxLimits, python, python_sandbox, sandbox_uids
from rlvr.tools.sandbox_seccomp import SYSCALLS
from rlvr.tools.sandbox_uids import SandboxError, sandbox_uid
from rlvr.tools.sandbox_view import SYSTEM

STOPPED = {"timeout_s": 3}
"""For code that runs until it is stopped."""


@pytest.fixture(autouse=True)
def no_process_left():
    yield
    assert wait_until_none_left() == []


@pytest.fixture(params=["root", "user namespace"])
def trainer(request, monkeypatch):
    """Both sandbox paths: a root trainer's, and a non-root trainer's."""
    if request.param == "root":
        yield request.param
        return
    with as_a_non_root_trainer(monkeypatch):
        yield request.param


# --- F2: a process name that is not UTF-8 ------------------------------------------------

BAD_NAME = b"r\xc3\xa9sum\xc3\xa9-\xe6\x97\xa5\xe6\x9c"  # "résumé-日本" cut at 15 bytes


def named_processes(name: bytes) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_bytes() == name + b"\n":
                found.append(int(pid))
    return found


@as_root
def test_a_host_process_whose_name_is_not_utf8_breaks_no_call():
    code = f"import ctypes, time\nctypes.CDLL(None).prctl(15, {BAD_NAME!r}, 0, 0, 0)\n"
    host = subprocess.Popen([sys.executable, "-c", code + "print(1, flush=True)\ntime.sleep(600)"],
                            stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert host.stdout.readline() == b"1\n" and named_processes(BAD_NAME)
        assert [run("1 + 1")[0] for _ in range(2)] == ["2", "2"]
    finally:
        host.kill()
        host.wait()


@as_root
def test_an_episode_that_renames_itself_breaks_no_other_call():
    hostile = "import ctypes, time\nctypes.CDLL(None).prctl(15, b'\\xff\\xfe', 0, 0, 0)\n"
    with ThreadPoolExecutor(5) as pool:
        bad = pool.submit(run, hostile + "time.sleep(10)")
        deadline = time.monotonic() + 60  # its start, on a loaded machine
        while not named_processes(b"\xff\xfe") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert named_processes(b"\xff\xfe")
        benign = [pool.submit(run, "1 + 1") for _ in range(4)]
        assert [f.result()[0] for f in benign] == ["2"] * 4
        assert bad.result()[1].exit_code == 0


RENAMED_DAEMON = """
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b'\\xff', 0, 0, 0)
        for fd in (0, 1, 2):
            os.close(fd)
        time.sleep(1000)
    os._exit(0)
print('parent done')
"""


@as_root
def test_without_namespaces_a_daemon_with_a_bad_name_is_killed(monkeypatch):
    with without_namespaces(monkeypatch):
        for _ in range(3):  # the audit: the call raised and the next ones too
            text, _ = run(RENAMED_DAEMON, site_packages=False)
            assert text == "parent done"
            assert named_processes(b"\xff") == []


@as_root
def test_a_uids_lock_is_kept_while_its_processes_may_live(monkeypatch, tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    monkeypatch.setattr(sandbox_uids, "LOCK_DIR", str(locks))
    monkeypatch.setattr(sandbox_uids, "_kept", {})
    monkeypatch.setattr(python_sandbox, "_alive", lambda uid: True)  # a sweep that fails

    def sweep_fails(uid):
        raise SandboxError(f"processes of sandbox uid {uid} survived the kill")

    monkeypatch.setattr(python_sandbox, "_sweep", sweep_fails)
    with (
        pytest.warns(RuntimeWarning, match="stays locked"),
        pytest.raises(SandboxError, match="survived the kill"),
    ):
        python("1 + 1")
    (kept,) = sandbox_uids._kept
    try:
        fd = os.open(locks / str(kept), os.O_RDWR)
        with pytest.raises(BlockingIOError):  # held: no other call is given this uid
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        with sandbox_uid(FIRST, lambda uid: True) as uid:  # one shown empty is released
            assert uid != kept
        fd = os.open(locks / str(uid), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        os.close(sandbox_uids._kept[kept])


# --- F3: setuid binaries -----------------------------------------------------------------

SETUID_PROBE = """
import os, shutil, subprocess, time
print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])
for line in open('/proc/self/mountinfo'):
    point, options = line.split()[4:6]
    if 'nosuid' not in options.split(',') or ('nodev' not in options.split(',')
                                              and not point.startswith('/dev/')):
        print('mount without nosuid/nodev', point, options)
su = shutil.which('su')
if su and os.stat(su).st_mode & 0o4000:
    p = subprocess.Popen([su, '-c', 'id'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    seen = None
    for _ in range(200):
        try:
            status = open(f'/proc/{p.pid}/status').read()
            seen = [l.split()[2] for l in status.splitlines() if l.startswith('Uid')]
            seen += [l.split()[1] for l in status.splitlines() if l.startswith('CapEff')]
        except OSError:
            break
        if p.poll() is not None:
            break
        time.sleep(0.01)
    p.kill()
    print('su', seen, os.geteuid())
"""


@as_root
def test_a_setuid_binary_gains_nothing(trainer):
    text, result = run(SETUID_PROBE)
    assert result.exit_code == 0, text
    lines = text.splitlines()
    assert lines[0] == "1"  # PR_SET_NO_NEW_PRIVS
    assert not [line for line in lines if line.startswith("mount without")]
    if len(lines) > 1:  # a setuid su was there: its effective uid is ours, no capability
        seen, euid = lines[1].rsplit(" ", 1)
        assert seen in ("su None", f"su ['{euid}', '0000000000000000']"), seen


# --- F4: namespaces of its own -----------------------------------------------------------

NESTED = """
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
print('unshare', libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), ctypes.get_errno())
pid = libc.syscall(CLONE, CLONE_NEWUSER | CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
print('clone', pid, ctypes.get_errno())
os.mkdir('big')
print('mount', libc.mount(b'none', b'big', b'tmpfs', 0, None), ctypes.get_errno())
written = 0
try:
    with open('big/fill', 'wb') as f:
        for _ in range(200):
            f.write(b'x' * (1 << 20))
            written += 1
except OSError:
    pass
print('wrote MB', written)
"""


@as_root
@pytest.mark.skipif(platform.machine() not in SYSCALLS, reason="no seccomp table here")
def test_it_cannot_make_a_user_namespace_and_mount_a_tmpfs_of_its_own(trainer):
    clone = SYSCALLS[platform.machine()][1]["clone"]
    text, _ = run(f"CLONE = {clone}\n" + NESTED, disk_mb=64, file_size_mb=256)
    lines = text.splitlines()
    assert lines[:3] == ["unshare -1 1", "clone -1 1", "mount -1 1"], text  # EPERM: seccomp
    written = int(lines[3].removeprefix("wrote MB "))
    assert 60 <= written <= 64, text  # into its working directory: its tmpfs of 64 MiB
    code = "import subprocess\nprint(subprocess.run(['unshare', '-Ur', 'id']).returncode)"
    assert run(code)[0].splitlines()[-1] != "0"


# --- F5: memory outside its limits -------------------------------------------------------

PIN = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print('shmget', libc.shmget(0, 64 << 20, 0o1600), ctypes.get_errno())
print('msgget', libc.msgget(0, 0o1600), ctypes.get_errno())
try:
    os.memfd_create('x')
    print('memfd made')
except OSError as error:
    print('memfd', error.errno)
"""


@as_root
def test_shared_memory_and_memfd_are_refused(trainer):
    assert run(PIN, memory_mb=64)[0].splitlines() == ["shmget -1 1", "msgget -1 1", "memfd 1"]


FILL = """
def fill(path):
    written = 0
    try:
        with open(path, 'wb', buffering=0) as f:
            for _ in range(60):
                f.write(b'x' * (1 << 20))
                written += 1
    except OSError as error:
        return written, error.errno
    return written, None
print(fill('/tmp/a'), fill('/dev/shm/b'))
"""


@as_root
def test_tmp_and_dev_shm_share_disk_mb(trainer):
    text, _ = run(FILL, disk_mb=64, file_size_mb=64)
    first, second = ast.literal_eval(text.replace(") (", "), ("))
    assert first == (60, None), text  # 60 of the 64 MB in /tmp
    assert second[1] == 28 and second[0] <= 4, text  # ENOSPC in /dev/shm: 4 MB were left


SPREAD = """
import os, time
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        held = bytearray(48 << 20)  # touched: resident, 48 MB
        time.sleep(3)
        os._exit(0)
    children.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children])
"""


@as_root
def test_all_its_processes_together_hold_at_most_memory_mb_plus_disk_mb():
    # the audit: 6 × 48 MB resident under memory_mb=64, each process within its own limit
    text, result = run(SPREAD, memory_mb=64, disk_mb=64)
    if not result.enforced.get("memory_cgroup"):
        pytest.skip("this host lets the launcher make no memory cgroup")
    statuses = ast.literal_eval(text.splitlines()[0])
    # 64 + 64 = 128 MB for the call: beside the parent, at most 2 children of 48 MB live
    assert set(statuses) <= {0, -9} and statuses.count(0) <= 2, text
    assert result.enforced["oom_kills"] >= 4


# --- F6, F7: what it can see -------------------------------------------------------------


@pytest.fixture
def host_secrets():
    """A world-readable file of answers and a world-connectable unix socket, outside the
    temporary directory, where a data set or a system service would put them."""
    tag = uuid.uuid4().hex
    answers = Path("/var/tmp") / f"rlvr-test-answers-{tag}.jsonl"
    answers.write_text('{"answer": 42}\n')
    answers.chmod(0o644)
    path = Path("/var/tmp") / f"rlvr-test-{tag}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen()
    try:
        yield answers, path
    finally:
        server.close()
        path.unlink(missing_ok=True)
        answers.unlink(missing_ok=True)


LOOK = """
import os, socket
for path in PATHS:
    try:
        print(open(path).read()[:60])
    except OSError as error:
        print(type(error).__name__)
try:
    socket.socket(socket.AF_UNIX).connect(SOCKET)
    print('connected')
except OSError as error:
    print(type(error).__name__)
print(sorted(os.listdir(ROOT)) if os.path.isdir(ROOT) else 'no checkout')
print(sorted(os.listdir('/')))
"""


@as_root
def test_it_sees_neither_the_project_nor_data_nor_host_sockets(trainer, host_secrets):
    answers, sock = host_secrets
    paths = [str(ROOT / "README.md"), str(answers), "/etc/hostname", "/etc/shadow"]
    code = f"PATHS = {paths!r}\nSOCKET = {str(sock)!r}\nROOT = {str(ROOT)!r}\n" + LOOK
    text, _ = run(code)
    lines = text.splitlines()
    assert lines[:5] == ["FileNotFoundError"] * 5, text
    # the checkout shows at most its virtual environment, when the interpreter lives there
    assert lines[5] in ("no checkout", "['.venv']"), text
    reveal = python_sandbox._config(SandboxLimits(), None)["reveal"]
    interpreter = {path.split("/")[1] for path in reveal}  # e.g. work (for .venv), root
    system = {path.split("/")[1] for path in SYSTEM} | {"dev", "proc", "tmp"}
    assert set(ast.literal_eval(lines[6])) <= system | interpreter, text
    assert not {"var", "run", "sys"} & set(ast.literal_eval(lines[6]))


# --- F8: the uid lock directory ----------------------------------------------------------

TRAINER_A = """
import itertools, os, sys
from rlvr.tools import make_python_tool, sandbox_uids
sandbox_uids._counter = itertools.count((5 - 7 * os.getpid()) % 1024)
python = make_python_tool(timeout_s=30)
print(python("import os, time\\nprint('A uid', os.getuid())\\ntime.sleep(6)"))
"""


def lock_held(uid: int) -> bool:
    path = Path(sandbox_uids.LOCK_DIR) / str(uid)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@as_root
def test_two_trainers_with_different_tmpdirs_never_share_a_uid(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    uid = FIRST + 5
    env = {**os.environ, "TMPDIR": str(tmp_path / "a"), "PYTHONPATH": str(ROOT)}
    a = subprocess.Popen([sys.executable, "-c", TRAINER_A], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not lock_held(uid) and a.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "b"))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr(sandbox_uids, "_counter", itertools.count((5 - 7 * os.getpid()) % 1024))
    b = python("import os\nos.getuid()")
    out, err = a.communicate(timeout=120)
    # both steered to FIRST + 5 (A takes the next one should another test's call hold it)
    a_uid = out.strip().removeprefix("A uid ")
    assert a_uid.isdigit(), out + err  # one line: not "[killed by SIGKILL]" by B's sweep
    assert b.isdigit() and b != a_uid  # B took another uid, and was not killed


@as_root
def test_a_lock_directory_someone_else_made_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "created-by-root"
    planted = tmp_path / "rlvr-sandbox-uids"
    planted.mkdir(mode=0o777)
    os.chown(planted, 65534, 65534)  # nobody's
    for k in range(1024):
        (planted / str(FIRST + k)).symlink_to(target)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the audit's attacker got root to look
    monkeypatch.setattr("tempfile.tempdir", None)
    assert python("1 + 1") == "2" and not target.exists()
    monkeypatch.setattr(sandbox_uids, "LOCK_DIR", str(planted))  # were it ours to use
    with pytest.raises(SandboxError, match=r"must belong to uid 0 with mode 0700; it belongs to uid 65534"):  # fmt: skip
        python_sandbox.run_python("1")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    monkeypatch.setattr(sandbox_uids, "LOCK_DIR", str(link))
    with pytest.raises(SandboxError, match=r"is not a directory"):
        python_sandbox.run_python("1")
    assert not target.exists()


# --- F10, F11 ----------------------------------------------------------------------------

REFORKING_DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    for fd in (0, 1, 2):
        os.close(fd)
    while True:
        try:
            if os.fork():
                os._exit(0)
        except OSError:
            pass
print('parent done')
"""


@as_root
def test_without_namespaces_a_reforking_daemon_is_swept(monkeypatch):
    with without_namespaces(monkeypatch), ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda _: run(REFORKING_DAEMON, site_packages=False), range(6)))
    assert [text for text, _ in done] == ["parent done"] * 6


def test_a_lone_surrogate_in_the_code_is_an_observation():
    assert python("print('\ud800')") == (
        "error: the code contains a lone surrogate (U+D800), which is not text; it was not run"
    )


def test_the_seccomp_program_jumps_where_its_labels_say():
    # every jump lands on the return its label names: refused calls on RET ERRNO(EPERM),
    # clone3 and another ABI on RET ERRNO(ENOSYS), clone on the load of its flags
    from rlvr.tools import sandbox_seccomp as sc

    for machine, (audit_arch, numbers) in SYSCALLS.items():
        code = sc.program(machine)
        eperm, enosys = (sc.RET_K, 0, 0, sc.RET_ERRNO | 1), (sc.RET_K, 0, 0, sc.RET_ERRNO | 38)
        assert code[-2:] == [eperm, enosys] and code[0] == (sc.LD_W_ABS, 0, 0, sc.ARCH)
        assert code[1 + 1 + code[1][2]] == enosys and code[1][3] == audit_arch
        landing = {k: code[i + 1 + jt] for i, (op, jt, _, k) in enumerate(code) if op == sc.JEQ_K}
        assert all(landing[numbers[name]] == eperm for name in sc.REFUSED)
        assert landing[numbers["clone3"]] == enosys
        assert landing[numbers["clone"]] == (sc.LD_W_ABS, 0, 0, sc.ARG0)
