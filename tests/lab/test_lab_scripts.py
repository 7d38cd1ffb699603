"""agentic-rl-lab's chapter scripts, unmodified, 2 steps each, against rlvr's local PyTRIO
server (issue 39) on a tiny Qwen2 with a ChatML template, warmed so that rewards are mixed
(labtestlib.build_models). Each run asserts: exit 0; its own step lines, with a reward
strictly between 0 and 1 on some step where the script computes one; a real loss (the
server's forward_backward lines: finite, not all 0) followed by optimizer steps; saved
weights that moved from the base; trainer and sampler log-probs equal on sampled tokens;
and the lab's folder left as it was.

Shims, and nothing else: environment variables (a fresh HOME with the server's named
profile, offline hubs, the lab's packages on PYTHONPATH, no bytecode), local data files
given through the scripts' own flags (and `openai/gsm8k` as a folder in the working
directory, which `load_dataset` reads offline), and the scripts' own flags.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from pathlib import Path

import pytest
import torch
from labtestlib import (
    QUESTIONS,
    STUDENT,
    TEACHER,
    build_models,
    lab_env,
    lab_missing,
    lab_snapshot,
    numbers,
    run_script,
    write_gsm8k,
    write_math_jsonl,
)

from rlvr.service import ModelInput, SamplingParams
from rlvr.service.as_pytrio import write_profile
from rlvr.service.pytrio.http import Server
from rlvr.service.pytrio.runs import LocalTrio

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(lab_missing()), reason=lab_missing() or "")]
URI = r"rlvr://\S+?/(?:state|sampler)\b"


class Lab:
    """One server for the module's scripts, a log of its lines, and a runner."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.warm, self.raw = build_models(_shared(base) / "lab-models")
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.trio = LocalTrio(base / "root", {STUDENT: self.warm, TEACHER: self.raw})
        self.server = Server(self.trio, log=self._log)
        self.server.start()

    def _log(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def home(self, name: str) -> Path:
        """The run's HOME and working directory, for its data files."""
        home = self.base / name
        home.mkdir(exist_ok=True)
        return home

    def run(self, name: str, script: str, args: list[str]) -> Run:
        home = self.home(name)
        write_profile("rlvr-local", self.server.url, home)
        before, start = lab_snapshot(), len(self.lines)
        rc, out, seconds = run_script(script, args, lab_env(home, self.server.url), cwd=home)
        assert lab_snapshot() == before, "the script changed files in the lab's folder"
        with self.lock:
            lines = self.lines[start:]
        assert rc == 0, out[-4000:]
        print(f"{name}: {seconds:.1f} s")
        return Run(out, lines, seconds)


class Run:
    def __init__(self, out: str, lines: list[str], seconds: float) -> None:
        self.out, self.lines, self.seconds = out, lines, seconds
        self.uris = re.findall(URI, out)

    def losses(self) -> list[float]:
        return numbers(r"forward_backward \S+ datums=\d+ loss_sum=(\S+)", "\n".join(self.lines))

    def assert_trained(self, steps: int = 2) -> None:
        """A real loss on some step, and an optimizer step after each forward_backward."""
        losses = self.losses()
        assert losses and all(math.isfinite(x) for x in losses) and any(losses), self.lines
        kinds = [
            m.group(1) for m in re.finditer(r"(forward_backward|optim_step)", "\n".join(self.lines))
        ]
        assert kinds.count("optim_step") >= 1 and kinds[-1] == "optim_step", kinds
        assert kinds.count("optim_step") <= steps


def _shared(base: Path) -> Path:
    """A folder every pytest worker of this session sees (the session's base temp)."""
    return base.parent.parent if os.environ.get("PYTEST_XDIST_WORKER") else base.parent


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("lab"))
    yield lab
    lab.server.stop()


def moved(lab: Lab, uri: str) -> float:
    """The largest |Δ| between the sampler weights saved at `uri` and the warm base."""
    from safetensors.torch import load_file

    saved = load_file(
        str(Path(lab.trio.registry.resolve(uri, "sampler")["path"]) / "model.safetensors")
    )
    base = load_file(str(lab.warm / "model.safetensors"))
    assert saved.keys() == base.keys()
    return max(float((saved[k] - base[k]).abs().max()) for k in base)


def sampler_matches_trainer(lab: Lab, run: Run) -> float:
    """The largest |log π_trainer − log π_sampler| over 8 tokens sampled at temperature 1
    from the run's final weights: a sampler over the saved sampler weights against a
    training client over them, and, where the run saved a state, the state's LoRA
    trainer against its own snapshot sampler."""
    service = lab.trio.service
    tokenizer = service.create_sampling_client(base_model=str(lab.warm)).get_tokenizer()
    prompt = ModelInput.from_ints(tokenizer.encode(QUESTIONS[0]))
    pairs = []
    weights = [u for u in run.uris if u.endswith("/sampler")][-1]
    path = lab.trio.registry.resolve(weights, "sampler")["path"]
    pairs.append(
        (service.create_sampling_client(model_path=weights), service.create_training_client(path))
    )
    states = [u for u in run.uris if u.endswith("/state")]
    if states:
        trainer = service.create_training_client_from_state(states[-1])
        pairs.append((trainer.save_weights_and_get_sampling_client(), trainer))
    gap = 0.0
    for sampler, trainer in pairs:
        for seq in (
            sampler.sample(prompt, 2, SamplingParams(max_tokens=4, seed=0)).result().sequences
        ):
            ids = prompt.to_ints() + seq.tokens
            scored = trainer.compute_logprobs(ModelInput.from_ints(ids))[-len(seq.tokens) :]
            gap = max(gap, float((torch.tensor(scored) - torch.tensor(seq.logprobs)).abs().max()))
    return gap


