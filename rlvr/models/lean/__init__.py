"""Autograd Functions that keep less for the backward than autograd would, with the same
numbers: the fused Llama forward's SwiGLU (`swiglu`) and its concatenated projections
(`cat_linear`). Each is tested bit for bit against the composition it replaces."""

from rlvr.models.lean.cat_linear import CatLinear
from rlvr.models.lean.swiglu import SwiGLU, swiglu

__all__ = ["CatLinear", "SwiGLU", "swiglu"]
