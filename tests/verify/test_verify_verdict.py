"""safe_verify turns exceptions, time-outs and junk into failed verdicts."""

import contextlib
import threading
import time

from rlvr.verify import Verdict, safe_verify


def _ok(answer: str) -> Verdict:
    return Verdict(True, True, answer, reason="correct")


def test_passes_through_a_verdict():
    assert safe_verify(_ok, "3") == Verdict(True, True, "3", "correct")


def test_exception_becomes_verdict():
    def boom(_):
        raise KeyError("missing")

    verdict = safe_verify(boom, "x")
    assert verdict == Verdict(False, False, None, verdict.reason)
    assert "KeyError" in verdict.reason


def test_recursion_error_becomes_verdict():
    def recurse(n):
        return recurse(n + 1)

    assert "RecursionError" in safe_verify(recurse, 0).reason


def test_non_verdict_result_becomes_verdict():
    verdict = safe_verify(lambda: True)
    assert not verdict.correct and "not a Verdict" in verdict.reason


def test_timeout_in_main_thread():
    def spin():
        while True:
            # A verifier that swallows errors is still stopped.
            with contextlib.suppress(Exception):
                time.sleep(0.001)

    start = time.monotonic()
    verdict = safe_verify(spin, timeout_s=0.05)
    assert time.monotonic() - start < 1.0
    assert not verdict.correct and "timed out" in verdict.reason


def test_timer_is_cleared_afterwards():
    import signal

    safe_verify(_ok, "1", timeout_s=0.01)
    time.sleep(0.03)  # a leaked alarm would fire here and kill the test
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def test_runs_without_timer_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(safe_verify(_ok, "2")))
    thread.start()
    thread.join()
    assert results == [Verdict(True, True, "2", "correct")]
