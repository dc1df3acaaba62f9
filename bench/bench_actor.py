"""Actor throughput with 256 episodes in flight against the instant ScriptedEngine.

Measures, on the calculator env (a real tool call every turn):
  - environment steps/s and tool calls/s,
  - wall time per generated token (us) for short and long actions, and the
    marginal actor cost per generated token (difference of the two runs),
    which is the actor's own overhead: the engine is instant.

Usage: python bench/bench_actor.py [--episodes 512] [--in_flight 256] [--turns 4]
"""

from __future__ import annotations

import argparse
import platform
import time

from jaxrl_agent.agent.actor import Actor, EpisodeSpec
from jaxrl_agent.agent.tool_calls import format_tool_call
from jaxrl_agent.data.tokenizers import train_debug_tokenizer
from jaxrl_agent.rollout.scripted import ScriptedEngine

CALC = "jaxrl_agent/Calculator-v0"


def run(actor: Actor, episodes: int, turns: int) -> dict:
    specs = [EpisodeSpec(CALC, options={"task_index": i % 64}, env_kwargs={"num_tasks": 64, "max_turns": turns})
             for i in range(episodes)]
    start = time.perf_counter()
    trajs = actor.collect(specs)
    wall = time.perf_counter() - start
    steps = sum(t.num_steps for t in trajs)
    tool_calls = sum(t.info["tool_calls"] for t in trajs)
    generated = sum(int(t.loss_mask.sum()) for t in trajs)
    return dict(wall_s=wall, steps=steps, tool_calls=tool_calls, generated=generated,
                steps_per_s=steps / wall, tool_calls_per_s=tool_calls / wall, us_per_token=1e6 * wall / generated)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--in_flight", type=int, default=256)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    tok = train_debug_tokenizer()
    call = format_tool_call("calculator", {"expression": "12 * 34"})
    results = {}
    for name, pad in (("short", 0), ("long", 200)):
        # A tool call padded with plain text: `pad` more generated tokens per turn.
        action = tok.encode("ok " * pad + call + "<|im_end|>")
        engine = ScriptedEngine(lambda ids, a=action: a)
        with Actor(engine, tok, max_total_tokens=8192, max_turns=args.turns, max_new_tokens=512,
                   max_in_flight=args.in_flight, max_batch_size=args.in_flight) as actor:
            run(actor, min(args.episodes, args.in_flight), args.turns)  # warm up: builds the envs
            results[name] = r = run(actor, args.episodes, args.turns)
        print(f"{name:5s} action={len(action)} tokens: {r['steps_per_s']:.0f} env steps/s, "
              f"{r['tool_calls_per_s']:.0f} tool calls/s, {r['us_per_token']:.1f} us/generated token "
              f"({r['steps']} steps, {r['generated']} tokens, {r['wall_s']:.2f} s)")
    s, l = results["short"], results["long"]
    marginal = 1e6 * (l["wall_s"] - s["wall_s"]) / (l["generated"] - s["generated"])
    print(f"marginal actor cost per generated token: {marginal:.2f} us")
    print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}")


if __name__ == "__main__":
    main()
