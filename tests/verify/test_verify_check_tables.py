"""Verdict tables for `rlvr.verify.check`: ≥ 60 cases per verifier, each with the verdict
a careful human grader would give. (correct, formatted) is the expected pair."""

from __future__ import annotations

import pytest

from rlvr.verify import check

LONG = "Let me think step by step. " * 4000  # ~108,000 characters of reasoning
B = "\\boxed"

GSM8K = [
    # (completion, reference, correct, formatted)
    (f"{B}{{72}}", "72", True, True),
    ("Natalia sold 48+24 = 72 clips.\n#### 72", "72", True, True),
    (f"{B}{{1,000}}", "1000", True, True),
    (f"{B}{{1000}}", "1,000", True, True),
    (f"{B}{{\\$1,000}}", "1000", True, True),
    (f"{B}{{$18}}", "18", True, True),
    (f"{B}{{18.0}}", "18", True, True),
    (f"{B}{{18.00}}", "18", True, True),
    (f"{B}{{18.5}}", "18.50", True, True),
    (f"{B}{{18 dollars}}", "18", True, True),
    (f"{B}{{18\\text{{ dollars}}}}", "18", True, True),
    (f"{B}{{25\\%}}", "25", True, True),
    (f"{B}{{25%}}", "25", True, True),
    (f"{B}{{5 hours}}", "5", True, True),
    (f"{B}{{-3}}", "-3", True, True),
    (f"{B}{{\u22123}}", "-3", True, True),  # unicode minus
    (f"{B}{{1{{,}}234}}", "1234", True, True),
    (f"{B}{{1\\,234}}", "1234", True, True),
    (f"{B}{{ 42 }}", "42", True, True),
    (f"{B}{{= 42}}", "42", True, True),
    (f"{B}{{42.}}", "42", True, True),
    (f"{B}{{\\textbf{{42}}}}", "42", True, True),
    ("#### 1,234,567", "1234567", True, True),
    ("####42", "42", True, True),
    ("blah\n  #### 42  \nthanks", "42", True, True),
    (f"#### 41\n{B}{{42}}", "42", True, True),  # the box wins over the #### line
    (f"{B}{{41}} no wait {B}{{42}}", "42", True, True),  # the last box counts
    (f"{B}{{42}} no wait {B}{{41}}", "42", False, True),
    ("#### 41\n#### 42", "42", True, True),  # the last #### line
    (f"{B}{{72}}", "Natalia sold 48/2 = 24 clips.\n#### 72", True, True),  # gold as solution
    (f"{B}{{0.5}}", "0.50", True, True),
    (f"{B}{{007}}", "7", True, True),
    (f"{B}{{+7}}", "7", True, True),
    (f"{B}{{3 apples.}}", "3", True, True),
    (f"{LONG}{B}{{42}}", "42", True, True),  # long reasoning, answer at the end
    (f"{LONG}\n#### 42", "42", True, True),
    # wrong answers, well formatted
    (f"{B}{{71}}", "72", False, True),
    (f"{B}{{72.5}}", "72", False, True),
    (f"{B}{{7200}}", "72", False, True),
    (f"{B}{{-72}}", "72", False, True),
    (f"{B}{{1,001}}", "1000", False, True),
    ("#### 0", "72", False, True),
    (f"{B}{{100 %}}", "1", False, True),  # 100 % is not 1
    # not a single plain number: unformatted
    (f"{B}{{3+4}}", "7", False, False),
    (f"{B}{{x}}", "7", False, False),
    (f"{B}{{}}", "7", False, False),
    (f"{B}{{1,5}}", "15", False, False),  # not a thousands separator
    (f"{B}{{12,34}}", "1234", False, False),
    (f"{B}{{\\frac{{1}}{{2}}}}", "0.5", False, False),
    (f"{B}{{7 or 8}}", "7", False, False),
    (f"{B}{{about seven}}", "7", False, False),
    (f"{B}{{1.2.3}}", "1.2", False, False),
    # no answer
    ("The answer is 72.", "72", False, False),
    ("", "72", False, False),
    (f"{B}{{72", "72", False, False),  # truncated box
    (f"{B} 72", "72", False, False),
    ("### 72", "72", False, False),
    ("the total ####", "72", False, False),
    (f"{B}{{72}}{LONG}", "72", False, False),  # answer hidden before 100k chars of text
    # adversarial nesting
    (f"{B}{{" + "{" * 50_000 + "}" * 50_000 + "}", "72", False, False),
    (f"{B}{{" * 20_000 + "72" + "}" * 20_000, "72", False, False),  # no box within the tail
    ("{" * 100_000 + f"{B}{{72}}", "72", True, True),
    (f"{B}{{{B}{{72}}}}", "72", False, False),  # the outer box holds a box, not a number
]

