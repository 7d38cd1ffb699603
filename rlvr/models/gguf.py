"""A GGUF file (llama.cpp's format) as a Hugging Face model directory rlvr can train.

transformers reads a GGUF through the `gguf` package (`from_pretrained(folder,
gguf_file=name)`), dequantizing every tensor to fp32, but the model it returns carries a
`quantization_config` that makes `save_pretrained` refuse it, and reading the file takes
tens of seconds. `convert_gguf` does it once: it rebuilds the model from its config
without that field, loads the dequantized weights strictly, checks that its logits equal
the GGUF load's, and saves it with the tokenizer (chat template included). The directory
lives in the cache (`cache_root()/gguf/<stem>-<sha256 of the file>`), keyed by the file's
bytes, so later runs load it directly and an edited file is converted again.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from rlvr.models.cache import cache_root, exclusive

MAGIC = b"GGUF"
"""The first four bytes of every GGUF file."""
FORMAT_VERSION = 1
"""Bump when the conversion changes, so stale directories are not reused."""
META_FILE = "rlvr_gguf.json"
"""Written last into a finished directory: what was converted, from what."""
INSTALL = "pip install 'rlvr[real]' (or: pip install gguf)"


def is_gguf(path: Path) -> bool:
    """Whether `path` is a file that starts with GGUF's magic bytes."""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def gguf_directory(path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The Hugging Face directory of the GGUF file `path`: the cached conversion, else
    converted now (one process converts; concurrent ones wait for it)."""
    path = Path(path).expanduser().resolve()
    digest = _sha256(path)
    target = cache_root(cache_dir) / "gguf" / f"{path.stem}-{digest[:16]}"
    if (target / META_FILE).is_file():
        return target
    with exclusive(target.parent / "locks" / f"{target.name}.lock"):
        if not (target / META_FILE).is_file():
            convert_gguf(path, target, digest)
    return target


def convert_gguf(path: Path, target: Path, digest: str = "") -> None:
    """Write `path` (GGUF) as a Hugging Face directory at `target`; see the module doc."""
    check_gguf_readable(path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    print(
        f"rlvr: converting {path.name} to a Hugging Face directory in {target} (once: later "
        "runs load it from there)",
        file=sys.stderr,
    )
    folder, name = str(path.parent), path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as err:  # a damaged file fails anywhere in the reader (struct.error…)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(
            f"model={str(path)!r} is a GGUF file transformers cannot read: {first} (rlvr "
            f"reads the GGUF files transformers reads, of architectures {_architectures()}; "
            f"or give a Hugging Face model directory)"
        ) from None
    model = dequantized_copy(loaded)
    check_same_logits(loaded, model, path)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    meta = {
        "source": str(path),
        "sha256": digest or _sha256(path),
        "bytes": path.stat().st_size,
        "format_version": FORMAT_VERSION,
        "parameters": model.num_parameters(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
    shutil.rmtree(target, ignore_errors=True)  # a half-written one from a killed process
    os.replace(tmp, target)


def dequantized_copy(loaded: torch.nn.Module) -> torch.nn.Module:
    """The GGUF-loaded model rebuilt from its config without `quantization_config` (so
    `save_pretrained` accepts it), with the dequantized weights loaded strictly."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    if loaded.generation_config is not None:
        model.generation_config = copy.deepcopy(loaded.generation_config)
    return model.eval()


def check_same_logits(loaded: torch.nn.Module, model: torch.nn.Module, path: Path) -> None:
    """The rebuilt model's logits equal the GGUF load's on a few tokens: the same weights in
    the same class, so exactly (any difference means the rebuild lost something)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = (torch.arange(8) * 7919 % vocab)[None]  # (1, 8) spread over the vocabulary
    with torch.no_grad():
        expected = loaded.eval()(input_ids=ids).logits
        got = model(input_ids=ids).logits
    if not torch.equal(expected, got):
        gap = float((expected - got).abs().max())
        raise ValueError(
            f"converting {str(path)!r}: the rebuilt model's logits differ from the GGUF "
            f"load's by up to {gap:.3g}; its config does not describe the file's model"
        )


def check_gguf_readable(path: Path) -> None:
    """Refuse in one line when the `gguf` package, which transformers reads GGUF with, is
    missing or too old."""
    from transformers.utils.import_utils import GGUF_MIN_VERSION, is_gguf_available

    if not is_gguf_available():
        raise ValueError(
            f"model={str(path)!r} is a GGUF file; reading it needs the gguf package "
            f"(≥ {GGUF_MIN_VERSION}): {INSTALL}"
        )


def _architectures() -> str:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    names = set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}  # metadata groups
    return ", ".join(sorted(names))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
