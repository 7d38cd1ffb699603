"""`rlvr audit`: what objective a recipe really optimizes, on a batch given as JSON.

Reads a batch of groups of responses with per-token log-probs, applies the recipe's
batch-level selection and shaping, advantages and loss exactly as the training loop does,
and returns the loss, the advantages and ∂loss/∂logπ for every response token.

A response may be a multi-turn episode: its optional `observation` (0/1 per token) marks
the environment's tokens, which the loop carries with `forced_mask` = 1. As there, they are
context: out of the loss mask (so out of every normaliser, ratio, KL and advantage), in
the trajectory's length (the overlong ramp), and their gradient is exactly 0.

A distillation recipe (`teacher_kl_coef` > 0: opd, opsd) reads each response's
`teacher_logprobs`, the teacher's log π_T of the same tokens; an observation token may
hold null there (the teacher scores no context), and gets no teacher term either way.
AgentOPSD (`advantage: turn_belief`) reads them too, summed per agent turn: a response's
optional `turns`, its policy turns as [start, end) token spans (the loop's
`EpisodeRecord.spans`), covering every policy token and no observation token; without it
the response is one turn.

`sampler_logprobs` (every response or none): the rollout engine's log-probs of the same
tokens. With them the recipe's rollout correction acts as in training (weights, and
rejection, which takes tokens out of the mask before the advantages), DPPO measures its
trust region against them, and the `rollout/mismatch_*` metrics appear; without them no
correction acts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.algo import get_recipe, policy_loss, prepare_batch, selection_metrics
from rlvr.algo.advantages.turn_credit import turn_ids_from_spans
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.policy.masks import policy_mask
from rlvr.algo.recipes import RECIPES
from rlvr.algo.regularizers import value_loss
from rlvr.algo.teacher import reverse_kl_metrics
from rlvr.audit.table import format_audit as format_audit  # the --table view
from rlvr.checks import is_int, is_number


class AuditInputError(ValueError):
    """Bad audit input; the message names the field and what would be valid."""


# Keys the batch may hold, per level: anything else is a typo that would silently change
# the audit (a misspelled `old_logprob` would mean "on-policy").
TOP_KEYS = ("recipe", "groups", "overrides", "max_new_tokens", "overlong_cache")
GROUP_KEYS = ("responses",)
RESPONSE_KEYS = (
    "logprobs",
    "reward",
    "old_logprobs",
    "ref_logprobs",
    "values",
    "correct",
    "truncated",
    "observation",
    "teacher_logprobs",
    "sampler_logprobs",
    "turns",
)
# Bounds that keep every intermediate finite: exp(logπ − logπ_ref) of the k3 KL and the
# whitening of rewards stay far from float64 overflow.
MAX_TEXT_CHARS = 16_000_000
MAX_CELLS = 500_000  # responses × longest response: the padded (N, T) tensors
MAX_REWARD = 1e6
MIN_LOGPROB = -1e3


def load_batch_json(text: str) -> Any:
    """Parse the batch's JSON text; every failure is one AuditInputError line."""
    if len(text) > MAX_TEXT_CHARS:
        raise AuditInputError(
            f"batch: {len(text):,} characters exceeds the audit's limit of {MAX_TEXT_CHARS:,}; "
            "audit fewer or shorter responses"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise AuditInputError(
            f"batch: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    except RecursionError:
        raise AuditInputError("batch: JSON nested too deeply to be an audit batch") from None
    except ValueError as err:  # e.g. an integer literal beyond Python's digit limit
        raise AuditInputError(f"batch: unreadable JSON value: {_short(str(err), 100)}") from None


def _short(value: Any, width: int = 60) -> str:
    """A one-line, bounded description of any JSON value for an error message."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width - 3] + "..."


def _check_keys(obj: dict[str, Any], valid: tuple[str, ...], where: str) -> None:
    unknown = [k for k in obj if k not in valid]
    if unknown:
        raise AuditInputError(
            f"{where}: unknown field {_short(unknown[0])}; valid fields: {', '.join(valid)}"
        )


@dataclass
class AuditBatch:
    """The JSON batch as padded (N, T) float64 tensors."""

    shape: list[list[int]]  # group → response → length
    group_ids: torch.Tensor
    mask: torch.Tensor  # (N, T) every token of the trajectory: the loop's `response_mask`
    observation: torch.Tensor  # (N, T) 1 on observation tokens: the loop's `forced_mask`
    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    values: torch.Tensor | None
    teacher_logprobs: torch.Tensor | None  # (N, T) log π_T; 0 where none was given
    sampler_logprobs: torch.Tensor | None  # (N, T) the rollout engine's; None: not given
    rewards: torch.Tensor
    correct: torch.Tensor
    truncated: torch.Tensor
    turn_ids: torch.Tensor | None = None  # (N, T) each token's agent turn; None: no `turns`

    @property
    def loss_mask(self) -> torch.Tensor:
        """(N, T) policy tokens, as `Rollout.loss_mask`: response mask × (1 − forced)."""
        return policy_mask(self.mask, self.observation)

    @property
    def lengths(self) -> torch.Tensor:
        """(N,) trajectory lengths, as `Rollout.lengths`: observation tokens count toward
        the budget `max_new_tokens`, so toward the overlong ramp too."""
        return self.mask.sum(-1)


def _number(value: Any, where: str, low: float, high: float) -> float:
    if not is_number(value):
        raise AuditInputError(f"{where} must be a number, got {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise AuditInputError(f"{where} must be finite, got {value!r}")
    if not low <= value <= high:  # compared exactly: a 400-digit integer never overflows
        raise AuditInputError(f"{where} must be in [{low:g}, {high:g}], got {_short(value, 30)}")
    return float(value)


def _numbers(value: Any, where: str, length: int | None, low: float, high: float) -> list[float]:
    if not isinstance(value, list) or not value:
        raise AuditInputError(f"{where} must be a non-empty list of numbers, got {_short(value)}")
    if length is not None and len(value) != length:
        raise AuditInputError(f"{where} has {len(value)} entries; logprobs has {length}")
    return [_number(v, f"{where}[{t}]", low, high) for t, v in enumerate(value)]


def _logprobs(value: Any, where: str, length: int | None) -> list[float]:
    return _numbers(value, where, length, MIN_LOGPROB, 0.0)


def _observation(value: Any, where: str, length: int) -> list[float]:
    """The 0/1 observation flags of one response, one per log-prob."""
    if not isinstance(value, list):
        raise AuditInputError(
            f"{where} must be a list of 0 (policy token) or 1 (observation token), "
            f"got {_short(value)}"
        )
    if len(value) != length:
        raise AuditInputError(f"{where} has {len(value)} entries; logprobs has {length}")
    for t, flag in enumerate(value):
        if not isinstance(flag, int) or flag not in (0, 1):  # JSON true/false pass as 1/0
            raise AuditInputError(
                f"{where}[{t}] must be 0 (policy token) or 1 (observation token), "
                f"got {_short(flag, 30)}"
            )
    return [float(flag) for flag in value]


def _teacher_logprobs(value: Any, where: str, observation: list[float]) -> list[float]:
    """The teacher's log-prob of each token: a number, or null on an observation token."""
    if not isinstance(value, list) or len(value) != len(observation):
        raise AuditInputError(
            f"{where} must be a list of one log-prob per token ({len(observation)}; null on "
            f"observation tokens), got {_short(value)}"
        )
    for t, v in enumerate(value):
        if v is None and not observation[t]:
            raise AuditInputError(
                f"{where}[{t}] is null but token {t} is a policy token: give the teacher's "
                f"log-prob there (null is for observation tokens, which the teacher does not score)"
            )
    return [
        0.0 if v is None else _number(v, f"{where}[{t}]", MIN_LOGPROB, 0.0)
        for t, v in enumerate(value)
    ]


def _response(
    resp: Any, where: str, needs_values: bool, needs_teacher: bool = False
) -> dict[str, Any]:
    if not isinstance(resp, dict):
        raise AuditInputError(f"{where} must be an object, got {type(resp).__name__}")
    _check_keys(resp, RESPONSE_KEYS, where)
    if "logprobs" not in resp:
        raise AuditInputError(f"{where}.logprobs is missing")
    if "reward" not in resp:
        raise AuditInputError(f"{where}.reward is missing")
    logprobs = _logprobs(resp["logprobs"], f"{where}.logprobs", None)
    n = len(logprobs)
    old = _logprobs(resp.get("old_logprobs", logprobs), f"{where}.old_logprobs", n)
    ref = _logprobs(resp.get("ref_logprobs", old), f"{where}.ref_logprobs", n)
    if needs_values and "values" not in resp:
        raise AuditInputError(f"{where}.values is missing: this recipe's critic needs values")
    values = (
        _numbers(resp["values"], f"{where}.values", n, -MAX_REWARD, MAX_REWARD)
        if needs_values
        else None
    )
    reward = _number(resp["reward"], f"{where}.reward", -MAX_REWARD, MAX_REWARD)
    correct = resp.get("correct", reward > 0)
    if isinstance(correct, list | dict) or correct not in (0, 1, True, False):
        raise AuditInputError(f"{where}.correct must be 0/1 or a boolean, got {_short(correct)}")
    truncated = resp.get("truncated", False)
    if not isinstance(truncated, bool):
        raise AuditInputError(f"{where}.truncated must be true or false, got {_short(truncated)}")
    observation = _observation(resp.get("observation", [0] * n), f"{where}.observation", n)
    if needs_teacher and "teacher_logprobs" not in resp:
        raise AuditInputError(
            f"{where}.teacher_logprobs is missing: this recipe reads a teacher (a teacher term, "
            "teacher_kl_coef > 0, or advantage turn_belief) and needs its log-prob of every "
            "policy token"
        )
    teacher = (  # checked whenever given; only a teacher recipe reads it
        _teacher_logprobs(resp["teacher_logprobs"], f"{where}.teacher_logprobs", observation)
        if "teacher_logprobs" in resp
        else None
    )
    sampler = resp.get("sampler_logprobs")
    turns = _turns(resp["turns"], f"{where}.turns", observation) if "turns" in resp else None
    return {
        "turns": turns,
        "logprobs": logprobs,
        "sampler": None if sampler is None else _logprobs(sampler, f"{where}.sampler_logprobs", n),
        "observation": observation,
        "old": old,
        "ref": ref,
        "values": values,
        "teacher": teacher,
        "reward": reward,
        "correct": float(correct),
        "truncated": truncated,
    }


def _turns(value: Any, where: str, observation: list[float]) -> list[tuple[int, int]]:
    """The policy turns of one response: [start, end) spans in order that cover every
    policy token and no observation token."""
    shape = (
        f"{where} must be a list of [start, end) token spans, one per policy turn, e.g. "
        f"[[0, 2], [4, 5]]; got {_short(value)}"
    )
    if not isinstance(value, list) or not value:
        raise AuditInputError(shape)
    covered, spans = [0] * len(observation), []
    for k, span in enumerate(value):
        if not (isinstance(span, list) and len(span) == 2 and all(is_int(v) for v in span)):
            raise AuditInputError(shape)
        start, end = span
        if not (spans[-1][1] if spans else 0) <= start < end <= len(observation):
            raise AuditInputError(
                f"{where}[{k}] = {span} must satisfy previous end ≤ start < end ≤ "
                f"{len(observation)} (the response's length)"
            )
        spans.append((start, end))
        for t in range(start, end):
            covered[t] = 1
    for t, (inside, obs) in enumerate(zip(covered, observation, strict=True)):
        if inside == bool(obs):
            what = "an observation token inside" if obs else "a policy token outside every"
            raise AuditInputError(f"{where}: token {t} is {what} turn")
    return spans


def _check_size(groups: list[Any]) -> None:
    """Bound the padded (N, T) tensors before building them: N × longest ≤ MAX_CELLS."""
    rows, longest = 0, 0
    for group in groups:
        responses = group.get("responses") if isinstance(group, dict) else None
        for resp in responses if isinstance(responses, list) else ():
            rows += 1
            lp = resp.get("logprobs") if isinstance(resp, dict) else None
            longest = max(longest, len(lp) if isinstance(lp, list) else 0)
    if rows * longest > MAX_CELLS:
        raise AuditInputError(
            f"groups: {rows} responses × {longest} tokens (the longest) = {rows * longest:,} "
            f"padded cells exceeds the audit's limit of {MAX_CELLS:,}; audit fewer or shorter "
            "responses"
        )


def _pad(rows: list[list[float]], length: int) -> torch.Tensor:
    return torch.tensor([r + [0.0] * (length - len(r)) for r in rows], dtype=torch.float64)


def parse_batch(data: Any, needs_values: bool, needs_teacher: bool = False) -> AuditBatch:
    """Validate the JSON batch and pad it into tensors."""
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list) or not groups:
        raise AuditInputError('groups must be a non-empty list of {"responses": [...]} objects')
    _check_size(groups)
    parsed, group_ids, shape = [], [], []
    for g, group in enumerate(groups):
        if isinstance(group, dict):
            _check_keys(group, GROUP_KEYS, f"groups[{g}]")
        responses = group.get("responses") if isinstance(group, dict) else None
        if not isinstance(responses, list) or not responses:
            raise AuditInputError(f"groups[{g}].responses must be a non-empty list")
        rows = [
            _response(r, f"groups[{g}].responses[{i}]", needs_values, needs_teacher)
            for i, r in enumerate(responses)
        ]
        parsed += rows
        group_ids += [g] * len(rows)
        shape.append([len(r["logprobs"]) for r in rows])
    length = max(len(r["logprobs"]) for r in parsed)
    col = lambda key: _pad([r[key] for r in parsed], length)  # noqa: E731
    given = [r["sampler"] is not None for r in parsed]
    if any(given) and not all(given):
        raise AuditInputError(
            f"sampler_logprobs: given for {sum(given)} of {len(given)} responses; give them for "
            "every response (the rollout engine reports every token) or for none"
        )
    return AuditBatch(
        shape=shape,
        group_ids=torch.tensor(group_ids),
        mask=_pad([[1.0] * len(r["logprobs"]) for r in parsed], length),
        observation=col("observation"),
        logprobs=col("logprobs"),
        old_logprobs=col("old"),
        ref_logprobs=col("ref"),
        values=col("values") if needs_values else None,
        teacher_logprobs=col("teacher") if needs_teacher else None,
        sampler_logprobs=col("sampler") if all(given) else None,
        turn_ids=_turn_ids(parsed, length),
        rewards=torch.tensor([r["reward"] for r in parsed], dtype=torch.float64),
        correct=torch.tensor([r["correct"] for r in parsed], dtype=torch.float64),
        truncated=torch.tensor([r["truncated"] for r in parsed]),
    )


def _turn_ids(parsed: list[dict[str, Any]], length: int) -> torch.Tensor | None:
    """(N, T) each token's agent turn, from the responses' `turns`; None when none has any."""
    if all(r["turns"] is None for r in parsed):
        return None
    policy = _pad([[1.0 - o for o in r["observation"]] for r in parsed], length)
    return turn_ids_from_spans([r["turns"] for r in parsed], policy)


def _recipe_from(data: dict[str, Any]):
    if "recipe" not in data:
        raise AuditInputError(
            f'recipe is missing: add "recipe": one of {", ".join(RECIPES)} to the batch, '
            "or pass --recipe"
        )
    name = data["recipe"]
    if not isinstance(name, str):
        raise AuditInputError(f"recipe must be a recipe name, got {_short(name)}")
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise AuditInputError(f"overrides must be an object of recipe fields, got {overrides!r}")
    overrides = dict(overrides)
    if "overlong_cache" in data:
        overrides["overlong_cache"] = data["overlong_cache"]
    try:
        return get_recipe(name, **overrides)
    except (ValueError, TypeError) as err:
        raise AuditInputError(f"recipe: {err}") from None


def _nest(x: torch.Tensor, shape: list[list[int]]) -> list[list[list[float]]]:
    out, row = [], 0
    for lengths in shape:
        out.append(
            [[round(float(v), 10) + 0.0 for v in x[row + i, :n]] for i, n in enumerate(lengths)]
        )
        row += len(lengths)
    return out


def run_audit(data: Any) -> dict[str, Any]:
    """The audit of one JSON batch: loss, advantages, gradient and the recipe's metrics."""
    if not isinstance(data, dict):
        raise AuditInputError("the batch must be a JSON object with 'recipe' and 'groups'")
    _check_keys(data, TOP_KEYS, "batch")
    recipe = _recipe_from(data)
    batch = parse_batch(data, recipe.needs_critic, recipe.needs_teacher)
    longest = max(n for lengths in batch.shape for n in lengths)
    budget = data.get("max_new_tokens", longest)
    if not is_int(budget) or not longest <= budget <= 10**9:
        raise AuditInputError(
            f"max_new_tokens must be an integer from the longest response ({longest}"
            f"{' tokens, observations included' if batch.observation.any() else ''}) to 10⁹, "
            f"got {_short(budget, 30)}"
        )
    try:
        prepared = prepare_batch(
            recipe,
            rewards=batch.rewards,
            correct=batch.correct,
            truncated=batch.truncated,
            response_mask=batch.loss_mask,
            group_ids=batch.group_ids,
            max_new_tokens=budget,
            old_logprobs=batch.old_logprobs,
            ref_logprobs=batch.ref_logprobs,
            values=batch.values,
            lengths=batch.lengths,
            teacher_logprobs=batch.teacher_logprobs,
            sampler_logprobs=batch.sampler_logprobs,
            turn_ids=batch.turn_ids,
        )
    except ValueError as err:
        raise AuditInputError(str(err)) from None
    logprobs = batch.logprobs.clone().requires_grad_(True)
    loss, stats = policy_loss(
        recipe,
        logprobs=logprobs,
        old_logprobs=batch.old_logprobs,
        advantages=prepared.advantages,
        loss_weights=prepared.loss_weights,
        response_mask=prepared.response_mask,
        ref_logprobs=batch.ref_logprobs,
        nll_weights=prepared.nll_weights,
        sampler_logprobs=batch.sampler_logprobs,
        sampled_mask=prepared.sampled_mask,
    )
    loss.backward()
    if not (torch.isfinite(loss) and torch.isfinite(logprobs.grad).all()):
        raise AuditInputError("the inputs give a non-finite loss or gradient; check their scale")
    metrics = {**selection_metrics(prepared, batch.group_ids), **stats.finalize()}
    if batch.teacher_logprobs is not None:  # the loop's distill/ metrics, over policy tokens
        metrics.update(
            reverse_kl_metrics(
                batch.old_logprobs, batch.teacher_logprobs, batch.loss_mask, batch.correct
            )
        )
    result: dict[str, Any] = {
        "recipe": recipe.name,
        "loss": float(loss.detach()),
        "advantages": _nest(prepared.advantages, batch.shape),
        "grad": _nest(logprobs.grad, batch.shape),
        "kept_groups": sorted({int(g) for g in batch.group_ids[prepared.keep]}),
        "shaped_rewards": [round(float(r), 10) for r in prepared.shaped_rewards],
    }
    if batch.observation.any():
        result["observation"] = [
            [[int(v) for v in row] for row in group]
            for group in _nest(batch.observation, batch.shape)
        ]
    if prepared.returns is not None:
        result["value_targets"] = _nest(prepared.returns, batch.shape)
        per_token = value_loss(batch.values, batch.values, prepared.returns, recipe.value_clip)
        # The critic regresses with a token mean over the kept tokens, as in training.
        value_weights = aggregation_weights("token_mean", prepared.response_mask, batch.group_ids)
        metrics["loss/value"] = float((per_token * value_weights).sum())
    result["metrics"] = {k: round(v, 10) for k, v in sorted(metrics.items())}
    return result
