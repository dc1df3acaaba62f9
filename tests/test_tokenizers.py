"""Debug tokenizer: determinism, round trip, single-id special tokens, digits; HF loader."""

import json

import pytest

from jaxrl_agent.data.tokenizers import SPECIAL_TOKENS, load_tokenizer, train_debug_tokenizer


@pytest.fixture(scope="module")
def tok():
    return train_debug_tokenizer()


def test_deterministic_and_vocab_size(tok):
    again = train_debug_tokenizer()
    assert tok.backend.to_str() == again.backend.to_str()
    assert 300 <= tok.vocab_size <= 1000


def test_trained_on_given_text_differs_from_builtin(tok):
    other = train_debug_tokenizer(["zebra quagga " * 50, "zebra okapi " * 50])
    assert other.backend.to_str() != tok.backend.to_str()
    assert len(other.encode("zebra")) == 1  # a merged word of the given text


@pytest.mark.parametrize("text", [
    "", "hello world", "What is 12*(3+4)?\n", "héllo 日本語 🙂 \t\r\n  spaces  ",
    '<|im_start|>user\n<tool_call>{"name": "calculator"}</tool_call><|im_end|>\n',
])
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_special_tokens_are_single_ids(tok):
    ids = [tok.token_to_id(s) for s in SPECIAL_TOKENS]
    assert ids == list(range(len(SPECIAL_TOKENS)))
    for s, i in zip(SPECIAL_TOKENS, ids):
        assert tok.encode(s) == [i]
        assert tok.encode("a" + s + "b") == tok.encode("a") + [i] + tok.encode("b")
    assert tok.eos_id == tok.token_to_id("<|im_end|>")
    assert tok.pad_id == tok.token_to_id("<|endoftext|>")
    assert tok.decode([tok.eos_id, 300], skip_special_tokens=True) == tok.decode([300])


def test_digits_split_individually(tok):
    ids = tok.encode("x=123456789")
    assert [tok.id_to_token(i) for i in ids[-9:]] == list("123456789")


def test_bad_vocab_size():
    with pytest.raises(ValueError, match="vocab_size"):
        train_debug_tokenizer(vocab_size=100)


def test_save_and_load(tok, tmp_path):
    tok.save(str(tmp_path))
    loaded = load_tokenizer(str(tmp_path))
    text = "<|im_start|>assistant\n<answer>42</answer><|im_end|>"
    assert loaded.encode(text) == tok.encode(text)
    assert (loaded.eos_id, loaded.pad_id, loaded.vocab_size) == (tok.eos_id, tok.pad_id, tok.vocab_size)


def test_load_infers_special_ids_without_config(tok, tmp_path):
    # Llama-3-like file: no tokenizer_config.json, eos found by name.
    tok.backend.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert loaded.eos_token == "<|im_end|>"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": {"content": "<|eot_id|>"}, "pad_token": None}))
    loaded = load_tokenizer(str(tmp_path))
    assert loaded.eos_id == tok.token_to_id("<|eot_id|>")
    assert loaded.pad_id == tok.token_to_id("<|endoftext|>")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizer(str(tmp_path))
