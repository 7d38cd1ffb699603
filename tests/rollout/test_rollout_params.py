"""SamplingParams validation and the Generation record's shape checks."""

import pytest
import torch

from rlvr.rollout import Generation, SamplingParams


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group_size", 0),
        ("group_size", 2.0),
        ("temperature", 0.0),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("max_new_tokens", 0),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_defaults_are_valid_and_frozen():
    params = SamplingParams()
    assert (params.group_size, params.temperature, params.top_p, params.max_new_tokens) == (
        8,
        1.0,
        1.0,
        16,
    )
    with pytest.raises(AttributeError):
        params.group_size = 4


def test_generation_rejects_inconsistent_shapes():
    ids = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="sampler_logprobs"):
        Generation(
            [[1], [1]],
            ids,
            torch.ones(2, 3),
            torch.zeros(2, 2),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.long),
            ["", ""],
        )
    with pytest.raises(ValueError, match="batch size 2"):
        Generation(
            [[1]],
            ids,
            torch.ones(2, 3),
            torch.zeros(2, 3),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.long),
            ["", ""],
        )
