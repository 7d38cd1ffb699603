"""benchmarks/gpu_check.py: its CPU fast mode end to end (every step present, the ones a
CPU can run ok, with the numbers they must give on a float32 tiny model), its guard and
budget, its command-line errors, and the arithmetic it reports."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "rollout"))  # fake_vllm

import gpu_check
from gpu_check_model import FAST, SHAPES, SyntheticTokenizer, bf16_peak, training_flops
from gpu_check_sampling import Context, mismatch_stats
from rounding_testlib import EPS32, RANDOM_LOGIT_SCALE, forward_terms, logprob_atol

ROOT = Path(__file__).resolve().parents[1]

CPU_OK = (
    "generate",
    "generate_generic",
    "mismatch",
    "grpo_full",
    "grpo_lora",
    "ddp",
    "fsdp",
)


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    """One `--fast` run in a subprocess, as `make test` and a user would run it."""
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--fast", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    return done, out, report, {r["name"]: r for r in report["steps"]}


def test_fast_mode_runs_every_step_and_reports_it(fast_run):
    done, out, report, steps = fast_run
    expected = [f"{k}/tiny" for k in gpu_check.KINDS]
    expected += [f"{k}/tiny-qwen3" for k in gpu_check.KINDS if k not in gpu_check.FIRST_SIZE_ONLY]
    assert sorted(steps) == sorted(expected)
    assert report["mode"] == "fast" and report["environment"]["device"] == "cpu"
    assert "6·N·T" in report["environment"]["mfu_formula"]
    # The summary printed is the one written, with a line per step.
    assert done.stdout == (out / "summary.txt").read_text()
    assert all(name in done.stdout for name in expected)


def test_fast_mode_cpu_steps_are_ok(fast_run):
    _, _, _, steps = fast_run
    for kind in CPU_OK:
        record = steps[f"{kind}/tiny"]
        assert record["status"] == "ok", record
    for kind in ("generate", "mismatch", "grpo_full", "grpo_lora"):
        assert steps[f"{kind}/tiny-qwen3"]["status"] == "ok", steps[f"{kind}/tiny-qwen3"]
    # What does not apply on a CPU in fast mode is skipped, with the reason.
    assert "--fast" in steps["generate_compiled/tiny"]["reason"]
    assert "no fused decode" in steps["generate_generic/tiny-qwen3"]["reason"]
    vllm = steps["vllm/tiny"]
    assert vllm["status"] == "skipped"
    assert vllm["reason"] in ("vLLM is not importable here", "vLLM needs a CUDA device")


def test_fast_mode_generation(fast_run):
    _, _, _, steps = fast_run
    fused, generic = steps["generate/tiny"]["result"], steps["generate_generic/tiny"]["result"]
    assert fused["decode_path"] == "fused static cache"
    assert generic["decode_path"] == "transformers, dynamic cache"
    assert steps["generate/tiny-qwen3"]["result"]["decode_path"] == generic["decode_path"]
    for result in (fused, generic):
        assert result["rows"] == 2 * 4  # prompts × group_size of the fast workload
        assert 0 < result["generated_tokens"] <= result["rows"] * 8
        assert result["tokens_per_s"] > 0


def test_fast_mode_trainer_and_sampler_logprobs_agree_in_float32(fast_run):
    _, _, _, steps = fast_run
    for size in ("tiny", "tiny-qwen3"):
        result = steps[f"mismatch/{size}"]["result"]
        # The sampler's decode and the trainer's forward of random float32 weights add in
        # other orders: |Δ| ≤ τ per token over ≤ 16 positions (rounding_testlib.py), so
        # |k1| ≤ τ and k3 ≤ τ² (e^x − 1 − x ≤ x² for |x| ≤ 1).
        positions = FAST.prompt_tokens + FAST.new_tokens
        tau = logprob_atol(SHAPES[size].config(), RANDOM_LOGIT_SCALE, positions)
        for head in ("fp32_head", "float32_head"):
            stats = result[head]
            assert stats["tokens"] > 0
            assert stats["max_abs_delta"] <= tau
            assert abs(stats["k1"]) <= tau and 0 <= stats["k3"] <= tau**2


def test_fast_mode_grpo_steps_train(fast_run):
    _, _, _, steps = fast_run
    for size in ("tiny", "tiny-qwen3"):
        full = steps[f"grpo_full/{size}"]["result"]
        lora = steps[f"grpo_lora/{size}"]["result"]
        for result in (full, lora):
            assert result["train/update_skipped"] == 0.0
            assert result["train/nonfinite_skipped"] == 0.0
            assert math.isfinite(result["loss/policy"])
            assert 0 < result["train/grad_norm"] < math.inf
            assert result["trained_tokens"] > result["rows"]
            assert result["update_tflops_per_s"] > 0
            assert result["peak_gpu_gib"] is None and "mfu" not in result  # a CPU has neither
        assert full["trainable_parameters"] == full["parameters"]
        assert 0 < lora["trainable_parameters"] < full["parameters"] / 10
        assert lora["update_flops"] * 6 == full["update_flops"] * 4  # same tokens, 4NT vs 6NT


def test_fast_mode_data_parallel_world_size_one_equals_one_process(fast_run):
    _, _, _, steps = fast_run
    for kind, trainer in (("ddp", "DataParallelTrainer"), ("fsdp", "ShardedTrainer")):
        result = steps[f"{kind}/tiny"]["result"]
        assert result["backend"] == "gloo" and result["trainer"] == trainer
        assert result["train/grad_norm"] > 0
        # One rank's (FSDP: unfused) forward and one process's add in other orders: a
        # relative 2·n·ε, n = the GRPO step's tokens and the forward's chain of sums
        # (rounding_testlib.StepBounds).
        config = SHAPES["tiny"].config()
        rows = FAST.prompts * FAST.group_size
        positions = FAST.prompt_tokens + FAST.train_new_tokens
        terms = rows * FAST.train_new_tokens + forward_terms(config, positions)
        assert result["grad_norm_rel_diff"] <= 2 * terms * EPS32


def _step(kind: str, run) -> gpu_check.Step:
    return gpu_check.Step(kind, "tiny", run)


def test_a_failed_step_is_recorded_and_the_next_one_runs():
    runner = gpu_check.Runner(budget_s=60, device="cpu")

    def broken() -> dict:
        raise RuntimeError("CUDA out of memory (pretend)")

    failed = runner.run(_step("grpo_full", broken))
    assert failed["status"] == "failed"
    assert failed["error"] == "RuntimeError: CUDA out of memory (pretend)"
    assert "in broken" in failed["traceback_tail"]
    assert runner.run(_step("generate", lambda: {"tokens_per_s": 1.0}))["status"] == "ok"
    # A library missing on the device fails the steps that import it, not the run.
    missing = runner.run(_step("vllm", lambda: gpu_check._call("no_such_module", "step")))
    assert missing["status"] == "failed"
    assert missing["error"].startswith("ModuleNotFoundError")


def test_budget_skips_steps_and_stops_one_that_overruns():
    spent = gpu_check.Runner(budget_s=1e-6, device="cpu")
    skipped = spent.run(_step("generate", lambda: {}))
    assert skipped["status"] == "skipped" and "budget" in skipped["reason"]

    def endless() -> dict:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return {}

    stopped = gpu_check.Runner(budget_s=1.5, device="cpu").run(_step("mismatch", endless))
    assert stopped["status"] == "failed" and stopped["error"].startswith("StepTimeout")


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--sizes", "qwen9-1t"], "--sizes"),
        (["--only", "grpo_full,warp"], "--only"),
        (["--budget-s", "0"], "--budget-s"),
        ([], "--out"),
    ],
)
def test_misuse_exits_2_naming_the_flag(argv, names, capsys, tmp_path):
    out = [] if argv == [] else ["--out", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        gpu_check.parse_args(argv + out)
    assert stop.value.code == 2
    assert names in capsys.readouterr().err


def test_plan_orders_breadth_first_and_filters_by_kind(tmp_path):
    ctx = Context("cpu", None, tmp_path, fast=True)
    names = [s.name for s in gpu_check.plan(ctx, ["tiny", "qwen3-4b"], set())]
    assert names[:5] == [f"{k}/tiny" for k in gpu_check.KINDS[:5]]
    assert names.index("fsdp/tiny") < names.index("grpo_full/qwen3-4b")
    assert names[-2:] == ["generate_compiled/tiny", "vllm/tiny"]
    assert "ddp/qwen3-4b" not in names
    only = gpu_check.plan(ctx, ["tiny", "qwen3-4b"], {"grpo_lora"})
    assert [s.name for s in only] == ["grpo_lora/tiny", "grpo_lora/qwen3-4b"]


def test_vllm_step_through_rlvrs_engine_with_a_fake_backend(tmp_path):
    from gpu_check_model import FAST
    from gpu_check_sampling import vllm

    ctx = Context("cpu", FAST, tmp_path, fast=True)
    result = vllm(ctx, "tiny", backend_factory="fake_vllm:make_fake")
    assert result["generated_tokens"] > 0
    # The fake samples with the HF engine in float32: the trainer agrees with it, to the
    # rounding of adding in other orders (rounding_testlib.py).
    positions = FAST.prompt_tokens + FAST.new_tokens
    tau = logprob_atol(SHAPES["tiny"].config(), RANDOM_LOGIT_SCALE, positions)
    assert result["mismatch_vs_trainer_fp32_head"]["max_abs_delta"] <= tau


def test_mismatch_stats_by_hand():
    trainer = torch.tensor([[0.0, -1.0, -7.0]])
    sampler = torch.tensor([[0.0, -1.5, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding: ignored
    stats = mismatch_stats(trainer, sampler, mask)
    # Δ = trainer − sampler = [0, 0.5]; k1 = mean(−Δ) = −0.25;
    # k3 = mean(e^Δ − 1 − Δ) = (0 + e^0.5 − 1.5) / 2 = (1.6487213 − 1.5) / 2 = 0.0743606
    assert stats["tokens"] == 2
    assert stats["k1"] == pytest.approx(-0.25)
    assert stats["k3"] == pytest.approx(0.0743606, abs=1e-7)
    assert stats["max_abs_delta"] == 0.5 and stats["mean_abs_delta"] == 0.25


# Parameter counts of the model cards, in billions to the cards' last digit (which some
# cards round and others truncate: Qwen2.5-7B's 7.616 B reads 7.61).
CARDS = {
    "qwen2.5-0.5b": 0.49,
    "qwen2.5-1.5b": 1.54,
    "qwen2.5-7b": 7.61,
    "qwen3-0.6b": 0.6,
    "qwen3-1.7b": 1.7,
    "qwen3-4b": 4.0,
    "qwen3-8b": 8.2,
}


@pytest.mark.parametrize("size", sorted(CARDS))
def test_shapes_have_the_model_cards_parameter_counts(size):
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(SHAPES[size].config())
    count = sum(p.numel() for p in model.parameters())
    digits = len(str(CARDS[size]).split(".")[1])
    assert abs(count / 1e9 - CARDS[size]) < 10**-digits
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert SHAPES[size].linear_params() == linear
    if size == "qwen2.5-0.5b":
        assert count == 494_032_768  # the figure transformers reports for the checkpoint


def test_training_flops_by_hand():
    # tiny: hidden 64, 4 heads of 16, 2 kv heads, MLP 128, 2 layers, vocabulary 512.
    # per layer: attention 64·16·(2·4 + 2·2) = 12 288, MLP 3·64·128 = 24 576 → 36 864;
    # N = 2 · 36 864 + LM head 512·64 = 73 728 + 32 768 = 106 496
    assert SHAPES["tiny"].linear_params() == 106_496
    assert training_flops(SHAPES["tiny"], 10, lora=False) == 6 * 106_496 * 10
    assert training_flops(SHAPES["tiny"], 10, lora=True) == 4 * 106_496 * 10


def test_bf16_peaks_by_device_name():
    assert bf16_peak("NVIDIA H200") == 989e12
    assert bf16_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert bf16_peak("NVIDIA H100 PCIe") == 756e12
    assert bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert bf16_peak("Tesla T4") is None  # unknown: FLOP/s reported, no MFU


def test_synthetic_tokenizer_round_trips_text_and_names_other_ids():
    tokenizer = SyntheticTokenizer(151_936)
    ids = tokenizer.encode("12+34=")
    assert tokenizer.decode(ids) == "12+34="
    assert tokenizer.decode([1, 150_000, 0]) == "<150000>"
    assert tokenizer.decode([1, 0], skip_special=False) == "<eos><pad>"
    with pytest.raises(ValueError, match="vocab_size"):
        SyntheticTokenizer(10)
