"""pass@k, maj@k and the eval summary, by hand; `rlvr eval --k 4` on a tiny HF model."""

from __future__ import annotations

import json
import math

import pytest
from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl

from rlvr.cli import main
from rlvr.eval.bench import pass_ks, summarise
from rlvr.eval.passk import majority_correct, pass_at_k, wilson_interval


def test_pass_at_k_by_hand():
    # n=4, c=1: pass@1 = 1 − C(3,1)/C(4,1) = 1 − 3/4 = 0.25; pass@2 = 1 − C(3,2)/C(4,2) = 1 − 3/6
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(4, 0, 4) == 0.0
    # n=10, c=3, k=5: 1 − C(7,5)/C(10,5) = 1 − 21/252 = 0.91666…
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    # pass@1 is always c/n
    assert all(pass_at_k(12, c, 1) == pytest.approx(c / 12) for c in range(13))
    with pytest.raises(ValueError, match="1 ≤ k ≤ n"):
        pass_at_k(4, 1, 5)


def test_majority_vote():
    assert majority_correct(["12", "12", "13", None], [True, True, False, False]) == 1.0
    assert (
        majority_correct(["13", "12", "13", "12"], [False, True, False, True]) == 0.0
    )  # tie: first
    assert majority_correct([None, None], [False, False]) == 0.0
    assert majority_correct(["1 2", "12", "7"], [True, True, False]) == 1.0  # whitespace ignored


def test_pass_ks():
    assert pass_ks(1) == [1]
    assert pass_ks(4) == [1, 2, 4]
    assert pass_ks(12) == [1, 2, 4, 8, 12]


def test_summary_has_wilson_intervals_for_rates_and_t_for_tokens():
    records = [
        {"avg": a, "maj": m, "format_rate": 1.0, "mean_tokens": t, "pass@1": a, "pass@2": p}
        for a, m, t, p in [(0.5, 1.0, 10, 1.0), (0.0, 0.0, 20, 0.0)]
    ]
    metrics = summarise(records, 2)
    assert metrics["eval/avg@2"] == 0.25 and metrics["eval/mean_tokens"] == 15
    # tokens 10 and 20: s = 7.071, t(0.975, 1) = 12.706 → half = 12.706·7.071/√2 = 63.53
    assert metrics["eval/mean_tokens_ci_high"] - 15 == pytest.approx(
        12.706 * 7.0711 / math.sqrt(2),
        rel=1e-3,  # 5 significant digits of t and s
    )
    # avg@2 = 0.25 over n = 2, z² = 3.8415: centre (0.25 + 0.9604)/2.9207 = 0.41441,
    # half 1.96·√(0.09375 + 0.24009)/2.9207 = 0.38773 → [0.02668, 0.80213] (the t interval
    # of 0.5 and 0 would be 0.25 ± 3.18, far below 0)
    assert metrics["eval/avg@2_ci_low"] == pytest.approx(0.02668, abs=1e-5)  # 5 decimals
    assert metrics["eval/avg@2_ci_high"] == pytest.approx(0.80213, abs=1e-5)
    assert metrics["eval/format_rate_ci_high"] == 1.0  # every item formatted: the top is 1


def test_wilson_interval_by_hand_never_leaves_0_1():
    # The trial's 3 correct of 200: Wald gives 0.015 ± 0.0168 = [−0.002, 0.032]. Wilson,
    # z² = 3.84146: centre (0.015 + 0.0096037)/1.0192073 = 0.024140, half
    # 1.96·√(0.000073875 + 0.0000240091)/1.0192073 = 0.019026 → [0.005114, 0.043166].
    interval = wilson_interval([1.0] * 3 + [0.0] * 197)
    assert interval.mean == 0.015
    assert interval.low == pytest.approx(0.005114, abs=1e-6)  # 6 decimals worked above
    assert interval.high == pytest.approx(0.043166, abs=1e-6)
    # 0 of 10: the lower bound is 0 and the upper z²/n / (1 + z²/n) = 0.384146/1.384146
    none = wilson_interval([0.0] * 10)
    assert none.low == 0.0  # centre and half are equal (0.139) in exact arithmetic
    assert none.high == pytest.approx(0.384146 / 1.384146, abs=1e-6)
    all_ = wilson_interval([1.0] * 10)
    assert all_.high == 1.0 and all_.low == pytest.approx(1 - 0.384146 / 1.384146, abs=1e-6)
    with pytest.raises(ValueError, match=r"rates in \[0, 1\]"):
        wilson_interval([0.5, 2.0])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_hf_model(tmp_path_factory.mktemp("tiny_eval")))


def test_cli_eval_k4_on_a_gsm8k_file(model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "test.jsonl", gsm8k_rows(6))
    items = tmp_path / "items.jsonl"
    code = main(
        [
            "eval", "--model", model_dir, "--task", "gsm8k", "--data", data, "--k", "4",
            "--temperature", "1.0", "--max-new-tokens", "5", "--items", str(items),
            "--set", "policy.chat_template=true", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["eval/items"] == 6 and metrics["eval/k"] == 4
    for name in ("avg@4", "pass@1", "pass@2", "pass@4", "maj@4", "format_rate", "mean_tokens"):
        assert (
            metrics[f"eval/{name}_ci_low"]
            <= metrics[f"eval/{name}"]
            <= metrics[f"eval/{name}_ci_high"]
        )
    assert 1 <= metrics["eval/mean_tokens"] <= 5
    lines = [json.loads(line) for line in items.read_text().splitlines()]
    assert len(lines) == 6 and all(len(r["samples"]) == 4 for r in lines)
    assert lines[0]["uid"] == "gsm8k/eval/0" and lines[0]["answer"] == "2"
    assert lines[0]["prompt"].startswith("<|im_start|>user\n")


def test_cli_eval_k_errors_are_clean(model_dir, tmp_path, capsys):
    code = main(
        [
            "eval",
            "--model",
            model_dir,
            "--task",
            "gsm8k",
            "--data",
            str(tmp_path / "x.jsonl"),
            "--k",
            "2",
        ]
    )
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_paired_items_by_hand(tmp_path):
    from rlvr.eval.paired import paired_items

    a = [{"uid": f"t/eval/{i}", "n": 2, "avg": v} for i, v in enumerate([1.0, 1.0, 0.5, 0.0])]
    b = [{"uid": f"t/eval/{i}", "n": 2, "avg": v} for i, v in enumerate([0.0, 1.0, 0.0, 0.0])]
    pa = write_jsonl(tmp_path / "a.jsonl", a[::-1])  # order does not matter: matched by uid
    pb = write_jsonl(tmp_path / "b.jsonl", b)
    result = paired_items(pa, pb)
    # differences 1, 0, 0.5, 0 → mean 0.375; A wins 2 items, ties 2; sign test p = 2·(1/2)² = 0.5
    assert result.diff == pytest.approx(0.375)
    assert (result.wins, result.losses, result.ties) == (2, 0, 2)
    assert result.p_value == pytest.approx(0.5)
    assert result.diff_ci_low <= 0.375 <= result.diff_ci_high
    with pytest.raises(ValueError, match="different items"):
        paired_items(pa, write_jsonl(tmp_path / "c.jsonl", b[:3]))
