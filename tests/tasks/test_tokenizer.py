import pytest

from specrl.tasks.arith import make_problems
from specrl.tasks.tokenizer import build_tokenizer, load_tokenizer, save_tokenizer, special_ids


def test_ids_of_special_tokens_and_vocab_size():
    tok = build_tokenizer()
    assert special_ids(tok) == (0, 1, 2, 3)  # pad, bos, eos, unk
    assert tok.get_vocab_size() <= 64


def test_round_trip_is_one_token_per_character():
    tok = build_tokenizer()
    for p in make_problems(50, seed=0):
        text = p.prompt + p.response
        enc = tok.encode(text)
        assert enc.ids[0] == 1  # <bos> prepended
        assert len(enc.ids) == len(text) + 1
        assert tok.decode(enc.ids) == text
    # without special tokens the encoding is exactly the characters
    assert tok.encode("Q:1+2", add_special_tokens=False).tokens == ["Q", ":", "1", "+", "2"]


def test_save_load_and_auto_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    save_tokenizer(tmp_path)
    tok, ids = load_tokenizer(tmp_path)
    assert ids.eos == 2
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "Q:6a-7b+5c-8=?\n6a-7=9\n9b+5=4\n4c-8=6\nA:6"
    assert hf(text).input_ids == tok.encode(text).ids
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id) == (ids.pad, ids.bos, ids.eos)
    assert hf.decode(hf(text).input_ids, skip_special_tokens=True) == text


def test_missing_tokenizer_says_how_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="save_tokenizer"):
        load_tokenizer(tmp_path)
