"""Exact match of a short answer (open-domain QA: NQ, HotpotQA, as Search-R1 scores them).

The answer is the last `<answer>...</answer>` of the completion (Search-R1's format), else
its last line that starts with `Answer:` (agentic-rl-lab's). It is correct when, normalised
as SQuAD's evaluation does (lower case, punctuation and the articles a/an/the removed,
whitespace collapsed; Rajpurkar et al. 2016, arXiv:1606.05250), it equals one of the
reference's answers: a reference may list aliases, as a JSON or Python list of strings.
"""

from __future__ import annotations

import ast
import json
import re
import string

from rlvr.verify.verdict import Verdict

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_LINE = re.compile(r"^\s*Answer:\s*(.+?)\s*$", re.MULTILINE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
MAX_ANSWER_CHARS = 500


def normalise(text: str) -> str:
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_answer(completion: str) -> str | None:
    tagged = _ANSWER_TAG.findall(completion)
    if tagged:
        return tagged[-1].strip()
    lines = _ANSWER_LINE.findall(completion)
    return lines[-1] if lines else None


def references(reference: str) -> list[str]:
    """The reference's answers: a list written as JSON or a Python literal, else itself."""
    text = reference.strip()
    if text.startswith("["):
        for parse in (json.loads, ast.literal_eval):
            try:
                value = parse(text)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
    return [text]


def check_exact_match(completion: str, reference: str) -> Verdict:
    answer = extract_answer(completion)
    if answer is None or len(answer) > MAX_ANSWER_CHARS:
        return Verdict(False, False, None, reason="no <answer>...</answer> or 'Answer:' line")
    golds = references(reference)
    right = normalise(answer) in {normalise(g) for g in golds}
    return Verdict(right, True, answer, reason="" if right else f"expected one of {golds[:5]}")
