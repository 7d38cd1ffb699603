"""`rlvr show --html` on an agentic run and on a comparison, in a real headless browser
(Chromium's command line): the episode panel and the cell list render, the filters by
failure, tool error, turn count and condition select rows, nothing reaches the console.
Skipped, with the reason, where no Chromium is installed (Debian: apt-get install
chromium; or set RLVR_BROWSER)."""

from __future__ import annotations

import re

import pytest
from agentic_testlib import write_agentic_run, write_comparison

from rlvr.cli import main
from rlvr.show.browser import NAMES, check_page, find_browser

BROWSER = find_browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason=f"no browser to check the page in: none of {', '.join(NAMES)} on PATH "
    "(Debian: apt-get install chromium; or set RLVR_BROWSER)",
)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("agentic")
    run, cmp = write_agentic_run(root / "run"), write_comparison(root / "cmp")
    assert main(["show", str(run), "--html"]) == 0
    assert main(["show", str(cmp), "--html"]) == 0
    return run / "show.html", cmp / "show.html"


@pytest.mark.parametrize(
    ("fragment", "shown"),
    [
        ("", "6"),  # the newest step: 4 rows, a failed episode and a tool error
        ("filter=failed", "1"),
        ("filter=toolerror", "1"),
        ("filter=turns-1", "1"),
        ("filter=turns-2", "2"),
        ("step=2&filter=failed", "1"),
    ],
)
def test_the_agentic_run_page_renders_its_episode_panel_and_filters(pages, fragment, shown):
    check = check_page(pages[0], BROWSER, fragment)
    assert check.problems == []
    assert check.root["data-shown"] == shown
    panel = re.search(r'<section id="episodes">(.*?)</section>', check.dom, re.S).group(1)
    assert "env/failed_frac" in panel and "env/tool_error_rate" in panel
    assert "the environment failed on 25% of the episodes" in panel
    assert 'aria-label="episode health (fractions)"' in check.dom


@pytest.mark.parametrize(("fragment", "shown"), [("", "4"), ("filter=numberle", "2")])
def test_the_comparison_page_renders_its_cell_list_and_curves(pages, fragment, shown):
    check = check_page(pages[1], BROWSER, fragment)
    assert check.problems == []
    assert check.root["data-shown"] == shown
    cells = re.findall(r'<article class="row cell[^"]*" data-tags="(\w+)"( hidden="")?', check.dom)
    assert len(cells) == 4
    assert sum(1 for _, hidden in cells if not hidden) == int(shown)
    assert check.dom.count('class="curve" data-metric="numberle-seed0"') >= 2  # accuracy, turns
