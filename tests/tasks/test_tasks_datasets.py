"""Dataset tasks from small files the tests write: GSM8K, MATH, DAPO-Math, AIME, and a
user dataset; validation by line number, dedupe, splits, templates, verdicts."""

from __future__ import annotations

import json

import pytest

from rlvr.tasks import make_task, task_options
from rlvr.tasks.data_loading import DataSource, get_field, read_rows
from rlvr.tasks.dataset_task import DataProblem


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def gsm8k_rows(n):
    return [
        {
            "question": f"Tom has {i} apples and buys {i} more. How many?",
            "answer": f"{i}+{i}={2 * i}\n#### {2 * i:,}",
        }
        for i in range(1, n + 1)
    ]


def test_gsm8k_file_loads_with_gold_numbers_and_template(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(1000))
    task = make_task("gsm8k", data=path, dev_size=10, eval_size=20)
    train, dev, evals = (task.problems(s) for s in ("train", "dev", "eval"))
    assert (len(train), len(dev), len(evals)) == (970, 10, 20)
    # gold of row 600 is "#### 1,200" -> "1,200"; the verifier compares numerically
    problem = next(p for p in train + dev + evals if p.columns["line"] == 600)
    assert problem.answer == "1,200"
    assert problem.prompt.endswith("put your final answer within \\boxed{}.")
    assert task.verify(problem, "so \\boxed{1200}").correct
    assert not task.verify(problem, "so \\boxed{1201}").correct
    # splits are disjoint and seeded
    prompts = [p.prompt for p in train + dev + evals]
    assert len(set(prompts)) == 1000
    again = make_task("gsm8k", data=path, dev_size=10, eval_size=20)
    assert [p.prompt for p in again.problems("dev")] == [p.prompt for p in dev]


def test_bad_rows_are_reported_by_line_number(tmp_path):
    rows = gsm8k_rows(5)
    rows[1] = {"question": "no answer here"}
    rows[3] = {"question": "", "answer": "#### 3"}
    rows.append({"question": "words", "answer": "no number at all"})
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError) as err:
        make_task("gsm8k", data=path, dev_size=0).problems("train")
    message = str(err.value)
    assert "3 of 6 rows are invalid" in message
    assert "line 2: no value in answer column 'answer'" in message
    assert "line 4: no text in prompt column 'question'" in message
    assert "line 6: answer 'no number at all' has no number" in message
    with pytest.warns(UserWarning, match="3 of 6 rows are invalid"):
        task = make_task("gsm8k", data=path, dev_size=0, skip_bad_rows=True)
        assert len(task.problems("train")) == 3


def test_invalid_json_line_is_named(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n{not json}\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not valid JSON"):
        make_task("gsm8k", data=str(path), dev_size=0).problems("train")


def test_math_parquet_with_boxed_solution_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = {
        "problem": ["What is 1/2 + 1/4?", "Solve x+1=3.", "Interval of x>1?"],
        "solution": [
            "We add: $\\boxed{\\frac{3}{4}}$.",
            "x = \\boxed{2}",
            "So \\boxed{(1, \\infty)}",
        ],
    }
    path = tmp_path / "math.parquet"
    pq.write_table(pa.table(rows), path)
    task = make_task("math", data=str(path), answer_field="solution", dev_size=0, eval_size=1)
    problems = task.problems("train") + task.problems("eval")
    answers = {p.columns["line"]: p.answer for p in problems}
    assert answers == {1: "\\frac{3}{4}", 2: "2", 3: "(1, \\infty)"}
    first = next(p for p in problems if p.columns["line"] == 1)
    assert task.verify(first, "\\boxed{0.75}").correct


def test_dapo_math_dedupes_and_drops_conflicting_answers(tmp_path):
    def row(text, answer):
        return {
            "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": text}],
            "reward_model": {"ground_truth": answer, "style": "rule"},
            "data_source": "math_dapo",
        }

    rows = [row(f"Problem {i}", str(i)) for i in range(30)]
    rows += [row("Problem 3", "3"), row("problem  3 ", "3")]  # duplicates, same answer
    rows += [row("Problem 7", "8")]  # conflicts with Problem 7 -> 7
    path = write_jsonl(tmp_path / "dapo.jsonl", rows)
    task = make_task("dapo_math", data=path, dev_size=5)
    kept = task.problems("train") + task.problems("dev")
    prompts = sorted(p.prompt for p in kept)
    # 30 distinct prompts, Problem 7 dropped for its conflicting answers
    assert len(prompts) == 29 and "Problem 7" not in prompts
    assert len(task.problems("dev")) == 5
    assert task.report["conflicting_prompts"] == 1
    assert task.report["duplicates_dropped"] == 2 + 2  # two repeats of 3, both copies of 7
    assert kept[0].columns["data_source"] == "math_dapo"


