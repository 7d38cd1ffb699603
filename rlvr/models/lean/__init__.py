"""Autograd Functions that keep less for the backward than autograd would, with the same
numbers: the fused Llama forward's SwiGLU and its down projection (`swiglu`), its
concatenated projections (`cat_linear`), its RMSNorm (`rms_norm`) and the two together
(`normed_linear`), and the LM head over chunks of positions (`chunked_head`), whose
products with the head's weight run over slices of the vocabulary on a CPU
(`head_product`). Each is tested bit for bit against the composition it replaces, as are
the decode loop's weights packed once for MKL's products (`packed`), whose memory goes
back to the system when freed (`heap`)."""

from rlvr.models.lean.cat_linear import CatLinear
from rlvr.models.lean.normed_linear import NormedCatLinear
from rlvr.models.lean.rms_norm import RMSNorm, rms_norm
from rlvr.models.lean.swiglu import SwiGLU, SwiGLUDown, swiglu

__all__ = ["CatLinear", "NormedCatLinear", "RMSNorm", "SwiGLU", "SwiGLUDown", "rms_norm", "swiglu"]
