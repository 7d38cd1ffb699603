"""The fp32 comparison of `step_vs_trl.py`: TRL with its defaults (gradient checkpointing
on), TRL without gradient checkpointing, and rlvr, all in float32. Its headline is
`ratio X.XX`: TRL-default s/step / rlvr s/step."""

from __future__ import annotations

from step_vs_trl_runner import Comparison, paired

CONTESTANTS = ("trl", "trl_nogc", "rlvr")  # the order of the steps within a round


def ratio(s: dict) -> float:
    return s["trl"]["median"] / s["rlvr"]["median"]


def headline(s: dict) -> list[str]:
    return [f"ratio {ratio(s):.2f}"]


def summary(size, loss, params, s, results) -> list[str]:
    ratio_nogc = s["trl_nogc"]["median"] / s["rlvr"]["median"]
    return [
        f"\n== {size} ({params / 1e6:.2f} M params), loss {loss}: "
        f"TRL-default/rlvr {ratio(s):.2f}x, TRL-no-checkpointing/rlvr {ratio_nogc:.2f}x "
        f"(ratio of medians); per-round paired medians {paired(results, 'trl'):.2f}x, "
        f"{paired(results, 'trl_nogc'):.2f}x"
    ]


FP32 = Comparison(CONTESTANTS, headline, summary)