def test_aime_is_eval_only_and_integer_answers(tmp_path):
    rows = [{"problem": f"AIME problem {i}", "answer": f"{i:03d}"} for i in range(30)]
    path = write_jsonl(tmp_path / "aime25.jsonl", rows)
    task = make_task("aime", data=path)
    assert task.problems("train") == [] and len(task.problems("eval")) == 30
    p = task.problems("eval")[7]
    assert p.answer == "7"
    assert task.verify(p, "\\boxed{007}").correct
    bad = write_jsonl(tmp_path / "aime_bad.jsonl", [{"problem": "x", "answer": "1000"}])
    with pytest.raises(ValueError, match="line 1: answer '1000' is not an integer from 0 to 999"):
        make_task("aime", data=bad).problems("eval")


def test_user_dataset_with_jinja_template_and_own_columns(tmp_path):
    rows = [{"q": f"Compute {i}*2", "gold": 2 * i, "difficulty": i % 3} for i in range(1, 21)]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", rows[:4])
    task = make_task(
        "dataset",
        data=train,
        eval_data={"path": held},
        prompt_field="q",
        answer_field="gold",
        verifier="gsm8k",
        template="[level {{ difficulty }}] {{ prompt }} =",
        dev_size=2,
        eval_size=3,
    )
    # the 3 eval rows are copies of training rows: they leave train/dev (20 − 3 = 17 remain)
    assert len(task.problems("eval")) == 3
    assert len(task.problems("train")) + len(task.problems("dev")) == 17
    p = task.problems("eval")[0]
    assert p.prompt == "[level 1] Compute 1*2 ="
    assert isinstance(p, DataProblem) and p.columns["difficulty"] == 1


def test_format_template_error_names_the_template(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "answer": "1"}])
    with pytest.raises(ValueError, match=r"line 1: template '\{prompt\} \{missing\}' failed"):
        make_task("dataset", data=path, template="{prompt} {missing}", verifier="gsm8k").problems(
            "train"
        )


