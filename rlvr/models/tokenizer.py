"""Tokenizers behind one small interface: a local character-level vocabulary for the
embedded model, and an adapter around any Hugging Face tokenizer.

The rest of `rlvr` needs only `encode`, `decode`, `pad_token_id`, `eos_token_id` and
`vocab_size`; the `Tokenizer` protocol names exactly that.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

SPECIAL_TOKENS = ("<pad>", "<eos>")
# Printable ASCII without the whitespace controls that only make tokenization ambiguous.
CHARACTERS = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
TOKENIZER_FILE = "char_tokenizer.json"


@runtime_checkable
class Tokenizer(Protocol):
    """What the rollout engines, the trainer and the warm start need from a tokenizer."""

    pad_token_id: int
    eos_token_id: int

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str: ...


class CharTokenizer:
    """One token per character over a fixed vocabulary: `<pad>`=0, `<eos>`=1, then
    printable ASCII (with space and newline, without tab and carriage return)."""

    def __init__(self, characters: str = CHARACTERS) -> None:
        if len(set(characters)) != len(characters):
            raise ValueError("CharTokenizer characters must be unique")
        self.characters = characters
        self.pad_token_id = 0
        self.eos_token_id = 1
        offset = len(SPECIAL_TOKENS)
        self._char_to_id = {c: i + offset for i, c in enumerate(characters)}
        self._id_to_token = list(SPECIAL_TOKENS) + list(characters)

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._char_to_id[c] for c in text]
        except KeyError as err:
            char = err.args[0]
            raise ValueError(
                f"character {char!r} (position {text.index(char)} of {text[:40]!r}) is not in "
                "the CharTokenizer vocabulary (printable ASCII, space and newline)"
            ) from None

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        pieces = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            if skip_special and i < len(SPECIAL_TOKENS):
                continue
            pieces.append(self._id_to_token[i])
        return "".join(pieces)

    def save(self, directory: str | Path) -> None:
        """Write the vocabulary as JSON into `directory` (created if missing)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        payload = {
            "type": "CharTokenizer",
            "special": list(SPECIAL_TOKENS),
            "chars": self.characters,
        }
        (path / TOKENIZER_FILE).write_text(json.dumps(payload))

    @classmethod
    def load(cls, directory: str | Path) -> CharTokenizer:
        """Read a tokenizer written by `save`."""
        file = Path(directory) / TOKENIZER_FILE
        if not file.is_file():
            raise FileNotFoundError(f"no {TOKENIZER_FILE} in {str(directory)!r}")
        payload = json.loads(file.read_text())
        if payload.get("type") != "CharTokenizer" or payload.get("special") != list(SPECIAL_TOKENS):
            raise ValueError(f"{file} does not describe a CharTokenizer with {SPECIAL_TOKENS}")
        return cls(payload["chars"])


class HFTokenizer:
    """Adapter giving a `transformers` tokenizer the `Tokenizer` interface: encoding adds
    no special tokens, and a missing pad token falls back to the EOS token."""

    def __init__(self, hf_tokenizer: Any) -> None:
        eos = hf_tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"tokenizer {type(hf_tokenizer).__name__} has no eos_token_id")
        pad = hf_tokenizer.pad_token_id
        self.hf_tokenizer = hf_tokenizer
        self.eos_token_id = int(eos)
        self.pad_token_id = int(eos if pad is None else pad)

    @property
    def vocab_size(self) -> int:
        return len(self.hf_tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.hf_tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.hf_tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def save(self, directory: str | Path) -> None:
        self.hf_tokenizer.save_pretrained(str(directory))

    @classmethod
    def load(cls, directory: str | Path) -> HFTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(directory)))
