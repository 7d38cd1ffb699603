"""`step_vs_trl.py --in-process`: the old harness, all fp32 contestants in one process,
each TRL trainer in a thread of its own. Sharing a process slows the contestants
unequally (allocator, OpenMP pools per thread, caches): kept only to compare against
`step_vs_trl_runner.run_setting`, which gives each contestant a process."""

from __future__ import annotations

import copy
import threading

from step_vs_trl_fp32 import CONTESTANTS
from step_vs_trl_sides import RlvrSide, gated, make_side
from step_vs_trl_work import build_hf_tokenizer, build_model

from rlvr.models.tiny import count_parameters


def run_setting_in_process(size, loss, reps, warmup, tokens, group):
    """As `run_setting` with the fp32 contestants, all in this process: per contestant,
    the phase times of each counted step, and the parameter count."""
    hf_tok = build_hf_tokenizer()
    base = build_model(size, len(hf_tok))
    steps = warmup + reps
    trl = {
        name: make_side(name, copy.deepcopy(base), hf_tok, loss, tokens, group, steps)
        for name in CONTESTANTS[:2]
    }
    rlvr = RlvrSide(copy.deepcopy(base), hf_tok, loss, tokens, group)
    # TRL's train() owns its loop, so each TRL trainer runs in a thread that the driver
    # lets take one step at a time: the three contestants alternate step by step.
    gates = {name: (threading.Semaphore(0), threading.Semaphore(0)) for name in trl}
    for name, side in trl.items():
        go, done = gates[name]
        gated(side.trainer, go.acquire, done.release)
    threads = [threading.Thread(target=s.run, daemon=True) for s in trl.values()]
    for t in threads:
        t.start()
    rlvr_times = []
    for _ in range(steps):
        for name in trl:
            go, done = gates[name]
            go.release()
            done.acquire()
        rlvr_times.append(rlvr.step())
    for t in threads:
        t.join()
    results = {name: side.times[warmup:] for name, side in trl.items()}
    results["rlvr"] = rlvr_times[warmup:]
    return count_parameters(base), results
