"""The embedded engine behind SGLang's native HTTP routes (starlette + uvicorn).

    jaxrl-agent serve --tiny-random --port 30000
    python -m jaxrl_agent.rollout.server --model-dir DIR --port 30000

Routes and fields follow docs/SGLANG_API.md, so `SGLangClient` runs
unchanged against this server and against a real SGLang. Concurrent
/generate requests are gathered into one engine batch (each row keeps its own
sampling parameters and seed). While paused, new generations wait up to
`pause_timeout_s` and then get 503. Errors are {"error": {"message": ...}}.
`ServerThread` runs the server on a free loopback port in-process (tests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
from typing import Any, Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from jaxrl_agent.rollout.embedded import EmbeddedEngine
from jaxrl_agent.rollout.engine import GenerateOutput, SamplingParams
from jaxrl_agent.rollout.server_protocol import BadRequest, parse_generate, response_item


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


@dataclasses.dataclass(eq=False)
class _Pending:
    prompt: list[int]
    sampling: SamplingParams
    ignore_eos: bool
    row_id: int
    rid: str
    future: asyncio.Future
    aborted: threading.Event = dataclasses.field(default_factory=threading.Event)


class _ServerState:
    def __init__(self, engine: EmbeddedEngine, model_path: str | None, pause_timeout_s: float):
        self.engine = engine
        self.model_path = model_path
        self.pause_timeout_s = pause_timeout_s
        self.max_batch = max(engine.batch_buckets)
        self.queue: asyncio.Queue | None = None
        self.unpaused: asyncio.Event | None = None
        self.active: dict[str, _Pending] = {}

    def abort_all(self) -> int:
        for p in self.active.values():
            p.aborted.set()
        return len(self.active)

    async def batch_loop(self) -> None:
        """Runs queued rows through the engine, one batch at a time."""
        while True:
            batch = [await self.queue.get()]
            await asyncio.sleep(0.002)  # let concurrent requests join this batch
            while not self.queue.empty() and len(batch) < self.max_batch:
                batch.append(self.queue.get_nowait())
            live = []
            for p in batch:
                if p.aborted.is_set() and not p.future.done():
                    p.future.set_result(GenerateOutput(
                        [], [], "abort", self.engine.weight_version,
                        {"prompt_tokens": len(p.prompt)}))
                elif not p.future.done():
                    live.append(p)
            if not live:
                continue
            try:
                outs = await asyncio.to_thread(
                    self.engine.generate_rows, [p.prompt for p in live],
                    [p.sampling for p in live], row_ids=[p.row_id for p in live],
                    aborted=[p.aborted for p in live], ignore_eos=[p.ignore_eos for p in live])
            except Exception as e:  # noqa: BLE001 (delivered to each waiting request)
                for p in live:
                    if not p.future.done():
                        p.future.set_exception(e)
                continue
            for p, out in zip(live, outs):
                if not p.future.done():
                    p.future.set_result(out)


async def _json_body(request: Request, *, required: bool) -> Any:
    raw = await request.body()
    if not raw.strip():
        if required:
            raise BadRequest("body: expected a JSON object, got an empty body")
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise BadRequest(f"body: invalid JSON ({e})") from None


def create_app(engine: EmbeddedEngine, *, model_path: str | None = None,
               pause_timeout_s: float = 60.0) -> Starlette:
    """The Starlette app serving `engine` with SGLang's routes (module docstring)."""
    st = _ServerState(engine, model_path, pause_timeout_s)

    async def generate(request: Request):
        t0 = time.perf_counter()
        body = await _json_body(request, required=True)
        req = parse_generate(body, max_seq_len=engine.max_seq_len,
                             vocab_size=engine.config.vocab_size)
        loop = asyncio.get_running_loop()
        pend = [_Pending(p, s, e, i, r, loop.create_future()) for i, (p, s, e, r) in enumerate(
            zip(req["prompts"], req["samplings"], req["ignore_eos"], req["rids"]))]
        for p in pend:  # registered first, so /abort_request reaches waiting requests too
            st.active[p.rid] = p
        try:
            try:
                await asyncio.wait_for(st.unpaused.wait(), st.pause_timeout_s)
            except asyncio.TimeoutError:
                return _error(f"generation is paused (waited {st.pause_timeout_s} s); "
                              "call /continue_generation", 503)
            for p in pend:
                st.queue.put_nowait(p)
            outs = await asyncio.gather(*(p.future for p in pend))
        except ValueError as e:
            raise BadRequest(str(e)) from None
        finally:
            for p in pend:
                p.aborted.set()  # a disconnected client's rows stop at the next check
                st.active.pop(p.rid, None)
        latency = time.perf_counter() - t0
        items = [response_item(o, p.rid, return_logprob=req["return_logprob"], latency_s=latency)
                 for o, p in zip(outs, pend)]
        return JSONResponse(items if req["batched"] else items[0])

    async def update_weights_from_disk(request: Request):
        body = await _json_body(request, required=True)
        path = body.get("model_path") if isinstance(body, dict) else None
        if not isinstance(path, str) or not path:
            raise BadRequest("model_path: required, a directory with config.json and *.safetensors")
        version = body.get("weight_version")
        version = engine.weight_version if version is None else str(version)
        n = st.abort_all() if body.get("abort_all_requests") else 0
        try:
            await asyncio.to_thread(engine.update_weights, path, version)
        except (ValueError, OSError, KeyError) as e:
            return JSONResponse({"success": False, "message": f"{type(e).__name__}: {e}",
                                 "num_paused_requests": n}, status_code=400)
        st.model_path = path
        return JSONResponse({"success": True, "message": f"loaded {path} as {version}",
                             "num_paused_requests": n})

    async def pause_generation(request: Request):
        body = await _json_body(request, required=False)
        mode = body.get("mode", "abort") if isinstance(body, dict) else "abort"
        if mode not in ("abort", "retract", "in_place"):
            raise BadRequest(f"mode: expected 'abort', 'retract' or 'in_place', got {mode!r}")
        st.unpaused.clear()
        n = st.abort_all() if mode == "abort" else 0
        return JSONResponse({"status": "ok", "mode": mode, "num_aborted_requests": n})

    async def continue_generation(request: Request):
        st.unpaused.set()
        return JSONResponse({"status": "ok"})

    async def flush_cache(request: Request):
        return PlainTextResponse("Cache flushed (no cross-request cache in the embedded engine).")

    async def abort_request(request: Request):
        body = await _json_body(request, required=True)
        if not isinstance(body, dict):
            raise BadRequest("body: expected an object {rid, abort_all}")
        if body.get("abort_all"):
            return JSONResponse({"num_aborted": st.abort_all()})
        rid = body.get("rid")
        hit = [p for r, p in st.active.items() if r == rid or r.startswith(f"{rid}-")]
        for p in hit:
            p.aborted.set()
        return JSONResponse({"num_aborted": len(hit)})

    async def health(request: Request):
        ok = engine.health()
        return PlainTextResponse("ok" if ok else "unhealthy", status_code=200 if ok else 503)

    async def get_model_info(request: Request):
        return JSONResponse({"model_path": st.model_path, "tokenizer_path": None,
                             "is_generation": True, "weight_version": engine.weight_version,
                             "max_seq_len": engine.max_seq_len,
                             "vocab_size": engine.config.vocab_size})

    async def get_server_info(request: Request):
        return JSONResponse({"engine": "jaxrl_agent.EmbeddedEngine",
                             "model_path": st.model_path, "context_length": engine.max_seq_len,
                             "batch_buckets": list(engine.batch_buckets),
                             "prompt_buckets": list(engine.prompt_buckets),
                             "paused": not st.unpaused.is_set(),
                             "running_requests": len(st.active),
                             "weight_version": engine.weight_version})

    async def on_bad_request(request: Request, exc: BadRequest):
        return _error(str(exc), 400)

    async def on_http(request: Request, exc: HTTPException):
        msg = exc.detail if exc.status_code != 404 else f"unknown route {request.url.path}"
        return _error(str(msg), exc.status_code)

    async def on_error(request: Request, exc: Exception):
        return _error(f"internal error: {type(exc).__name__}: {exc}", 500)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        st.queue = asyncio.Queue()
        st.unpaused = asyncio.Event()
        st.unpaused.set()
        task = asyncio.create_task(st.batch_loop())
        try:
            yield
        finally:
            task.cancel()

    routes = [
        Route("/generate", generate, methods=["POST"]),
        Route("/update_weights_from_disk", update_weights_from_disk, methods=["POST"]),
        Route("/pause_generation", pause_generation, methods=["POST"]),
        Route("/continue_generation", continue_generation, methods=["POST"]),
        Route("/flush_cache", flush_cache, methods=["GET", "POST"]),
        Route("/abort_request", abort_request, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/health_generate", health, methods=["GET"]),
        Route("/get_model_info", get_model_info, methods=["GET"]),
        Route("/get_server_info", get_server_info, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={BadRequest: on_bad_request, HTTPException: on_http,
                                         Exception: on_error})


class ServerThread:
    """Runs an app with uvicorn in a background thread on 127.0.0.1 (port 0 = free port).

    Use as a context manager; `url` is the base URL once started.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        daemon=True)

    def start(self, timeout_s: float = 30.0) -> "ServerThread":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server at {self.url} did not start within {timeout_s} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `jaxrl-agent serve`."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-dir", help="HF checkpoint directory (config.json + *.safetensors)")
    src.add_argument("--tiny-random", action="store_true",
                     help="serve a tiny randomly initialized model (tests, demos)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--max-seq-len", type=int, default=1024, help="context limit in tokens")
    parser.add_argument("--vocab-size", type=int, default=256, help="--tiny-random vocabulary")
    parser.add_argument("--dtype", default="float32", help="compute dtype (float32, bfloat16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eos-token-ids", type=int, nargs="*", default=[])
    parser.add_argument("--weight-version", default="0")


def build_engine(args: argparse.Namespace) -> tuple[EmbeddedEngine, str | None]:
    """The engine `serve` runs, from parsed flags."""
    import jax

    from jaxrl_agent.models.config import tiny_config

    if args.tiny_random:
        from jaxrl_agent.models.transformer import init_params

        config = tiny_config(vocab_size=args.vocab_size, dtype=args.dtype)
        params, path = init_params(config, jax.random.key(args.seed)), None
    else:
        from jaxrl_agent.models.hf_io import load_hf_checkpoint

        config, params = load_hf_checkpoint(args.model_dir, dtype=args.dtype)
        path = os.path.abspath(args.model_dir)
    engine = EmbeddedEngine(params, config, max_seq_len=args.max_seq_len, seed=args.seed,
                            eos_token_ids=args.eos_token_ids, steps_per_call=32,
                            weight_version=args.weight_version)
    return engine, path


def serve(args: argparse.Namespace) -> int:
    """Runs the server in the foreground until interrupted."""
    engine, path = build_engine(args)
    uvicorn.run(create_app(engine, model_path=path), host=args.host, port=args.port,
                log_level="info")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxrl_agent.rollout.server",
                                     description=__doc__.splitlines()[0])
    add_serve_arguments(parser)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
