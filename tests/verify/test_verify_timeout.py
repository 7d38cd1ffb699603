"""A pathological answer times out cleanly wherever the check runs: main thread (alarm),
another thread (helper process), a worker process's main thread (alarm) and a thread
inside a daemonic worker (helper process). A time-out is a counted verdict, never an
exception."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from rlvr.verify import check
from rlvr.verify.checkers import FAILURES
from rlvr.verify.timeout import VerifierTimeout, call_with_timeout, choose_mode

# sympy evaluates this sum term by term: minutes of work for a 6-character-ish answer.
HANGS = "\\boxed{\\sum_{k=1}^{100000000} k^{k}}"
LIMIT_S = 0.5


def _timed_check(mode: str = "auto"):
    if choose_mode(mode) == "process":
        # Starting the helper and importing sympy are one-off costs outside the limit.
        assert check("math", "\\boxed{1}", "1", mode=mode).correct
    started = time.perf_counter()
    verdict = check("math", HANGS, "1", timeout_s=LIMIT_S, mode=mode)
    return verdict, time.perf_counter() - started


def _assert_timed_out(verdict, seconds):
    assert (verdict.correct, verdict.formatted) == (False, False)
    assert "timed out" in verdict.reason
    assert seconds < LIMIT_S + 3.0  # the limit plus process start/kill overhead


def test_main_thread_uses_the_alarm():
    assert choose_mode() == "alarm"
    before = FAILURES["math/timeout"]
    _assert_timed_out(*_timed_check())
    assert FAILURES["math/timeout"] == before + 1


def test_other_thread_uses_the_helper_process():
    results = []

    def work():
        results.append((choose_mode(), *_timed_check()))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(60)
    mode, verdict, seconds = results[0]
    assert mode == "process"
    _assert_timed_out(verdict, seconds)
    # The helper was killed; the next check restarts it and gives a normal verdict.
    after = []
    worker = threading.Thread(target=lambda: after.append(check("math", "\\boxed{2}", "2")))
    worker.start()
    worker.join(120)
    assert after[0].correct


def test_forced_process_mode_on_the_main_thread():
    _assert_timed_out(*_timed_check("process"))


def _in_child(queue, use_thread: bool) -> None:
    if use_thread:
        box = []
        worker = threading.Thread(target=lambda: box.append((choose_mode(), *_timed_check())))
        worker.start()
        worker.join(60)
        queue.put(box[0])
    else:
        queue.put((choose_mode(), *_timed_check()))


@pytest.mark.parametrize(("use_thread", "expected_mode"), [(False, "alarm"), (True, "process")])
def test_inside_a_daemonic_worker_process(use_thread, expected_mode):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(queue, use_thread), daemon=True)
    child.start()
    mode, verdict, seconds = queue.get(timeout=120)
    child.join(30)
    assert mode == expected_mode
    _assert_timed_out(verdict, seconds)


def test_exceptions_inside_a_verifier_become_verdicts():
    before = FAILURES["aime/error"]
    verdict = check("aime", "\\boxed{5}", "not an integer")
    assert (verdict.correct, verdict.formatted) == (False, False)
    assert "verifier error: ValueError" in verdict.reason
    assert FAILURES["aime/error"] == before + 1


def _sleep_forever() -> None:
    while True:
        time.sleep(0.01)


def test_call_with_timeout_in_thread_mode_raises_the_timeout():
    with pytest.raises(VerifierTimeout):
        call_with_timeout(_sleep_forever, (), 0.2, mode="thread")


def test_unknown_verifier_and_mode_are_named():
    with pytest.raises(ValueError, match="valid verifiers are: gsm8k, math, aime"):
        check("gsm9k", "x", "1")
    with pytest.raises(ValueError, match="timeout mode must be one of"):
        choose_mode("fork")


def _timeout_then_check(queue) -> None:
    first = check("math", HANGS, "1", timeout_s=LIMIT_S)
    queue.put((first.reason, check("math", "\\boxed{\\frac{2}{4}}", "\\frac{1}{2}").correct))


def test_a_time_out_on_the_first_check_leaves_math_verify_working():
    # Before the warm-up ran outside the limit, the alarm landed inside math-verify's
    # import and every later check in the process came out wrong.
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_timeout_then_check, args=(queue,), daemon=True)
    child.start()
    reason, later_correct = queue.get(timeout=120)
    child.join(30)
    assert "timed out" in reason
    assert later_correct


def _noisy(x: int) -> int:
    print("verifier chatter on stdout")
    return x + 1


def test_a_verifier_printing_to_stdout_does_not_break_the_helper():
    assert call_with_timeout(_noisy, (41,), 30.0, mode="process") == 42
    assert call_with_timeout(_noisy, (1,), 30.0, mode="process") == 2


SCRIPT = """
import threading
from pathlib import Path
from rlvr.verify import check
with Path({marker!r}).open("a") as f:
    f.write("top level ran\\n")
box = []
worker = threading.Thread(target=lambda: box.append(check("gsm8k", "#### 1,000", "1000")))
worker.start()
worker.join(120)
print(box[0].correct)
"""


def test_the_helper_never_reruns_the_callers_main_script(tmp_path):
    # A user's script without an `if __name__ == "__main__"` guard: a multiprocessing
    # spawn would re-run its top level in the helper (and failed on `python -`).
    import subprocess
    import sys

    marker = tmp_path / "marker.txt"
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT.format(marker=str(marker)))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.strip() == "True", result.stderr[-2000:]
    assert marker.read_text().count("top level ran") == 1


def test_a_forked_child_gets_its_own_helper():
    import os

    from rlvr.verify.timeout import _HELPER

    assert call_with_timeout(_noisy, (1,), 30.0, mode="process") == 2
    parent_helper = _HELPER._process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: a call must not talk to the parent's helper
        ok = call_with_timeout(_noisy, (2,), 60.0, mode="process") == 3
        ok = ok and _HELPER._process is not parent_helper
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert _HELPER._process is parent_helper and parent_helper.poll() is None


SWALLOWS_ONCE = """
import time
from rlvr.verify.timeout import VerifierTimeout, with_alarm

def work():
    try:  # third-party code with a bare except around a slow step
        while True:
            pass
    except:  # noqa: E722
        pass
    while True:  # the rest of the work
        pass

started = time.perf_counter()
try:
    with_alarm(work, (), 0.3)
except VerifierTimeout:
    print("timed out after", round(time.perf_counter() - started, 1))
"""


def test_a_swallowed_timeout_fires_again():
    """A bare except swallows the first VerifierTimeout; the alarm fires again until the
    call stops. Run in its own process so that, were it broken, the test fails, not hangs."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", SWALLOWS_ONCE], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith("timed out after"), done.stderr
    assert float(done.stdout.split()[-1]) < 5.0


def test_the_repeat_alarm_does_not_break_a_traceback_report():
    """A tick that lands while a traceback is being formatted (an unraisable-exception
    hook reporting a swallowed VerifierTimeout) waits for the next tick; any other frame
    gets the VerifierTimeout. Both ticks re-arm the alarm."""
    import signal
    from types import SimpleNamespace

    from rlvr.verify import timeout

    def frame(filename, back=None):
        return SimpleNamespace(f_code=SimpleNamespace(co_filename=filename), f_back=back)

    reporting = frame(__file__, back=frame(timeout.traceback.__file__))
    old = signal.signal(signal.SIGALRM, signal.SIG_IGN)
    try:
        timeout._raise_timeout(signal.SIGALRM, reporting)  # no raise
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
        with pytest.raises(timeout.VerifierTimeout):
            timeout._raise_timeout(signal.SIGALRM, frame(__file__))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
