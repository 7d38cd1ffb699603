"""Answer extraction: hand-worked cases, including hostile text."""

from rlvr.verify import MAX_INPUT_CHARS, extract_boxed, extract_final_line, extract_tagged


def test_boxed_simple_and_whitespace():
    assert extract_boxed(r" \boxed{122}") == "122"
    assert extract_boxed(r"\boxed{ -12 }") == "-12"


def test_boxed_nested_braces():
    assert extract_boxed(r"so \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert extract_boxed(r"\boxed{{{a}}}") == "{{a}}"


def test_boxed_last_of_several():
    assert extract_boxed(r"\boxed{1} then \boxed{2} and \boxed{3}") == "3"


def test_boxed_inside_box_gives_outer():
    # The outer box closes last, so it is the final answer.
    assert extract_boxed(r"\boxed{a\boxed{3}}") == r"a\boxed{3}"


def test_boxed_unbalanced():
    assert extract_boxed(r"\boxed{12") is None
    assert extract_boxed(r"\boxed{1{2}") is None
    # A truncated last box falls back to the earlier complete one.
    assert extract_boxed(r"\boxed{7} ... \boxed{8") == "7"
    # Stray closing braces are ignored.
    assert extract_boxed(r"}}} \boxed{5} }") == "5"
    assert extract_boxed("no box here") is None
    assert extract_boxed(r"\boxed 5") is None


def test_boxed_garbage_after_box_is_ignored():
    assert extract_boxed(r" \boxed{122}Q: 1+1=? A: blah") == "122"


def test_boxed_after_a_long_reasoning_chain_is_read():
    # 100,000 characters of reasoning, then the final answer: the end window holds it.
    reasoning = "step: 12+30 is 42. " * 5_264  # 19 × 5,264 = 100,016 characters
    assert extract_boxed(reasoning + r"\boxed{42}") == "42"
    assert extract_tagged(reasoning + "<answer>42</answer>") == "42"
    assert extract_final_line(reasoning + "\nAnswer: 42") == "42"


def test_answer_followed_by_a_long_ramble_is_read_from_the_start():
    ramble = "x" * 100_000
    assert extract_boxed(r"\boxed{7}" + ramble) == "7"
    assert extract_tagged("<answer>7</answer>" + ramble) == "7"


def test_only_the_two_end_windows_are_read():
    # A box wholly inside the middle (past the first and before the last MAX_INPUT_CHARS
    # characters) is not seen: the work stays bounded by 2 × MAX_INPUT_CHARS.
    pad = "x" * MAX_INPUT_CHARS
    assert extract_boxed(pad + r"\boxed{1}" + pad) is None
    assert extract_boxed(pad + r"\boxed{1}" + pad, max_chars=3 * MAX_INPUT_CHARS) == "1"
    # The end window wins over the start window: the last answer counts.
    assert extract_boxed(r"\boxed{1}" + pad + r"\boxed{2}") == "2"


def test_non_string_input_gives_none():
    for bad in (None, 12, b"\\boxed{1}", ["\\boxed{1}"]):
        assert extract_boxed(bad) is None
        assert extract_tagged(bad) is None
        assert extract_final_line(bad) is None


def test_tagged():
    assert extract_tagged("<answer>122</answer>") == "122"
    assert extract_tagged("<answer>1</answer> x <answer> 2 </answer>") == "2"
    assert extract_tagged("<answer>1</answer> x <answer>2") == "1"
    assert extract_tagged("<answer>1") is None
    assert extract_tagged("</answer><answer>") is None
    assert extract_tagged("<final>9</final>", tag="final") == "9"
    assert extract_tagged("<a>9</a>", tag="a>(") is None


def test_final_line():
    assert extract_final_line("work\nAnswer: 42\n") == "42"
    assert extract_final_line("Answer: 1\n  Answer: 2 \nthanks") == "2"
    assert extract_final_line("Answer:   \n") is None
    assert extract_final_line("the Answer: 3") is None
    assert extract_final_line("Final: 7", prefix="Final:") == "7"


def test_hostile_inputs_never_raise():
    hostile = [
        "\\boxed{" * 5000,
        "{" * 20_000 + "}" * 20_000,
        "\\boxed{" + "\u202e\U0001f600\x00\udcff" * 1000 + "}",
        "<answer>" * 3000 + "</answer>" * 10,
        "\n" * 50_000 + "Answer: 1",
        "x" * 1_000_000,
    ]
    for text in hostile:
        extract_boxed(text)
        extract_tagged(text)
        extract_final_line(text)
