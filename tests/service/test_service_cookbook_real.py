"""tinker-cookbook's own minimal RL loop (`tinker_cookbook/recipes/rl_loop.py`, the
installed package, unmodified, started through its chz command line) runs two steps
against rlvr's drop-in for `tinker.ServiceClient` on a tiny local Qwen2.

What the harness adapts, and nothing else (docs/service.md lists the same):
- the model: the recipe's default `model_name`, "Qwen/Qwen3.5-9B-Base", is a directory
  under the working directory holding the tiny model. The cookbook's `get_tokenizer`
  loads a local directory as it is, `model_info` picks the renderer by the name
  (role_colon, a base model's), and the drop-in loads the directory;
- GSM8K: `datasets.load_dataset("openai/gsm8k", "main")` is answered from rows written
  here (the hub is unreachable);
- `loss_fn=importance_sampling` on the command line: the recipe's default,
  `stable_reinforce`, is computed on Tinker's servers by a formula the SDK does not publish.

A random tiny model never writes \\boxed{...}, so every reward would be 0 and the recipe
would skip each training step. The model is first fine-tuned through rlvr.service
(cross_entropy) to answer \\boxed{4} or \\boxed{5} about equally often; every question's
answer is 4, so a group's rewards are mixed and the recipe trains.

The drop-in itself (the SDK's types accepted, what cannot take effect refused, `installed`
with and without the SDK, `as_tinker -m`) is tested first, without the cookbook.
"""

from __future__ import annotations

import copy
import json
import sys
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
    tinker_compat,
)
from rlvr.service.as_tinker import installed, main
from rlvr.service.datums import pack
from rlvr.service.losses import loss_spec
from rlvr.service.tinker_compat import ServiceClient as DropIn
from rlvr.service.training import TrainingClient
from rlvr.service.types import from_sdk

COOKBOOK = "needs tinker-cookbook: pip install --no-deps tinker-cookbook==0.6.1 (docs/service.md)"


def test_without_the_sdk_the_whole_package_is_the_drop_in():
    before = sys.modules.get("tinker")
    with installed(sdk=False, seed=3):
        import tinker
        from tinker.types.tensor_data import TensorData

        assert tinker is tinker_compat and TensorData is tinker_compat.types.TensorData
        assert tinker.ServiceClient().seed == 3
    assert sys.modules.get("tinker") is before and tinker_compat.LOCAL_OPTIONS == {}


def test_with_the_sdk_only_its_service_client_is_replaced():
    sdk = pytest.importorskip("tinker", reason="needs the tinker SDK (rlvr[test])")
    sdk_client = sdk.ServiceClient
    with installed():
        assert sdk.ServiceClient is DropIn and sdk.types.Datum is not tinker_compat.types.Datum
    assert sdk.ServiceClient is sdk_client


def test_the_sdks_params_are_rlvrs_checked():
    sdk = pytest.importorskip("tinker", reason="needs the tinker SDK (rlvr[test])")
    got = from_sdk(AdamParams, sdk.types.AdamParams(learning_rate=0.5, beta2=0.9, eps=1e-8))
    assert got == AdamParams(learning_rate=0.5, beta2=0.9, eps=1e-8)
    params = sdk.types.SamplingParams(max_tokens=3, stop=["\n\nUser:"], temperature=0.5)
    expected = SamplingParams(max_tokens=3, stop=["\n\nUser:"], temperature=0.5)
    assert from_sdk(SamplingParams, params) == expected
    assert from_sdk(SamplingParams, sdk.types.SamplingParams(max_tokens=3, top_k=5)).top_k == 5
    with pytest.raises(ValueError, match=r"top_k=0 is not valid; it must be -1 \(no limit\)"):
        from_sdk(SamplingParams, sdk.types.SamplingParams(max_tokens=3, top_k=0))
    with pytest.raises(ValueError, match=r"stop=\[\] .* not even EOS"):
        from_sdk(SamplingParams, sdk.types.SamplingParams(max_tokens=3, stop=[]))
    with pytest.raises(ValueError, match=r"optim_step needs AdamParams\(...\), got \{"):
        from_sdk(AdamParams, {"learning_rate": 0.1}, "optim_step")


