"""Multi-turn episodes, token in and token out, through any rollout engine.

Every live episode of the batch decodes together, one policy turn per round: the first
round samples `group_size` turns per prompt (the group forks after its shared prompt),
later rounds continue each episode from its exact token ids so far, so a policy token is
never re-encoded from text (re-tokenising a conversation changes the ids the trainer
scores: verl #6719, TRL #6250). After a turn the episode's environment answers; its
observation's ids are appended with `forced_mask` = 1: context for what follows, never
trained on and never counted by a normaliser (docs/algorithms.md §9).

The result is one `Generation` whose response is the whole trajectory, so every recipe,
`audit`, resume and data parallelism take episodes unchanged. Each row carries an
`EpisodeRecord` (turns, tool calls, observation tokens, environment time, how it ended).

Limits (`EpisodeBudgets`): turns, tool calls, tokens per turn, tokens per observation (cut
with a marker) and the trajectory's `max_new_tokens`, policy and observation tokens
together (hitting it truncates the episode). An environment whose `step` raises or runs
past `env_timeout_s` ends the episode flagged (`EpisodeRecord.env_failed`): it costs the
sample, never the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from rlvr.checks import is_number
from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.chat_tools import ChatFrame
from rlvr.envs.isolated import IsolatedEnvironment
from rlvr.envs.notices import Watched
from rlvr.rollout.base import Generation, RolloutEngine, SamplingParams, encode_prompts
from rlvr.rollout.kv_session import open_session
from rlvr.rollout.stops import stop_end
from rlvr.tools.special_tokens import control_tokens, neutralise
from rlvr.verify.timeout import VerifierTimeout, alarm_usable, call_with_timeout
from rlvr.vision.prompts import encode_image_problems


@dataclass
class EpisodeRecord:
    """What one episode did; `rlvr.train.records.step_metrics` turns these into `env/` metrics."""

    turns: int = 0
    tool_calls: int = 0
    invalid_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    observation_tokens: int = 0
    observations_cut: int = 0
    env_seconds: float = 0.0
    turn_reward: float = 0.0  # the sum of the environment's per-turn reward parts
    env_failed: str | None = None  # why the environment itself failed, if it did
    ended_by: str = ""  # one of rlvr.envs.budgets.ENDINGS
    calls: list[str | None] = field(default_factory=list)  # each answered turn's Reply.call
    spans: list[tuple[int, int]] = field(default_factory=list)  # each turn's [start, end) ids


@dataclass
class _Episode:
    prompt: list[int]
    env: Environment | None  # None: it failed to start
    ids: list[int]
    logprobs: list[float]
    forced: list[float]
    record: EpisodeRecord
    done: bool = False
    truncated: bool = False

    @property
    def env_failed_to_start(self) -> bool:
        return self.env is None


def run_episodes(
    engine: RolloutEngine,
    tokenizer,
    prompts: list[list[int]],
    environments: Callable[[int], Environment],
    params: SamplingParams,
    budgets: EpisodeBudgets,
    generator: torch.Generator,
    frame: ChatFrame | None = None,
    reuse_cache: bool = True,
) -> Generation:
    """`params.group_size` episodes per prompt; `environments(i)` makes (and resets) a
    fresh environment for an episode of prompt i. Rows are grouped by prompt, as
    `engine.generate_ids` orders them. With a chat `frame`, each observation is framed as
    the chat template's tool message (`rlvr.envs.chat_tools`). With `reuse_cache`, an
    engine that can (`rlvr.rollout.kv_session`) keeps each episode's KV cache between
    turns and prefills only the new tokens; otherwise every turn re-prefills its context."""
    group = params.group_size
    session = open_session(engine) if reuse_cache else None
    row_of: dict[int, int] = {}  # id(episode) → its row in the last engine call
    episodes = [
        _start(p, environments, i, budgets.env_timeout_s)
        for i, p in enumerate(prompts)
        for _ in range(group)
    ]
    for turn in range(budgets.max_turns):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        room = max(_room(e, params, budgets) for e in live)
        if turn == 0:  # one prefill per prompt, forked into its group: row r is episode r
            first = replace(params, max_new_tokens=room)
            gen = (session or engine).generate_ids(prompts, first, generator)
            rows = [r for r, e in enumerate(episodes) if not e.done]
        else:
            contexts = [e.prompt + e.ids for e in live]
            step = replace(params, group_size=1, max_new_tokens=room)
            if session is None:
                gen = engine.generate_ids(contexts, step, generator)
            else:  # each episode continues its own row of the last call, cache and all
                sources = [row_of[id(e)] for e in live]
                gen = session.generate_ids(contexts, step, generator, sources)
            rows = list(range(len(live)))
        row_of = {id(e): r for r, e in zip(rows, live, strict=True)}
        for row, episode in zip(rows, live, strict=True):
            _take_turn(episode, gen, row, tokenizer, params, budgets, frame)
            if episode.done:
                _close(episode.env)
    for episode in episodes:
        if not episode.done:
            episode.done, episode.record.ended_by = True, "max_turns"
        _close(episode.env)
    return _package(episodes, prompts, group, tokenizer)


def _start(prompt, environments, i: int, timeout_s: float) -> _Episode:
    """An episode of prompt `i` with its environment made and reset under the same time
    limit and guard as `step`: one that fails to start ends at once, flagged."""
    episode = _Episode(prompt, None, [], [], [], EpisodeRecord())
    started = time.perf_counter()
    try:
        episode.env = call_with_timeout(environments, (i,), timeout_s, _mode())
    except VerifierTimeout:
        episode.record.env_failed = f"timeout: starting the environment ran past {timeout_s:g}s"
    except Exception as error:  # a broken environment costs the sample, not the run
        episode.record.env_failed = (
            f"error: starting the environment: {type(error).__name__}: {error}"
        )
    episode.record.env_seconds += time.perf_counter() - started
    if episode.env_failed_to_start:
        episode.done, episode.record.ended_by = True, "env_failed"
    return episode


def _close(env: Environment | None) -> None:
    """An isolated environment's worker process ends with its episode."""
    if isinstance(env, Watched):  # a config's environment, its failures reported
        env = env.inner
    if isinstance(env, IsolatedEnvironment):
        env.close()


