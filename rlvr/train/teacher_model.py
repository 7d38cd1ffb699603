"""The teacher of on-policy distillation (OPD, OPSD, AgentOPSD): which model, what it
sees, and its log-probs of the student's own tokens (docs/16-distillation.md,
docs/20-agent-opsd.md).

`teacher: {model, prompt_template, skills}` in the config. `model` is a Hugging Face id or
path or a checkpoint directory (an embedded model's too) that shares the student's
tokenizer, "self": the frozen step-0 student (with LoRA, the adapter-disabled base, as
π_ref), or "current": the policy being trained, as it is when the step scores (AgentOPSD's
self-teacher). `prompt_template` renders the teacher's own prompt from the problem, with
fields the student never sees (`{answer}` for every task; a dataset's columns by name;
`{skill}`, the text `skills` picks for the row); without it the teacher reads the
student's prompt ids. The teacher never generates: it scores the student's exact response
ids after its own prompt ids, once per step, without gradient.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo.advantages.turn_credit import turn_ids_from_spans
from rlvr.algo.teacher import reverse_kl_metrics
from rlvr.models.context import context_length
from rlvr.models.hf_policy import chat_prompt
from rlvr.models.policy_options import PolicyOptions
from rlvr.tasks.base import Problem
from rlvr.tasks.dataset_task import render_template
from rlvr.vision import ImagePrompt

if TYPE_CHECKING:  # the config imports this module while rlvr.train is still loading
    from rlvr.train.records.rollout_record import Rollout

SELF = "self"
CURRENT = "current"
TEACHER_KEYS = ("model", "prompt_template", "skills")
# Encodings compared besides the vocabulary size: words, digits, LaTeX, spacing.
PROBES = ("The answer is 42.", "Q: 37+85=? A: \\boxed{122}", "  x = [1, 2]\n#### 7")


@dataclass(frozen=True)
class TeacherSpec:
    """The config's `teacher` mapping, validated."""

    model: str
    prompt_template: str | None = None
    skills: SkillSpec | None = None

    @classmethod
    def from_dict(cls, data: Any) -> TeacherSpec:
        if not isinstance(data, dict):
            raise ValueError(f"teacher must be a mapping with keys {TEACHER_KEYS}, got {data!r}")
        unknown = sorted(set(data) - set(TEACHER_KEYS))
        if unknown:
            raise ValueError(f"unknown teacher key(s) {unknown}; valid: {', '.join(TEACHER_KEYS)}")
        model, template = data.get("model"), data.get("prompt_template")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(
                f"teacher.model must be a Hugging Face id or path, a checkpoint directory, "
                f"{SELF!r} (the frozen step-0 student) or {CURRENT!r} (the policy being "
                f"trained), got {model!r}"
            )
        if model == "embedded":
            raise ValueError(
                f"teacher.model='embedded' would be the student's own warm start: use {SELF!r} "
                "(the frozen step-0 student) or a checkpoint directory of a stronger model"
            )
        if template is not None and (not isinstance(template, str) or not template.strip()):
            raise ValueError(
                f"teacher.prompt_template must be a non-empty string, got {template!r}"
            )
        if model == SELF and template is None:
            raise ValueError(
                f"teacher.model={SELF!r} needs teacher.prompt_template: on the student's own "
                "prompt the frozen student only pulls back to step 0 (a KL to π_ref does that); "
                "OPSD's teacher sees more, e.g. '{prompt} (the answer is {answer})'"
            )
        if model == CURRENT and template is None:
            raise ValueError(
                f"teacher.model={CURRENT!r} needs teacher.prompt_template: on the student's "
                "own prompt the current policy is the student, and every gap is 0; "
                "AgentOPSD's teacher sees a skill, e.g. '{skill}\n{prompt}'"
            )
        skills = None if data.get("skills") is None else SkillSpec.from_dict(data["skills"])
        if skills is not None and (template is None or "skill" not in template):
            raise ValueError(
                f"teacher.skills picks a text per row for teacher.prompt_template's {{skill}}, "
                f"which {template!r} does not use; e.g. '{{skill}}\n{{prompt}}'"
            )
        return cls(model, template, skills)


