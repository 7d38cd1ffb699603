"""CharTokenizer and HFTokenizer: vocabulary layout, round trips, errors, persistence."""

import string

import pytest

from rlvr.models.tokenizer import CharTokenizer, HFTokenizer, Tokenizer


def test_vocabulary_layout():
    tok = CharTokenizer()
    # 100 printable characters minus \t \r \x0b \x0c = 96, plus <pad> and <eos>.
    assert tok.vocab_size == 98
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)
    assert tok.encode(" \n") == [2 + tok.characters.index(" "), 2 + tok.characters.index("\n")]
    assert isinstance(tok, Tokenizer)


def test_round_trip_of_every_character():
    tok = CharTokenizer()
    text = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("Q: 37+85=? A: \\boxed{122}")) == "Q: 37+85=? A: \\boxed{122}"


def test_decode_skips_special_tokens_unless_asked():
    tok = CharTokenizer()
    ids = [*tok.encode("12"), tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(ids) == "12"
    assert tok.decode(ids, skip_special=False) == "12<eos><pad>"


@pytest.mark.parametrize("bad", ["a\tb", "é", "x\r"])
def test_encode_names_the_unknown_character(bad):
    char = next(c for c in bad if c not in CharTokenizer().characters)
    with pytest.raises(ValueError, match="not in the CharTokenizer vocabulary") as err:
        CharTokenizer().encode(bad)
    assert repr(char) in str(err.value)


def test_decode_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CharTokenizer().decode([98])


def test_save_load_round_trip(tmp_path):
    tok = CharTokenizer()
    tok.save(tmp_path / "tok")
    loaded = CharTokenizer.load(tmp_path / "tok")
    assert loaded.characters == tok.characters
    assert loaded.encode("A:12") == tok.encode("A:12")


def test_load_missing_file_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"char_tokenizer\.json"):
        CharTokenizer.load(tmp_path)


def test_hf_adapter_encodes_without_special_tokens_and_pads_with_eos_by_default(
    word_level_hf_tokenizer,
):
    tok = HFTokenizer(word_level_hf_tokenizer(with_pad=False))
    assert tok.encode("hello world") == [3, 4]
    assert (tok.eos_token_id, tok.pad_token_id) == (1, 1)
    assert tok.decode([3, 1]) == "hello"
    assert tok.vocab_size == 5
    assert HFTokenizer(word_level_hf_tokenizer(with_pad=True)).pad_token_id == 2
