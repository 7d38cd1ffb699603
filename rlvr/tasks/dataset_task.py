"""A task over a dataset: any file or hub dataset with a prompt column and an answer column.

Rows are read (``rlvr.tasks.data_loading``), validated (every bad row is reported by its
line number), optionally deduplicated by prompt (rows whose duplicates disagree on the
answer are dropped), and split with a seeded shuffle into train / dev / eval. The prompt
template is data: a Python format string (``"{prompt}\\nAnswer in \\\\boxed{{}}."``) or a
Jinja template (``{%`` tags, or ``{{ prompt }}`` with no named ``{field}``: `is_jinja`);
both see the prompt as ``prompt`` and every column of the row by name. Completions are
scored by a named verifier of ``rlvr.verify.check`` (gsm8k, math, aime); the row's other
columns travel with the problem for user reward functions.
"""

from __future__ import annotations

import random
import re
import string
import warnings
from dataclasses import dataclass, field
from typing import Any

from rlvr.tasks.base import SPLITS, Problem, Task, check_size, check_split
from rlvr.tasks.data_loading import (
    DataSource,
    Row,
    get_field,
    has_column,
    is_missing,
    read_rows,
)
from rlvr.verify import Verdict, check
from rlvr.verify.checkers import CHECKERS
from rlvr.verify.extract import extract_boxed
from rlvr.verify.math_answers import aime_integer, gsm8k_gold, parse_number

MAX_REPORTED_ROWS = 20
REASONING_BUDGET = 1024
"""Default response budget of a dataset task: a model reasons before its final answer, so
the reference's length says little about the response's; configs set their own."""


@dataclass(frozen=True)
class DataProblem(Problem):
    """A problem with the rest of its dataset row, for reward functions."""

    columns: dict[str, Any] = field(default_factory=dict, compare=False)
    """Every column of the source row (answer included), plus ``line``."""


def normalise_answer(verifier: str, answer: Any) -> str:
    """The reference answer as the verifier expects it; raises ValueError if it is unusable.

    gsm8k: the ``#### N`` number of a worked solution; math: the last ``\\boxed{}`` of a
    worked solution, else the text; aime: an integer 0–999.
    """
    text = str(answer).strip()
    if verifier == "gsm8k":
        gold = gsm8k_gold(text)
        if parse_number(gold) is None:
            raise ValueError(f"answer {text[:60]!r} has no number (nor a '#### N' line)")
        return gold
    if verifier == "aime":
        value = aime_integer(text)
        if value is None:
            raise ValueError(f"answer {text[:60]!r} is not an integer from 0 to 999")
        return str(value)
    boxed = extract_boxed(text, max_chars=len(text))
    result = boxed if boxed is not None else text
    if not result:
        raise ValueError("answer is empty")
    return result


def render_template(template: str, prompt: str, columns: dict[str, Any]) -> str:
    """``template`` filled with ``prompt`` and the row's columns (format string or Jinja)."""
    values = {**columns, "prompt": prompt}
    if is_jinja(template):
        import jinja2

        return jinja2.Template(template, undefined=jinja2.StrictUndefined).render(**values)
    return template.format(**values)


_NAME = re.compile(r"[A-Za-z_]\w*")


def is_jinja(template: str) -> bool:
    """A template is Jinja when it has a ``{%`` or ``{#`` tag, or a non-empty ``{{ … }}``
    and no named format field. A named field (``{prompt}``, ``{row.x}``, ``{q[0]}``) makes it a
    format string, whose ``{{`` and ``}}`` are escaped braces: ``\\boxed{{12}}`` is
    ``\\boxed{12}`` there, not a Jinja expression. A positional ``{}`` or ``{12}`` is not a
    name, so ``{{ prompt }} … \\boxed{12}`` stays Jinja."""
    if "{%" in template or "{#" in template:
        return True
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError:  # unbalanced single braces: not a format string
        fields = []
    if any(_NAME.fullmatch(re.split(r"[.\[]", f, maxsplit=1)[0]) for f in fields):
        return False
    return "{{" in template.replace("{{}}", "")  # an empty {{}} is an escaped \boxed{}


