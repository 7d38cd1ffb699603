"""Load a pretrained policy from a local directory, a GGUF file, an alias or a hub id,
refusing models whose logits rlvr cannot reproduce; a file or directory rlvr cannot load
is named for what it is, with what would work, in one line. (The embedded model by name:
`rlvr.warmstart.load_policy`.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from rlvr.models.aliases import ALIASES, alias_path
from rlvr.models.gguf import gguf_directory, is_gguf
from rlvr.models.logprobs import lm_head_logits
from rlvr.models.quiet import quiet_transformers
from rlvr.models.tokenizer import TOKENIZER_FILE, CharTokenizer, HFTokenizer, Tokenizer
from rlvr.vision import TinyVLM, VisionTokenizer
from rlvr.vision.model import CONFIG_FILE as VLM_CONFIG_FILE
from rlvr.vision.qwen_vl import QwenVLTokenizer, is_vision_language, load_qwen_vl

EMBEDDED = "embedded"
LOADABLE = (
    "rlvr loads a model directory as save_pretrained writes it (config.json, weights and "
    f"tokenizer files), a .gguf file, an alias ({', '.join(ALIASES)}), a hub id, or "
    f"{EMBEDDED!r} for the built-in tiny model"
)


def load_pretrained(name: str) -> tuple[PreTrainedModel, Tokenizer, dict[str, Any]]:
    """A local directory, GGUF file, alias or hub id through `from_pretrained`; returns
    (model in train mode, tokenizer, info)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(name)
    if (Path(source) / VLM_CONFIG_FILE).is_file():  # the embedded VLM, as a run saved it
        policy = TinyVLM.from_pretrained(source).train()
        tokenizer = VisionTokenizer.load(source, CharTokenizer.load(source))
        return policy, tokenizer, {"model": name, "parameters": policy.num_parameters()}
    check_local_model(source)
    if is_vision_language(source):
        return _load_vision_language(source, name)
    try:
        with quiet_transformers():  # its per-shard "Loading weights" bar: one line of noise
            policy = AutoModelForCausalLM.from_pretrained(source)
    except (OSError, ValueError) as err:
        local = Path(source).exists()
        where = "local directory" if local else "path or hub id"
        no_dir = "" if local else f"there is no local directory {str(Path(name).resolve())!r}; "
        raise ValueError(
            f"could not load model={name!r} as a {where} with AutoModelForCausalLM "
            f"(use {EMBEDDED!r} for the built-in tiny model): {no_dir}"
            f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from err
    check_logits_match(policy, name)
    tokenizer: Tokenizer
    if (Path(source) / TOKENIZER_FILE).is_file():
        tokenizer = CharTokenizer.load(source)  # a saved embedded model or an RL checkpoint
    else:
        try:
            tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(source))
        except (OSError, ValueError) as err:
            raise ValueError(f"could not load a tokenizer for model={name!r}: {err}") from err
    policy.train()
    info = {"model": name, "parameters": policy.num_parameters()}
    if source != name:
        info["converted_directory"] = source
    return policy, tokenizer, info


def _load_vision_language(source: str, name: str) -> tuple[Any, Tokenizer, dict[str, Any]]:
    """A Hugging Face vision-language model directory (rlvr.vision.qwen_vl): Qwen2-VL, or a
    refusal that names the architecture."""
    from transformers import AutoTokenizer

    with quiet_transformers():
        policy, images = load_qwen_vl(source, name)
    check_logits_match(policy, name)
    text = HFTokenizer(AutoTokenizer.from_pretrained(source))
    tokenizer = QwenVLTokenizer(text, images, int(policy.config.image_token_id))
    return policy, tokenizer, {"model": name, "parameters": policy.num_parameters()}


def resolve_model(name: str) -> str:
    """What `from_pretrained` reads for `name`: for an alias or a GGUF file, its converted
    directory (converted once, then cached: `rlvr.models.gguf`); else `name` itself. Any
    other file is refused, saying what it is."""
    path = alias_path(name)
    if path is None:
        path = Path(name).expanduser()
        if not path.is_file():
            return name
    if is_gguf(path):
        return str(gguf_directory(path))
    raise ValueError(f"model={name!r} {describe_file(path)}; {LOADABLE}")


_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl")


def describe_file(path: Path) -> str:
    """What a file that is not a model is, as the rest of a sentence."""
    size = path.stat().st_size
    if path.suffix == ".gguf":
        return (
            f"is named .gguf but is not a GGUF file (it does not start with 'GGUF'; {size} bytes)"
        )
    if path.suffix in _WEIGHT_FILES:
        return (
            f"is a file of weights ({path.suffix}, {size} bytes), not a model: a model is "
            f"the directory that holds it with config.json and the tokenizer files"
        )
    return f"is a file ({size} bytes), not a model"


# A tokenizer's vocabulary lives in one of these; without any, transformers would build an
# empty tokenizer from config.json alone.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "vocab.txt", TOKENIZER_FILE)


def looks_like_path(name: str) -> bool:
    """A name only a local path can mean: absolute, ~ or . first, or more than one '/'
    (a hub id is 'name' or 'namespace/name')."""
    return name.startswith(("/", "~", ".")) or name.count("/") > 1 or "\\" in name


def check_local_model(name: str) -> None:
    """Refuse a local path that does not exist, a directory that is not a model (an rlvr
    run, a folder of GGUF files, one without config.json) or a model directory without
    tokenizer files, in one line each (before transformers tries the hub or builds an
    empty tokenizer)."""
    path = Path(name).expanduser()
    if not path.exists():
        if looks_like_path(name):
            raise ValueError(
                f"model={name!r}: the local path {str(path.resolve())!r} does not exist "
                f"(a hub id has the form 'namespace/name'; use {EMBEDDED!r} for the built-in "
                f"tiny model)"
            )
        return
    if path.is_dir():
        check_model_directory(name, path)
    if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(
            f"model={name!r}: the directory has no tokenizer files (expected tokenizer.json "
            f"and tokenizer_config.json, or tokenizer_config.json with vocab.json + merges.txt "
            f"or tokenizer.model); save them there with tokenizer.save_pretrained({name!r})"
        )


def check_model_directory(name: str, path: Path) -> None:
    """A directory without config.json is not a model: say what it is instead."""
    if (path / "config.json").is_file():
        return
    if (path / "config.yaml").is_file() and (path / "checkpoint").is_dir():
        raise ValueError(
            f"model={name!r} is an rlvr run directory: its newest policy is "
            f"{str(path / 'checkpoint' / 'policy')!r} (or evaluate the run with rlvr eval "
            f"--run {name})"
        )
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if ggufs:
        raise ValueError(
            f"model={name!r} is a directory of GGUF files ({', '.join(ggufs[:3])}"
            f"{', …' if len(ggufs) > 3 else ''}); rlvr reads one file: pass "
            f"{str(path / ggufs[0])!r}"
        )
    raise ValueError(f"model={name!r} is a directory without config.json, not a model; {LOADABLE}")


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