# Trainer and sampler run the same float32 forward over the same weights; they differ only
# in reduction order (a KV-cached decode step vs one full-sequence pass): a few float32 ulps
# of |log p| ≲ 10, i.e. ~1e-6; 1e-4 is the bound (the prototype saw 5.2e-7).
FIDELITY = 1e-4


def check_outputs(lab: Lab, run: Run) -> None:
    weights = [u for u in run.uris if u.endswith("/sampler")]
    assert weights, run.out[-2000:]
    assert moved(lab, weights[-1]) > 0
    assert sampler_matches_trainer(lab, run) <= FIDELITY


def mixed(values: list[float]) -> bool:
    return any(0 < v < 1 for v in values)


GRPO = [
    "--steps",
    "2",
    "--batch-size",
    "2",
    "--group-size",
    "4",
    "--max-tokens",
    "16",
    "--learning-rate",
    "1e-3",
    "--swanlab-mode",
    "disabled",
]


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo"])
def test_01_grpo_demo_sync(lab, loss_fn):
    write_gsm8k(lab.home(f"grpo-{loss_fn}"))
    run = lab.run(f"grpo-{loss_fn}", "01-grpo/01-demo-sync.py", [*GRPO, "--loss-fn", loss_fn])
    rewards = numbers(r"Step\s+\d+ \| reward: (\S+)", run.out)
    assert len(rewards) == 2 and mixed(rewards)
    assert numbers(r"loss_mean: (-?\d\S*)", run.out)  # not n/a
    run.assert_trained()
    if loss_fn == "cispo":  # the SDK's custom loss: a forward, then cross_entropy's backward
        assert re.search(
            r"forward cross_entropy.*\n.*forward_backward cross_entropy", "\n".join(run.lines)
        )
    check_outputs(lab, run)


def test_02_opd_general_demo_sync(lab):
    import datasets

    home = lab.home("opd-general")
    shard = home / "deepmath" / "data" / "train-00000-of-00010.parquet"
    shard.parent.mkdir(parents=True)
    datasets.Dataset.from_list([{"question": q} for q in QUESTIONS]).to_parquet(str(shard))
    run = lab.run(
        "opd-general",
        "02-opd/general-opd/01-demo-sync.py",
        [
            "--dataset-dir",
            str(home / "deepmath"),
            "--sample-size",
            "4",
            "--teacher-base-model",
            TEACHER,
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "16",
            "--learning-rate",
            "1e-3",
            "--no-swanlab",
        ],
    )
    # the teacher is the unwarmed model, so the student's reverse KL to it is not 0
    kls = numbers(r"reverse_kl (-?\d\S*)", run.out)
    assert len(kls) == 2 and any(kls)
    run.assert_trained()
    check_outputs(lab, run)


def test_04_opsd_sync_with_its_default_top_k(lab):
    import datasets

    home = lab.home("opsd")
    # the trainer asserts the official set's 29,434 rows; the rows are synthetic
    rows = {
        "problem": [QUESTIONS[i % 5] for i in range(29_434)],
        "solution": ["4 fruits."] * 29_434,
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(home / "opsd-data"))
    run = lab.run(
        "opsd",
        "04-opsd/01-opsd-sync.py",
        [
            "--dataset-path",
            str(home / "opsd-data"),
            "--sample-size",
            "4",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "16",
            "--learning-rate",
            "1e-3",
            "--no-swanlab",
        ],
    )
    assert "--top-k" not in run.out and len(numbers(r"reverse_kl (-?\d\S*)", run.out)) == 2
    run.assert_trained()
    check_outputs(lab, run)


def test_05_retool_train(lab):
    data = write_math_jsonl(lab.home("retool") / "retool.jsonl")
    run = lab.run(
        "retool",
        "05-retool/train.py",
        [
            "--data",
            str(data),
            "--max-steps",
            "2",
            "--questions-per-batch",
            "2",
            "--group-size",
            "4",
            "--max-assistant-turns",
            "2",
            "--max-trajectory-tokens",
            "512",
            "--max-assistant-tokens",
            "16",
            "--max-tool-response-tokens",
            "32",
            "--sandbox-workers",
            "1",
            "--learning-rate",
            "1e-3",
            "--swanlab-mode",
            "disabled",
        ],
    )
    correct = numbers(r"correct=(\S+)", run.out)
    assert len(correct) == 2 and mixed(correct)  # its reward is ±1: some answers right
    run.assert_trained()
    check_outputs(lab, run)


