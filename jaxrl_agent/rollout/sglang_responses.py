"""Parsing of SGLang's native POST /generate responses into GenerateOutput.

Pinned against SGLang's `io_struct.py` / `http_server.py` as summarized in
docs/SGLANG_API.md (late 2026). Unknown keys pass through untouched into
`GenerateOutput.meta`; a missing required field raises `SGLangResponseError`
naming the field, so an API change is reported at the door instead of
producing silently empty completions.
"""

from __future__ import annotations

from typing import Any

from jaxrl_agent.rollout.engine import GenerateOutput


class SGLangError(RuntimeError):
    """Base class of the errors raised by the SGLang client."""


class SGLangConnectionError(SGLangError):
    """The server could not be reached (connection refused, timeout, 502/503/504)
    after all retries.

    Attributes:
        url: the server URL.
        last_error: the last error seen, as text.
    """

    def __init__(self, url: str, last_error: str, attempts: int):
        self.url = url
        self.last_error = last_error
        self.attempts = attempts
        super().__init__(
            f"SGLang server {url} unreachable after {attempts} attempt(s); last error: {last_error}"
        )


class SGLangRequestError(SGLangError):
    """The server answered with an error status (4xx, or 5xx other than 502-504).

    Attributes:
        url: the server URL (including the route).
        status_code: the HTTP status.
        message: the server's own error message.
    """

    def __init__(self, url: str, status_code: int, message: str):
        self.url = url
        self.status_code = status_code
        self.message = message
        super().__init__(f"SGLang server {url} answered HTTP {status_code}: {message}")


class SGLangResponseError(SGLangError):
    """A response lacks a required field or has one of the wrong type."""


def error_message(body: Any, fallback: str) -> str:
    """The server's message from `{"error": {"message"}}` or `{"detail": ...}`."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "detail" in body:
            return str(body["detail"])
        if "message" in body:
            return str(body["message"])
    return fallback


def _require(d: Any, key: str, where: str) -> Any:
    if not isinstance(d, dict):
        raise SGLangResponseError(f"{where}: expected a JSON object, got {type(d).__name__}")
    if key not in d:
        raise SGLangResponseError(
            f"{where}.{key}: required field missing from the SGLang response "
            f"(keys present: {sorted(d)})"
        )
    return d[key]


def parse_generate_item(item: Any, *, where: str = "response") -> GenerateOutput:
    """Parses one item of a POST /generate response (sent with return_logprob).

    Args:
        item: the decoded JSON object of one completion: `output_ids`,
            `meta_info.finish_reason.type`, `meta_info.weight_version` and
            `meta_info.output_token_logprobs` ([logprob, token_id, text|null]
            triples, one per output token) are required.
        where: a label for error messages (e.g. "response[3]").

    Returns:
        GenerateOutput; every other key of the item and of `meta_info` (id,
        prompt_tokens, e2e_latency, text, unknown future keys...) lands in `meta`.
        An aborted request keeps finish_reason "abort" and its partial output,
        truncated to the tokens that came with a logprob.

    Raises:
        SGLangResponseError: naming the missing or malformed field.
    """
    output_ids = _require(item, "output_ids", where)
    meta_info = _require(item, "meta_info", where)
    finish = _require(meta_info, "finish_reason", f"{where}.meta_info")
    if finish is None:
        raise SGLangResponseError(
            f"{where}.meta_info.finish_reason: is null (request not finished); "
            "expected {'type': 'stop'|'length'|'abort', ...}"
        )
    finish_type = _require(finish, "type", f"{where}.meta_info.finish_reason")
    if finish_type not in ("stop", "length", "abort"):
        raise SGLangResponseError(
            f"{where}.meta_info.finish_reason.type: expected 'stop', 'length' or 'abort', "
            f"got {finish_type!r}"
        )
    weight_version = _require(meta_info, "weight_version", f"{where}.meta_info")
    triples = _require(meta_info, "output_token_logprobs", f"{where}.meta_info")
    if not isinstance(output_ids, list) or not isinstance(triples, list):
        raise SGLangResponseError(
            f"{where}: output_ids and meta_info.output_token_logprobs must be lists, got "
            f"{type(output_ids).__name__} and {type(triples).__name__}"
        )
    logprobs, lp_ids = [], []
    for i, triple in enumerate(triples):
        if not isinstance(triple, (list, tuple)) or len(triple) < 2 or triple[0] is None:
            raise SGLangResponseError(
                f"{where}.meta_info.output_token_logprobs[{i}]: expected "
                f"[logprob, token_id, text|null], got {triple!r}"
            )
        logprobs.append(float(triple[0]))
        lp_ids.append(int(triple[1]))
    output_ids = [int(t) for t in output_ids]
    if finish_type == "abort" and len(output_ids) > len(logprobs):
        output_ids = output_ids[: len(logprobs)]
    if lp_ids != output_ids:
        raise SGLangResponseError(
            f"{where}.meta_info.output_token_logprobs: token ids {lp_ids[:8]}... "
            f"(n={len(lp_ids)}) do not match output_ids {output_ids[:8]}... (n={len(output_ids)})"
        )
    meta = {k: v for k, v in item.items() if k not in ("output_ids", "meta_info")}
    meta.update(
        {k: v for k, v in meta_info.items() if k not in ("output_token_logprobs", "weight_version")}
    )
    return GenerateOutput(
        output_ids=output_ids,
        logprobs=logprobs,
        finish_reason=finish_type,
        weight_version=str(weight_version),
        meta=meta,
    )