SKILL_KEYS = ("field", "texts", "pattern")


@dataclass(frozen=True)
class SkillSpec:
    """`teacher.skills`: the row's `field` (a dataset column, `answer` or `target`), cut by
    the regex `pattern` (its first group, else its whole match) when given, names the
    entry of `texts` that fills the teacher's `{skill}` (AgentOPSD's skill per task type)."""

    field: str
    texts: dict[str, str]
    pattern: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> SkillSpec:
        if not isinstance(data, dict):
            raise ValueError(
                f"teacher.skills must be a mapping with keys {SKILL_KEYS}, got {data!r}"
            )
        unknown = sorted(set(data) - set(SKILL_KEYS))
        if unknown:
            raise ValueError(
                f"unknown teacher.skills key(s) {unknown}; valid: {', '.join(SKILL_KEYS)}"
            )
        name, texts, pattern = data.get("field"), data.get("texts"), data.get("pattern")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(
                f"teacher.skills.field must name a row field (a dataset column, answer or "
                f"target), got {name!r}"
            )
        ok = (
            isinstance(texts, dict)
            and texts
            and all(isinstance(k, str) and isinstance(v, str) for k, v in texts.items())
        )
        if not ok:
            raise ValueError(
                f"teacher.skills.texts must be a non-empty mapping of field value → skill "
                f"text (strings), got {texts!r}"
            )
        if pattern is not None:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as err:
                raise ValueError(
                    f"teacher.skills.pattern must be a regular expression, got {pattern!r}: {err}"
                ) from None
        return cls(name, dict(texts), pattern)

    def text(self, values: dict[str, Any], uid: str) -> str:
        """The skill text of the row whose template values are `values`."""
        if self.field not in values:
            raise ValueError(
                f"teacher.skills.field={self.field!r} is not a field of problem {uid!r}; its "
                f"fields: {', '.join(sorted(values))}"
            )
        key = str(values[self.field])
        if self.pattern is not None:
            found = re.search(self.pattern, key)
            if found is None:
                raise ValueError(
                    f"teacher.skills.pattern={self.pattern!r} does not match {self.field}="
                    f"{key!r} of problem {uid!r}"
                )
            key = found.group(1) if found.re.groups else found.group(0)
        if key not in self.texts:
            raise ValueError(
                f"teacher.skills.texts has no entry {key!r} (problem {uid!r}); its keys: "
                f"{', '.join(sorted(self.texts))}"
            )
        return self.texts[key]


def check_teacher(teacher: dict, recipe: Any, parallel: str) -> None:
    """A teacher in the config and a recipe that reads one (a teacher term, or an advantage
    such as AgentOPSD's turn_belief) go together."""
    if not teacher:
        if recipe.teacher_kl_coef:
            raise ValueError(
                f"recipe {recipe.name!r} has teacher_kl_coef={recipe.teacher_kl_coef:g} but the "
                f"config has no teacher; set teacher.model to a Hugging Face id or path, a "
                f"checkpoint directory, or {SELF!r} (OPSD)"
            )
        if recipe.needs_teacher:
            raise ValueError(
                f"recipe {recipe.name!r} has advantage={recipe.advantage!r}, which reads a "
                f"teacher's log-probs, but the config has no teacher; set teacher.model "
                f"({CURRENT!r} for AgentOPSD) and teacher.prompt_template"
            )
        return
    TeacherSpec.from_dict(teacher)
    if not recipe.needs_teacher:
        raise ValueError(
            f"teacher={teacher!r} cannot take effect: recipe {recipe.name!r} has "
            f"teacher_kl_coef=0 (no teacher term) and an advantage that reads no teacher; use "
            f"recipe opd, opsd or agent_opsd, set teacher_kl_coef > 0, or remove teacher"
        )
    if parallel == "fsdp":
        raise ValueError("parallel='fsdp' does not support a teacher yet; use parallel='ddp'")


