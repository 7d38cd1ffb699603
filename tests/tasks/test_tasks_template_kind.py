"""A dataset task's template is a format string or Jinja: a format string's escaped braces
(`\\boxed{{12}}`) are not Jinja (issue 40's trial: every row failed), and a template that
fails on every row alike is reported once, not once per row."""

from __future__ import annotations

import pytest
from hf_testlib import write_jsonl

from rlvr.tasks import make_task
from rlvr.tasks.dataset_task import is_jinja, render_template

TRIAL_FORMAT = "{prompt} Put the final answer in \\boxed{{}}, for example \\boxed{{12}}."
TRIAL_JINJA = "{{ prompt }} Put the final answer in \\boxed{}, for example \\boxed{12}."
RENDERED = "What is 1 + 2? Put the final answer in \\boxed{}, for example \\boxed{12}."


@pytest.mark.parametrize(
    ("template", "jinja"),
    [
        (TRIAL_FORMAT, False),  # {prompt} is a named field: the {{ }} are escapes
        (TRIAL_JINJA, True),  # no named field; {} and {12} are positional, not names
        ("{prompt}\nPlease put it within \\boxed{{}}.", False),
        ("Answer in \\boxed{{}}.", False),  # only empty escapes: a constant format string
        ("[level {{ difficulty }}] {{ prompt }} =", True),
        ("{% if hint %}{{ hint }} {% endif %}{{ prompt }}", True),
        ("{# note #}{prompt}", True),  # a Jinja comment tag decides
        ("{row.q} and {items[0]}", False),  # attribute and index fields are names too
        ("{{ prompt }} as {a, b}", True),  # 'a, b' is no field name
    ],
)
def test_format_string_or_jinja(template, jinja):
    assert is_jinja(template) is jinja


def test_both_trial_templates_render_the_same_prompt():
    assert render_template(TRIAL_FORMAT, "What is 1 + 2?", {}) == RENDERED
    assert render_template(TRIAL_JINJA, "What is 1 + 2?", {}) == RENDERED


def test_the_trial_format_template_loads_every_row(tmp_path):
    rows = [{"question": f"What is {a} + 2?", "answer": str(a + 2)} for a in range(6)]
    data = write_jsonl(tmp_path / "add.jsonl", rows)
    task = make_task(
        "dataset", data=data, prompt_field="question", verifier="gsm8k", template=TRIAL_FORMAT
    )
    prompts = [p.prompt for p in task.problems("train")]
    assert len(prompts) == 6 and "What is 1 + 2? Put the final answer in" in "".join(prompts)
    assert all(p.endswith("for example \\boxed{12}.") for p in prompts)


def test_a_template_that_does_not_parse_is_refused_once_at_construction(tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "answer": "1"}] * 3)
    with pytest.raises(ValueError) as err:
        make_task("dataset", data=data, template="{{ prompt }} {% if %}", verifier="gsm8k")
    message = str(err.value)
    assert message.startswith("task_options.template='{{ prompt }} {% if %}' is read as a Jinja")
    assert "line " not in message and "\n" not in message
    with pytest.raises(ValueError, match="is read as a format string and does not parse"):
        make_task("dataset", data=data, template="{prompt} {", verifier="gsm8k")


def test_a_missing_column_on_every_row_is_reported_once(tmp_path):
    data = write_jsonl(
        tmp_path / "t.jsonl", [{"prompt": f"p{i}", "answer": "1"} for i in range(30)]
    )
    task = make_task("dataset", data=data, template="{prompt} {missing}", verifier="gsm8k")
    with pytest.raises(ValueError) as err:
        task.problems("train")
    message = str(err.value)
    assert "on every row (30), line 1: template '{prompt} {missing}' failed: no column " in message
    assert message.endswith("no column 'missing' (the row has prompt, answer, line)")
    assert message.count("failed") == 1 and "skip_bad_rows" not in message


def test_a_column_missing_from_some_rows_still_lists_them(tmp_path):
    rows = [{"prompt": "p0", "answer": "1", "hint": "h"}, {"prompt": "p1", "answer": "1"}]
    data = write_jsonl(tmp_path / "t.jsonl", rows)
    task = make_task("dataset", data=data, template="{prompt} {hint}", verifier="gsm8k")
    with pytest.raises(
        ValueError, match=r"1 of 2 rows are invalid: line 2: template .* no column 'hint'"
    ):
        task.problems("train")
