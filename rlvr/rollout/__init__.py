"""Generation engines behind one interface (`RolloutEngine`): the in-process Hugging Face
engine here; a vLLM engine implements the same protocol."""

from rlvr.rollout.base import Generation, RolloutEngine, SamplingParams
from rlvr.rollout.hf_engine import HFEngine, left_pad, nucleus_log_probs, top_p_filter

__all__ = [
    "Generation",
    "HFEngine",
    "RolloutEngine",
    "SamplingParams",
    "left_pad",
    "nucleus_log_probs",
    "top_p_filter",
]
