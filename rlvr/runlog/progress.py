"""Progress of long work. `StepBar`: a tqdm bar over training steps showing reward and
held-out accuracy (with ETA), and for multi-turn runs the episodes' turns and failed
fraction; the warning a run whose episodes mostly run out of tokens gets once.
`Progress`: any other long work (`rlvr eval`, `rlvr compare` and its cells), a bar on a
terminal and periodic lines with an ETA elsewhere, opened with what it stops at and closed
with a line; with `after_s`, quiet for work that ends sooner. `Timed`: one long call with
no count of its own (the service's sample, forward_backward, save and load), its elapsed
time and an ETA from the same call's earlier rate, quiet for a short call."""

from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm

BUDGET_WARNING = 0.5
"""The fraction of a step's episodes cut by the token budget past which a run is warned."""


class StepBar:
    def __init__(self, total: int, enabled: bool, desc: str, initial: int = 0) -> None:
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="step",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        self._warned = False

    def update(self, metrics: dict[str, float], eval_accuracy: float) -> None:
        episodes = {}
        if "env/turns" in metrics:  # a multi-turn run: how its episodes go
            episodes = {
                "turns": f"{metrics['env/turns']:.2f}",
                "failed": f"{metrics.get('env/failed_frac', 0.0):.2f}",
            }
        self._bar.set_postfix(
            reward=f"{metrics.get('reward/mean', 0.0):.3f}",
            eval_acc=f"{eval_accuracy:.3f}",
            refill=int(metrics.get("rollout/refill_rounds", 0)),
            **episodes,
            refresh=False,
        )
        self._bar.update(1)
        self._warn_budget(metrics)

    def _warn_budget(self, metrics: dict[str, float]) -> None:
        """Once per run: most episodes ended at the token budget, not by answering."""
        cut = metrics.get("env/ended_budget", 0.0)
        if self._warned or cut <= BUDGET_WARNING:
            return
        self._warned = True
        tqdm.write(
            f"rlvr: warning: {cut:.0%} of this step's episodes ran out of tokens before they "
            f"ended (env/ended_budget): an episode's turns and observations share one "
            f"max_new_tokens; raise it (or lower episode.max_turns)",
            file=sys.stderr,
        )

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, enabled: bool, desc: str = "train", initial: int = 0) -> StepBar:
    """A bar over `total` steps that starts at `initial` (a resumed run's finished steps)."""
    return StepBar(total, enabled, desc, initial)


def duration(value: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    value = round(value)
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60:02d} s"
    return f"{value // 3600} h {value % 3600 // 60:02d} min"


class Progress:
    """Long work, seen as it goes: on a terminal a tqdm bar (with its ETA); elsewhere (logs,
    CI, pipes) an opening line that says what it stops at, a line every `every_s` seconds
    with the count, the elapsed time and the ETA, and a closing line. Disabled: silent.

    `target` says what ends the work, when not only its count does: "dev accuracy 0.30"
    reads "stops at dev accuracy 0.30 or 3000 steps"; the ETA is then to the count, an
    upper bound. `initial`: units done before (a resumed run's steps), left out of the
    rate. `after_s`: nothing is shown until the work has lasted that long (the opening
    line comes with the first count after it), so short work prints nothing at all."""

    def __init__(
        self,
        desc: str,
        total: int,
        unit: str = "step",
        enabled: bool = True,
        target: str | None = None,
        every_s: float = 30.0,
        file=None,
        initial: int = 0,
        after_s: float = 0.0,
    ) -> None:
        self.desc, self.total, self.unit, self.enabled = desc, total, unit, enabled
        self.file = file or sys.stderr
        self.every_s, self.done, self.initial, self.after_s = every_s, initial, initial, after_s
        self.started = self.last_line = time.perf_counter()
        self.lines = enabled and not _is_terminal(self.file)
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            disable=not enabled or self.lines,
            file=self.file,
            dynamic_ncols=True,
            delay=after_s,
        )
        stops = f"stops at {target} or {total} {unit}s" if target else f"{total} {unit}s"
        self.opening = f"{desc}: {stops}"
        self.opened = after_s <= 0
        if self.opened:
            self.say(self.opening)

    def say(self, text: str) -> None:
        """One line, above the bar on a terminal."""
        if self.enabled:
            tqdm.write(text, file=self.file)

    def update(self, n: int = 1, **postfix: object) -> None:
        self.done += n
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(n)
        now = time.perf_counter()
        if not self.lines or self.done >= self.total:
            return
        if not self.opened and now - self.started >= self.after_s:
            self.opened, self.last_line = True, now  # late work: opened with its count
            self.say(self.opening)
            self.say(f"{self.desc}: {self.status()}" + _postfix(postfix))
        elif self.opened and now - self.last_line >= self.every_s:
            self.last_line = now
            self.say(f"{self.desc}: {self.status()}" + _postfix(postfix))

    def status(self) -> str:
        """'120/300 steps, 1 min 02 s elapsed, ETA 1 min 33 s'."""
        elapsed = time.perf_counter() - self.started
        head = f"{self.done}/{self.total} {self.unit}s, {duration(elapsed)} elapsed"
        ran = self.done - self.initial  # in this much time
        if ran <= 0 or self.done >= self.total:
            return head
        return head + f", ETA {duration(elapsed / ran * (self.total - self.done))}"

    def close(self, closing: str = "", line: bool = True) -> None:
        """End the bar; the closing line says how much was done, in how long, and
        `closing` (e.g. "cached at …"); none with `line=False` (the caller says it) or for
        work shorter than `after_s`."""
        self._bar.close()
        elapsed = time.perf_counter() - self.started
        if line and elapsed >= self.after_s:
            self.say(
                f"{self.desc}: done, {self.done} {self.unit}s in {duration(elapsed)}"
                + (f"; {closing}" if closing else "")
            )