AIME = [
    (f"{B}{{33}}", "33", True, True),
    (f"{B}{{033}}", "33", True, True),
    (f"{B}{{33}}", "033", True, True),
    (f"{B}{{0}}", "0", True, True),
    (f"{B}{{000}}", "0", True, True),
    (f"{B}{{999}}", "999", True, True),
    (f"{B}{{ 204 }}", "204", True, True),
    (f"{B}{{$204$}}", "204", True, True),
    (f"{B}{{\\text{{204}}}}", "204", True, True),
    (f"{B}{{\\textbf{{204}}}}", "204", True, True),
    (f"so {B}{{100}} hmm no {B}{{204}}", "204", True, True),
    (f"{B}{{204}} hmm no {B}{{100}}", "204", False, True),
    (f"{LONG}{B}{{204}}", "204", True, True),
    (f"{B}{{" * 20_000 + "204" + "}" * 20_000, "204", False, False),
    ("{" * 100_000 + f"{B}{{204}}", "204", True, True),
    (f"{B}{{203}}", "204", False, True),
    (f"{B}{{1}}", "204", False, True),
    (f"{B}{{0204}}", "204", True, True),
    (f"{B}{{00204}}", "204", True, True),
    (f"{B}{{402}}", "204", False, True),
    (f"{B}{{20}}", "204", False, True),
    (f"{B}{{24}}", "204", False, True),
    (f"{B}{{999}}", "998", False, True),
    (f"{B}{{5}}", "55", False, True),
    (f"{B}{{55}}", "5", False, True),
    (f"{B}{{100}}", "10", False, True),
    (f"{B}{{  7}}", "7", True, True),
    (f"The answer: {B}{{7}}.", "7", True, True),
    (f"$${B}{{7}}$$", "7", True, True),
    (f"\\[ {B}{{7}} \\]", "7", True, True),
    # out of range or not an integer: unformatted
    (f"{B}{{1000}}", "0", False, False),
    (f"{B}{{1204}}", "204", False, False),
    (f"{B}{{-204}}", "204", False, False),
    (f"{B}{{204.0}}", "204", False, False),
    (f"{B}{{204.5}}", "204", False, False),
    (f"{B}{{2.04e2}}", "204", False, False),
    (f"{B}{{\\frac{{408}}{{2}}}}", "204", False, False),
    (f"{B}{{200+4}}", "204", False, False),
    (f"{B}{{two hundred four}}", "204", False, False),
    (f"{B}{{204 degrees}}", "204", False, False),
    (f"{B}{{(C)}}", "204", False, False),
    (f"{B}{{x=204}}", "204", False, False),
    (f"{B}{{2,04}}", "204", False, False),
    (f"{B}{{}}", "204", False, False),
    (f"{B}{{ }}", "204", False, False),
    (f"{B}{{1234567}}", "204", False, False),
    (f"{B}{{" + "9" * 5000 + "}", "204", False, False),
    (f"{B}{{204", "204", False, False),  # truncated
    ("The answer is 204.", "204", False, False),
    ("#### 204", "204", False, False),  # AIME wants a box
    ("<answer>204</answer>", "204", False, False),
    ("", "204", False, False),
    (f"{B} 204", "204", False, False),
    (f"{B}{{204}}{LONG}", "204", False, False),
    (f"{B}{{" + "{" * 50_000 + "}" * 50_000 + "}", "204", False, False),
    (f"{B}{{{B}{{204}}}}", "204", False, False),
    ("\\fbox{204}", "204", False, False),
    ("\\boxed{204}\\boxed{", "204", True, True),  # an unclosed later box is skipped
    (f"{B}{{0x1A}}", "26", False, False),
    (f"{B}{{٢٠٤}}", "204", False, False),  # non-ASCII digits are not an AIME answer
    (f"{B}{{٧٢}}", "72", False, False),
    (f"{B}{{+204}}", "204", False, False),
    (f"{B}{{20 4}}", "204", False, False),
]

