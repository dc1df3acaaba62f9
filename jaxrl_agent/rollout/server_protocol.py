"""Request validation and response building for the SGLang-contract server.

Turns SGLang's POST /generate JSON (docs/SGLANG_API.md) into prompts and
SamplingParams, and GenerateOutputs back into SGLang response items. Every
rejection is a `BadRequest` whose message names the offending field.
"""

from __future__ import annotations

import uuid
from typing import Any

from jaxrl_agent.rollout.engine import GenerateOutput, SamplingParams

# SGLang sampling params honoured here.
_SUPPORTED = ("max_new_tokens", "temperature", "top_p", "top_k", "stop_token_ids",
              "sampling_seed", "ignore_eos")
# Accepted only at their neutral value (no tokenizer, no penalties here).
_NEUTRAL = {"skip_special_tokens": None, "no_stop_trim": None, "n": 1, "stop": None,
            "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
            "repetition_penalty": 1.0, "min_new_tokens": 0, "spaces_between_special_tokens": None}


class BadRequest(ValueError):
    """A client error; the server answers 400 {"error": {"message": str(e)}}."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_sampling(d: Any, where: str) -> tuple[SamplingParams, bool]:
    """SGLang `sampling_params` dict -> (SamplingParams, ignore_eos)."""
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise BadRequest(f"{where}: expected an object, got {type(d).__name__}")
    for key, value in d.items():
        if key in _SUPPORTED:
            continue
        if key not in _NEUTRAL:
            raise BadRequest(f"{where}.{key}: unsupported sampling parameter; supported: "
                             f"{sorted(_SUPPORTED + tuple(_NEUTRAL))}")
        neutral = _NEUTRAL[key]
        if neutral is not None and value not in (neutral, None):
            raise BadRequest(f"{where}.{key}: only {neutral!r} is supported by this server, "
                             f"got {value!r}")
        if key == "stop" and value:
            raise BadRequest(f"{where}.stop: stop strings need a tokenizer; this server is "
                             "token-in/token-out, use stop_token_ids")
    stop_ids = d.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(_is_int(t) for t in stop_ids):
        raise BadRequest(f"{where}.stop_token_ids: expected a list of ints, got {stop_ids!r}")
    kw = {"stop_token_ids": tuple(stop_ids)}
    for key, kind in (("max_new_tokens", int), ("top_k", int), ("sampling_seed", int),
                      ("temperature", float), ("top_p", float)):
        if d.get(key) is None:
            continue
        value = d[key]
        ok = _is_int(value) if kind is int else (
            isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok:
            raise BadRequest(f"{where}.{key}: expected {kind.__name__}, got {value!r}")
        kw["seed" if key == "sampling_seed" else key] = value
    if "max_new_tokens" not in kw:
        kw["max_new_tokens"] = 128  # SGLang's default
    try:
        return SamplingParams(**kw), bool(d.get("ignore_eos", False))
    except (ValueError, TypeError) as e:
        raise BadRequest(f"{where}: {e}") from None


def parse_generate(body: Any, *, max_seq_len: int, vocab_size: int) -> dict[str, Any]:
    """Validates a POST /generate body.

    Returns:
        {"prompts": [[int]], "samplings": [SamplingParams], "ignore_eos": [bool],
         "rids": [str], "batched": bool, "return_logprob": bool}.

    Raises:
        BadRequest: naming the field that is missing or wrong.
    """
    if not isinstance(body, dict):
        raise BadRequest(f"body: expected a JSON object, got {type(body).__name__}")
    if body.get("text") is not None:
        raise BadRequest("text: this server runs token-in/token-out (like "
                         "--skip-tokenizer-init); send input_ids")
    if body.get("stream"):
        raise BadRequest("stream: streaming is not supported by this server; send stream=false")
    ids = body.get("input_ids")
    if ids is None:
        raise BadRequest("input_ids: required (a list of ints, or a list of lists for a batch)")
    if not isinstance(ids, list) or not ids:
        raise BadRequest(f"input_ids: expected a non-empty list, got {ids!r:.80}")
    batched = isinstance(ids[0], list)
    prompts = ids if batched else [ids]
    for i, p in enumerate(prompts):
        name = f"input_ids[{i}]" if batched else "input_ids"
        if not isinstance(p, list) or not p or not all(_is_int(t) for t in p):
            raise BadRequest(f"{name}: expected a non-empty list of ints")
        if len(p) >= max_seq_len:
            raise BadRequest(f"{name}: prompt has {len(p)} tokens; the context is "
                             f"{max_seq_len} tokens (need prompt length < {max_seq_len})")
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise BadRequest(f"{name}: token ids must be in [0, {vocab_size}), got {bad[:5]}")
    sp = body.get("sampling_params")
    if isinstance(sp, list):
        if len(sp) != len(prompts):
            raise BadRequest(f"sampling_params: list of {len(sp)}, expected one per prompt "
                             f"({len(prompts)})")
        parsed = [parse_sampling(s, f"sampling_params[{i}]") for i, s in enumerate(sp)]
    else:
        parsed = [parse_sampling(sp, "sampling_params")] * len(prompts)
    lsl = body.get("logprob_start_len", -1)
    if lsl not in (-1, None):
        raise BadRequest(f"logprob_start_len: only -1 (output tokens) is supported, got {lsl!r}")
    rid = body.get("rid")
    if rid is None:
        rids = [uuid.uuid4().hex for _ in prompts]
    elif isinstance(rid, list) and len(rid) == len(prompts):
        rids = [str(r) for r in rid]
    elif isinstance(rid, str):
        rids = [rid] if not batched else [f"{rid}-{i}" for i in range(len(prompts))]
    else:
        raise BadRequest(f"rid: expected a string or one per prompt, got {rid!r:.80}")
    return {"prompts": prompts, "samplings": [s for s, _ in parsed],
            "ignore_eos": [e for _, e in parsed], "rids": rids, "batched": batched,
            "return_logprob": bool(body.get("return_logprob", False))}


def response_item(out: GenerateOutput, rid: str, *, return_logprob: bool,
                  latency_s: float, abort_message: str = "Abort by request") -> dict[str, Any]:
    """One SGLang POST /generate response item for a GenerateOutput."""
    if out.finish_reason == "stop":
        finish = {"type": "stop", "matched": out.output_ids[-1]}
    elif out.finish_reason == "length":
        finish = {"type": "length", "length": len(out.output_ids)}
    else:
        finish = {"type": "abort", "message": abort_message}
    meta = {
        "id": rid,
        "finish_reason": finish,
        "prompt_tokens": int(out.meta.get("prompt_tokens", 0)),
        "completion_tokens": len(out.output_ids),
        "cached_tokens": 0,
        "weight_version": out.weight_version,
        "e2e_latency": latency_s,
    }
    if return_logprob:
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in
                                         zip(out.logprobs, out.output_ids)]
    return {"output_ids": list(out.output_ids), "meta_info": meta}