def _mode() -> str:
    """Environments are in-process objects: an alarm on the main thread, else a thread."""
    return "alarm" if alarm_usable() else "thread"


def _room(episode: _Episode, params: SamplingParams, budgets: EpisodeBudgets) -> int:
    """Tokens this episode's next turn may take."""
    left = params.max_new_tokens - len(episode.ids)
    return max(1, min(left, budgets.max_turn_tokens or left))


def turn_text(ids: list[int], env: Environment, tokenizer) -> tuple[int | None, str]:
    """(tokens of the turn up to the earliest of `env`'s stop strings, or None; the text the
    environment hears). An environment with `stops_in(text)` adds the stop strings it finds
    in the turn (`ToolEnvironment`: the closing tag of a call to a tool it lacks). The
    token completing a stop string may run past it (a BPE token such as '>='): the tokens
    stay as sampled, and the text ends with the stop string."""
    decode = lambda part: tokenizer.decode(part, skip_special=False)  # noqa: E731
    found_in = getattr(env, "stops_in", None)  # e.g. a tags call of an unknown tool's `</x>`
    stops = (*env.stop, *found_in(decode(ids))) if found_in else env.stop
    end = stop_end(ids, stops, decode)
    if end is None:
        return None, tokenizer.decode(ids, skip_special=True)
    text = decode(ids[:end])  # special tokens kept: a stop string may be one
    found = [(text.find(s) + len(s), s) for s in stops if s in text]
    return end, text[: min(found)[0]] if found else text


