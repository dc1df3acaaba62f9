"""Embedded JAX rollout engine: the learner's own model, jitted prefill + decode.

Prompts are right-padded to a prompt bucket and the batch to a batch bucket,
so each (batch bucket, prompt bucket) compiles prefill once and each batch
bucket compiles decode once (the KV cache is always `max_seq_len` long). The
decode loop is a `lax.while_loop` inside jit that exits early when every row
is done; it runs `steps_per_call` steps per call (None: to the end) and
returns to the host in between, where aborted rows are stopped
(bench/bench_engine.py measures the choice).

Every row carries its own sampling parameters and PRNG key, so one batch can
mix requests. Row key = fold_in(base key, row index); token key = fold_in(row
key, step): same seed and prompts give the same outputs at any batch bucket.
Logprobs follow the convention of `sampling.py` (after temperature, before
top-k/top-p), which matches `models.logprobs.token_logprobs`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_agent.models import kv_cache
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.rollout.engine import GenerateOutput, SamplingParams
from jaxrl_agent.rollout.sampling import sample_tokens

_RUNNING, _STOP, _LENGTH, _ABORT = 0, 1, 2, 3
_FINISH_NAMES = {_STOP: "stop", _LENGTH: "length", _ABORT: "abort"}

# Number of traces (= compilations) of the jitted functions, for tests/benchmarks.
TRACE_COUNTS = {"prefill": 0, "decode": 0}


class _Rows(NamedTuple):
    """Per-row sampling parameters ([B] each, stop_ids [B, S_stop], -1 padded)."""

    temperature: jax.Array
    top_p: jax.Array
    top_k: jax.Array
    max_new: jax.Array
    stop_ids: jax.Array
    prompt_lens: jax.Array
    keys: jax.Array


class _State(NamedTuple):
    cache: Any
    logits: jax.Array  # [B, V] float32 logits of the next token
    step: jax.Array  # [] int32 tokens generated so far by running rows
    out_tokens: jax.Array  # [B, N] int32
    out_logprobs: jax.Array  # [B, N] float32
    num_generated: jax.Array  # [B] int32
    done: jax.Array  # [B] bool
    finish: jax.Array  # [B] int32 (_RUNNING/_STOP/_LENGTH/_ABORT)


@functools.partial(jax.jit, static_argnames=("config", "max_seq_len"))
def _prefill(params, config: ModelConfig, tokens, lengths, done, max_seq_len: int) -> _State:
    TRACE_COUNTS["prefill"] += 1
    b = tokens.shape[0]
    cache = kv_cache.init_cache(config, b, max_seq_len)
    logits, cache = kv_cache.prefill(params, config, tokens, lengths, cache)
    return _State(
        cache=cache,
        logits=logits.astype(jnp.float32),
        step=jnp.zeros((), jnp.int32),
        out_tokens=jnp.zeros((b, max_seq_len), jnp.int32),
        out_logprobs=jnp.zeros((b, max_seq_len), jnp.float32),
        num_generated=jnp.zeros((b,), jnp.int32),
        done=done,
        finish=jnp.zeros((b,), jnp.int32),
    )


@functools.partial(
    jax.jit, static_argnames=("config", "max_seq_len"), donate_argnames=("state",))
def _decode(params, config: ModelConfig, state: _State, rows: _Rows, abort, step_limit,
            max_seq_len: int) -> _State:
    """Samples tokens until every row is done or `step` reaches `step_limit`."""
    TRACE_COUNTS["decode"] += 1
    newly_aborted = abort & ~state.done
    state = state._replace(
        done=state.done | abort, finish=jnp.where(newly_aborted, _ABORT, state.finish))

    def cond(st: _State):
        return (st.step < step_limit) & ~jnp.all(st.done)

    def body(st: _State) -> _State:
        keys = jax.vmap(jax.random.fold_in)(rows.keys, jnp.broadcast_to(st.step, st.done.shape))
        tok, lp = sample_tokens(st.logits, keys, rows.temperature, rows.top_p, rows.top_k)
        active = ~st.done
        tok = jnp.where(active, tok, 0)
        out_tokens = jax.lax.dynamic_update_slice(
            st.out_tokens, tok[:, None], (0, st.step))
        out_logprobs = jax.lax.dynamic_update_slice(
            st.out_logprobs, jnp.where(active, lp, 0.0)[:, None], (0, st.step))
        gen = st.num_generated + active.astype(jnp.int32)
        hit_stop = active & jnp.any(tok[:, None] == rows.stop_ids, axis=-1)
        hit_len = active & ~hit_stop & (
            (gen >= rows.max_new) | (rows.prompt_lens + gen >= max_seq_len))
        done = st.done | hit_stop | hit_len
        finish = jnp.where(hit_stop, _STOP, jnp.where(hit_len, _LENGTH, st.finish))

        def advance(_):
            logits, cache = kv_cache.decode_step(params, config, tok, st.cache)
            # Finished rows stop growing (their cache slots are never read again).
            lengths = jnp.where(done, st.cache.lengths, cache.lengths)
            return logits.astype(jnp.float32), cache._replace(lengths=lengths)

        logits, cache = jax.lax.cond(
            jnp.all(done), lambda _: (st.logits, st.cache), advance, None)
        return _State(cache, logits, st.step + 1, out_tokens, out_logprobs, gen, done, finish)

    return jax.lax.while_loop(cond, body, state)


def _bucket(n: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if b >= n:
            return b
    return buckets[-1]


class EmbeddedEngine:
    """In-process RolloutEngine on the learner's Flax model (KV-cache decoding).

    Args:
        params: model params pytree (models.transformer.init_params or
            hf_io.load_hf_checkpoint).
        config: the ModelConfig.
        max_seq_len: context limit: prompt + generated tokens <= max_seq_len.
        batch_buckets: batch sizes compiled for; larger batches are split.
        prompt_buckets: padded prompt lengths (<= max_seq_len); default powers
            of two from 16 up to max_seq_len. max_seq_len is appended when the
            largest bucket cannot hold a prompt of max_seq_len - 1 tokens.
        seed: base PRNG seed for requests without SamplingParams.seed.
        eos_token_ids: ids added to every request's stop ids (the model's EOS).
        max_stop_ids: static width of the per-row stop id table.
        steps_per_call: decode steps per jitted call (None: the whole
            generation in one call); smaller values let aborts act sooner.
        weight_version: version label of `params`.

    Raises:
        ValueError: on inconsistent buckets or limits.
    """

    def __init__(self, params, config: ModelConfig, *, max_seq_len: int,
                 batch_buckets: Sequence[int] = (1, 4, 16, 64),
                 prompt_buckets: Sequence[int] | None = None, seed: int = 0,
                 eos_token_ids: Sequence[int] = (), max_stop_ids: int = 8,
                 steps_per_call: int | None = None, weight_version: str = "0"):
        if max_seq_len < 2:
            raise ValueError(f"max_seq_len: expected >= 2, got {max_seq_len}")
        if prompt_buckets is None:
            prompt_buckets = [b for b in (2 ** i for i in range(4, 20)) if b < max_seq_len]
            prompt_buckets.append(max_seq_len)
        self.batch_buckets = tuple(sorted(int(b) for b in batch_buckets))
        self.prompt_buckets = tuple(sorted(int(b) for b in prompt_buckets))
        if self.prompt_buckets and self.prompt_buckets[-1] < max_seq_len - 1:
            self.prompt_buckets += (max_seq_len,)  # catch-all: any prompt that fits
        if not self.batch_buckets or self.batch_buckets[0] < 1:
            raise ValueError(f"batch_buckets: expected sizes >= 1, got {batch_buckets}")
        if not self.prompt_buckets or self.prompt_buckets[-1] > max_seq_len:
            raise ValueError(
                f"prompt_buckets: expected sizes <= max_seq_len={max_seq_len}, "
                f"got {prompt_buckets}")
        if steps_per_call is not None and steps_per_call < 1:
            raise ValueError(f"steps_per_call: expected None or >= 1, got {steps_per_call}")
        self.config = config
        self.max_seq_len = int(max_seq_len)
        self.eos_token_ids = tuple(int(t) for t in eos_token_ids)
        self.max_stop_ids = int(max_stop_ids)
        self.steps_per_call = steps_per_call
        self._params = params
        self._weight_version = str(weight_version)
        self._key = jax.random.key(seed)
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- protocol

    @property
    def weight_version(self) -> str:
        return self._weight_version

    @property
    def params(self):
        return self._params

    def health(self) -> bool:
        return True

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling: SamplingParams) -> list[GenerateOutput]:
        """Completes each prompt (token ids) with one SamplingParams; prompt order.

        Raises:
            ValueError: an empty prompt, or one with >= max_seq_len tokens
                (naming the prompt index and the lengths).
        """
        return self.generate_rows(prompts, [sampling] * len(prompts))

    def generate_rows(self, prompts: Sequence[Sequence[int]],
                      samplings: Sequence[SamplingParams], *,
                      row_ids: Sequence[int] | None = None,
                      aborted: Sequence[threading.Event | None] | None = None,
                      ignore_eos: Sequence[bool] | None = None,
                      ) -> list[GenerateOutput]:
        """Completes prompts with per-row sampling parameters (the server batches requests).

        Args:
            prompts: N token-id lists.
            samplings: N SamplingParams (one per prompt).
            row_ids: N ints; row i's key is fold_in(base, row_ids[i]) where base
                is key(samplings[i].seed), or a fresh key split from the
                engine's key when seed is None. Default 0..N-1.
            aborted: N optional threading.Events; a set event stops its row at
                the next host check with finish_reason "abort".
            ignore_eos: N bools; true rows do not stop on the engine's eos_token_ids.

        Raises:
            ValueError: bad prompt lengths, too many stop ids, mismatched lists.
        """
        n = len(prompts)
        if len(samplings) != n:
            raise ValueError(f"samplings: expected {n} (one per prompt), got {len(samplings)}")
        row_ids = list(range(n)) if row_ids is None else list(row_ids)
        aborted = [None] * n if aborted is None else list(aborted)
        ignore_eos = [False] * n if ignore_eos is None else list(ignore_eos)
        if len(row_ids) != n or len(aborted) != n or len(ignore_eos) != n:
            raise ValueError(f"row_ids/aborted/ignore_eos: expected {n} entries each")
        prompts = [np.asarray(p, np.int32).reshape(-1) for p in prompts]
        for i, p in enumerate(prompts):
            if p.size == 0:
                raise ValueError(f"prompt {i}: is empty; expected at least one token id")
            if p.size >= self.max_seq_len:
                raise ValueError(
                    f"prompt {i}: has {p.size} tokens; max_seq_len={self.max_seq_len} leaves "
                    f"no room to generate (need prompt length < {self.max_seq_len})")
            if p.min() < 0 or p.max() >= self.config.vocab_size:
                raise ValueError(
                    f"prompt {i}: token ids must be in [0, {self.config.vocab_size}), "
                    f"got min {p.min()} max {p.max()}")
        with self._lock:
            self._key, call_key = jax.random.split(self._key)
            keys = [jax.random.fold_in(
                call_key if s.seed is None else jax.random.key(s.seed), r)
                for s, r in zip(samplings, row_ids)]
            params, version = self._params, self._weight_version
            outputs = []
            step = self.batch_buckets[-1]
            for lo in range(0, n, step):
                sl = slice(lo, lo + step)
                outputs += self._run_chunk(params, prompts[sl], samplings[sl], keys[sl],
                                           aborted[sl], ignore_eos[sl], version)
            return outputs

    # ------------------------------------------------------------------ internals

    def _run_chunk(self, params, prompts, samplings, keys, aborted, ignore_eos, version):
        n = len(prompts)
        b = _bucket(n, self.batch_buckets)
        t = _bucket(max(p.size for p in prompts), self.prompt_buckets)
        tokens = np.zeros((b, t), np.int32)
        lengths = np.ones((b,), np.int32)
        for i, p in enumerate(prompts):
            tokens[i, : p.size] = p
            lengths[i] = p.size
        stop = np.full((b, self.max_stop_ids), -1, np.int32)
        for i, (s, no_eos) in enumerate(zip(samplings, ignore_eos)):
            ids = tuple(dict.fromkeys(s.stop_token_ids + (() if no_eos else self.eos_token_ids)))
            if len(ids) > self.max_stop_ids:
                raise ValueError(
                    f"stop_token_ids: row {i} has {len(ids)} stop ids (with EOS); the engine "
                    f"was built with max_stop_ids={self.max_stop_ids}")
            stop[i, : len(ids)] = ids
        pad = b - n

        def col(values, fill, dtype):
            return jnp.asarray(np.asarray(list(values) + [fill] * pad, dtype))

        rows = _Rows(
            temperature=col((s.temperature for s in samplings), 0.0, np.float32),
            top_p=col((s.top_p for s in samplings), 1.0, np.float32),
            top_k=col((s.top_k for s in samplings), -1, np.int32),
            max_new=col((s.max_new_tokens for s in samplings), 1, np.int32),
            stop_ids=jnp.asarray(stop),
            prompt_lens=jnp.asarray(lengths),
            keys=jnp.stack(list(keys) + [keys[0]] * pad),
        )
        done = jnp.asarray(np.arange(b) >= n)
        state = _prefill(params, self.config, jnp.asarray(tokens), jnp.asarray(lengths), done,
                         max_seq_len=self.max_seq_len)
        chunk = self.steps_per_call or self.max_seq_len
        limit = 0
        while True:
            abort = np.zeros((b,), bool)
            abort[:n] = [e is not None and e.is_set() for e in aborted]
            limit += chunk
            state = _decode(params, self.config, state, rows, jnp.asarray(abort),
                            jnp.int32(limit), max_seq_len=self.max_seq_len)
            if bool(jnp.all(state.done)) or limit >= self.max_seq_len:
                break
        out_tokens, out_lp, num, finish = jax.device_get(
            (state.out_tokens, state.out_logprobs, state.num_generated, state.finish))
        outputs = []
        for i in range(n):
            k = int(num[i])
            ids = [int(x) for x in out_tokens[i, :k]]
            reason = _FINISH_NAMES[int(finish[i])]
            meta = {"prompt_tokens": int(prompts[i].size), "completion_tokens": k}
            if reason == "stop":
                meta["matched"] = ids[-1]
            outputs.append(GenerateOutput(ids, [float(x) for x in out_lp[i, :k]], reason,
                                          version, meta))
        return outputs

    # ------------------------------------------------------------------ weights

    def update_weights(self, source: Any, weight_version: str) -> None:
        """Swaps in new weights: a params pytree (in-process) or an HF directory path.

        Raises:
            ValueError: the new params' tree structure or shapes differ, or the
                directory's config is another architecture.
        """
        if isinstance(source, (str, os.PathLike)):
            from jaxrl_agent.models.hf_io import load_hf_checkpoint

            config, params = load_hf_checkpoint(
                source, param_dtype=jnp.dtype(self.config.param_dtype))
            config = config.replace(dtype=self.config.dtype, param_dtype=self.config.param_dtype)
            if config != self.config:
                diff = [f.name for f in dataclasses.fields(ModelConfig)
                        if getattr(config, f.name) != getattr(self.config, f.name)]
                raise ValueError(
                    f"update_weights: {os.fspath(source)} holds another model; config fields "
                    f"differ: {diff}")
        else:
            params = source
        def spec(tree):
            leaves, treedef = jax.tree.flatten(tree)
            return treedef, [(jnp.shape(x), jnp.result_type(x)) for x in leaves]

        if spec(params) != spec(self._params):
            raise ValueError(
                "update_weights: params must have the same tree structure, shapes and dtypes "
                "as the engine's current params")
        with self._lock:
            self._params = params
            self._weight_version = str(weight_version)
