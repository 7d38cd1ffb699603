"""The local service's findings of the security audit (issue 41, reports/security-audit.md
F14–F19), each attack performed as the report performed it, on a tiny local Qwen2.

F14 one lock per model: concurrent training calls take turns, samples never mix two
steps' weights, and weights changed under a sampler are detected. F15 save names stay
inside the root and replace only saves. F16 a save is put in place atomically: killed at
any moment, the name holds one whole save. F17 two processes saving one name take turns.
F18 LoRA adapters follow the seed. F19 inputs are checked: integer ids, the context
length, the size of one sampling call, the learning rate, the embedding's rows.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from hf_testlib import build_tiny_hf_model

from rlvr.service import (
    AdamParams,
    Datum,
    ModelInput,
    SamplingParams,
    ServiceClient,
    StaleWeightsError,
)
from rlvr.service.saves import MARKER

REPO = Path(__file__).parents[2]
RACE = Path(__file__).with_name("save_race.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def service(tmp_path) -> ServiceClient:
    return ServiceClient(root=tmp_path / "root")


def sft(n: int = 6) -> Datum:
    ids = list(range(5, 5 + n))
    return Datum(
        ModelInput.from_ints(ids[:-1]), {"target_tokens": ids[1:], "weights": [1.0] * (n - 1)}
    )


# F14 ------------------------------------------------------------------------------------


def hammer(*loops, seconds: float = 4.0) -> list[BaseException]:
    """Run each loop body on its own thread until `seconds` pass; the errors they raised."""
    errors, stop = [], time.monotonic() + seconds

    def run(body):
        try:
            while time.monotonic() < stop:
                body()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=(body,)) for body in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_f14_two_training_threads_take_turns(service, tiny):
    trainer = service.create_lora_training_client(str(tiny), rank=4, train_unembed=False)
    steps = []

    def train():
        trainer.forward_backward([sft()], "cross_entropy").result()
        steps.append(trainer.optim_step(AdamParams(learning_rate=1e-3)).result().metrics)

    assert hammer(train, train) == []
    assert steps and trainer.step == len(steps)  # every step counted once


def test_f14_a_sample_never_mixes_two_steps_weights(service, tiny):
    trainer = service.create_lora_training_client(str(tiny), rank=4, train_unembed=False)
    prompt = ModelInput.from_ints([5, 6, 7])
    drawn = []

    def train():
        trainer.forward_backward([sft()], "cross_entropy").result()
        trainer.optim_step(AdamParams(learning_rate=1e-2)).result()

    def sample():
        sampler = trainer.save_weights_and_get_sampling_client()
        for seq in sampler.sample(prompt, 2, SamplingParams(max_tokens=6)).result().sequences:
            drawn.append((sampler, seq))

    assert hammer(train, sample) == []
    assert drawn and trainer.step > 0
    # each sequence's log-probs are its sampler's step's, scored again by that sampler
    # (same weights, temperature 1; only the reduction order of a cached decode step and a
    # full forward differs: float32 ulps of |log p| < 10, so 1e-5 is ample)
    for sampler, seq in drawn[:: max(1, len(drawn) // 8)]:
        ids = prompt.to_ints() + seq.tokens
        again = sampler.compute_logprobs(ModelInput.from_ints(ids)).result()[-len(seq.tokens) :]
        torch.testing.assert_close(
            torch.tensor(again), torch.tensor(seq.logprobs), rtol=0, atol=1e-5
        )


def test_f14_weights_changed_under_a_sampler_are_detected(service, tiny):
    trainer = service.create_lora_training_client(str(tiny), rank=4, train_unembed=False)
    sampler = trainer.save_weights_and_get_sampling_client()
    generate = sampler.engine.generate_ids

    def generate_while_someone_writes(*args, **kwargs):
        out = generate(*args, **kwargs)
        trainer.version += 1  # a writer that bypassed the lock
        return out

    sampler.engine.generate_ids = generate_while_someone_writes
    with pytest.raises(
        StaleWeightsError, match=r"weights moved \(version 0 → 1\) while this sampler"
    ):
        sampler.sample(ModelInput.from_ints([5, 6]), 1, SamplingParams(max_tokens=2))


# F15 ------------------------------------------------------------------------------------


def test_f15_save_names_cannot_escape_the_root(service, tiny, tmp_path):
    trainer = service.create_training_client(str(tiny))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path)
    (service.root / "link").parent.mkdir(parents=True, exist_ok=True)
    (service.root / "link").symlink_to(tmp_path)
    for name in ("a/../../escape", "a/../../victim", "../victim", ".hidden", "link/escape"):
        with pytest.raises(ValueError, match=r"save name=.*(must stay inside|outside the root)"):
            trainer.save_state(name, overwrite=True)
        with pytest.raises(ValueError, match=r"save name=.*(must stay inside|outside the root)"):
            trainer.save_weights_for_sampler(name, overwrite=True)
    assert not (tmp_path / "escape").exists() and (victim / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"]
    locked_in = ServiceClient(root=tmp_path / "r2", absolute_saves=False).create_training_client(
        str(tiny)
    )
    with pytest.raises(ValueError, match="is absolute; give a name inside the root"):
        locked_in.save_state(str(victim))


def test_f15_a_save_replaces_only_a_save(service, tiny):
    trainer = service.create_training_client(str(tiny))
    user = service.root / "mine" / "state"
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    for sibling in (
        "x.old",
        "x.tmp",
        "x/state.old",
        "x/state.tmp",
    ):  # what save_checkpoint used to delete
        (service.root / sibling).mkdir(parents=True)
        (service.root / sibling / "notes.txt").write_text("mine")
    with pytest.raises(
        ValueError, match=r"mine/state' exists and is not a directory this service saved"
    ):
        trainer.save_state("mine", overwrite=True)
    assert (user / "notes.txt").read_text() == "mine"
    first = trainer.save_state("x").result()
    trainer.save_weights_for_sampler("x").result()  # x/sampler, beside x/state
    with pytest.raises(ValueError, match=r"x/sampler' exists; pass overwrite=True"):
        trainer.save_weights_for_sampler("x")
    second = trainer.save_state("x", overwrite=True).result()
    assert first.path == second.path and (Path(second.path) / MARKER).is_file()
    for sibling in ("x.old", "x.tmp", "x/state.old", "x/state.tmp"):
        assert (service.root / sibling / "notes.txt").read_text() == "mine"
    assert not [p for p in (service.root / "x").iterdir() if p.name.startswith(".state.tmp")]


# F16, F17 -------------------------------------------------------------------------------


def whole(target: Path) -> str:
    """The one token every file of the save at `target` holds; fails on a partial save."""
    tokens = {p.read_text() for p in target.glob("part-*")}
    assert (target / MARKER).is_file() and len(list(target.glob("part-*"))) == 8, target
    assert len(tokens) == 1, "a save mixing two writes"
    return tokens.pop()


def race(target: Path, count: int, tag: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(RACE), str(target), str(count), tag],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_f16_a_save_killed_at_any_moment_leaves_one_whole_save(tmp_path):
    target = tmp_path / "ck" / "state"
    done = race(target, 1, "first")
    assert done.wait(60) == 0, done.stderr.read()
    rng = random.Random(0)
    seen = set()
    for attempt in range(8):
        saver = race(target, 10_000, f"try{attempt}")
        # Its first save has replaced the name (however long a loaded machine took to
        # start it); then a random moment inside the save loop.
        assert saver.stdout.readline().strip() == "saved", saver.stderr.read()
        time.sleep(rng.random() * 0.3)
        saver.send_signal(signal.SIGKILL)
        saver.wait(30)
        seen.add(whole(target).split("-")[0])  # never missing, never half old and half new
    assert len(seen) > 1  # the kills did land inside saves that replaced the name


def test_f17_two_processes_saving_one_name_take_turns(tmp_path):
    target = tmp_path / "shared" / "state"
    savers = [race(target, 12, tag) for tag in ("a", "b")]
    for saver in savers:
        assert saver.wait(120) == 0, saver.stderr.read()
    assert whole(target).startswith(("a-11", "b-11"))


# F18 ------------------------------------------------------------------------------------


def test_f18_lora_adapters_follow_the_seed(service, tiny):
    def adapters(**kwargs):
        trainer = service.create_lora_training_client(
            str(tiny), rank=4, train_unembed=False, **kwargs
        )
        return {
            n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad
        }

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = adapters(seed=7), adapters(seed=7), adapters(seed=8)
    assert torch.equal(torch.rand(1), before)  # the caller's random stream is left alone
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    default, zero = adapters(), adapters(seed=0)  # None: the ServiceClient's seed, 0
    assert all(torch.equal(default[k], zero[k]) for k in default)
    mlp_only = adapters(train_attn=False)
    assert mlp_only and all("mlp" in k for k in mlp_only)


# F19 ------------------------------------------------------------------------------------


def test_f19_inputs_are_checked(service, tiny):
    trainer = service.create_training_client(str(tiny))
    with pytest.raises(
        ValueError, match=r"ModelInput token 0 is True \(bool\); token ids must be integers"
    ):
        ModelInput([True, 1])
    with pytest.raises(ValueError, match=r"ModelInput token 1 is 1.7 \(float\)"):
        ModelInput([1, 1.7])
    long = list(range(600))  # the tiny model has 512 positions
    datum = Datum(
        ModelInput.from_ints([t % 300 for t in long]),
        {"target_tokens": [5] * 600, "weights": [1.0] * 600},
    )
    with pytest.raises(
        ValueError,
        match="datum 0: model_input has 600 tokens, more than the model's context of 512",
    ):
        trainer.forward_backward([datum], "cross_entropy")
    with pytest.raises(ValueError, match="more than the model's context of 512"):
        trainer.compute_logprobs(ModelInput.from_ints([t % 300 for t in long]))
    sampler = trainer.save_weights_and_get_sampling_client()
    started = time.monotonic()
    with pytest.raises(
        ValueError, match=r"num_samples=10000000 × max_tokens=16 is too much for one call"
    ):
        sampler.sample(ModelInput.from_ints([5]), 10**7, SamplingParams(max_tokens=16))
    assert time.monotonic() - started < 1  # refused before anything is allocated
    with pytest.raises(
        ValueError, match=r"AdamParams.learning_rate=1e\+30 is not valid; it must be in \[0, 1\]"
    ):
        AdamParams(learning_rate=1e30)
    rows = trainer.model.get_input_embeddings().num_embeddings
    with pytest.raises(
        ValueError, match=rf"prompt token {rows} is outside the vocabulary \[0, {rows}\)"
    ):
        sampler.sample(ModelInput.from_ints([rows]), 1, SamplingParams(max_tokens=1))