def _take_turn(episode, gen, row, tokenizer, params, budgets, frame=None) -> None:
    """Append row `row` of `gen` as the episode's next turn, cut at a stop string or the
    episode's own room, then let the environment answer."""
    record = episode.record
    n = int(gen.response_mask[row].sum())
    ids = gen.response_ids[row, :n].tolist()
    cut, heard = turn_text(ids, episode.env, tokenizer)
    room = _room(episode, params, budgets)
    stopped = cut is not None and cut <= room  # the turn reached a stop string
    length = cut if stopped else min(n, room)
    eos = length == n and not bool(gen.truncated[row]) and cut is None
    record.spans.append((len(episode.ids), len(episode.ids) + length))
    episode.ids += ids[:length]
    episode.logprobs += gen.sampler_logprobs[row, :length].tolist()
    episode.forced += [0.0] * length
    record.turns += 1
    if eos:
        episode.done, record.ended_by = True, "answer"
        return
    if len(episode.ids) >= params.max_new_tokens:
        episode.done, episode.truncated, record.ended_by = True, True, "budget"
        return
    if record.turns >= budgets.max_turns:  # no turn follows: nothing to answer
        episode.done, record.ended_by = True, "max_turns"
        return
    said = heard if stopped else tokenizer.decode(ids[:length], skip_special=True)
    if stopped and record.tool_calls >= budgets.max_tool_calls:
        episode.done, record.ended_by = True, "max_tool_calls"
        return
    reply = _ask(episode, said, budgets.env_timeout_s)
    if reply is None:
        episode.done, record.ended_by = True, "env_failed"
        return
    record.calls.append(reply.call)
    record.tool_calls += reply.tool_call
    record.invalid_calls += reply.invalid_call
    record.tool_errors += reply.tool_error == "error"
    record.tool_timeouts += reply.tool_error == "timeout"
    record.turn_reward += float(reply.reward)
    if reply.observation or (frame is not None and not reply.done):
        _observe(episode, reply.observation, tokenizer, params, budgets, frame)
    if reply.done:
        episode.done, record.ended_by = True, "env"
    elif len(episode.ids) >= params.max_new_tokens:
        episode.done, episode.truncated, record.ended_by = True, True, "budget"


def _ask(episode: _Episode, turn: str, timeout_s: float) -> Reply | None:
    """The environment's reply, or None (recorded) when it raised, hung or answered
    something that is not a `Reply`."""
    started = time.perf_counter()
    try:
        reply = call_with_timeout(episode.env.step, (turn,), timeout_s, _mode())
    except VerifierTimeout:
        episode.record.env_failed = f"timeout: step ran past {timeout_s:g}s"
        return None
    except Exception as error:  # a broken environment costs the sample, not the run
        episode.record.env_failed = f"error: {type(error).__name__}: {error}"
        return None
    finally:
        episode.record.env_seconds += time.perf_counter() - started
    if not isinstance(reply, Reply):
        episode.record.env_failed = f"type: step returned {type(reply).__name__}, not a Reply"
        return None
    if not isinstance(reply.observation, str):
        episode.record.env_failed = f"type: Reply.observation is {type(reply.observation).__name__}"
        return None
    if not is_number(reply.reward) or not math.isfinite(reply.reward):
        episode.record.env_failed = f"type: Reply.reward is {reply.reward!r}, not a finite number"
        return None
    return reply


OBSERVATION_CHARS_PER_TOKEN = 64
"""An observation is cut to `max_observation_tokens` × this many characters before it is
tokenised, so a huge reply costs the trainer no time or memory (security audit F12); no
token of the usual vocabularies is longer, so the token cut that follows is the same."""


