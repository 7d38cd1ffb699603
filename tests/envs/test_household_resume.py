"""A household environment resumed after a prefix of actions (`actions=`) is the world of
that prefix, and its step limit counts the replayed actions (09-tempo's saved states)."""

from __future__ import annotations

from rlvr.envs.household import HouseholdEnvironment, make_game, replay, walkthrough


def test_resumed_environment_continues_the_game():
    game = make_game(3, "pick_heat_then_place_in_recep")
    plan = walkthrough(game)
    assert len(plan) == 6  # docs/household.md's example
    whole = HouseholdEnvironment(game, compact=True)
    replies = [whole.step(f"{a}\n") for a in plan]
    resumed = HouseholdEnvironment(game, compact=True, actions=plan[:4])
    assert resumed.world.snapshot() == replay(game, plan[:4]).snapshot()
    assert [resumed.step(f"{a}\n") for a in plan[4:]] == replies[4:]
    assert replies[-1].done and replies[-1].reward == 1.0


def test_replayed_actions_count_towards_max_steps():
    game = make_game(3, "pick_heat_then_place_in_recep")
    env = HouseholdEnvironment(game, max_steps=3, actions=["look", "inventory"])
    reply = env.step("look\n")
    assert reply.done and not reply.observation.endswith(">")  # step 3 of 3: the last