MATH = [
    (f"{B}{{\\frac{{1}}{{2}}}}", "\\frac{1}{2}", True, True),
    (f"{B}{{\\dfrac{{1}}{{2}}}}", "\\frac{1}{2}", True, True),
    (f"{B}{{\\tfrac12}}", "\\frac{1}{2}", True, True),
    (f"{B}{{0.5}}", "\\frac{1}{2}", True, True),
    (f"{B}{{1/2}}", "\\frac12", True, True),
    (f"{B}{{\\frac{{2}}{{4}}}}", "\\frac{1}{2}", True, True),
    (f"{B}{{\\frac{{1}}{{3}}}}", "\\frac{1}{2}", False, True),
    (f"{B}{{0.333}}", "\\frac{1}{3}", False, True),  # not equal to 6 places
    (f"{B}{{[1,3)}}", "[1,3)", True, True),
    (f"{B}{{[1, 3)}}", "[1,3)", True, True),
    (f"{B}{{(1,3)}}", "[1,3)", False, True),
    (f"{B}{{(-\\infty, 0]}}", "(-\\infty,0]", True, True),
    (f"{B}{{(-\\infty, 0)}}", "(-\\infty,0]", False, True),
    (f"{B}{{\\{{2,1\\}}}}", "\\{1,2\\}", True, True),
    (f"{B}{{\\{{1,3\\}}}}", "\\{1,2\\}", False, True),
    (f"{B}{{30^\\circ}}", "30", True, True),
    (f"{B}{{30}}", "30^\\circ", True, True),
    (f"{B}{{31^\\circ}}", "30^\\circ", False, True),
    (f"{B}{{\\text{{even}}}}", "\\text{even}", True, True),
    (f"{B}{{\\text{{odd}}}}", "\\text{even}", False, True),
    (f"{B}{{C}}", "\\text{(C)}", True, True),
    (f"{B}{{\\text{{(D)}}}}", "\\text{(C)}", False, True),
    (f"{B}{{\\frac{{\\sqrt2}}{{2}}}}", "\\frac{\\sqrt{2}}{2}", True, True),
    (f"{B}{{\\sqrt{{2}}/2}}", "\\frac{\\sqrt{2}}{2}", True, True),
    (f"{B}{{\\sqrt{{12}}}}", "2\\sqrt{3}", True, True),
    (f"{B}{{3\\sqrt{{2}}}}", "2\\sqrt{3}", False, True),
    (f"{B}{{(x+1)^2}}", "x^2+2x+1", True, True),
    (f"{B}{{(x-1)^2}}", "x^2+2x+1", False, True),
    (f"{B}{{3.0}}", "3", True, True),
    (f"{B}{{4}}", "3", False, True),
    (f"{B}{{x=3}}", "3", True, True),
    (f"{B}{{\\sqrt{{4}}}}", "2", True, True),
    (f"{B}{{\\frac{{3}}{{10}}}}", "0.3", True, True),
    (f"{B}{{1000}}", "1,000", True, True),
    (f"{B}{{\\infty}}", "\\infty", True, True),
    (f"{B}{{-\\infty}}", "\\infty", False, True),
    (f"{B}{{\\pi}}", "\\pi", True, True),
    (f"{B}{{3.14159}}", "\\pi", False, True),
    (f"{B}{{2\\pi}}", "2\\pi", True, True),
    (
        f"{B}{{\\begin{{pmatrix}}1\\\\2\\end{{pmatrix}}}}",
        "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
        True,
        True,
    ),
    (
        f"{B}{{\\begin{{pmatrix}}2\\\\1\\end{{pmatrix}}}}",
        "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
        False,
        True,
    ),
    (f"{B}{{\\frac{{\\frac{{1}}{{2}}}}{{2}}}}", "\\frac14", True, True),  # nested braces
    (f"{B}{{\\left(\\frac{{1}}{{2}}\\right)^{{2}}}}", "\\frac14", True, True),
    (f"{B}{{5}} first, then {B}{{\\frac{{1}}{{4}}}}", "\\frac14", True, True),  # last box
    (f"{B}{{\\frac{{1}}{{4}}}} first, then {B}{{5}}", "\\frac14", False, True),
    (f"{LONG}{B}{{\\frac14}}", "\\frac14", True, True),
    (f"{B}{{" * 20_000 + "7" + "}" * 20_000, "7", False, False),  # no box within the tail
    (f"{B}{{" * 3 + "7" + "}" * 3, "7", True, True),  # math-verify reads boxes in boxes
    ("{" * 100_000 + f"{B}{{7}}", "7", True, True),
    (f"{B}{{-7}}", "-7", True, True),
    (f"{B}{{7}}", "-7", False, True),
    (f"{B}{{10\\%}}", "10", True, True),
    (f"{B}{{\\$5}}", "5", True, True),
    (f"{B}{{\\text{{Monday}}}}", "\\text{Tuesday}", False, True),
    (f"{B}{{a}}", "b", False, True),
    # no answer / unparseable
    ("The answer is 1/2.", "\\frac12", False, False),
    ("", "\\frac12", False, False),
    (f"{B}{{\\frac{{1}}{{2}}", "\\frac12", False, False),  # truncated
    (f"{B}{{}}", "\\frac12", False, False),
    (f"{B}{{\\frac12}}{LONG}", "\\frac12", False, False),
    (f"{B}{{" + "{" * 50_000 + "}" * 50_000 + "}", "7", False, False),
    (f"{B}{{" + "1+" * 400 + "1}", "401", False, False),  # too long to parse
    ("#### 7", "7", False, False),
    ("\\fbox{7}", "7", False, False),
]

