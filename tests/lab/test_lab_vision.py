"""agentic-rl-lab's 09-vision-grpo/train.py, unmodified, 2 steps, against rlvr's local
PyTRIO server (issue 46) on a tiny Hugging Face Qwen2-VL (tests/vision/qwen_vl_testlib.py:
random init, its own Qwen2-VL image processor and a ChatML template with image content)
warmed so that its answers are \\boxed{X} with mixed correctness, over a local
train.parquet in GeoQA's shape (synthetic: how many sides has the pictured polygon).

Shims, as the other lab tests': environment variables (lab_env), the data file and the
model directory given through the script's own flags (--dataset-dir, --base-model, which
the script also hands to AutoImageProcessor.from_pretrained), and swanlab disabled by
its own flag. The run asserts: exit 0; a reward strictly between 0 and 1 on some step;
a loss over real datums followed by optimizer steps; saved weights that moved from the
base; the trainer's and the sampler's log-probs equal on sampled tokens of an image
prompt; the lab's folder left as it was.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from pathlib import Path

import pytest
import torch
from labtestlib import lab_env, lab_missing, lab_snapshot, numbers, run_script

sys.path.insert(0, str(Path(__file__).parents[1] / "vision"))
from qwen_vl_testlib import (
    build_qwen2_vl,
    geoqa_rows,
    lab_prompt_chunks,
    warm_qwen2_vl,
    write_geoqa,
)

from rlvr.service import ModelInput, SamplingParams
from rlvr.service.as_pytrio import write_profile
from rlvr.service.pytrio.http import Server
from rlvr.service.pytrio.runs import LocalTrio

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(lab_missing()), reason=lab_missing() or "")]
SCRIPT = "09-vision-grpo/train.py"
URI = r"rlvr://\S+?/(?:state|sampler)\b"
# Trainer and sampler: the same float32 forward over the same weights, differing only in
# reduction order (a KV-cached decode step vs one full pass): a few ulps of |log p| ≲ 10,
# ~1e-6; 1e-4 is the lab tests' bound (test_lab_scripts.FIDELITY).
FIDELITY = 1e-4


@pytest.fixture
def one_thread():
    """One torch thread in this process (the server's and the warm start's forwards), as
    under xdist (tests/conftest.py): the script's process needs the other core, and two
    threads each on two shared cores made the warm start 15× slower (measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_09_vision_grpo_train(tmp_path, one_thread):
    warm = warm_qwen2_vl(
        build_qwen2_vl(tmp_path / "raw"), tmp_path / "warm", tmp_path / "warm-service"
    )
    lines: list[str] = []
    lock = threading.Lock()

    def log(line: str) -> None:
        with lock:
            lines.append(line)

    trio = LocalTrio(tmp_path / "root", {str(warm): warm})
    server = Server(trio, log=log)
    server.start()
    try:
        home = tmp_path / "home"
        home.mkdir()
        write_profile("rlvr-local", server.url, home)
        data = write_geoqa(home / "geoqa", n=8)
        before = lab_snapshot()
        rc, out, seconds = run_script(SCRIPT, _args(data, warm), lab_env(home, server.url), home)
        assert lab_snapshot() == before, "the script changed files in the lab's folder"
        assert rc == 0, out[-4000:]
        print(f"09-vision-grpo: {seconds:.1f} s")
        print("\n".join(re.findall(r"Step \d+/2 \|.*", out)))
        rewards = numbers(r"Step \d+/2 \| reward=(\S+) \|", out)
        assert len(rewards) == 2 and any(0 < r < 1 for r in rewards), out[-3000:]
        assert re.search(r"loss_mean=-?\d", out), out[-3000:]  # not n/a on some step
        _assert_trained("\n".join(lines))
        uris = re.findall(URI, out)
        sampler_uri = [u for u in uris if u.endswith("/sampler")][-1]
        saved = Path(trio.registry.resolve(sampler_uri, "sampler")["path"])
        assert _moved(saved, warm) > 0
        assert _sampler_matches_trainer(trio, saved) <= FIDELITY
    finally:
        server.stop()


def _args(data: Path, warm: Path) -> list[str]:
    return [
        "--dataset-dir",
        str(data),
        "--base-model",
        str(warm),
        "--lora-rank",
        "8",
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
        "--save-every",
        "0",
        "--swanlab-mode",
        "disabled",
        "--show-samples",
    ]


def _assert_trained(log: str) -> None:
    """A loss computed over real datums (finite) on some step, and an optimizer step after
    each forward_backward. Not "nonzero": at ratio 1 the importance-sampling loss is
    −Σ Â over tokens, which group-centred advantages and equal-length answers
    (\boxed{X}<|im_end|>) make 0 up to rounding (measured 3e-7); the gradient
    −Σ Â ∇log π is not, and the moved weights (`_moved`) prove it."""
    losses = numbers(r"forward_backward \S+ datums=[1-9]\d* loss_sum=(\S+)", log)
    assert losses and all(math.isfinite(x) for x in losses), log[-2000:]
    kinds = re.findall(r"(forward_backward|optim_step)", log)
    assert 1 <= kinds.count("optim_step") <= 2 and kinds[-1] == "optim_step", kinds


def _moved(saved: Path, base: Path) -> float:
    from safetensors.torch import load_file

    new, old = (
        load_file(str(saved / "model.safetensors")),
        load_file(str(base / "model.safetensors")),
    )
    assert new.keys() == old.keys()
    return max(float((new[k] - old[k]).abs().max()) for k in old)


def _sampler_matches_trainer(trio: LocalTrio, saved: Path) -> float:
    """|log π_trainer − log π_sampler| over 8 tokens sampled from an image prompt with the
    run's final weights: a sampler over them against a training client over them."""
    service = trio.service
    sampler = service.create_sampling_client(base_model=str(saved))
    trainer = service.create_training_client(str(saved))
    row = geoqa_rows(1, seed=9)[0]
    chunks = lab_prompt_chunks(trainer.get_tokenizer().hf_tokenizer, row)
    prompt = ModelInput(chunks=chunks)
    gap = 0.0
    for seq in sampler.sample(prompt, 2, SamplingParams(max_tokens=8, seed=0)).result().sequences:
        from rlvr.service.types import EncodedTextChunk

        whole = ModelInput(chunks=[*chunks, EncodedTextChunk(seq.tokens)])
        scored = trainer.compute_logprobs(whole)[-len(seq.tokens) :]
        gap = max(gap, float((torch.tensor(scored) - torch.tensor(seq.logprobs)).abs().max()))
    return gap