def test_gspo_takes_the_sdks_sequence_ratio_mask():
    inputs = {"target_tokens": [2, 3, 4], "logprobs": [0.0, -0.7, -0.7], "advantages": [0, 1, 1]}
    ours = Datum(ModelInput.from_ints([1, 2, 3]), {**inputs, "response_mask": [0, 1, 1]})
    sdks = Datum(ModelInput.from_ints([1, 2, 3]), {**inputs, "sequence_ratio_mask": [0, 1, 1]})
    a, b = (pack([d], loss_spec("gspo").inputs, 10, "gspo") for d in (ours, sdks))
    assert a.inputs.keys() == b.inputs.keys() and torch.equal(
        a.inputs["response_mask"], b.inputs["response_mask"]
    )
    both = Datum(ours.model_input, {**ours.loss_fn_inputs, "sequence_ratio_mask": [0, 1, 1]})
    with pytest.raises(ValueError, match="datum 0: loss_fn_inputs hold both names"):
        pack([both], loss_spec("gspo").inputs, 10, "gspo")


def test_what_cannot_take_effect_is_refused(service):
    with pytest.raises(ValueError, match=r"stable_reinforce.* not published"):
        loss_spec("stable_reinforce")
    trainer = service.create_training_client("embedded:arithmetic")
    assert trainer.result() is trainer  # the SDK's create_* return a future of the client
    with pytest.raises(ValueError, match="record_stability_info=True"):
        trainer.save_weights_and_get_sampling_client(record_stability_info=True)
    with pytest.raises(ValueError, match="kind='inflight'"):
        trainer.save_weights_and_get_sampling_client(kind="inflight")
    with pytest.warns(UserWarning, match=r"base_url=\.\.\..*cannot take effect"):
        DropIn(base_url="https://example.invalid", display_name="run")


