"""Shared fixtures for the models tests."""

import pytest


@pytest.fixture
def word_level_hf_tokenizer():
    """A factory of real `transformers` fast tokenizers, built offline."""
    return _word_level_hf_tokenizer


def _word_level_hf_tokenizer(with_pad: bool):
    """A real `transformers` fast tokenizer, built offline."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, "<pad>": 2, "hello": 3, "world": 4}
    raw = RawTokenizer(WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = WhitespaceSplit()
    specials = {"unk_token": "<unk>", "eos_token": "</s>"}
    if with_pad:
        specials["pad_token"] = "<pad>"
    return PreTrainedTokenizerFast(tokenizer_object=raw, **specials)
