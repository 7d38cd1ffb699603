"""What rlvr.service gained for the PyTRIO front (issue 39), by hand-worked values: top-k
sampling's distribution, -100 targets, the loss metrics (loss_sum, loss_mean,
token_count), the checkpoint registry that a new client resolves, and saves that keep
a state and sampler weights of one name side by side.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hf_testlib import build_tiny_hf_model

from rlvr.rollout.hf_engine import top_k_log_probs
from rlvr.service import Datum, ModelInput, SamplingParams, ServiceClient
from rlvr.service.datums import pack


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "model")


def test_top_k_keeps_the_k_most_probable_renormalised():
    # p = (0.5, 0.3, 0.2), k = 2: keep 0.5 and 0.3, renormalise by 0.8 → 0.625, 0.375.
    log_p = torch.tensor([[0.5, 0.3, 0.2]]).log()
    got = top_k_log_probs(log_p, 2).exp()
    torch.testing.assert_close(got, torch.tensor([[0.625, 0.375, 0.0]]), rtol=0, atol=1e-7)
    assert torch.equal(top_k_log_probs(log_p, -1), log_p)  # -1: no limit
    assert torch.equal(top_k_log_probs(log_p, 3), log_p)  # k ≥ V: no limit


def test_top_k_sampling_draws_only_the_top_k(tiny, tmp_path):
    sampler = ServiceClient(root=tmp_path).create_sampling_client(str(tiny))
    prompt = ModelInput.from_ints([5, 6, 7])
    out = sampler.sample(prompt, 16, SamplingParams(max_tokens=1, top_k=1, seed=0)).result()
    # top_k=1 is greedy: one token, drawn with probability 1 (log-prob 0)
    assert len({s.tokens[0] for s in out.sequences}) == 1
    assert all(s.logprobs[0] == 0.0 for s in out.sequences)
    with pytest.raises(ValueError, match=r"top_k=0 is not valid; it must be -1 \(no limit\)"):
        SamplingParams(top_k=0)
    # temperature 0 is the remote APIs' greedy: the same token as top_k=1
    greedy = sampler.sample(prompt, 4, SamplingParams(max_tokens=1, temperature=0.0)).result()
    assert {s.tokens[0] for s in greedy.sequences} == {out.sequences[0].tokens[0]}


def test_a_minus_100_target_is_no_position_of_any_loss(tiny, tmp_path):
    trainer = ServiceClient(root=tmp_path).create_training_client(str(tiny))
    full = Datum(
        ModelInput.from_ints([5, 6, 7]), {"target_tokens": [6, 7, 8], "weights": [1.0, 2.0, 1.0]}
    )
    out = trainer.forward([full], "cross_entropy").result()
    lp = out.loss_fn_outputs[0]["logprobs"].to_torch().double()
    ignored = Datum(full.model_input, {"target_tokens": [6, -100, 8], "weights": [1.0, 2.0, 1.0]})
    got = trainer.forward([ignored], "cross_entropy").result()
    # Σ w·(−log π) over the two positions left: −(1·lp0 + 1·lp2); token_count 2; mean /2
    expected = -(lp[0] + lp[2])
    assert math.isclose(got.metrics["loss_sum"], expected, rel_tol=1e-6)  # float32 sum of 2
    assert got.metrics["token_count"] == 2 and got.metrics["loss:sum"] == got.metrics["loss_sum"]
    assert math.isclose(got.metrics["loss_mean"], expected / 2, rel_tol=1e-6)
    assert got.loss_fn_outputs[0]["logprobs"].tolist()[1] == 0.0
    # a zero weight is no position of cross_entropy's count either (the SDK's active tokens)
    zero = Datum(full.model_input, {"target_tokens": [6, 7, 8], "weights": [1.0, 0.0, 1.0]})
    assert trainer.forward([zero], "cross_entropy").result().metrics["token_count"] == 2
    batch = pack([ignored], ("target_tokens", "weights"), 320, "cross_entropy")
    assert batch.target_tokens.tolist() == [[6, 0, 8]] and batch.active.tolist() == [[1, 0, 1]]


def test_a_state_saved_by_one_client_loads_by_its_uri_in_another(tiny, tmp_path):
    first = ServiceClient(root=tmp_path, seed=3)
    trainer = first.create_lora_training_client(
        str(tiny), rank=4, train_mlp=False, train_unembed=False
    )
    state = trainer.save_state("run/ck").result()
    weights = trainer.save_weights_for_sampler("run/ck").result()
    assert (state.path, weights.path) == (
        str(tmp_path / "run/ck/state"),
        str(tmp_path / "run/ck/sampler"),
    )
    assert (state.uri, weights.uri) == ("rlvr://run/ck/state", "rlvr://run/ck/sampler")
    later = ServiceClient(root=tmp_path)  # a new client: what it knows is the root's registry
    resumed = later.create_training_client_from_state(state.uri)
    assert resumed.lora.record() == {
        "rank": 4,
        "alpha": 32.0,
        "seed": 3,
        "train_attn": True,
        "train_mlp": False,
        "train_unembed": False,
    }
    for (name, p), q in zip(
        trainer.model.named_parameters(), resumed.model.parameters(), strict=True
    ):
        assert torch.equal(p, q), name
    assert later.create_sampling_client(weights.uri).get_tokenizer() is not None
    with pytest.raises(ValueError, match=r"holds sampler, not state"):
        later.create_training_client_from_state(weights.uri)
    with pytest.raises(ValueError, match=r"is not in .*checkpoints\.json"):
        later.create_training_client_from_state("rlvr://elsewhere/state")