def check_same_tokenizer(student: Any, teacher: Any, name: str, samples: Sequence[str]) -> None:
    """Refuse a teacher whose tokenizer differs from the student's, in one line: the vocabulary
    size and the encodings of a few probe strings and task prompts are compared."""
    reason = None
    if student.vocab_size != teacher.vocab_size:
        reason = f"vocabulary of {teacher.vocab_size} tokens vs the student's {student.vocab_size}"
    for text in (*PROBES, *samples):
        if reason is not None:
            break
        ids = [_encoded(t, text) for t in (teacher, student)]
        if ids[0] != ids[1]:
            reason = f"{text[:40]!r} encodes as {_ids(ids[0])} vs the student's {_ids(ids[1])}"
    if reason is not None:
        raise ValueError(
            f"teacher.model={name!r} does not share the student's tokenizer ({reason}): the "
            f"teacher scores the student's token ids, so it must tokenize exactly as the student"
        )


def _encoded(tokenizer: Any, text: str) -> list[int] | str:
    try:
        return tokenizer.encode(text)
    except ValueError:  # a character vocabulary without this character
        return "unencodable"


def _ids(ids: list[int] | str) -> str:
    return ids if isinstance(ids, str) else str(ids[:8]) + ("…" if len(ids) > 8 else "")


def teacher_text(template: str, problem: Problem, skills: SkillSpec | None = None) -> str:
    """The teacher's prompt text for `problem`: `template` with `{prompt}` (the student's
    prompt before any chat template), `{answer}` and `{target}` of every task, a dataset
    row's columns by name (`{row[answer]}` reaches a column that those names shadow) and,
    with `skills`, `{skill}`: the text the row's field picks."""
    columns = dict(getattr(problem, "columns", None) or {})
    values = {**columns, "answer": problem.answer, "target": problem.target, "row": columns}
    if skills is not None:
        values["skill"] = skills.text({**values, "prompt": problem.prompt}, problem.uid)
    try:
        return render_template(template, problem.prompt, values)
    except (KeyError, IndexError, AttributeError) as err:
        fields = ", ".join(sorted({*values, "prompt"}))
        raise ValueError(
            f"teacher.prompt_template uses {err}, which problem {problem.uid!r} does not have; "
            f"its fields: {fields}"
        ) from None
    except Exception as err:  # a Jinja undefined name or syntax error, a bad format spec
        raise ValueError(
            f"teacher.prompt_template cannot be rendered for problem {problem.uid!r}: {err}"
        ) from None


