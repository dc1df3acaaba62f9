"""The multi-turn actor: many episodes in flight against any RolloutEngine.

Each episode is a coroutine on one asyncio event loop:

    prompt = template.prompt(info["system_prompt"], reset observation)
    per turn k: ids <- engine (batched across episodes, GenerationQueue)
                obs, r, terminated, truncated <- env.step(action text) (worker pool)
                append action ids (loss_mask true) and observation-suffix ids

Token-in/token-out: the history is never re-tokenized; the trajectory holds the
exact ids the engine returned. env.step runs in a thread pool with a timeout, so
a slow or hung tool never blocks the other episodes; a step that raises ends its
episode (terminated, info["env_error"]) instead of the actor.

Budgets: `max_total_tokens` (prompt included) and `max_turns`; running out of
either truncates the episode (truncated=True, not terminated). The engine's
max_new_tokens is clipped to the remaining token budget; a "length" finish at
the budget, or an "abort" finish, truncates the episode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import gymnasium as gym

from jaxrl_agent.agent.chat import ChatTemplate, get_chat_template, stop_token_ids
from jaxrl_agent.agent.episode import EpisodeRecord, parse_weight_version
from jaxrl_agent.agent.generation import GenerationQueue
from jaxrl_agent.checks import check_choice, check_positive
from jaxrl_agent.rollout.engine import RolloutEngine, SamplingParams
from jaxrl_agent.types import Trajectory

EnvFactory = Callable[[], gym.Env]


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
    """One task instance: how to build the env and how to reset it.

    Attributes:
        env: a registered env id (e.g. "jaxrl_agent/Calculator-v0") or a factory.
        seed: env.reset seed (selects the task in seeded task sets).
        options: env.reset options (e.g. {"task_id": ...}).
        env_kwargs: keyword arguments of gym.make (ignored for a factory).
        group_id: explicit group id; None numbers tasks in order.
    """

    env: str | EnvFactory
    seed: int | None = None
    options: Mapping[str, Any] | None = None
    env_kwargs: Mapping[str, Any] | None = None
    group_id: int | None = None

    def env_key(self) -> Any:
        """Envs built with equal keys are interchangeable (reused across episodes)."""
        if callable(self.env):
            return self.env
        return (self.env, repr(sorted((self.env_kwargs or {}).items())))

    def make_env(self) -> gym.Env:
        if callable(self.env):
            return self.env()
        if self.env.startswith("jaxrl_agent/"):
            import jaxrl_agent.environments  # noqa: F401  (registers the ids)
        return gym.make(self.env, **dict(self.env_kwargs or {}))


def as_episode_spec(task: EpisodeSpec | str | EnvFactory) -> EpisodeSpec:
    """An EpisodeSpec, an env id or an env factory -> EpisodeSpec."""
    if isinstance(task, EpisodeSpec):
        return task
    if isinstance(task, str) or callable(task):
        return EpisodeSpec(env=task)
    raise TypeError(f"task: expected an EpisodeSpec, an env id or an env factory, got {type(task).__name__}")


@dataclasses.dataclass(frozen=True)
class _Episode:
    task: EpisodeSpec
    group_id: int
    sample_index: int


class Actor:
    """Runs episodes concurrently and records them as Trajectories.

    Args:
        engine: any RolloutEngine.
        tokenizer: a jaxrl_agent.data.tokenizers.Tokenizer (encode/decode/token_to_id).
        chat_template: "qwen", "llama3" or a ChatTemplate.
        max_total_tokens: per-episode token budget, prompt included.
        max_turns: per-episode turn budget.
        max_new_tokens: per-turn generation cap (clipped to the remaining budget).
        temperature, top_p, top_k: sampling parameters.
        max_in_flight: episodes running at once.
        max_batch_size: most prompts per engine.generate call.
        generate_concurrency: engine.generate calls in flight at once.
        env_workers: threads running env.reset/step/close.
        step_timeout_s: wall-clock limit of one env.step once started (None: no
            limit); a step past it truncates the episode with info["env_error"].
        observation_role: "tool" (tool-response turn) or "user".
        seed: base sampling seed (see GenerationQueue); None leaves it to the engine.
        lockstep: batch generation only once every running episode waits for
            an action, rows in (group, sample) order (GenerationQueue
            lockstep): with `seed` and max_in_flight >= the episodes of one
            collect, a collect is reproducible run to run (resume = same run).
        reuse_envs: keep finished envs and reset them for later episodes of the
            same env key (building an env can cost far more than an episode);
            `close()` closes them. Envs whose step raised or hung are never reused.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer: Any,
        *,
        chat_template: str | ChatTemplate = "qwen",
        max_total_tokens: int = 4096,
        max_turns: int = 8,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        max_in_flight: int = 256,
        max_batch_size: int = 256,
        generate_concurrency: int = 1,
        env_workers: int = 32,
        step_timeout_s: float | None = 60.0,
        observation_role: str = "tool",
        seed: int | None = None,
        reuse_envs: bool = True,
        lockstep: bool = False,
    ):
        for name, value in [("max_total_tokens", max_total_tokens), ("max_turns", max_turns),
                            ("max_new_tokens", max_new_tokens), ("max_in_flight", max_in_flight),
                            ("max_batch_size", max_batch_size), ("generate_concurrency", generate_concurrency),
                            ("env_workers", env_workers)]:
            check_positive(name, value)
        check_choice("observation_role", observation_role, ("tool", "user"))
        self.engine = engine
        self.tokenizer = tokenizer
        self.template = chat_template if isinstance(chat_template, ChatTemplate) else get_chat_template(chat_template)
        self.stop_ids = stop_token_ids(self.template, tokenizer)
        self.max_total_tokens = max_total_tokens
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                       top_k=top_k, stop_token_ids=self.stop_ids)
        self.max_in_flight = max_in_flight
        self.max_batch_size = max_batch_size
        self.generate_concurrency = generate_concurrency
        self.env_workers = env_workers
        self.step_timeout_s = step_timeout_s
        self.observation_role = observation_role
        self.seed = seed
        self.reuse_envs = reuse_envs
        self.lockstep = lockstep
        self._idle_envs: dict[Any, list[gym.Env]] = {}
        self._env_lock = threading.Lock()
        self._next_group_id = 0
        self._prefix_ids: dict[str, list[int] | bool] = {}  # system-turn text -> ids (False: not separable)
        self._group_lock = threading.Lock()
        self.last_batch_sizes: list[int] = []  # engine batch sizes of the last run

    # ------------------------------------------------------------------ public API

    def collect(self, tasks: Sequence[EpisodeSpec | str | EnvFactory], num_samples_per_task: int = 1) -> list[Trajectory]:
        """Runs G = num_samples_per_task episodes of every task; returns them all.

        Samples of one task share its group_id (same env reset seed/options,
        independent sampling). Output order: task by task, sample by sample.

        Raises:
            EngineError: the engine failed; RuntimeError: env creation/reset failed.
        """
        trajs = list(self.stream(tasks, num_samples_per_task))
        return sorted(trajs, key=lambda t: (t.group_id, t.info["sample_index"]))

    def stream(
        self,
        tasks: Iterable[EpisodeSpec | str | EnvFactory],
        num_samples_per_task: int = 1,
        *,
        groups: bool = False,
        max_buffered: int | None = None,
    ) -> Iterator[Trajectory] | Iterator[list[Trajectory]]:
        """Streams trajectories as episodes finish (for asynchronous training).

        Tasks are drawn lazily from `tasks` (which may be infinite), keeping up to
        max_in_flight episodes running on a background event-loop thread.

        Args:
            tasks: iterable of EpisodeSpec / env id / env factory.
            num_samples_per_task: G samples per task (one group).
            groups: yield whole groups (list of G trajectories, sample order)
                instead of single trajectories.
            max_buffered: pause launching episodes while this many finished
                trajectories wait to be consumed (None: no limit).

        Closing the iterator early cancels the episodes still running.
        """
        check_positive("num_samples_per_task", num_samples_per_task)
        out: queue.Queue = queue.Queue()
        stop = threading.Event()
        done = object()

        def episodes() -> Iterator[_Episode]:
            for task in tasks:
                task = as_episode_spec(task)
                with self._group_lock:
                    gid = task.group_id if task.group_id is not None else self._next_group_id
                    self._next_group_id = max(self._next_group_id, gid + 1)
                for k in range(num_samples_per_task):
                    yield _Episode(task, gid, k)

        def run_loop():
            try:
                asyncio.run(self._main(episodes(), out.put, stop, out.qsize, max_buffered))
                out.put(done)
            except BaseException as e:  # noqa: BLE001  (re-raised in the consumer thread)
                out.put(e)

        thread = threading.Thread(target=run_loop, name="actor-loop", daemon=True)
        thread.start()
        pending_groups: dict[int, list[Trajectory]] = {}
        try:
            while True:
                item = out.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                if not groups:
                    yield item
                    continue
                group = pending_groups.setdefault(item.group_id, [])
                group.append(item)
                if len(group) == num_samples_per_task:
                    del pending_groups[item.group_id]
                    yield sorted(group, key=lambda t: t.info["sample_index"])
        finally:
            stop.set()
            thread.join()

    def close(self) -> None:
        """Closes the idle envs kept for reuse."""
        with self._env_lock:
            envs = [e for idle in self._idle_envs.values() for e in idle]
            self._idle_envs.clear()
        for env in envs:
            env.close()

    def __enter__(self) -> "Actor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _acquire_env(self, task: EpisodeSpec) -> gym.Env:
        """An idle env of the task's key, or a new one (runs in an env worker)."""
        if self.reuse_envs:
            with self._env_lock:
                idle = self._idle_envs.get(task.env_key())
                if idle:
                    return idle.pop()
        return task.make_env()

    def _release_env(self, task: EpisodeSpec, env: gym.Env) -> None:
        if not self.reuse_envs:
            env.close()
            return
        with self._env_lock:
            self._idle_envs.setdefault(task.env_key(), []).append(env)

    # ------------------------------------------------------------------ event loop

    async def _main(self, episodes, emit, stop, buffered, max_buffered) -> None:
        gen = GenerationQueue(self.engine, max_batch_size=self.max_batch_size,
                              concurrency=self.generate_concurrency, seed=self.seed,
                              lockstep=self.lockstep)
        pool = concurrent.futures.ThreadPoolExecutor(self.env_workers, thread_name_prefix="env")
        dispatcher = asyncio.create_task(gen.run())
        slots = asyncio.Semaphore(self.max_in_flight)
        running: set[asyncio.Task] = set()
        errors: list[BaseException] = []

        def finished(task: asyncio.Task):
            running.discard(task)
            gen.unregister()
            slots.release()
            if task.cancelled():
                return
            if task.exception() is not None:
                errors.append(task.exception())
            else:
                emit(task.result())

        try:
            for ep in episodes:
                if not slots.locked():
                    await slots.acquire()  # a free slot: no yield, launch right away
                else:
                    acquire = asyncio.ensure_future(slots.acquire())
                    while not acquire.done() and not stop.is_set() and not errors:
                        await asyncio.wait({acquire}, timeout=0.1)  # wake up now and then to see a stop
                    if not acquire.done():
                        acquire.cancel()
                        break
                while max_buffered is not None and buffered() >= max_buffered and not stop.is_set():
                    await asyncio.sleep(0.01)
                if stop.is_set() or errors:
                    slots.release()
                    break
                task = asyncio.create_task(self._episode(ep, gen, pool))
                gen.register()
                running.add(task)
                task.add_done_callback(finished)
            while running and not errors and not stop.is_set():
                await asyncio.wait(set(running), timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in list(running):
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            dispatcher.cancel()
            await asyncio.gather(dispatcher, return_exceptions=True)
            pool.shutdown(wait=False, cancel_futures=True)
            self.last_batch_sizes = gen.batch_sizes
        if errors:
            raise errors[0]

    def _encode_prompt(self, system: str | None, user: str) -> list[int]:
        """Token ids of template.prompt(system, user), reusing the ids of the system turn.

        The system turn ends with a special token, so tokenizing it apart does
        not change the ids; this is checked once per distinct system prompt
        (falling back to whole-prompt encoding on a mismatch).
        """
        full = self.template.prompt(system, user)
        prefix = self.template.prompt(system, "").split(self.template.header.format(role="user"))[0]
        cached = self._prefix_ids.get(prefix)
        if cached is None:
            ids = self.tokenizer.encode(full)
            prefix_ids = self.tokenizer.encode(prefix)
            ok = ids[: len(prefix_ids)] == prefix_ids and ids[len(prefix_ids):] == self.tokenizer.encode(full[len(prefix):])
            if len(self._prefix_ids) < 64:
                self._prefix_ids[prefix] = prefix_ids if ok else False
            return ids
        if cached is False:
            return self.tokenizer.encode(full)
        return cached + self.tokenizer.encode(full[len(prefix):])

    async def _in_pool(self, pool, fn, *args, timeout: float | None = None, **kwargs):
        """Runs fn in the env pool; the timeout counts from when a worker starts it."""
        loop = asyncio.get_running_loop()
        started = loop.create_future()

        def call():
            loop.call_soon_threadsafe(lambda: started.done() or started.set_result(None))
            return fn(*args, **kwargs)

        cfut = pool.submit(call)
        afut = asyncio.wrap_future(cfut)
        if timeout is None:
            return await afut
        await started
        return await asyncio.wait_for(asyncio.shield(afut), timeout)

    async def _episode(self, ep: _Episode, gen: GenerationQueue, pool) -> Trajectory:
        t0 = time.perf_counter()
        try:
            env = await self._in_pool(pool, self._acquire_env, ep.task)
            obs, reset_info = await self._in_pool(pool, env.reset, seed=ep.task.seed,
                                                  options=dict(ep.task.options) if ep.task.options else None)
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"task {ep.task!r}: env creation/reset failed: {type(e).__name__}: {e}") from e
        rec = EpisodeRecord(group_id=ep.group_id, sample_index=ep.sample_index, reset_info=reset_info)
        rec.add_prompt(self._encode_prompt(reset_info.get("system_prompt"), obs))
        # Cancellation or an engine error propagates and drops the env (it may be
        # mid-step in a worker); a broken or hung env is never reused.
        hung = await self._turns(rec, env, gen, pool)
        if "env_error" in rec.info and not hung:
            pool.submit(env.close)
        elif not hung:
            self._release_env(ep.task, env)
        rec.info["wall_s"] = time.perf_counter() - t0
        return rec.to_trajectory()

    async def _turns(self, rec: EpisodeRecord, env: gym.Env, gen: GenerationQueue, pool) -> bool:
        """Runs the turns of one episode into `rec`; returns True when env.step hung."""
        if len(rec.tokens) >= self.max_total_tokens:
            rec.truncate("context")
            return False
        for turn in range(self.max_turns):
            requested = min(self.max_new_tokens, self.max_total_tokens - len(rec.tokens))
            sampling = dataclasses.replace(self.sampling, max_new_tokens=requested)
            t = time.perf_counter()
            out = await gen.generate(list(rec.tokens), sampling, order=(rec.group_id, rec.info["sample_index"]))
            rec.info["generate_s"] += time.perf_counter() - t
            rec.add_action(out.output_ids, out.logprobs, parse_weight_version(out.weight_version),
                           out.finish_reason)
            if out.finish_reason == "abort":
                rec.info["aborted"] = True
                rec.truncate("abort")
                return False
            closed = bool(out.output_ids) and out.output_ids[-1] in self.stop_ids
            if out.finish_reason == "length" and (len(rec.tokens) >= self.max_total_tokens
                                                 or len(out.output_ids) < requested):
                rec.truncate("context")  # the token budget (ours or the engine's context) is spent
                return False
            action, _ = self.template.strip_stop(self.tokenizer.decode(out.output_ids))
            t = time.perf_counter()
            try:
                obs, reward, terminated, truncated, info = await self._in_pool(
                    pool, env.step, action, timeout=self.step_timeout_s)
            except asyncio.TimeoutError:
                rec.env_failed(f"env.step timed out after {self.step_timeout_s} s", terminated=False)
                return True
            except Exception as e:  # noqa: BLE001  (a failing env ends its episode, not the actor)
                rec.env_failed(f"{type(e).__name__}: {e}", terminated=True)
                return False
            finally:
                rec.info["env_s"] += time.perf_counter() - t
            rec.add_step_result(float(reward), info)
            if terminated or truncated:
                rec.finish(terminated=bool(terminated), reason="env" if truncated else None)
                return False
            if turn == self.max_turns - 1:
                rec.truncate("max_turns")
                return False
            suffix = self.tokenizer.encode(
                self.template.observation(str(obs), turn_closed=closed, role=self.observation_role))
            if len(rec.tokens) + len(suffix) + 1 > self.max_total_tokens:
                rec.truncate("context")
                return False
            rec.add_observation(suffix)
        return False
