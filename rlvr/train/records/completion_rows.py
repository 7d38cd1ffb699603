"""The rows of the completions table (`rlvr.runlog.completions` writes them): what the
policy wrote, every `completions_every` steps.

A bounded sample of the step's generated responses (refills and dropped groups included),
one JSON object per row (docs/metrics.md gives the schema). Every value is read from the
tensors the update used: the verifier's correctness, the rewards, the prepared batch's
advantages and mask; nothing is recomputed. The rows are chosen by their own generator,
seeded by (seed, step), so logging never moves the training RNG: a run with the table and
one without train alike.

Bounds: at most `completions_rows` rows per step, whole prompt groups first; every text
field at most `MAX_CHARS` characters (a completion keeps its first ones, its segments cut
alike; a prompt keeps its last ones, after "…"); a shortened row says `"cut": true`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from rlvr.algo import PreparedBatch
from rlvr.runlog.completions import prompt_images
from rlvr.train.collect import Collected
from rlvr.train.records.rollout_record import Rollout

MAX_CHARS = 2000
"""Characters kept of each text field of a row (prompt, completion, each turn's texts)."""


def choose_rows(group_ids: torch.Tensor, count: int, seed: int, step: int) -> list[int]:
    """Up to `count` row indices, whole groups first, in a random group order drawn from a
    generator of its own seeded by (seed, step); returned in batch order."""
    order = random.Random(f"completions:{seed}:{step}")
    groups = list(dict.fromkeys(group_ids.tolist()))
    order.shuffle(groups)
    rows: list[int] = []
    for gid in groups:
        rows += (group_ids == gid).nonzero().squeeze(-1).tolist()
        if len(rows) >= count:
            break
    return sorted(rows[:count])


def token_kinds(generated: Rollout, row: int, trained: torch.Tensor | None) -> list[str]:
    """The class of each response token of `row`: "policy" (sampled and trained on),
    "masked" (sampled, left out of the loss: a dropped or filtered row), "observation"
    (an environment's reply) or "forced" (inserted by the engine: forced interruption).
    `trained`: the prepared batch's (T',) mask of this row, None when the row was dropped."""
    n = int(generated.response_mask[row].sum())
    forced = generated.forced_mask
    inserted = "observation" if generated.episodes is not None else "forced"
    kinds = []
    for t in range(n):
        if forced is not None and forced[row, t] > 0:
            kinds.append(inserted)
        elif trained is not None and t < len(trained) and trained[t] > 0:
            kinds.append("policy")
        else:
            kinds.append("masked")
    return kinds


def segments(
    ids: list[int], kinds: list[str], text: str, decode: Callable[[list[int]], str]
) -> list[dict[str, str]]:
    """`text` (the decoded response) split into runs of one token class. A run ends where
    the decoded prefix of the ids through it ends (its common prefix with `text`), so the
    segments' texts always concatenate to `text`."""
    out: list[dict[str, str]] = []
    start = 0
    for end, kind in _runs(kinds):
        if end == len(ids):
            position = len(text)
        else:
            position = max(start, _common_prefix(decode(ids[:end]), text))
        if position > start:
            if out and out[-1]["kind"] == kind:
                out[-1]["text"] += text[start:position]
            else:
                out.append({"kind": kind, "text": text[start:position]})
        start = position
    if start < len(text):  # no token (or every run) decoded to it: the last class keeps it
        kind = kinds[-1] if kinds else "policy"
        out.append({"kind": kind, "text": text[start:]})
    return out


def _runs(kinds: list[str]) -> list[tuple[int, str]]:
    """(end, kind) of each run of equal kinds."""
    return [(t + 1, k) for t, k in enumerate(kinds) if t + 1 == len(kinds) or kinds[t + 1] != k]


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def turns(parts: list[dict[str, str]], record: Any) -> list[dict[str, Any]]:
    """A multi-turn episode's turns from its segments: a turn is the policy's text up to
    an observation, and that observation; `tool_call` is the call the environment read in
    that turn (`EpisodeRecord.calls`, None when it made none). The last turn's `ended` is
    why the episode ended."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if part["kind"] == "observation":
            if not out or out[-1]["observation"] is not None:
                out.append(_turn(len(out), ""))
            out[-1]["observation"] = part["text"]
        else:
            if not out or out[-1]["observation"] is not None:
                out.append(_turn(len(out), ""))
            out[-1]["policy"] += part["text"]
    calls = getattr(record, "calls", [])
    for turn in out:
        turn["tool_call"] = calls[turn["turn"]] if turn["turn"] < len(calls) else None
    if out:
        out[-1]["ended"] = record.ended_by or None
    return out


def _turn(index: int, policy: str) -> dict[str, Any]:
    return {"turn": index, "policy": policy, "tool_call": None, "observation": None, "ended": None}


def completion_rows(
    collected: Collected,
    prepared: PreparedBatch | None,
    decode: Callable[[list[int]], str],
    step: int,
    seed: int,
    count: int,
) -> list[dict[str, Any]]:
    """The sampled rows of one step (docs/metrics.md, "Completions"). `prepared` is the
    prepared batch of `collected.rollout` (None when nothing was kept); `decode(ids)` the
    tokenizer's decoding without special tokens."""
    generated = collected.generated
    kept = _kept_index(generated, collected.rollout)
    rows = []
    for row in choose_rows(generated.group_ids, count, seed, step):
        k = kept.get(row)
        trained = None if prepared is None or k is None else prepared.response_mask[k]
        rows.append(_row(generated, row, k, prepared, trained, decode, step))
    return rows


def _kept_index(generated: Rollout, rollout: Rollout | None) -> dict[int, int]:
    """Generated row → its row in the kept batch. Groups are kept or dropped whole and
    their ids are unique in the step, so (group id, place in the group) names a row."""
    if rollout is None:
        return {}
    where = {key: i for i, key in enumerate(_places(rollout.group_ids))}
    return {r: where[key] for r, key in enumerate(_places(generated.group_ids)) if key in where}


def _places(group_ids: torch.Tensor) -> list[tuple[int, int]]:
    seen: dict[int, int] = {}
    out = []
    for gid in group_ids.tolist():
        out.append((gid, seen.get(gid, 0)))
        seen[gid] = seen.get(gid, 0) + 1
    return out


def _row(generated, row, k, prepared, trained, decode, step) -> dict[str, Any]:
    n = int(generated.response_mask[row].sum())
    ids = generated.response_ids[row, :n].tolist()
    text = generated.texts[row]
    parts = segments(ids, token_kinds(generated, row, trained), text, decode)
    record = generated.episodes[row] if generated.episodes is not None else None
    values = generated.reward_values[row] if generated.reward_values is not None else None
    advantage = None
    if trained is not None and trained.sum() > 0:
        advantage = float(prepared.advantages[k][trained > 0].double().mean())
    gid = int(generated.group_ids[row])
    out = {
        "step": step,
        "prompt": decode(generated.prompt_ids[row]),
        "completion": text,
        "group": gid,
        "sample": int((generated.group_ids[:row] == gid).sum()),
        "reward": float(generated.rewards[row]),
        "rewards": dict(values) if values else {},
        "correct": bool(generated.correct[row] > 0),
        "formatted": bool(generated.formatted[row] > 0),
        "advantage": advantage,
        "length": n,
        "truncated": bool(generated.truncated[row]),
        "kept": advantage is not None,
        "segments": parts,
        "turns": turns(parts, record) if record is not None else None,
        **episode_health(record),
        "shaped_reward": None if k is None else float(prepared.shaped_rewards[k]),
        **prompt_images(generated.prompt_ids[row]),  # only a prompt that shows images
    }
    return _bounded(out)


def episode_health(record: Any) -> dict[str, Any]:
    """Why the environment failed (None when it did not), and the episode's tool errors
    (raised or timed out) and invalid calls: what `rlvr show` shows and filters on; all
    None for a one-turn response (`record` None)."""
    if record is None:
        return dict.fromkeys(("env_failed", "tool_errors", "invalid_calls"))
    return {
        "env_failed": record.env_failed,
        "tool_errors": record.tool_errors + record.tool_timeouts,
        "invalid_calls": record.invalid_calls,
    }


def _bounded(row: dict[str, Any]) -> dict[str, Any]:
    """Each text field at most `MAX_CHARS` characters; `cut` says whether any was."""
    cut = False
    if len(row["prompt"]) > MAX_CHARS:
        row["prompt"], cut = "…" + row["prompt"][-(MAX_CHARS - 1) :], True
    if len(row["completion"]) > MAX_CHARS:
        row["completion"], cut = row["completion"][:MAX_CHARS], True
        room, kept = MAX_CHARS, []
        for part in row["segments"]:
            if room > 0:
                kept.append({"kind": part["kind"], "text": part["text"][:room]})
                room -= len(kept[-1]["text"])
        row["segments"] = kept
    for turn in row["turns"] or []:
        for key in ("policy", "observation"):
            if turn[key] is not None and len(turn[key]) > MAX_CHARS:
                turn[key], cut = turn[key][:MAX_CHARS], True
    row["cut"] = cut
    return row