DAPO = [
    "--max-steps",
    "2",
    "--groups-per-step",
    "2",
    "--group-size",
    "4",
    "--max-tokens",
    "16",
    "--rollout-concurrency",
    "2",
    "--learning-rate",
    "1e-3",
    "--swanlab-mode",
    "disabled",
]


@pytest.mark.parametrize("algorithm", ["dapo", "grpo"])
def test_06_dapo_train(lab, algorithm):
    data = write_math_jsonl(lab.home(f"dapo-{algorithm}") / "dapo.jsonl")
    run = lab.run(
        f"dapo-{algorithm}",
        "06-dapo/train.py",
        ["--algorithm", algorithm, "--data", str(data), *DAPO, "--overlong-cache", "4"],
    )
    accuracy = numbers(r"accuracy=(\S+)", run.out)
    assert len(accuracy) == 2 and mixed(accuracy)
    run.assert_trained()
    check_outputs(lab, run)


def test_07_gspo_train(lab):
    data = write_math_jsonl(lab.home("gspo") / "gspo.jsonl")
    run = lab.run("gspo", "07-gspo/train.py", ["--data", str(data), *DAPO])
    accuracy = numbers(r"accuracy=(\S+)", run.out)
    assert len(accuracy) == 2 and mixed(accuracy)
    run.assert_trained()
    check_outputs(lab, run)


def test_02_opd_medical_sft_then_ceval_opd_from_its_state_then_eval(lab):
    """The chain across processes: 02-medical-sft saves a state, 04-ceval-opd-async loads
    it by URI (create_training_client_from_state, a new Python), and 01-eval-medical
    evaluates the SFT's sampler weights through the OpenAI-compatible endpoint."""
    home = lab.home("medical")
    sft_rows = [{"question": q, "complex_cot": "4 fruits.", "response": "4"} for q in QUESTIONS]
    (home / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft_rows))
    options = {"A": "4", "B": "5", "C": "6", "D": "7"}
    mcq = [{"question": q, "options": options, "answer_idx": "A"} for q in QUESTIONS]
    (home / "mcq.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mcq))
    sft = lab.run(
        "medical",
        "02-opd/02-medical-sft.py",
        [
            "--dataset-path",
            str(home / "sft.jsonl"),
            "--sample-size",
            "4",
            "--batch-size",
            "2",
            "--max-steps",
            "2",
            "--max-length",
            "256",
            "--learning-rate",
            "1e-3",
            "--no-swanlab",
        ],
    )
    assert len(numbers(r"step \d+/\d+ \| epoch \S+ \| loss (\S+)", sft.out)) == 2
    sft.assert_trained()
    check_outputs(lab, sft)
    state = [u for u in sft.uris if u.endswith("/state")][-1]
    opd = lab.run(
        "medical",
        "02-opd/04-ceval-opd-async.py",
        [
            "--dataset-path",
            str(home / "mcq.jsonl"),
            "--student-state-path",
            state,
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "16",
            "--learning-rate",
            "1e-3",
            "--no-swanlab",
        ],
    )
    assert len(numbers(r"reverse_kl (-?\d\S*)", opd.out)) == 2
    opd.assert_trained()
    check_outputs(lab, opd)
    # the source copy, saved before any update, holds the SFT state's adapter to the bit
    copy = re.search(r"Saved source-copy state: (\S+)", opd.out).group(1)
    adapters = [
        Path(lab.trio.registry.resolve(uri, "state")["path"])
        / "adapter"
        / "adapter_model.safetensors"
        for uri in (state, copy)
    ]
    assert adapters[0].read_bytes() == adapters[1].read_bytes()
    weights = [u for u in sft.uris if u.endswith("/sampler")][-1]
    evaluated = lab.run(
        "medical",
        "02-opd/01-eval-medical.py",
        [
            "--dataset-path",
            str(home / "mcq.jsonl"),
            "--output-path",
            str(home / "eval.jsonl"),
            "--base-url",
            f"{lab.server.url}/api/openai/v1",
            "--model",
            weights,
            "--limit",
            "4",
            "--max-tokens",
            "8",
            "--concurrency",
            "2",
        ],
    )
    assert re.search(r"accuracy \S+ \| correct \d+/4 \| invalid \d+", evaluated.out)
    assert len((home / "eval.jsonl").read_text().splitlines()) == 4


def test_01_grpo_demo_async_is_the_labs_bug_not_ours(tmp_path):
    """01-grpo/02-demo-async.py calls trio.configure(actor_event_wait_timeout=...,
    actor_event_request_timeout=...), names pytrio 0.2.8 (the lab's pin since its commit
    74efeef) does not have: it fails at import, before any request, with no server."""
    import importlib.metadata

    assert importlib.metadata.version("pytrio") == "0.2.8"
    rc, out, _ = run_script(
        "01-grpo/02-demo-async.py", ["--help"], lab_env(tmp_path, "http://127.0.0.1:9"), tmp_path
    )
    assert rc != 0
    assert (
        "TypeError: configure() got an unexpected keyword argument 'actor_event_wait_timeout'"
        in out
    )
