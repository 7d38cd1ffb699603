"""A PyTRIO SDK script (ours, not the lab's) that asks the local server for what it refuses
and then trains and samples: run by test_service_pytrio_refusals.py through
`python -m rlvr.service.as_pytrio run ... -- sdk_refusals.py ALIAS`. Prints one line per
refusal, `REFUSED <the SDK's error class>: <its first line>`, then `SERVING` and the
trained step's loss once the server has gone on serving.
"""

from __future__ import annotations

import sys

import numpy as np
import pytrio as trio

ALIAS = sys.argv[1]


def refused(what: str, call) -> None:
    try:
        call()
    except Exception as err:  # the SDK's own error, whatever its class
        print(f"REFUSED {what} {type(err).__name__}: {str(err).splitlines()[0]}", flush=True)
    else:
        print(f"ACCEPTED {what}", flush=True)


def datum(**inputs) -> trio.Datum:
    return trio.Datum(
        model_input=trio.ModelInput.from_ints([5, 6, 7]),
        loss_fn_inputs={"target_tokens": np.array([6, 7, 8], dtype=np.int64), **inputs},
    )


service = trio.ServiceClient()
refused("alias", lambda: service.create_lora_training_client(base_model="nope/model", rank=8))
policy = {"logprobs": np.zeros(3, np.float32), "advantages": np.ones(3, np.float32)}
dro = service.create_lora_training_client(base_model=ALIAS, rank=8)
refused("dro", lambda: dro.forward_backward([datum(**policy)], loss_fn="dro").result())
shifted = service.create_lora_training_client(base_model=ALIAS, rank=8)
refused(
    "auto_shift",
    lambda: shifted.forward_backward([datum()], "cross_entropy", auto_shift=True).result(),
)
image = trio.ModelInput(chunks=[trio.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=4)])
sampler = service.create_sampling_client(base_model=ALIAS)
params = trio.SamplingParams(max_tokens=2)
refused(
    "image", lambda: sampler.sample(prompt=image, num_samples=1, sampling_params=params).result()
)

trainer = service.create_lora_training_client(base_model=ALIAS, rank=8, seed=1)
out = trainer.forward_backward([datum(**policy)], loss_fn="importance_sampling").result()
trainer.optim_step(trio.AdamParams(learning_rate=1e-3)).result()
sampled = (
    trainer.save_weights_and_get_sampling_client()
    .sample(prompt=trio.ModelInput.from_ints([5, 6]), num_samples=2, sampling_params=params)
    .result()
)
assert len(sampled.sequences) == 2
print(f"SERVING loss_sum={out.metrics['loss_sum']:.6g} token_count={out.metrics['token_count']}")
