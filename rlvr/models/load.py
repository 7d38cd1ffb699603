"""Load a pretrained policy from a local path or a hub id, refusing models whose logits rlvr
cannot reproduce. (The embedded model by name: `rlvr.warmstart.load_policy`.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from rlvr.models.logprobs import lm_head_logits
from rlvr.models.tokenizer import TOKENIZER_FILE, CharTokenizer, HFTokenizer, Tokenizer

EMBEDDED = "embedded"


def load_pretrained(name: str) -> tuple[PreTrainedModel, Tokenizer, dict[str, Any]]:
    """A local directory or hub id through `from_pretrained`; returns (model in train mode,
    tokenizer, info)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_local_model(name)
    try:
        policy = AutoModelForCausalLM.from_pretrained(name)
    except (OSError, ValueError) as err:
        local = Path(name).exists()
        where = "local directory" if local else "path or hub id"
        no_dir = "" if local else f"there is no local directory {str(Path(name).resolve())!r}; "
        raise ValueError(
            f"could not load model={name!r} as a {where} with AutoModelForCausalLM "
            f"(use {EMBEDDED!r} for the built-in tiny model): {no_dir}"
            f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from err
    check_logits_match(policy, name)
    tokenizer: Tokenizer
    if (Path(name) / TOKENIZER_FILE).is_file():
        tokenizer = CharTokenizer.load(name)  # a saved embedded model or an RL checkpoint of it
    else:
        try:
            tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(name))
        except (OSError, ValueError) as err:
            raise ValueError(f"could not load a tokenizer for model={name!r}: {err}") from err
    policy.train()
    return policy, tokenizer, {"model": name, "parameters": policy.num_parameters()}


# A tokenizer's vocabulary lives in one of these; without any, transformers would build an
# empty tokenizer from config.json alone.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "vocab.txt", TOKENIZER_FILE)


def looks_like_path(name: str) -> bool:
    """A name only a local path can mean: absolute, ~ or . first, or more than one '/'
    (a hub id is 'name' or 'namespace/name')."""
    return name.startswith(("/", "~", ".")) or name.count("/") > 1 or "\\" in name


def check_local_model(name: str) -> None:
    """Refuse a local path that does not exist, or a model directory without tokenizer
    files, in one line each (before transformers tries the hub or builds an empty one)."""
    path = Path(name).expanduser()
    if not path.exists():
        if looks_like_path(name):
            raise ValueError(
                f"model={name!r}: the local path {str(path.resolve())!r} does not exist "
                f"(a hub id has the form 'namespace/name'; use {EMBEDDED!r} for the built-in "
                f"tiny model)"
            )
        return
    if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(
            f"model={name!r}: the directory has no tokenizer files (expected tokenizer.json "
            f"and tokenizer_config.json, or tokenizer_config.json with vocab.json + merges.txt "
            f"or tokenizer.model); save them there with tokenizer.save_pretrained({name!r})"
        )


# Config attribute names that hint at logit processing, named in the refusal message.
_LOGIT_HINTS = ("logit", "softcap", "multiplier", "scaling", "scale_width", "dim_model_base")


def check_logits_match(model: PreTrainedModel, name: str) -> None:
    """Refuse a model whose own forward turns `lm_head(hidden)` into logits in a way rlvr's
    `lm_head_logits` does not reproduce: rlvr computes logits from hidden states, so its
    log-probs would silently differ from the model's. One 4-token forward decides."""
    vocab = model.get_output_embeddings().weight.shape[0]
    device = next(model.parameters()).device
    ids = (torch.arange(4, device=device) % vocab)[None]  # (1, 4)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            expected = model(input_ids=ids).logits.float()
            hidden = model.base_model(input_ids=ids).last_hidden_state
            got = lm_head_logits(model, hidden, fp32_head=False)
    finally:
        model.train(was_training)
    tolerance = 1e-3 * (1.0 + float(expected.abs().max()))
    if got.shape == expected.shape and torch.allclose(got, expected, atol=tolerance, rtol=1e-2):
        return
    config = model.config.to_dict()
    hints = sorted(k for k, v in config.items() if any(h in k for h in _LOGIT_HINTS) and v)
    raise ValueError(
        f"model={name!r} ({type(model).__name__}) is not supported: its forward turns the LM "
        f"head's output into logits in a way rlvr does not reproduce (rlvr applies only "
        f"final_logit_softcapping, logit_scale and logits_scaling), so log-probs computed "
        f"from hidden states would differ from the model's; config attributes that may be "
        f"responsible: {', '.join(hints) or 'none found'}"
    )
