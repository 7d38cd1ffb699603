"""The critic: a separate copy of the policy's backbone with a scalar value head.

Why separate and not a head on the policy: the critic gets its own optimizer and learning
rate, value pre-training (VAPO §4.1) provably leaves the policy untouched, and the policy
of a critic-free recipe is bit-identical to one of a critic recipe at step 0. The cost is
a second backbone in memory, negligible at the embedded scale; for large models, point the
critic at a smaller model with `ValueModel.from_backbone`.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlvr.models.logprobs import response_hidden_states
from rlvr.models.precision import full_precision


class ValueModel(nn.Module):
    """V(x, y_<t) for every response position t: the value of the state before token t."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy: nn.Module) -> ValueModel:
        """A critic initialised from the policy's backbone (a deep copy) and a zero head."""
        return cls(copy.deepcopy(policy.base_model), policy.config.hidden_size)

    def forward(
        self,
        prompt_ids: list[list[int]],
        response_ids: torch.Tensor,
        response_mask: torch.Tensor,
        pad_id: int,
    ) -> torch.Tensor:
        """Values (B, T) in float32, 0 where the mask is 0."""
        hidden = response_hidden_states(
            self.backbone, prompt_ids, response_ids, response_mask, pad_id
        )
        with full_precision(hidden.device):  # a bf16 value carries ~3 significant digits
            values = self.head(hidden.float()).squeeze(-1)  # (B, T)
        return values * (response_mask.to(values.device) > 0)
