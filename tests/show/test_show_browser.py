"""The `rlvr show --html` pages in a real headless browser (Chromium's command line): the
page loads, its script runs to the end, the rows render and filter, nothing reaches the
console. Skipped, with the reason, where no Chromium is installed, so `make test` needs no
browser; where one is (Debian: `apt-get install chromium`) these run."""

from __future__ import annotations

import re
import struct

import pytest
from show_testlib import write_run

from rlvr.show.browser import NAMES, check_page, find_browser, main, screenshot
from rlvr.show.html_items import write_diff_page, write_items_page
from rlvr.show.html_run import write_run_page
from rlvr.show.load import load_run

BROWSER = find_browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason=f"no browser to check the page in: none of {', '.join(NAMES)} on PATH "
    "(Debian: apt-get install chromium; or set RLVR_BROWSER)",
)
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
ITEMS = ROOT / "examples" / "items"


@pytest.fixture(scope="module")
def run_page(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("show") / "run", steps=(2, 4))
    write_run_page(load_run(run), run / "show.html")
    return run / "show.html"


def test_run_page_loads_and_renders_its_rows(run_page) -> None:
    check = check_page(run_page, BROWSER)
    assert check.problems == []
    assert check.root["data-shown"] == "4"  # the newest step's 4 rows
    assert len(re.findall(r'<article class="row', check.dom)) == 8
    assert 'id="status">4 of 4 rows shown<' in check.dom
    # The completion's <script> stayed text: it is in the DOM escaped, and never ran.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in check.dom


@pytest.mark.parametrize(
    ("fragment", "shown"),
    [
        ("step=2", "4"),
        ("step=2&filter=wrong", "2"),  # the wrong single-turn row and the hostile row
        ("step=4&filter=correct", "2"),
        ("filter=multiturn", "1"),
        ("filter=dropped", "1"),
    ],
)
def test_step_and_filter_select_rows(run_page, fragment, shown) -> None:
    check = check_page(run_page, BROWSER, fragment)
    assert check.problems == []
    assert check.root["data-shown"] == shown
    step = re.search(r"step=(\d)", fragment)
    hidden = re.findall(r'<section class="rows" data-step="(\d)" hidden', check.dom)
    assert hidden == ([s for s in "24" if s != step.group(1)] if step else ["2"])


def test_items_and_diff_pages_load(tmp_path) -> None:
    a, b = ITEMS / "embedded_t0.5.jsonl", ITEMS / "embedded_t1.0.jsonl"
    write_items_page(str(a), tmp_path / "items.html")
    check = check_page(tmp_path / "items.html", BROWSER)
    assert check.problems == [] and check.root["data-shown"] == "40"
    write_diff_page(str(a), str(b), tmp_path / "diff.html")
    check = check_page(tmp_path / "diff.html", BROWSER, "filter=lost")
    assert check.problems == [] and check.root["data-shown"] == "5"  # B higher on 5 items


def test_the_check_sees_errors(tmp_path) -> None:
    # The negative control: a page whose script fails is reported, console and all.
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body><script>console.error('boom'); notDefined();</script>"
        "</body></html>"
    )
    problems = check_page(page, BROWSER).problems
    assert any("boom" in p for p in problems)
    assert any("notDefined is not defined" in p for p in problems)
    assert "the page's script did not run to the end (no data-ready)" in problems


def test_screenshot_is_a_png_of_the_window(run_page, tmp_path) -> None:
    png = screenshot(run_page, tmp_path / "page.png", BROWSER, (800, 600))
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (800, 600)


def test_command_line_check_fails_a_broken_page(run_page, tmp_path, capsys) -> None:
    assert main([str(run_page)]) == 0
    assert capsys.readouterr().out == f"{run_page}: 4 rows shown, 0 problems (chromium)\n"
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>")
    assert main([str(broken)]) == 1
    err = capsys.readouterr().err
    assert 'console: "Uncaught ReferenceError: notDefined is not defined"' in err
    assert "the page's script did not run to the end (no data-ready)" in err
