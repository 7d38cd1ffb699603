"""`rlvr show --html`: one self-contained page — every logged completion, one section per
step, model text escaped, the scripts the only ones allowed to run, curves as inline SVG."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import re
from html.parser import HTMLParser

from show_testlib import INJECTION, item, step_rows, write_items, write_run

from rlvr.cli import main
from rlvr.show.html_items import diff_page, items_page
from rlvr.show.html_run import run_page
from rlvr.show.load import NO_COMPLETIONS, load_run
from rlvr.show.svg import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, panel_svg, scale


class Page(HTMLParser):
    """The parts of a page the tests look at."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.sections: dict[str, int] = {}  # data-step → rows
        self.scripts: list[str] = []
        self.selected: list[str] = []
        self.completions: list[list[tuple[str, str]]] = []  # (span class, text) per row
        self.prompts: list[str] = []
        self.csp = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "section" and "rows" in classes:
            self.sections[attrs.get("data-step", "")] = 0
        if tag == "article" and "row" in classes:
            self.sections[list(self.sections)[-1]] += 1
        if tag == "pre" and "completion" in classes:
            self.completions.append([])
        if tag == "option" and "selected" in attrs:
            self.selected.append(attrs["value"])
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.csp = attrs["content"]
        if tag not in ("meta", "input", "br", "circle", "polyline", "rect"):
            self.stack.append((tag, attrs))

    def handle_endtag(self, tag) -> None:
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_data(self, data) -> None:
        if not self.stack:
            return
        tag, attrs = self.stack[-1]
        if tag == "script":
            self.scripts.append(data)
        if tag == "pre" and attrs.get("class") == "prompt":
            self.prompts.append(data)
        inside = any("completion" in (a.get("class") or "") for t, a in self.stack if t == "pre")
        if tag == "span" and inside:
            self.completions[-1].append((attrs["class"], data))


def test_every_logged_row_is_on_the_page(tmp_path) -> None:
    run = load_run(write_run(tmp_path / "run", steps=(2, 4)))
    text, count = run_page(run)
    page = Page(text)
    assert page.sections == {"2": 4, "4": 4}  # each step's file has 4 rows
    assert count == 8
    assert page.selected == ["4"]  # opens at the newest step
    assert Page(run_page(run, step=2)[0]).selected == ["2"]


def test_segments_keep_their_class_and_text(tmp_path) -> None:
    page = Page(run_page(load_run(write_run(tmp_path / "run")))[0])
    rows = step_rows(2)
    assert len(page.completions) == 8
    for spans, row in zip(page.completions, rows + rows, strict=True):
        assert [(f"seg-{s['kind']}", s["text"]) for s in row["segments"]] == spans
        assert "".join(text for _, text in spans) == row["completion"]


def test_model_text_is_escaped(tmp_path) -> None:
    text, _ = run_page(load_run(write_run(tmp_path / "run")))
    page = Page(text)
    assert len(page.scripts) == 2  # the page's own two; the completion's is text
    assert INJECTION not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert page.prompts[3] == "Q: <b>bold</b>? A:"  # text, not a tag
    assert ("seg-policy", " " + INJECTION + "\x1b[2J\x1b]0;owned\x07 done") in page.completions[3]


def test_only_the_pages_own_scripts_may_run(tmp_path) -> None:
    page = Page(run_page(load_run(write_run(tmp_path / "run")))[0])
    allowed = re.search(r"script-src ([^;]*)", page.csp).group(1).split()
    digests = [
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in page.scripts
    ]
    assert allowed == digests
    assert "default-src 'none'" in page.csp  # nothing is fetched: no network, no CDN


def test_page_without_completions_says_why(tmp_path) -> None:
    text, count = run_page(load_run(write_run(tmp_path / "run", completions=False)))
    assert count == 0 and NO_COMPLETIONS in text and 'id="step"' not in text


def test_scale_maps_ranges_linearly() -> None:
    # [0, 10] onto [46, 270]: 5 is halfway, 46 + 224 / 2 = 158.
    assert scale([0, 5, 10], 0, 10, 46, 270) == [46, 158, 270]
    assert scale([3, 3], 3, 3, 0, 100) == [50, 50]  # a flat series sits in the middle


def test_curve_spans_the_plot(tmp_path) -> None:
    svg = panel_svg("training reward", {"reward/mean": ([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])})
    points = re.search(r'points="([^"]*)"', svg).group(1).split()
    # Lowest value at the bottom-left corner, highest at the top-right.
    assert points[0] == f"{LEFT:.1f},{HEIGHT - BOTTOM:.1f}"
    assert points[-1] == f"{WIDTH - RIGHT:.1f},{TOP:.1f}"
    assert len(points) == 4 and svg.count("<circle") == 4
    assert "not logged" in panel_svg("clip fraction", {})


def test_run_page_draws_the_curves_png_panels(tmp_path) -> None:
    text, _ = run_page(load_run(write_run(tmp_path / "run")))
    metrics = re.findall(r'class="curve" data-metric="([^"]*)"', text)
    assert metrics == ["eval/accuracy", "reward/mean", "rollout/response_length"]


def test_items_and_diff_pages_hold_their_rows(tmp_path) -> None:
    ok, bad = " \\boxed{2}", " \\boxed{3}"
    a = write_items(tmp_path / "a.jsonl", [item("u1", "2", [ok]), item("u2", "2", [bad])])
    b = write_items(tmp_path / "b.jsonl", [item("u1", "2", [bad]), item("u2", "2", [bad])])
    text, count = items_page(str(a))
    assert count == 2 and Page(text).sections == {"": 2}
    text, count = diff_page(str(a), str(b))  # u1 won, u2 tied: one row
    assert count == 1 and 'data-tags="won"' in text and "u2" not in text.split("<section")[1]


def test_cli_writes_the_page_beside_the_run(tmp_path) -> None:
    run = write_run(tmp_path / "run")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", str(run), "--html"]) == 0
    assert out.getvalue() == f"wrote {run / 'show.html'} (2 logged steps, 8 completions)\n"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["show", str(run), "--html", str(tmp_path / "x" / "page.html")]) == 0
    assert (tmp_path / "x" / "page.html").read_text() == (run / "show.html").read_text()


def test_turns_table_has_a_tool_call_column_only_with_tool_calls(tmp_path) -> None:
    from show_testlib import multi_turn_row

    from rlvr.show.html_run import turns_html

    turns = multi_turn_row(4)["turns"]
    assert turns_html(turns).count("<tr>") == 3  # header and two turns
    assert "<th>tool call</th>" in turns_html(turns)
    no_calls = [{**t, "tool_call": None} for t in turns]
    assert "tool call" not in turns_html(no_calls)


def test_browser_command_names_what_is_missing(tmp_path, monkeypatch, capsys) -> None:
    import pytest

    from rlvr.show.browser import main as browser_main

    monkeypatch.setenv("RLVR_BROWSER", "no-such-browser")
    assert browser_main([str(tmp_path / "page.html")]) == 2
    assert "RLVR_BROWSER=no-such-browser is not an executable on PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        browser_main(["page.html", "--size", "1100x1400"])
    assert "expected WIDTH,HEIGHT in pixels" in capsys.readouterr().err