def _observe(episode, text, tokenizer, params, budgets, frame=None) -> None:
    """Append the observation's ids, cut to its budget (ending with the marker) and to the
    trajectory's room; they are context, forced, never trained on. The run tokenizer's
    special and added tokens in it are broken (`neutralise`), whatever the tool format,
    so a tool's output cannot end the turn or forge one. A chat `frame` wraps the cut text
    in the template's tool message (its tokens are not the budget's)."""
    limit = budgets.max_observation_tokens
    chars_cut = len(text) > limit * OBSERVATION_CHARS_PER_TOKEN
    text = text[: limit * OBSERVATION_CHARS_PER_TOKEN]
    if frame is not None:
        text = frame.neutralise(text)
    elif controls := control_tokens(tokenizer):
        text = neutralise(text, controls)
    ids = encode_observation(tokenizer, text)
    if chars_cut or len(ids) > limit:
        marker = encode_observation(tokenizer, budgets.cut_marker)[:limit]
        ids = ids[: limit - len(marker)] + marker
        episode.record.observations_cut += 1
    if frame is not None:
        ids = encode_observation(tokenizer, frame.wrap(tokenizer.decode(ids, skip_special=False)))
    ids = ids[: params.max_new_tokens - len(episode.ids)]
    episode.ids += ids
    episode.logprobs += [0.0] * len(ids)
    episode.forced += [1.0] * len(ids)
    episode.record.observation_tokens += len(ids)


def encode_observation(tokenizer, text: str) -> list[int]:
    """Ids of an observation; characters the vocabulary lacks become '?', so a tool's
    output can never break the episode."""
    try:
        return tokenizer.encode(text)
    except (ValueError, KeyError):
        known = getattr(tokenizer, "characters", None)
        cleaned = "".join(c if known is None or c in known else "?" for c in text)
        return tokenizer.encode(cleaned.encode("ascii", "replace").decode())


def _package(episodes: list[_Episode], prompts, group: int, tokenizer) -> Generation:
    width = max(1, max(len(e.ids) for e in episodes))
    pad = tokenizer.pad_token_id
    rows = len(episodes)
    ids = torch.full((rows, width), pad, dtype=torch.long)
    mask, logprobs, forced = (
        torch.zeros(rows, width),
        torch.zeros(rows, width),
        torch.zeros(rows, width),
    )
    for r, e in enumerate(episodes):
        n = len(e.ids)
        ids[r, :n] = torch.tensor(e.ids, dtype=torch.long)
        mask[r, :n] = 1.0
        logprobs[r, :n] = torch.tensor(e.logprobs)
        forced[r, :n] = torch.tensor(e.forced)
    return Generation(
        prompt_ids=[e.prompt for e in episodes],
        response_ids=ids,
        response_mask=mask,
        sampler_logprobs=logprobs,
        truncated=torch.tensor([e.truncated for e in episodes]),
        prompt_index=torch.arange(len(prompts)).repeat_interleave(group),
        texts=[tokenizer.decode(e.ids, skip_special=True) for e in episodes],
        forced_mask=forced,
        episodes=[e.record for e in episodes],
    )


def generate_for(
    engine: RolloutEngine, task, problems: list, params: SamplingParams, generator
) -> Generation:
    """Responses to `problems`: one turn through `engine.generate`, or, for a task with
    `episode_budgets`, episodes with a fresh `task.environment(problem)` each."""
    budgets = getattr(task, "episode_budgets", None)
    shows_images = any(getattr(p, "pixel_values", None) is not None for p in problems)
    if budgets is None and shows_images:  # their pixels ride on the ids (rlvr.vision)
        prompts = encode_image_problems(engine.tokenizer, problems)
        return engine.generate_ids(prompts, params, generator)
    if budgets is None:
        return engine.generate([p.prompt for p in problems], params, generator)

    def environment(i: int) -> Environment:
        env = task.environment(problems[i])
        env.reset(problems[i])
        return env

    if shows_images:
        prompts = encode_image_problems(engine.tokenizer, problems)
    else:
        prompts = encode_prompts(engine.tokenizer, [p.prompt for p in problems])
    frame = getattr(task, "observation_frame", None)  # tools through the chat template
    return run_episodes(
        engine, engine.tokenizer, prompts, environment, params, budgets, generator, frame
    )
