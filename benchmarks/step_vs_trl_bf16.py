"""The bf16 comparison of `step_vs_trl.py` (skipped with `--no-bf16`): TRL's defaults with
`bf16=True`, and rlvr with `precision: bf16` (autocast over float32 master weights) and
`sampler_precision: bf16` (sampling from a bf16 copy synced after the update), run after
the fp32 contestants within each round. Its headlines are `ratio-bf16 X.XX`
(TRL-bf16 / rlvr-bf16: same precision, same work) and `speedup-bf16 X.XX` (TRL's fp32
defaults / rlvr-bf16: what a user gains)."""

from __future__ import annotations

from step_vs_trl_runner import Comparison, paired

CONTESTANTS = ("trl_bf16", "rlvr_bf16")


def ratios(s: dict) -> tuple[float, float]:
    """(TRL-bf16 / rlvr-bf16, TRL-default fp32 / rlvr-bf16), ratios of median steps."""
    rlvr_bf16 = s["rlvr_bf16"]["median"]
    return s["trl_bf16"]["median"] / rlvr_bf16, s["trl"]["median"] / rlvr_bf16


def headline(s: dict) -> list[str]:
    ratio_bf16, speedup_bf16 = ratios(s)
    return [f"ratio-bf16 {ratio_bf16:.2f}", f"speedup-bf16 {speedup_bf16:.2f}"]


def summary(size, loss, params, s, results) -> list[str]:
    ratio_bf16, speedup_bf16 = ratios(s)
    return [
        f"bf16: TRL-bf16/rlvr-bf16 {ratio_bf16:.2f}x (paired "
        f"{paired(results, 'trl_bf16', 'rlvr_bf16'):.2f}x), TRL-default (fp32)/rlvr-bf16 "
        f"{speedup_bf16:.2f}x (paired {paired(results, 'trl', 'rlvr_bf16'):.2f}x), "
        f"rlvr fp32/bf16 {s['rlvr']['median'] / s['rlvr_bf16']['median']:.2f}x"
    ]


BF16 = Comparison(CONTESTANTS, headline, summary)
