"""`sample_segments`: K-turn segments of an episode from a saved state (docs/21-tempo.md).

A saved state is two snapshots, as 09-tempo's `MacroState`: the token ids of everything
so far (the prompt, then the policy's turns and the observations, never re-encoded), so
the next segment's context extends them exactly; and the environment's reading of each
answered turn (`Reply.call`), from which the caller's `environment(actions)` rebuilds the
world (e.g. `HouseholdEnvironment(game, actions=...)`, which replays them).

A segment pauses after its `turns`-th answer: the environment's reply is marked done
(its observation, with the next prompt mark, stays as context), so the episode loop asks
for no further turn. A segment that ends otherwise (the environment said done, the policy
ended with EOS, the token budget ran out, the environment failed) has no future to
bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.service.episodes import SampledEpisode, episode_datum
from rlvr.service.types import Datum, ModelInput, SamplingParams


@dataclass(frozen=True)
class SavedState:
    """Where a segment starts: the exact ids so far and the actions the environment heard."""

    tokens: tuple[int, ...]
    """The episode's prompt, then every policy and observation token so far."""
    actions: tuple[str, ...] = ()
    """Each answered turn as the environment read it (`Reply.call`), in order."""

    @property
    def model_input(self) -> ModelInput:
        return ModelInput.from_ints(list(self.tokens))


@dataclass
class Segment:
    """One segment from `start`: its trajectory and whether it paused at the boundary."""

    start: SavedState
    episode: SampledEpisode
    paused: bool
    """It stopped after its last allowed turn with the game going on (TD: bootstrap V̂)."""

    @property
    def actions(self) -> tuple[str, ...]:
        """The segment's answered turns as the environment read them."""
        return tuple(c for c in self.episode.record.calls if c is not None)

    def end(self) -> SavedState:
        """The state this segment stops in: the next segment's start."""
        return SavedState(
            self.start.tokens + tuple(self.episode.tokens), self.start.actions + self.actions
        )

    def datum(self, advantage: float, loss_fn: str) -> Datum:
        """`episode_datum` after the saved context: Â on this segment's policy tokens only."""
        return episode_datum(self.start.model_input, self.episode, advantage, loss_fn)


class _Pause(Environment):
    """`inner`, marked done after `turns` answers; remembers whether it paused or ended."""

    def __init__(self, inner: Environment, turns: int) -> None:
        self.inner, self.turns, self.stop = inner, turns, inner.stop
        self.calls: list[str | None] = []
        self.paused = False
        if hasattr(inner, "stops_in"):  # a tool environment's extra stop strings
            self.stops_in = inner.stops_in

    def step(self, turn: str) -> Reply:
        reply = self.inner.step(turn)
        self.calls.append(reply.call)
        if not reply.done and len(self.calls) >= self.turns:
            self.paused = True
            reply = replace(reply, done=True)
        return reply


def sample_segments(
    sampler,
    start: SavedState,
    num_samples: int,
    sampling_params: SamplingParams,
    environment: Callable[[tuple[str, ...]], Environment],
    turns: int,
    budgets: EpisodeBudgets | None = None,
) -> list[Segment]:
    """`num_samples` segments of at most `turns` answered turns from `start`, each against
    `environment(start.actions)` (a fresh environment after those actions), through
    `sampler.sample_episodes`. `sampling_params.max_tokens` bounds each segment's tokens;
    `budgets` as for an episode, with room for `turns` turns and tool calls."""
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ValueError(f"sample_segments: turns={turns!r} must be an integer >= 1")
    made: list[_Pause | None] = []  # in the order the episode loop makes them

    def paused_environment() -> Environment:
        made.append(None)  # stays None if `environment` raises (the episode is flagged)
        made[-1] = _Pause(environment(start.actions), turns)
        return made[-1]

    budgets = budgets or EpisodeBudgets()
    budgets = replace(
        budgets,
        max_turns=turns + 1,  # never reached: the environment pauses after `turns` answers
        max_tool_calls=max(budgets.max_tool_calls, turns),
    )
    episodes = (
        sampler.sample_episodes(
            start.model_input, num_samples, sampling_params, paused_environment, budgets
        )
        .result()
        .episodes
    )
    return [
        _segment(start, e, env) for e, env in zip(episodes, _aligned(made, episodes), strict=True)
    ]


def _aligned(made: list[_Pause | None], episodes: Sequence[SampledEpisode]) -> list[_Pause | None]:
    """Each episode's environment: the episode loop makes one per episode, in order; if
    what each heard differs from its episode's record, that order did not hold, and the
    pairing is refused rather than mislabelled."""
    if len(made) != len(episodes):
        raise RuntimeError(
            f"sample_segments: {len(made)} environments for {len(episodes)} episodes"
        )
    for env, episode in zip(made, episodes, strict=True):
        if env is not None and env.calls != episode.record.calls:
            raise RuntimeError("sample_segments: environments and episodes are out of order")
    return made


def _segment(start: SavedState, episode: SampledEpisode, env: _Pause | None) -> Segment:
    paused = env is not None and env.paused and not episode.truncated
    return Segment(start, episode, paused and episode.record.ended_by == "env")