def check_template(template: str) -> None:
    """Refuse, once, a template that cannot be parsed: as the format string or the Jinja
    template `is_jinja` takes it for (each row would fail the same way)."""
    kind = "Jinja template" if is_jinja(template) else "format string"
    try:
        if kind == "format string":
            list(string.Formatter().parse(template))
        else:
            import jinja2

            jinja2.Environment().parse(template)
    except Exception as err:  # ValueError or Jinja's TemplateSyntaxError
        raise ValueError(
            f"task_options.template={template!r} is read as a {kind} and does not parse: "
            f"{err}; a format string names fields as {{prompt}} and doubles literal braces "
            f"(\\boxed{{{{12}}}}), a Jinja template writes {{{{ prompt }}}} and single braces "
            f"(\\boxed{{12}})"
        ) from None


class TemplateFailed(ValueError):
    """A row's prompt template could not be filled; when every row fails alike, the
    template is reported once, not once per row."""


class DatasetTask(Task):
    """Problems from ``data`` scored by ``verifier``; see the module docstring."""

    name = "dataset"
    default_template = "{prompt}"
    loads_data = True

    def __init__(
        self,
        data: Any = None,
        eval_data: Any = None,
        prompt_field: str = "prompt",
        answer_field: str = "answer",
        verifier: str = "math",
        template: str | None = None,
        seed: int = 0,
        dev_size: int = 0,
        eval_size: int = 0,
        dedupe: bool = False,
        skip_bad_rows: bool = False,
        eval_only: bool = False,
        verify_timeout_s: float | None = None,
        eval_prompt_field: str | None = None,
        eval_answer_field: str | None = None,
    ) -> None:
        """
        Args:
            data: the training rows (a path or ``{path|hub, config, split, revision}``).
            eval_data: held-out rows for evaluation; if None the eval split is
                ``eval_size`` rows held out from ``data``.
            prompt_field, answer_field: column names (dots reach into nested columns).
            verifier: ``gsm8k``, ``math``, ``aime`` or ``dapo_math`` (``rlvr.verify.check``).
            template: format string or Jinja template of the prompt; ``{prompt}`` is the
                prompt column.
            seed: seed of the shuffle that holds dev (and eval) rows out.
            dev_size: rows of ``data`` held out as the dev split.
            eval_size: with ``eval_data``, its first ``eval_size`` rows (0: all); without,
                rows of ``data`` held out as the eval split.
            dedupe: drop repeated prompts; duplicates with different answers are all dropped.
            skip_bad_rows: warn about invalid rows and skip them instead of failing.
            eval_only: every row of ``data`` goes to the eval split (benchmarks like AIME).
            verify_timeout_s: time limit of one check (None: the verifier's default).
            eval_prompt_field, eval_answer_field: the columns of ``eval_data`` when they
                differ from the training data's (e.g. DAPO-Math for training, AIME for eval).
        """
        if data is None:
            raise ValueError(f"task {self.name!r} needs data= (a file path or a hub mapping)")
        if verifier not in CHECKERS:
            raise ValueError(f"verifier must be one of {', '.join(CHECKERS)}, got {verifier!r}")
        self.source = DataSource.parse(data, "data")
        self.eval_source = None if eval_data is None else DataSource.parse(eval_data, "eval_data")
        self.prompt_field, self.answer_field = prompt_field, answer_field
        self.eval_fields = (eval_prompt_field or prompt_field, eval_answer_field or answer_field)
        self.verifier = verifier
        self.template = self.default_template if template is None else template
        check_template(self.template)
        self.seed = seed
        self.dev_size = check_size("dev_size", dev_size)
        self.eval_size = check_size("eval_size", eval_size)
        self.dedupe, self.skip_bad_rows, self.eval_only = dedupe, skip_bad_rows, eval_only
        self.timeout_s = verify_timeout_s
        self.report: dict[str, int] = {}
        self._splits: dict[str, list[DataProblem]] | None = None

    # -- loading -------------------------------------------------------------------------

    def _problems_of(self, source: DataSource, fields: tuple[str, str]) -> list[DataProblem]:
        rows = read_rows(source)
        self._check_columns(source, rows, fields)
        problems, bad, template_errors = [], [], set()
        for row in rows:
            try:
                problems.append(self._problem(row, *fields))
            except TemplateFailed as err:
                template_errors.add(str(err))
                bad.append(f"line {row.line}: {err}")
            except ValueError as err:
                bad.append(f"line {row.line}: {err}")
        self.report[f"bad_rows:{source.describe()}"] = len(bad)
        if rows and len(bad) == len(rows) and len(template_errors) == 1:
            raise ValueError(f"{source.describe()}: on every row ({len(rows)}), {bad[0]}")
        if bad:
            listed = "; ".join(bad[:MAX_REPORTED_ROWS])
            more = (
                f" (and {len(bad) - MAX_REPORTED_ROWS} more)"
                if len(bad) > MAX_REPORTED_ROWS
                else ""
            )
            message = (
                f"{source.describe()}: {len(bad)} of {len(rows)} rows are invalid: {listed}{more}"
            )
            if not self.skip_bad_rows:
                raise ValueError(message + "; fix them or set skip_bad_rows: true")
            warnings.warn(message, stacklevel=3)
        if not problems:
            raise ValueError(f"{source.describe()}: no valid rows")
        return self._deduplicated(problems) if self.dedupe else problems

    def _check_columns(self, source: DataSource, rows: list[Row], fields: tuple[str, str]) -> None:
        """A column no row has is named once, with the columns there are, instead of one
        error per row."""
        option = ("prompt_field", "answer_field")
        if source is self.eval_source:
            option = ("eval_prompt_field", "eval_answer_field")
        for name, column in zip(option, fields, strict=True):
            if rows and not any(has_column(row.fields, column) for row in rows):
                available = list(dict.fromkeys(k for row in rows[:100] for k in row.fields))
                raise ValueError(
                    f"{source.describe()}: no column {column!r} ({name}); available "
                    f"columns: {', '.join(available) or 'none'}; set task_options.{name}"
                )

    def _problem(self, row: Row, prompt_field: str, answer_field: str) -> DataProblem:
        prompt = get_field(row.fields, prompt_field)
        if is_missing(prompt) or not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"no text in prompt column {prompt_field!r}")
        answer = get_field(row.fields, answer_field)
        if is_missing(answer) or answer is None or str(answer).strip() == "":
            raise ValueError(f"no value in answer column {answer_field!r}")
        reference = normalise_answer(self.verifier, answer)
        columns = {**row.fields, "line": row.line}
        try:
            text = render_template(self.template, prompt, columns)
        except KeyError as err:
            raise TemplateFailed(
                f"template {self.template!r} failed: no column {err.args[0]!r} (the row has "
                f"{', '.join(dict.fromkeys(['prompt', *columns]))})"
            ) from None
        except (IndexError, ValueError) as err:
            raise TemplateFailed(f"template {self.template!r} failed: {err!r}") from None
        except Exception as err:  # Jinja's errors
            raise TemplateFailed(f"template {self.template!r} failed: {err}") from None
        return DataProblem("", text, reference, f" \\boxed{{{reference}}}", columns)

    def _deduplicated(self, problems: list[DataProblem]) -> list[DataProblem]:
        answers: dict[str, set[str]] = {}
        for p in problems:
            answers.setdefault(_key(p.prompt), set()).add(p.answer)
        seen: set[str] = set()
        kept = []
        for p in problems:
            key = _key(p.prompt)
            if len(answers[key]) == 1 and key not in seen:
                kept.append(p)
            seen.add(key)
        conflicting = sum(len(a) > 1 for a in answers.values())
        self.report["conflicting_prompts"] = self.report.get("conflicting_prompts", 0) + conflicting
        self.report["duplicates_dropped"] = self.report.get("duplicates_dropped", 0) + (
            len(problems) - len(kept)
        )
        return kept

    # -- splits --------------------------------------------------------------------------

    def problems(self, split: str) -> list[Problem]:
        check_split(split)
        if self._splits is None:
            self._splits = self._build_splits()
        return list(self._splits[split])

    def _build_splits(self) -> dict[str, list[DataProblem]]:
        rows = self._problems_of(self.source, (self.prompt_field, self.answer_field))
        if self.eval_only:
            return self._named({"train": [], "dev": [], "eval": rows})
        # Split by prompt, not by row: copies of one prompt (dedupe off) share a split, so
        # no eval item is also a training or dev item.
        keys = list(dict.fromkeys(_key(r.prompt) for r in rows))
        order = list(range(len(keys)))
        random.Random(self.seed).shuffle(order)
        held_eval = 0 if self.eval_source is not None else self.eval_size
        needed = self.dev_size + held_eval
        if needed >= len(keys):
            raise ValueError(
                f"{self.source.describe()} has {len(keys)} distinct valid prompts, too few to "
                f"hold out dev_size={self.dev_size} + eval_size={held_eval} and keep any for "
                f"training; set task_options.dev_size and task_options.eval_size to add up to "
                f"less than {len(keys)}"
            )
        split_of = {keys[i]: "eval" for i in order[:held_eval]}
        split_of.update({keys[i]: "dev" for i in order[held_eval:needed]})
        by_split: dict[str, list[DataProblem]] = {"train": [], "dev": [], "eval": []}
        for row in rows:
            by_split[split_of.get(_key(row.prompt), "train")].append(row)
        train_rows, dev_rows, eval_rows = by_split["train"], by_split["dev"], by_split["eval"]
        if self.eval_source is not None:
            eval_rows = self._problems_of(self.eval_source, self.eval_fields)
            eval_rows = eval_rows[: self.eval_size] if self.eval_size else eval_rows
            # No eval item may be trained on or gate anything: drop its copies elsewhere.
            held_out = {_key(p.prompt) for p in eval_rows}
            train_rows = [p for p in train_rows if _key(p.prompt) not in held_out]
            dev_rows = [p for p in dev_rows if _key(p.prompt) not in held_out]
        return self._named({"train": train_rows, "dev": dev_rows, "eval": eval_rows})

    def _named(self, splits: dict[str, list[DataProblem]]) -> dict[str, list[DataProblem]]:
        return {
            split: [
                DataProblem(f"{self.name}/{split}/{i}", p.prompt, p.answer, p.target, p.columns)
                for i, p in enumerate(problems)
            ]
            for split, problems in splits.items()
        }

    # -- scoring -------------------------------------------------------------------------

    def check(self, problem: Problem, completion: str) -> Verdict:
        return check(self.verifier, completion, problem.answer, timeout_s=self.timeout_s)

    def verify(self, problem: Problem, completion: str) -> Verdict:
        """``rlvr.verify.check`` already applies the time limit and never raises."""
        return self.check(problem, completion)

    @property
    def longest_target_chars(self) -> int:
        return max((len(p.target) for s in SPLITS for p in self.problems(s)), default=0)

    @property
    def default_max_new_tokens(self) -> int:
        return REASONING_BUDGET

    @property
    def alphabet(self) -> str:
        chars = set()
        for split in ("train", "dev", "eval"):
            for p in self.problems(split):
                chars.update(p.prompt, p.target)
        return "".join(sorted(chars))


_SPACES = re.compile(r"\s+")


def _key(prompt: str) -> str:
    return _SPACES.sub(" ", prompt).strip().lower()
