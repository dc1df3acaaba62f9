"""Tokenizers: a tiny deterministic debug tokenizer and a loader for HF tokenizer.json.

The debug tokenizer serves the tiny CPU model: a byte-level BPE (lossless for
any UTF-8 text) whose pre-tokenizer splits every digit into its own token, with
the chat and tool-call special tokens as single ids. It is trained with the
`tokenizers` library on the task-set text (or a built-in corpus), so the same
corpus and vocabulary size always give the same tokenizer.json.

`load_tokenizer` reads the tokenizer.json of a real model (Qwen3, Llama 3) for
the real-scale configs; special ids come from tokenizer_config.json when it is
present, else from the well-known token names.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

# Chat (Qwen/ChatML and Llama 3) and tool-call tokens; each is one id in the
# debug tokenizer. Order is part of the vocabulary: keep it stable.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
)

# Candidate names, in order of preference, when no tokenizer_config.json says.
_EOS_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>")
_PAD_CANDIDATES = ("<|endoftext|>", "<|finetune_right_pad_id|>", "<pad>", "<|end_of_text|>")

# Built-in training text for the debug tokenizer when no task-set text is given:
# chat scaffolding, tool-call JSON, arithmetic and plain English.
_BUILTIN_CORPUS = (
    "You are a helpful assistant. Answer the question. Use the tools when needed.\n",
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12*(3+4)"}}</tool_call>\n',
    '<tool_call>{"name": "search", "arguments": {"query": "capital of France"}}</tool_call>\n',
    '<tool_call>{"name": "python", "arguments": {"code": "print(sum(range(10)))"}}</tool_call>\n',
    "<tool_response>\nresult: 84\n</tool_response>\n<answer>84</answer>\n",
    "What is 17 + 25? Compute the value of the expression and give the final answer.\n",
    "error: invalid tool call; expected a JSON object with name and arguments.\n",
    "The quick brown fox jumps over the lazy dog. The answer is the number of items.\n",
    "def solve(x):\n    return x * 2 + 1\n\nfor i in range(3):\n    print(solve(i))\n",
)


class Tokenizer:
    """A thin wrapper over `tokenizers.Tokenizer` with the ids the actor needs.

    Attributes:
        eos_id: id that ends an assistant turn / generation.
        pad_id: id used to pad batches.
        vocab_size: V, number of ids (including added special tokens).
    """

    def __init__(self, tok: tokenizers.Tokenizer, *, eos_token: str, pad_token: str):
        self._tok = tok
        self.eos_id = self._require_id(eos_token, "eos_token")
        self.pad_id = self._require_id(pad_token, "pad_token")
        self.eos_token = eos_token
        self.pad_token = pad_token

    def _require_id(self, token: str, what: str) -> int:
        tid = self._tok.token_to_id(token)
        if tid is None:
            raise ValueError(f"{what}: {token!r} is not in the vocabulary")
        return tid

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer`."""
        return self._tok

    def encode(self, text: str) -> list[int]:
        """Text -> ids; special-token strings in `text` become their single id.

        No BOS/EOS is added: chat templates write every special token explicitly.
        """
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Like `encode` for many texts (runs in the library's thread pool)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Ids -> text; special tokens are kept unless `skip_special_tokens`."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """Id of a single token string, or None when it is not in the vocabulary."""
        return self._tok.token_to_id(token)

    def id_to_token(self, tid: int) -> str | None:
        return self._tok.id_to_token(int(tid))

    def save(self, path: str) -> str:
        """Writes tokenizer.json (and tokenizer_config.json with eos/pad) into directory `path`."""
        os.makedirs(path, exist_ok=True)
        self._tok.save(os.path.join(path, "tokenizer.json"))
        with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"eos_token": self.eos_token, "pad_token": self.pad_token}, f, indent=1)
        return path


def train_debug_tokenizer(
    texts: Iterable[str] | None = None,
    *,
    vocab_size: int = 512,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
    merge_words: bool = False,
) -> Tokenizer:
    """Trains the byte-level BPE debug tokenizer (digits always single tokens).

    Args:
        texts: training text (e.g. task-set prompts and gold demonstrations);
            None uses a small built-in corpus.
        vocab_size: V, total ids including the 256 byte symbols and the special
            tokens; must be in [300, 4096].
        special_tokens: tokens kept whole, ids 0..len-1 in this order.
        merge_words: let BPE merges cross word boundaries (digits still stay
            single tokens). On templated task text this turns whole recurring
            phrases (the system prompt, tool-call JSON scaffolding) into a few
            ids, cutting episode length ~4x for the CPU debug model.

    Returns:
        A `Tokenizer` with eos `<|im_end|>` and pad `<|endoftext|>`. The result
        is a deterministic function of (texts, vocab_size, special_tokens).

    Raises:
        ValueError: bad vocab_size or missing eos/pad special tokens.
    """
    if not 300 <= vocab_size <= 4096:
        raise ValueError(f"vocab_size: expected an int in [300, 4096], got {vocab_size!r}")
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not merge_words),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = list(_BUILTIN_CORPUS if texts is None else texts)
    tok.train_from_iterator(corpus, trainer=trainer)
    return Tokenizer(tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _first_present(tok: tokenizers.Tokenizer, names: Sequence[str]) -> str | None:
    return next((n for n in names if tok.token_to_id(n) is not None), None)


def _token_str(value) -> str | None:
    # tokenizer_config.json stores tokens as strings or AddedToken dicts.
    if isinstance(value, dict):
        return value.get("content")
    return value


def load_tokenizer(path_or_dir: str, *, eos_token: str | None = None, pad_token: str | None = None) -> Tokenizer:
    """Loads an HF tokenizer.json (a file, or a model directory holding one).

    eos/pad: explicit arguments win, then tokenizer_config.json next to the
    file, then the first present of the usual names (<|im_end|>, <|eot_id|>,
    <|endoftext|>, ...); pad falls back to eos.

    Raises:
        FileNotFoundError: no tokenizer.json at the path.
        ValueError: no eos token can be determined.
    """
    path = path_or_dir
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"path_or_dir: no tokenizer.json at {path_or_dir!r}")
    tok = tokenizers.Tokenizer.from_file(path)
    config_path = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    config = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    eos = eos_token or _token_str(config.get("eos_token")) or _first_present(tok, _EOS_CANDIDATES)
    if eos is None:
        raise ValueError(f"eos_token: none given and none of {_EOS_CANDIDATES} is in {path!r}")
    pad = pad_token or _token_str(config.get("pad_token")) or _first_present(tok, _PAD_CANDIDATES) or eos
    return Tokenizer(tok, eos_token=eos, pad_token=pad)