def test_sources_and_fields():
    assert DataSource.parse("a.jsonl") == DataSource(path="a.jsonl")
    hub = DataSource.parse({"hub": "openai/gsm8k", "config": "main", "split": "test"})
    assert hub.describe() == "hub:openai/gsm8k (config=main, split=test)"
    with pytest.raises(ValueError, match="exactly one of 'path' and 'hub'"):
        DataSource.parse({"split": "train"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['revison'\]"):
        DataSource.parse({"hub": "x", "revison": "main"})
    assert get_field({"a": {"b": 3}}, "a.b") == 3
    with pytest.raises(ValueError, match="unknown format"):
        read_rows(DataSource(path=__file__))


def test_task_needs_data_and_a_known_verifier(tmp_path):
    with pytest.raises(ValueError, match="task 'gsm8k' needs data="):
        make_task("gsm8k")
    with pytest.raises(ValueError, match="verifier must be one of gsm8k, math, aime"):
        make_task("dataset", data="x.jsonl", verifier="exact")
    assert "prompt_field" in task_options("math")


def test_eval_data_with_its_own_columns(tmp_path):
    train = write_jsonl(
        tmp_path / "dapo.jsonl", [{"prompt": f"P{i}", "solution": str(i)} for i in range(9)]
    )
    aime = write_jsonl(tmp_path / "aime.jsonl", [{"problem": "A1", "answer": "042"}])
    task = make_task(
        "dataset",
        data=train,
        answer_field="solution",
        eval_data=aime,
        eval_prompt_field="problem",
        eval_answer_field="answer",
        verifier="math",
    )
    (problem,) = task.problems("eval")
    assert (problem.prompt, problem.answer) == ("A1", "042")
    assert task.verify(problem, "\\boxed{42}").correct
    assert len(task.problems("train")) == 9


def test_datasets_library_path_with_a_local_dataset_directory(tmp_path, monkeypatch):
    # The hub branch goes through datasets.load_dataset; a local directory exercises it
    # without the network (the hub itself is unreachable from the tests).
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "my_gsm8k"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", gsm8k_rows(12))
    task = make_task("gsm8k", data={"hub": str(folder), "split": "train"}, dev_size=2)
    assert len(task.problems("train")) == 10 and len(task.problems("dev")) == 2
    assert sorted(int(p.answer) for p in task.problems("train") + task.problems("dev")) == [
        2 * i for i in range(1, 13)
    ]


def test_eval_file_items_are_removed_from_train_and_dev(tmp_path):
    # P3 and P5 are in both files (P5 with other spacing and case): trained on, they would
    # make the held-out score partly memorisation.
    rows = [{"prompt": f"P{i}", "solution": str(i)} for i in range(9)]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    held = write_jsonl(
        tmp_path / "held.jsonl",
        [{"prompt": "P3", "solution": "3"}, {"prompt": " p5 ", "solution": "5"}],
    )
    task = make_task(
        "dataset", data=train, answer_field="solution", eval_data=held, verifier="gsm8k", dev_size=2
    )
    used = {p.prompt for s in ("train", "dev") for p in task.problems(s)}
    assert len(used) == 7 and not used & {"P3", "P5"}
    assert task.default_max_new_tokens == 1024  # reasoning budget, not the answer's length


# Dataset tasks whose own file is split into train/dev/eval (aime is eval-only: every row is
# an eval item, nothing is trained on). tests/tasks/test_tasks_splits.py requires every
# registered task to be checked here or there.
DATASET_LEAK_TASKS = {
    "gsm8k": ("question", "answer", lambda i: f"#### {i}"),
    "math": ("problem", "answer", str),
    "dapo_math": ("prompt", "answer", str),
    "dataset": ("prompt", "answer", str),
    "aime": None,
}


@pytest.mark.parametrize("name", [n for n, spec in DATASET_LEAK_TASKS.items() if spec])
def test_no_eval_prompt_or_its_copy_is_in_train_or_dev(tmp_path, name):
    prompt_field, answer_field, gold = DATASET_LEAK_TASKS[name]
    rows = []
    for i in range(60):  # every prompt twice, the copy in other case and spacing
        rows.append({prompt_field: f"What is {i} plus zero?", answer_field: gold(i)})
        rows.append({prompt_field: f"  WHAT is {i}  plus ZERO? ", answer_field: gold(i)})
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    options = {"verifier": "gsm8k"} if name == "dataset" else {}
    extra = {"dedupe": False} if "dedupe" in task_options(name) else {}
    fields = {"prompt_field": prompt_field, "answer_field": answer_field}
    task = make_task(name, data=path, dev_size=10, eval_size=10, **fields, **options, **extra)
    key = lambda p: " ".join(p.prompt.split()).lower()  # noqa: E731
    evals = {key(p) for p in task.problems("eval")}
    used = {key(p) for s in ("train", "dev") for p in task.problems(s)}
    assert len(evals) == 10 and len(used) == 50 and not evals & used