def test_as_tinker_runs_a_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "sdk_probe.py").write_text(
        "import sys, tinker\nprint(tinker.ServiceClient.__module__, sys.argv[1:])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    main(["--root", str(tmp_path), "-m", "sdk_probe", "max_steps=2"])
    assert capsys.readouterr().out == "rlvr.service.tinker_compat ['max_steps=2']\n"


# The cookbook's rl_loop ---------------------------------------------------------------

MODEL_NAME = "Qwen/Qwen3.5-9B-Base"  # rl_loop.Config's default
SUFFIX = " Provide a numerical answer without units, written inside \\boxed{}."
ROWS = [
    {"question": f"Ann has {k} pears and {4 - k} plums. How many fruits?", "answer": "#### 4"}
    for k in range(4)
]
STEPS = 2


def fine_tune_to_answer(raw: Path, out: Path, root: Path) -> None:
    """Full fine-tune of the tiny model: after each question, rendered as the recipe
    renders it, ' \\boxed{4}' or ' \\boxed{5}' then EOS, half each."""
    from tinker_cookbook import renderers
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tokenizer = get_tokenizer(str(raw))
    renderer = renderers.get_renderer("role_colon", tokenizer)
    trainer = ServiceClient(root=root).create_training_client(str(raw))
    datums = []
    for row in ROWS:
        convo = [{"role": "user", "content": row["question"] + SUFFIX}]
        prompt = renderer.build_generation_prompt(convo).to_ints()
        for answer in ("4", "5"):
            target = tokenizer.encode(f" \\boxed{{{answer}}}", add_special_tokens=False)
            ids = prompt + target + [tokenizer.eos_token_id]
            weights = [0.0] * (len(prompt) - 1) + [1.0] * (len(target) + 1)
            datums.append(
                Datum(
                    ModelInput.from_ints(ids[:-1]), {"target_tokens": ids[1:], "weights": weights}
                )
            )
    for _ in range(40):
        trainer.forward_backward(datums, "cross_entropy").result()
        trainer.optim_step(AdamParams(learning_rate=1e-2)).result()
    saved = trainer.save_weights_for_sampler(str(root / "answering")).result().path
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(saved).rename(out)


class Seen:
    """The training clients and samplers the recipe made, and the LoRA weights at start."""

    def __init__(self, monkeypatch):
        self.trainers, self.samplers, self.start = [], [], {}
        create = DropIn.create_lora_training_client
        sampler = TrainingClient.save_weights_and_get_sampling_client

        def create_lora_training_client(service, *args, **kwargs):
            trainer = create(service, *args, **kwargs)
            self.trainers.append(trainer)
            self.start = copy.deepcopy(dict(trainer.model.named_parameters()))
            return trainer

        def save_weights(trainer, *args, **kwargs):
            self.samplers.append(sampler(trainer, *args, **kwargs))
            return self.samplers[-1]

        monkeypatch.setattr(DropIn, "create_lora_training_client", create_lora_training_client)
        monkeypatch.setattr(TrainingClient, "save_weights_and_get_sampling_client", save_weights)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("tinker_cookbook", reason=COOKBOOK)
    import chz
    import datasets
    from tinker_cookbook.recipes import rl_loop

    work = tmp_path_factory.mktemp("cookbook")
    raw = build_tiny_hf_model(work / "raw")
    fine_tune_to_answer(raw, work / MODEL_NAME, work / "sft")

    def load_dataset(path, name=None, **kwargs):
        assert (path, name) == ("openai/gsm8k", "main")
        return datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)})

    argv = [
        f"log_path={work / 'log'}",
        "batch_size=2",
        "group_size=4",
        "max_tokens=10",
        f"max_steps={STEPS}",
        "loss_fn=importance_sampling",
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(work)  # MODEL_NAME is a directory here
        monkeypatch.setattr(datasets, "load_dataset", load_dataset)
        seen = Seen(monkeypatch)
        with installed(root=str(work / "service"), seed=0):
            chz.nested_entrypoint(rl_loop.main, argv=argv)
    metrics = [
        json.loads(line) for line in (work / "log" / "metrics.jsonl").read_text().splitlines()
    ]
    return work, seen, metrics


def test_the_cookbook_logs_two_trained_steps(run):
    _, _, metrics = run
    assert [m["progress/batch"] for m in metrics] == list(range(STEPS))
    # both steps trained: optim_step's metrics are in the cookbook's own log
    assert [m["optim/step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert 0 < m["reward/total"] < 1
        assert m["optim/grad_norm"] > 0


def test_the_lora_weights_moved_and_the_base_did_not(run):
    _, seen, _ = run
    (trainer,) = seen.trainers
    assert trainer.is_lora and trainer.lora.rank == 32 and trainer.step == STEPS
    moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, seen.start[n])]
    assert moved and all("lora_" in n for n in moved)


def test_each_step_sampled_from_a_fresh_sampler(run):
    _, seen, _ = run
    assert len(seen.samplers) == STEPS
    prompt = ModelInput.from_ints([1, 2, 3])
    # each sampler keeps its own step's weights (snapshots): they score differently, and
    # none as the trained client now does
    (trainer,) = seen.trainers
    scores = [s.compute_logprobs(prompt).result() for s in seen.samplers]
    scores.append(trainer.compute_logprobs(prompt))
    assert all(a != b for i, a in enumerate(scores) for b in scores[i + 1 :])


def test_the_final_checkpoint_resumes(run):
    work, seen, _ = run
    log = (work / "log" / "checkpoints.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in log]
    assert record["name"] == "final"
    (trainer,) = seen.trainers
    with pytest.MonkeyPatch.context() as monkeypatch, installed(root=str(work / "service")):
        monkeypatch.chdir(work)  # the state names its base model as the recipe did
        service = DropIn()
        resumed = service.create_training_client_from_state_with_optimizer(record["state_path"])
    assert resumed.result() is resumed and resumed.step == STEPS
    weights = zip(trainer.model.named_parameters(), resumed.model.parameters(), strict=True)
    for (name, p), q in weights:
        torch.testing.assert_close(p, q, msg=name)
