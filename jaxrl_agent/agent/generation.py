"""Batches generation requests of concurrent episodes into engine.generate calls.

Each live episode awaits `GenerationQueue.generate(prompt_ids, sampling)`. A
dispatcher coroutine gathers the pending requests that share sampling
parameters (oldest first, up to `max_batch_size`) into one `engine.generate`
call, run in a thread so the event loop stays free; up to `concurrency` calls
are in flight at once (1 for an in-process engine, more for HTTP servers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from typing import Sequence

from jaxrl_agent.rollout.engine import GenerateOutput, RolloutEngine, SamplingParams


class EngineError(RuntimeError):
    """The engine failed or broke its contract; raised to every waiting episode."""


class GenerationQueue:
    """Continuous batching of generate requests across episodes (one event loop).

    Args:
        engine: any RolloutEngine.
        max_batch_size: most prompts per engine.generate call.
        concurrency: most engine.generate calls in flight.
        seed: when not None, call i gets SamplingParams.seed = seed + i
            (reproducible only under the same request order).
        lockstep: dispatch only when every live episode (see `register`) has a
            request pending, groups in a fixed order and rows sorted by
            (requests the episode made before, its `order` key), so the oldest
            turns go first and no episode starves when max_batch_size is below
            the number of episodes: batches, and with `seed` the sampled tokens, are then a
            function of the episodes alone, not of thread timing (resumable,
            bit-reproducible runs). Needs all episodes registered up front,
            i.e. max_in_flight >= the number of episodes of one collect.
    """

    def __init__(self, engine: RolloutEngine, *, max_batch_size: int, concurrency: int, seed: int | None,
                 lockstep: bool = False):
        self._engine = engine
        self._lockstep = lockstep
        self._live = 0
        self._rows_in_flight = 0
        self._max_batch_size = max_batch_size
        self._seed = seed
        self._pending: dict[SamplingParams, list[tuple[list[int], asyncio.Future, tuple]]] = {}
        self._requests_per_order: dict[tuple, int] = {}  # lockstep: turns requested per episode
        self._has_work = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self._executor = concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="generate")
        self._inflight: set[asyncio.Task] = set()
        self.num_calls = 0
        self.batch_sizes: list[int] = []

    def register(self) -> None:
        """Counts one more live episode (lockstep mode waits for its request)."""
        self._live += 1

    def unregister(self) -> None:
        """Counts one live episode fewer (it finished)."""
        self._live -= 1
        self._has_work.set()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams,
                       order: tuple = ()) -> GenerateOutput:
        """Queues one prompt; returns its output once its batch has run.

        `order` identifies the episode in lockstep mode (e.g. (group, sample));
        rows are served by (its earlier requests, order).
        """
        fut = asyncio.get_running_loop().create_future()
        key = order
        if self._lockstep:
            turn = self._requests_per_order.get(order, 0)
            self._requests_per_order[order] = turn + 1
            key = (turn, order)
        self._pending.setdefault(sampling, []).append((prompt_ids, fut, key))
        self._has_work.set()
        return await fut

    def _ready(self) -> bool:
        if not self._pending:
            return False
        if not self._lockstep:
            return True
        waiting = sum(len(q) for q in self._pending.values()) + self._rows_in_flight
        return waiting >= self._live

    def _next_group(self) -> SamplingParams:
        if not self._lockstep:
            return next(iter(self._pending))
        return min(self._pending, key=lambda s: repr(dataclasses.astuple(s)))

    async def run(self) -> None:
        """Dispatcher loop; runs until cancelled."""
        try:
            while True:
                await self._slots.acquire()
                while not self._ready():
                    self._has_work.clear()
                    await self._has_work.wait()
                await asyncio.sleep(0)  # let episodes that are ready submit too
                sampling = self._next_group()
                queue = self._pending[sampling]
                if self._lockstep:
                    queue.sort(key=lambda item: item[2])
                batch, rest = queue[: self._max_batch_size], queue[self._max_batch_size :]
                if rest:
                    self._pending[sampling] = rest
                else:
                    del self._pending[sampling]
                if self._seed is not None:
                    sampling = dataclasses.replace(sampling, seed=self._seed + self.num_calls)
                self.num_calls += 1
                self.batch_sizes.append(len(batch))
                self._rows_in_flight += len(batch)
                task = asyncio.create_task(self._dispatch(batch, sampling))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def _dispatch(self, batch: Sequence[tuple[list[int], asyncio.Future, tuple]],
                        sampling: SamplingParams) -> None:
        try:
            prompts = [p for p, _, _ in batch]
            loop = asyncio.get_running_loop()
            try:
                outs = await loop.run_in_executor(self._executor, self._engine.generate, prompts, sampling)
            except Exception as e:  # noqa: BLE001  (re-raised in every waiting episode)
                raise EngineError(f"engine.generate failed on a batch of {len(prompts)}: {type(e).__name__}: {e}") from e
            if len(outs) != len(prompts):
                raise EngineError(f"engine.generate returned {len(outs)} outputs for {len(prompts)} prompts")
            for out in outs:
                if len(out.output_ids) > sampling.max_new_tokens:
                    raise EngineError(
                        f"engine.generate returned {len(out.output_ids)} ids > max_new_tokens={sampling.max_new_tokens}"
                    )
            for (_, fut, _), out in zip(batch, outs):
                if not fut.done():
                    fut.set_result(out)
        except Exception as e:  # noqa: BLE001
            for _, fut, _ in batch:
                if not fut.done():
                    fut.set_exception(e)
        finally:
            self._rows_in_flight -= len(batch)
            self._slots.release()