# DAPO-Math-17k's prompts ask for a last line "Answer: $Answer"; DAPO's own scorer reads it.
DAPO_MATH = [
    ("Work.\nAnswer: 7", "7", True, True),
    ("Work.\nAnswer: 7\n", "7", True, True),
    ("Answer: 3\nOn reflection:\nAnswer: 7", "7", True, True),  # the last line wins
    ("Answer: 7\nOn reflection:\nAnswer: 3", "7", False, True),
    ("Work.\nAnswer: $\\frac{1}{2}$", "\\frac{1}{2}", True, True),
    ("Work.\nAnswer: 0.5", "\\frac{1}{2}", True, True),
    (f"Work.\nAnswer: ${B}{{7}}$", "7", True, True),
    ("Work.\nAnswer: 7.", "7", True, True),
    (f"no answer line, but {B}{{7}}", "7", True, True),  # the boxed fallback
    (f"{B}{{3}} then\nAnswer: 7", "7", True, True),  # the Answer line comes first
    ("the Answer: 7 is inline", "7", False, False),  # not a line of its own
    ("Answer:", "7", False, False),
    ("Work.\nAnswer: banana", "7", False, True),  # an answer, parsed as text, wrong
    ("Work.\nAnswer: 8", "7", False, True),
    (LONG + "\nAnswer: 7", "7", True, True),
]


@pytest.mark.parametrize(("completion", "reference", "correct", "formatted"), DAPO_MATH)
def test_dapo_math_table(completion, reference, correct, formatted):
    verdict = check("dapo_math", completion, reference)
    assert (verdict.correct, verdict.formatted) == (correct, formatted), verdict


@pytest.mark.parametrize(("completion", "reference", "correct", "formatted"), GSM8K)
def test_gsm8k_table(completion, reference, correct, formatted):
    verdict = check("gsm8k", completion, reference)
    assert (verdict.correct, verdict.formatted) == (correct, formatted), verdict


@pytest.mark.parametrize(("completion", "reference", "correct", "formatted"), AIME)
def test_aime_table(completion, reference, correct, formatted):
    verdict = check("aime", completion, reference)
    assert (verdict.correct, verdict.formatted) == (correct, formatted), verdict


@pytest.mark.parametrize(("completion", "reference", "correct", "formatted"), MATH)
def test_math_table(completion, reference, correct, formatted):
    verdict = check("math", completion, reference)
    assert (verdict.correct, verdict.formatted) == (correct, formatted), verdict


def test_tables_have_at_least_60_cases_each():
    assert min(len(GSM8K), len(AIME), len(MATH)) >= 60


def test_verdicts_carry_the_extracted_answer_and_a_reason():
    verdict = check("gsm8k", "#### 1,000", "999")
    assert verdict.extracted == "1,000"
    assert verdict.reason == "expected 999, got 1000"
