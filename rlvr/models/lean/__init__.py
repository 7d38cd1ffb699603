"""Autograd Functions that keep less for the backward than autograd would, with the same
numbers: the fused Llama forward's SwiGLU and its down projection (`swiglu`), its concatenated projections
(`cat_linear`) and its RMSNorm (`rms_norm`), and the LM head over chunks of positions
(`chunked_head`). Each is tested bit for bit against the composition it replaces."""

from rlvr.models.lean.cat_linear import CatLinear
from rlvr.models.lean.rms_norm import RMSNorm, rms_norm
from rlvr.models.lean.swiglu import SwiGLU, SwiGLUDown, swiglu

__all__ = ["CatLinear", "RMSNorm", "SwiGLU", "SwiGLUDown", "rms_norm", "swiglu"]
