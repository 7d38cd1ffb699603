"""Load a `rlvr show --html` page in a real headless browser (Chromium's command line, no
extra dependency): the DOM after the page's scripts ran, the console messages, and a
screenshot. The tests use it where a browser is installed (Debian: `apt-get install
chromium`) and skip, naming it, where none is.

    python -m rlvr.show.browser PAGE.html [--screenshot OUT.png] [--size 1100,1400]

checks the page (scripts ran to the end, no console message, no uncaught error) and exits
1 when it fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)$", re.M)  # Chromium's --enable-logging lines
TIMEOUT_S = 90


def _looked_for() -> str:
    given = os.environ.get("RLVR_BROWSER")
    if given:
        return f"RLVR_BROWSER={given} is not an executable on PATH"
    return f"none of {', '.join(NAMES)} on PATH (Debian: apt-get install chromium)"


def find_browser() -> str | None:
    """The Chromium binary: $RLVR_BROWSER, else the first of NAMES on PATH."""
    given = os.environ.get("RLVR_BROWSER")
    if given:
        return shutil.which(given)
    return next((found for name in NAMES if (found := shutil.which(name))), None)


@dataclass(frozen=True)
class PageCheck:
    """What the browser saw: the DOM after the scripts ran, <html>'s data attributes (the
    page sets data-ready, data-shown, data-errors) and every console message."""

    dom: str
    root: dict[str, str]
    console: list[str]

    @property
    def problems(self) -> list[str]:
        found = [f"console: {line}" for line in self.console]
        found += [f"uncaught: {e}" for e in self.root.get("data-errors", "").splitlines() if e]
        if self.root.get("data-ready") != "1":
            found.append("the page's script did not run to the end (no data-ready)")
        return found


class _Root(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "html" and not self.attrs:
            self.attrs = {k: v or "" for k, v in attrs}


def _run(
    browser: str, flags: list[str], page: Path, fragment: str = ""
) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="rlvr-browser-") as profile:
        command = [
            browser,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",  # containers and root: Chromium's sandbox needs namespaces
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            *flags,
            page.resolve().as_uri() + (f"#{fragment}" if fragment else ""),
        ]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )


def check_page(page: str | Path, browser: str, fragment: str = "") -> PageCheck:
    """Load `page` (with `#fragment`, e.g. "step=2&filter=wrong") in headless `browser`;
    its DOM once loaded and its console messages."""
    flags = ["--enable-logging=stderr", "--v=0", "--dump-dom"]
    done = _run(browser, flags, Path(page), fragment)
    if done.returncode != 0 or "<html" not in done.stdout:
        raise RuntimeError(f"{browser} --dump-dom failed ({done.returncode}): {done.stderr[-500:]}")
    root = _Root()
    root.feed(done.stdout)
    return PageCheck(done.stdout, root.attrs, CONSOLE.findall(done.stderr))


def screenshot(page: str | Path, png: str | Path, browser: str, size=(1100, 1400)) -> Path:
    """A PNG of `page` as a `size` window shows it."""
    png = Path(png).resolve()
    flags = ["--hide-scrollbars", f"--window-size={size[0]},{size[1]}", f"--screenshot={png}"]
    done = _run(browser, flags, Path(page))
    if done.returncode != 0 or not png.is_file():
        raise RuntimeError(
            f"{browser} --screenshot failed ({done.returncode}): {done.stderr[-500:]}"
        )
    return png


def _size(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected WIDTH,HEIGHT in pixels, e.g. 1100,1400, got {text!r}"
        )
    return int(parts[0]), int(parts[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.show.browser", description=__doc__)
    parser.add_argument("page", help="an HTML page written by `rlvr show --html`")
    parser.add_argument("--screenshot", metavar="PNG", help="also save a screenshot here")
    parser.add_argument(
        "--size", type=_size, default=(1100, 1400), help="window WIDTH,HEIGHT in pixels"
    )
    args = parser.parse_args(argv)
    browser = find_browser()
    if browser is None:
        print(f"no browser found: {_looked_for()}", file=sys.stderr)
        return 2
    if not Path(args.page).is_file():
        print(f"{args.page}: no such page", file=sys.stderr)
        return 2
    try:
        check = check_page(args.page, browser)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"{args.page}: {err}", file=sys.stderr)
        return 2
    for problem in check.problems:
        print(problem, file=sys.stderr)
    print(
        f"{args.page}: {check.root.get('data-shown', '?')} rows shown, "
        f"{len(check.problems)} problems ({Path(browser).name})"
    )
    if args.screenshot:
        print(f"wrote {screenshot(args.page, args.screenshot, browser, args.size)}")
    return 1 if check.problems else 0


if __name__ == "__main__":
    sys.exit(main())
