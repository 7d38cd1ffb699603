"""`rlvr show` on what a real run wrote: two steps of GRPO on the embedded model with the
retry environment (multi-turn: a wrong answer hears ' wrong:'), completions every step."""

from __future__ import annotations

import contextlib
import io
import json
import re
from html.parser import HTMLParser

import pytest

from rlvr.cli import main
from rlvr.show.browser import check_page, find_browser
from rlvr.train import resolve_config, run_training


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("show") / "run"
    config = {
        "task_options": {"digits": 2, "ops": "+"},
        "steps": 2,
        "prompts_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 40,
        "eval_size": 4,
        "eval_every": 2,
        "progress": False,
        "report_to": [],
        "completions_every": 1,
        "completions_rows": 8,
        "environment": "rlvr.envs.feedback:RetryWithFeedback",
        "environment_options": {"max_tries": 3},
        "episode": {"max_turns": 3},
        "out": str(out),
    }
    run_training(resolve_config(config), "new")
    return out


def rows(run, step: int) -> list[dict]:
    path = run / "completions" / f"step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_terminal_view_of_a_real_run(run) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", str(run), "--rows", "8"]) == 0
    text = out.getvalue()
    assert "task arithmetic {digits: 2, ops: +}   recipe grpo   model embedded" in text
    assert "completions at step 2: showing 8 of 8 rows (2 steps logged, logged every 1" in text
    shown = re.findall(r"^  completion  (.*)$", text, re.M)
    # Markers removed, each completion line is the row's text: nothing lost or added.
    unmarked = [re.sub(r"⟦(obs|forced|masked): (.*?)⟧", r"\2", line) for line in shown]
    assert unmarked == [r["completion"].split("\n")[0] for r in rows(run, 2)]
    assert text.count("  turns       ") == 8  # every row is an episode


class Spans(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.classes: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        cls = dict(attrs).get("class") or ""
        if tag == "span" and cls.startswith("seg-"):
            self.classes.append(cls)


def test_page_of_a_real_run(run, tmp_path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["show", str(run), "--html", str(tmp_path / "page.html")]) == 0
    text = (tmp_path / "page.html").read_text()
    spans = Spans()
    spans.feed(text)
    logged = [s["kind"] for step in (1, 2) for r in rows(run, step) for s in r["segments"]]
    legend = 4  # the legend's one span per class
    assert len(spans.classes) == len(logged) + legend
    assert spans.classes.count("seg-observation") == logged.count("observation") + 1
    assert text.count('<article class="row') == 16
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium): the page was not loaded")
    check = check_page(tmp_path / "page.html", browser)
    assert check.problems == [] and check.root["data-shown"] == "8"