class Teacher:
    """A frozen model and the prompts it reads; `logprobs` scores a rollout's responses."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        spec: TeacherSpec,
        problems: Sequence[Problem],
        chat: Callable[[str], str] | None = None,
    ) -> None:
        self.model, self.tokenizer, self.spec, self.chat = model, tokenizer, spec, chat
        self.problems = {p.uid: p for p in problems}
        self._prompt_ids: dict[str, list[int]] = {}
        if spec.prompt_template is not None and problems:
            self.prompt_text(problems[0])  # a template error shows before the first step

    def prompt_text(self, problem: Problem) -> str:
        text = teacher_text(self.spec.prompt_template, problem, self.spec.skills)
        return text if self.chat is None else self.chat(text)

    def prompt_ids(self, rollout: Rollout) -> list[list[int]]:
        """The teacher's prompt ids of every row: its template's, else the student's own."""
        if self.spec.prompt_template is None:
            return rollout.prompt_ids  # an ImagePrompt keeps its pictures: the teacher sees them
        for uid in set(rollout.problem_uids) - set(self._prompt_ids):
            self._prompt_ids[uid] = self.tokenizer.encode(self.prompt_text(self.problems[uid]))
        return [self._prompt_ids[uid] for uid in rollout.problem_uids]

    def logprobs(
        self, rollout: Rollout, forward: Callable[[Any, Rollout], torch.Tensor]
    ) -> torch.Tensor:
        """log π_T (B, T) of the rollout's exact response ids after the teacher's prompt
        ids; `forward(model, rollout)` is the trainer's no-gradient log-prob pass."""
        pictures = any(isinstance(p, ImagePrompt) for p in rollout.prompt_ids)
        if pictures and self.spec.prompt_template is not None:
            raise ValueError(
                f"teacher.prompt_template={self.spec.prompt_template!r} rebuilds the teacher's "
                "prompt from text, which would drop the prompts' pictures; a teacher on a task "
                "that shows images reads the student's own prompt (leave out prompt_template)"
            )
        prompts = self.prompt_ids(rollout)
        self._check_context(prompts, rollout.response_ids.shape[1])
        scored = forward(self.model, dataclasses.replace(rollout, prompt_ids=prompts))
        if scored.shape != rollout.response_ids.shape:
            raise ValueError(
                f"the teacher's log-probs have shape {tuple(scored.shape)}, the student's "
                f"responses {tuple(rollout.response_ids.shape)}: they must align token by token"
            )
        return scored

    def _check_context(self, prompts: list[list[int]], width: int) -> None:
        context, longest = context_length(self.model), max(map(len, prompts), default=0)
        if context is not None and longest + width > context:
            raise ValueError(
                f"the teacher's longest prompt ({longest} tokens) and a response of {width} "
                f"tokens exceed teacher.model={self.spec.model!r}'s context length of {context} "
                f"tokens; shorten teacher.prompt_template or lower max_new_tokens"
            )


def load_teacher(
    cfg: Any,
    student_tokenizer: Any,
    problems: Sequence[Problem],
    frozen_student: Callable[[], Any],
    student: torch.nn.Module,
) -> Teacher:
    """The config's teacher. `problems`: the training split before any chat template;
    `frozen_student()`: the step-0 student (π_ref's module when the run has one)."""
    from rlvr.models.load import load_pretrained
    from rlvr.models.modes import dropout_off

    spec = TeacherSpec.from_dict(cfg.teacher)
    if spec.model == CURRENT:  # the live policy: each step scores with its current weights
        model, tokenizer = student, student_tokenizer
    elif spec.model == SELF:
        model, tokenizer = frozen_student(), student_tokenizer
    else:
        model, tokenizer, _ = load_pretrained(spec.model)
        samples = [p.prompt for p in problems[:4]]
        check_same_tokenizer(student_tokenizer, tokenizer, spec.model, samples)
        weights = student.get_input_embeddings().weight
        model = dropout_off(model.to(device=weights.device, dtype=weights.dtype))
        for p in model.parameters():
            p.requires_grad_(False)
    chat = None
    options = PolicyOptions.from_dict(cfg.policy) if cfg.model != "embedded" else None
    if options is not None and options.chat_template and spec.prompt_template is not None:
        chat = lambda text: chat_prompt(tokenizer, text, options)  # noqa: E731
    return Teacher(model, tokenizer, spec, problems, chat)


def teacher_metrics(rollout: Rollout, seconds: float) -> dict[str, float]:
    """The step's reverse KL to the teacher on the sampled policy tokens, and the teacher's
    forward time."""
    metrics = reverse_kl_metrics(
        rollout.old_logprobs, rollout.teacher_logprobs, rollout.loss_mask, rollout.correct
    )
    return {**metrics, "time/teacher_s": seconds}


def rollout_turn_ids(rollout: Rollout) -> torch.Tensor | None:
    """(B, T) each policy token's agent turn k ≥ 1 (0 on observations and padding), from
    the episodes' records (`EpisodeRecord.spans`); a row without a record is one turn.
    None for a batch without episodes: every response is one turn, which the advantage
    reads from its mask."""
    if rollout.episodes is None:
        return None
    spans = [None if e is None else e.spans for e in rollout.episodes]
    return turn_ids_from_spans(spans, rollout.loss_mask)
