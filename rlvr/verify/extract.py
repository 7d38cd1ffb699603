"""Pull a final answer out of an untrusted completion.

Every function takes whatever the model wrote, never raises, and returns the answer
text stripped of surrounding whitespace, or ``None`` when there is no answer in the
expected format. Hostile completions can be huge, so a text longer than ``max_chars``
is read through two windows of ``max_chars`` characters: its end first (where a final
answer follows a long reasoning chain), then its start (an answer followed by a long
ramble). Work is bounded by ``2 * max_chars`` whatever the length.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MAX_INPUT_CHARS = 10_000
"""Characters at each end of a completion that extraction looks at; the middle is ignored."""

_BOXED = "\\boxed{"
_TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _windows(text: object, max_chars: int) -> list[str]:
    """The text itself when short enough, else its last and then its first `max_chars`."""
    if not isinstance(text, str):
        return []
    size = max(0, max_chars)
    if len(text) <= size:
        return [text]
    return [text[len(text) - size :], text[:size]] if size else []


def _first_found(windows: list[str], extract: Callable[[str], str | None]) -> str | None:
    for window in windows:
        answer = extract(window)
        if answer is not None:
            return answer
    return None


def extract_boxed(text: str, max_chars: int = MAX_INPUT_CHARS) -> str | None:
    """Content of the last complete ``\\boxed{...}``, braces balanced, nesting allowed.

    "Last" means the box whose closing brace comes last, so ``\\boxed{\\frac{1}{2}}``
    gives ``\\frac{1}{2}`` and a box nested in another box yields the outer one.
    A box that never closes (a truncated generation) is skipped, and an earlier
    complete box, if any, is returned. One linear pass, no backtracking.
    """
    return _first_found(_windows(text, max_chars), _last_boxed)


def _last_boxed(head: str) -> str | None:
    # Each open brace pushes the index where a box's content starts, or -1 for plain braces.
    stack: list[int] = []
    last: tuple[int, int] | None = None
    i = 0
    while i < len(head):
        if head.startswith(_BOXED, i):
            i += len(_BOXED)
            stack.append(i)
            continue
        char = head[i]
        if char == "{":
            stack.append(-1)
        elif char == "}" and stack:
            start = stack.pop()
            if start >= 0:
                last = (start, i)
        i += 1
    if last is None:
        return None
    return head[last[0] : last[1]].strip()


def extract_tagged(text: str, tag: str = "answer", max_chars: int = MAX_INPUT_CHARS) -> str | None:
    """Content of the last ``<tag>...</tag>`` pair; ``None`` if there is no closed pair."""
    if not isinstance(tag, str) or not _TAG_NAME.fullmatch(tag):
        return None
    return _first_found(_windows(text, max_chars), lambda head: _last_tagged(head, tag))


def _last_tagged(head: str, tag: str) -> str | None:
    opening, closing = f"<{tag}>", f"</{tag}>"
    end = head.rfind(closing)
    if end < 0:
        return None
    start = head.rfind(opening, 0, end)
    if start < 0:
        return None
    return head[start + len(opening) : end].strip()


def extract_final_line(
    text: str, prefix: str = "Answer:", max_chars: int = MAX_INPUT_CHARS
) -> str | None:
    """Rest of the last line that starts (after indentation) with ``prefix``.

    ``"...\\nAnswer: 42\\n"`` gives ``"42"``; an empty remainder gives ``None``.
    """
    if not isinstance(prefix, str) or not prefix:
        return None
    return _first_found(_windows(text, max_chars), lambda head: _last_line(head, prefix))


def _last_line(head: str, prefix: str) -> str | None:
    for line in reversed(head.splitlines()):
        stripped = line.lstrip()
        if stripped.startswith(prefix):
            answer = stripped[len(prefix) :].strip()
            return answer or None
    return None