class Timed:
    """One long call with no count of its own, seen as it goes: quiet unless it lasts
    `after_s`; then its elapsed time and, when `expected_s` is known (the same call's rate
    earlier), an ETA: a bar over the expected seconds on a terminal, a line every `every_s`
    off one; and a closing line with the time it took. A thread ticks it every `tick_s`
    seconds (None: the caller calls `tick`, as tests do).

        with Timed("rlvr service sample (64 × 512 tokens)", expected_s=40.0):
            ...
    """

    def __init__(
        self,
        desc: str,
        expected_s: float | None = None,
        after_s: float = 10.0,
        every_s: float = 30.0,
        file=None,
        tick_s: float | None = 1.0,
    ) -> None:
        self.desc, self.expected_s, self.after_s, self.every_s = desc, expected_s, after_s, every_s
        self.file, self.tick_s = file or sys.stderr, tick_s
        self.lines = not _is_terminal(self.file)
        self.shown = False
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._bar: tqdm | None = None

    def __enter__(self) -> Timed:
        self.started = self.last_line = time.perf_counter()
        if self.tick_s is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def tick(self) -> None:
        now = time.perf_counter()
        self.elapsed = now - self.started
        if self.elapsed < self.after_s:
            return
        if not self.lines:
            self._tick_bar()
        elif not self.shown or now - self.last_line >= self.every_s:
            self.last_line = now
            tqdm.write(f"{self.desc}: {self.status()}", file=self.file)
        self.shown = True

    def _tick_bar(self) -> None:
        if self._bar is None:
            total = None if self.expected_s is None else max(1, round(self.expected_s))
            self._bar = tqdm(total=total, desc=self.desc, unit="s", file=self.file, leave=False)
        if self._bar.total is not None and self.elapsed > self._bar.total:
            self._bar.total = round(self.elapsed) + 1  # slower than the last call
        self._bar.n = int(self.elapsed)
        self._bar.refresh()

    def status(self) -> str:
        """'31 s elapsed, ETA 9 s (at the last call's rate)'."""
        head = f"{duration(self.elapsed)} elapsed"
        if self.expected_s is None:
            return head
        if self.elapsed >= self.expected_s:
            return head + f", past the {duration(self.expected_s)} the last call's rate gave"
        return head + f", ETA {duration(self.expected_s - self.elapsed)} (at the last call's rate)"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.tick_s is not None:
            self._thread.join()
        self.elapsed = time.perf_counter() - self.started
        if self._bar is not None:
            self._bar.close()
        if self.shown or self.elapsed >= self.after_s:  # long, if between two ticks
            tqdm.write(f"{self.desc}: done in {duration(self.elapsed)}", file=self.file)


def _postfix(values: dict[str, object]) -> str:
    return "".join(f", {k} {v}" for k, v in values.items())


def _is_terminal(file) -> bool:
    return bool(getattr(file, "isatty", None)) and file.isatty()
