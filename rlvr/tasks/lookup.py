"""Multi-hop questions answered through a lookup tool: an embedded analog of Search-R1.

``Q: parent of parent of kavo? A:`` (``hops=2``) asks for the end of a chain of facts the
policy can only read through ``lookup``: it writes ``<lookup>kavo</lookup>``, hears
``=belu``, looks up ``belu``, hears ``=tira``, and answers `` \\boxed{tira}``. Each
question has a world of its own, as each HotpotQA question in the distractor setting comes
with its own passages: the chain kavo → belu → tira is drawn from (task seed, the entity
asked about), so no other question, in any split, holds its facts, and a model cannot
answer from memory (the ``tools=False`` control: chance is 1 in 6,400 names). A lookup of
a name outside the chain answers ``=unknown``. Search-R1 (arXiv 2503.09516) retrieves
passages from a corpus with a search engine; here the corpus is one fact per entity and
the search is exact.

Scoring: the last ``\\boxed{}`` of the whole trajectory must hold the chain's last name.

The default is one hop (``Q: parent of kavo? A:``: a lookup, then the answer), because its
warm start teaches the protocol in a budget like the calculator's: on the embedded model,
with the observations out of the supervised loss, one hop reaches dev accuracy 0.3 after
175 supervised steps, two hops after 325 (docs/agentic.md has the figures and commands).
"""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

from rlvr.checks import check_int
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.tools import ToolEnvironment
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import Verdict, extract_boxed

CONSONANTS, VOWELS = "bcdfghjklmnprstv", "aeiou"
OBSERVATION = "={result}"
UNKNOWN = "unknown"
RELATION = "parent"
NAME_CHARS = 4
_OBSERVATION_IN_TARGET = re.compile(r"</lookup>(=[a-z]+)")


def name(rng: random.Random) -> str:
    """A pronounceable 4-letter name, consonant-vowel-consonant-vowel (6,400 of them)."""
    return "".join(rng.choice(s) for s in (CONSONANTS, VOWELS, CONSONANTS, VOWELS))


class LookupTask(SyntheticTask):
    """``hops``-hop questions ``parent of … of X``, answered through ``lookup``."""

    name = "lookup"

    def __init__(
        self,
        hops: int = 1,
        tools: bool = True,
        seed: int = 0,
        train_size: int = 3000,
        dev_size: int = 200,
        eval_size: int = 300,
        max_turns: int | None = None,
        max_tool_calls: int | None = None,
        max_observation_tokens: int = 16,
        max_turn_tokens: int | None = None,
        env_errors: str = "drop",
    ) -> None:
        """
        Args:
            hops: facts to chain, 1 to 3 (2 takes the warm start about twice the steps
                of 1; 3 needs more context than the embedded model's 128 positions).
            tools: whether the policy may call ``lookup`` (False: the one-turn control).
            seed, train_size, dev_size, eval_size: as for arithmetic; the entity asked
                about is the problem's identity, never in two splits.
            max_turns, max_tool_calls: the episode's limits; None: hops + 2 turns and
                hops + 1 calls (one wasted lookup allowed).
            max_observation_tokens, max_turn_tokens, env_errors: as for calculator.
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        check_int("hops", hops, 1, 3)
        if not isinstance(tools, bool):
            raise ValueError(f"tools must be true or false, got {tools!r}")
        self.hops, self.tools = hops, tools
        budgets = EpisodeBudgets(
            max_turns=hops + 2 if max_turns is None else max_turns,
            max_tool_calls=hops + 1 if max_tool_calls is None else max_tool_calls,
            max_observation_tokens=max_observation_tokens,
            max_turn_tokens=max_turn_tokens,
            env_errors=env_errors,
        )
        self.episode_budgets = budgets if tools else None

    def chain(self, entity: str) -> list[str]:
        """[entity, its parent, its parent's parent, …]: `hops` + 1 distinct names drawn
        from (seed, entity) alone, so the environment rebuilds it from the prompt."""
        rng = random.Random(f"lookup/{self.seed}/{entity}")
        names = [entity]
        while len(names) <= self.hops:
            candidate = name(rng)
            if candidate not in names:
                names.append(candidate)
        return names

    def facts(self, problem: Problem) -> dict[str, str]:
        """The question's world: each name of its chain → the next."""
        names = self.chain(problem.prompt.removesuffix("? A:").rsplit(" ", 1)[-1])
        return dict(itertools.pairwise(names))

    def environment(self, problem: Problem) -> Any:
        if not self.tools:
            return super().environment(problem)
        facts = self.facts(problem)

        def lookup(entity: str) -> str:
            """The parent of `entity`, or 'unknown'.

            Args:
                entity: a name, e.g. ``kavo``.
            """
            return facts.get(entity.strip(), UNKNOWN)

        return ToolEnvironment({"lookup": lookup}, observation_format=OBSERVATION)

    def sample(self, rng: random.Random) -> Draft:
        names = self.chain(name(rng))
        prompt = f"Q: {f'{RELATION} of ' * self.hops}{names[0]}? A:"
        target = f" \\boxed{{{names[-1]}}}"
        if self.tools:
            calls = "".join(
                f" <lookup>{a}</lookup>{OBSERVATION.format(result=b)}"
                for a, b in itertools.pairwise(names)
            )
            target = calls + target
        return Draft(names[0], prompt, names[-1], target)

    def observation_spans(self, target: str) -> list[tuple[int, int]]:
        """Character spans of the environment's replies (``=belu``) in a target: the warm
        start leaves them out of its loss, as RL does (they are forced, not sampled)."""
        return [m.span(1) for m in _OBSERVATION_IN_TARGET.finditer(target)]

    def check(self, problem: Problem, completion: str) -> Verdict:
        answer = extract_boxed(completion)
        if answer is None:
            return Verdict(False, False, None, reason="no \\boxed{...} answer found")
        correct = answer.strip() == problem.answer
        reason = "correct" if correct else f"expected {problem.answer}, got {answer.strip()}"
        return Verdict(correct, True, answer, reason=reason)

    @property
    def longest_target_chars(self) -> int:
        call = len(f" <lookup></lookup>{OBSERVATION.format(result='')}") + 2 * NAME_CHARS
        return (self.hops * call if self.tools else 0) + len(" \\boxed{}") + NAME_CHARS

    @property
    def alphabet(self) -> str:
        return alphabet_of(
            f"Q: {RELATION} of? A:", CONSONANTS, VOWELS, "\\boxed{}", "<lookup></lookup>="
        )
