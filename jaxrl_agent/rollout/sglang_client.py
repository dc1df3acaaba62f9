"""RolloutEngine over SGLang's native HTTP API (docs/SGLANG_API.md).

One POST /generate per prompt (token ids in, token ids + logprobs out), many
in flight on an `httpx.AsyncClient` behind an `asyncio.Semaphore`, spread
round-robin over one or several server URLs (or one sglang_router URL).
Connection errors, timeouts and 502/503/504 are retried with exponential
backoff, then raise `SGLangConnectionError` naming the server; other error
statuses raise `SGLangRequestError` with the server's message. Every call has
a timeout, so nothing hangs.

Weight sync: `update_weights_from_disk` runs SGLang's documented sequence
(pause_generation, update_weights_from_disk, continue_generation) on every
server and verifies the served weight_version afterwards.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import uuid
import weakref
from typing import Any, Awaitable, Callable, Sequence

import httpx

from jaxrl_agent.checks import check_choice, check_positive
from jaxrl_agent.rollout.engine import GenerateOutput, SamplingParams
from jaxrl_agent.rollout.sglang_responses import (
    SGLangConnectionError,
    SGLangRequestError,
    SGLangResponseError,
    error_message,
    parse_generate_item,
)

RETRY_STATUS = (502, 503, 504)
_MAX_BACKOFF_S = 30.0


class SGLangClient:
    """Rollout engine talking to SGLang servers over HTTP.

    Args:
        urls: one base URL ("http://127.0.0.1:30000") or a list; requests go
            round-robin over the list (one sglang_router URL is one entry).
        max_concurrency: requests in flight at once per event loop (>= 1).
        timeout_s: timeout of every HTTP call (connect, read, write, pool), in
            seconds; a generation must finish within it.
        max_retries: retries after the first attempt on connection errors,
            timeouts and 502/503/504 (>= 0).
        backoff_s: first retry delay in seconds; doubles each retry (max 30 s).
        pause_mode: body of POST /pause_generation during weight updates
            ("abort", "retract", "in_place"; None sends no body, for older servers).
        transport: optional httpx async transport (tests inject faults with
            `httpx.MockTransport`).

    Raises:
        ValueError: on an empty URL list or out-of-range arguments.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        max_concurrency: int = 64,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        pause_mode: str | None = "abort",
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise ValueError("urls: expected at least one server URL, got none")
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"urls: expected http(s)://host:port, got {u!r}")
        check_positive("max_concurrency", max_concurrency)
        check_positive("timeout_s", timeout_s)
        check_positive("max_retries", max_retries, allow_zero=True)
        check_positive("backoff_s", backoff_s, allow_zero=True)
        if pause_mode is not None:
            check_choice("pause_mode", pause_mode, ("abort", "retract", "in_place"))
        self.urls = [u.rstrip("/") for u in urls]
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.pause_mode = pause_mode
        self._transport = transport
        self._rr = itertools.count()
        self._loops: "weakref.WeakKeyDictionary[Any, tuple[httpx.AsyncClient, asyncio.Semaphore]]"
        self._loops = weakref.WeakKeyDictionary()
        self._weight_version: str | None = None
        self._bg: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None
        self._bg_lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    def _loop_state(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        """The HTTP client and semaphore of the running event loop (made on first use)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(max_connections=self.max_concurrency),
                transport=self._transport,
            )
            state = (client, asyncio.Semaphore(self.max_concurrency))
            self._loops[loop] = state
        return state

    async def aclose(self) -> None:
        """Closes the HTTP client of the running event loop."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state[0].aclose()

    def _run_sync(self, make_coro: Callable[[], Awaitable[Any]]) -> Any:
        """Runs a coroutine from synchronous code on the client's own loop thread.

        One long-lived background loop keeps its HTTP client (connections, TLS
        context) across calls; works from inside a running event loop too.
        """
        with self._bg_lock:
            if self._bg is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="sglang-client",
                                          daemon=True)
                thread.start()
                self._bg = (loop, thread)
            loop = self._bg[0]
        return asyncio.run_coroutine_threadsafe(make_coro(), loop).result()

    def close(self) -> None:
        """Closes the background loop of the synchronous API and its HTTP client."""
        with self._bg_lock:
            bg, self._bg = self._bg, None
        if bg is not None:
            loop, thread = bg
            asyncio.run_coroutine_threadsafe(self.aclose(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    def __enter__(self) -> "SGLangClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _next_url(self) -> str:
        return self.urls[next(self._rr) % len(self.urls)]

    async def _request(self, method: str, url: str, path: str, body: Any = None) -> Any:
        """One HTTP call with retries; returns the decoded JSON (or text) body.

        Raises:
            SGLangConnectionError: unreachable / timing out / 502-504 after retries.
            SGLangRequestError: any other non-2xx status, with the server's message.
        """
        client, sem = self._loop_state()
        last_error = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S))
            try:
                async with sem:
                    resp = await client.request(method, url + path, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as e:
                last_error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                continue
            if resp.status_code in RETRY_STATUS:
                last_error = f"HTTP {resp.status_code}: {_body_message(resp)}"
                continue
            if resp.status_code >= 400:
                raise SGLangRequestError(url + path, resp.status_code, _body_message(resp))
            try:
                return resp.json()
            except ValueError:
                return resp.text
        raise SGLangConnectionError(url, last_error, self.max_retries + 1)

    # ---------------------------------------------------------------- generation

    async def agenerate_one(
        self, prompt: Sequence[int], sampling: SamplingParams, *, rid: str | None = None
    ) -> GenerateOutput:
        """Completes one prompt ([T] token ids) on the next server (round-robin).

        Returns:
            GenerateOutput; `meta` holds the server's meta_info (id, prompt_tokens,
            e2e_latency, ...) and `server_url`.

        Raises:
            ValueError: empty prompt. SGLangConnectionError, SGLangRequestError,
            SGLangResponseError: see the class docstrings.
        """
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("prompt: expected at least one token id, got an empty prompt")
        url = self._next_url()
        body = {
            "input_ids": ids,
            "sampling_params": sampling.to_sglang(),
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": False,
            "rid": rid or uuid.uuid4().hex,
        }
        data = await self._request("POST", url, "/generate", body)
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        out = parse_generate_item(data, where=f"{url}/generate response")
        out.meta["server_url"] = url
        return out

    async def agenerate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams
    ) -> list[GenerateOutput]:
        """Completes every prompt concurrently; outputs in prompt order."""
        return list(await asyncio.gather(*(self.agenerate_one(p, sampling) for p in prompts)))

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams
    ) -> list[GenerateOutput]:
        """Synchronous `agenerate` (RolloutEngine protocol)."""
        prompts = [list(p) for p in prompts]
        out = self._run_sync(lambda: self.agenerate(prompts, sampling))
        if out:
            self._weight_version = out[-1].weight_version
        return out

    # ------------------------------------------------------------------- control

    def _call_all(self, method: str, path: str, body: Any = None) -> list[Any]:
        async def go():
            return await asyncio.gather(*(self._request(method, u, path, body) for u in self.urls))

        return self._run_sync(go)

    def health(self) -> bool:
        """True when GET /health answers 200 on every server (no retries)."""

        async def one(url):
            client, _ = self._loop_state()
            try:
                resp = await client.get(url + "/health")
            except (httpx.TransportError, httpx.TimeoutException):
                return False
            return resp.status_code == 200

        async def go():
            return await asyncio.gather(*(one(u) for u in self.urls))

        return all(self._run_sync(go))

    def get_model_info(self) -> list[dict[str, Any]]:
        """GET /get_model_info of every server, in `urls` order."""
        return self._call_all("GET", "/get_model_info")

    def flush_cache(self) -> None:
        """POST /flush_cache on every server."""
        self._call_all("POST", "/flush_cache")

    def pause_generation(self) -> None:
        """POST /pause_generation on every server."""
        body = {"mode": self.pause_mode} if self.pause_mode else None
        self._call_all("POST", "/pause_generation", body)

    def continue_generation(self) -> None:
        """POST /continue_generation on every server."""
        self._call_all("POST", "/continue_generation", {})

    def abort_request(self, rid: str = "", *, abort_all: bool = False) -> None:
        """POST /abort_request on every server (one request id, or all)."""
        self._call_all("POST", "/abort_request", {"rid": rid, "abort_all": abort_all})

    def update_weights_from_disk(
        self,
        model_dir: str | os.PathLike,
        weight_version: str,
        *,
        flush_cache: bool = True,
        abort_all_requests: bool = False,
    ) -> None:
        """Loads an HF safetensors directory on every server under `weight_version`.

        Sequence: pause_generation; POST /update_weights_from_disk {model_path,
        weight_version, flush_cache, abort_all_requests}; continue_generation
        (always, even when the update failed); then GET /get_model_info on every
        server must report the new weight_version.

        Raises:
            SGLangRequestError: a server rejected the update (its message).
            SGLangResponseError: `success` false, or a server reports another
                weight_version afterwards (naming the server).
            SGLangConnectionError: a server is unreachable.
        """
        weight_version = str(weight_version)
        body = {
            "model_path": os.fspath(model_dir),
            "load_format": None,
            "weight_version": weight_version,
            "flush_cache": flush_cache,
            "abort_all_requests": abort_all_requests,
        }
        self.pause_generation()
        try:
            answers = self._call_all("POST", "/update_weights_from_disk", body)
        finally:
            self.continue_generation()
        for url, ans in zip(self.urls, answers):
            if isinstance(ans, dict) and ans.get("success") is False:
                raise SGLangResponseError(
                    f"{url}/update_weights_from_disk failed: {ans.get('message', ans)}"
                )
        for url, info in zip(self.urls, self.get_model_info()):
            got = info.get("weight_version") if isinstance(info, dict) else None
            if str(got) != weight_version:
                raise SGLangResponseError(
                    f"{url}: serves weight_version {got!r} after the update, expected "
                    f"{weight_version!r}"
                )
        self._weight_version = weight_version

    def update_weights(self, source: Any, weight_version: str) -> None:
        """RolloutEngine protocol: `source` must be an HF directory path (str/PathLike)."""
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(
                "source: SGLangClient loads weights from an HF safetensors directory path; "
                f"got {type(source).__name__} (export params with export_for_engine first)"
            )
        self.update_weights_from_disk(source, weight_version)

    @property
    def weight_version(self) -> str:
        """The version last seen (responses, updates, refresh); "unknown" before any.

        No network call here (isinstance checks on the protocol read it); use
        `refresh_weight_version()` to ask the servers.
        """
        return self._weight_version or "unknown"

    def refresh_weight_version(self) -> str:
        """Asks the first server (GET /get_model_info) for its weight_version."""
        info = self._run_sync(lambda: self._request("GET", self.urls[0], "/get_model_info"))
        self._weight_version = str(info.get("weight_version")) if isinstance(info, dict) else None
        return self.weight_version


def _body_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        body = None
    return error_message(body, resp.text[:500] or resp.reason_phrase)
