"""Calculator-env throughput: environment steps/s and tool calls/s on scripted gold actions.

One process, one env, stepping the gold demonstrations (one calculator call per
turn, then the answer) of many tasks; reset time is included. The actor
benchmark measures the many-episodes-in-flight case.

    /work/venv/bin/python bench/bench_envs.py --seconds 5 --out /tmp/bench_envs.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

import gymnasium as gym

import jaxrl_agent.environments as E


def run(seconds: float) -> dict[str, float]:
    """Steps scripted episodes for about `seconds`; returns steps/s, tool calls/s, episodes/s."""
    env = gym.make("jaxrl_agent/Calculator-v0", split="train", num_tasks=500)
    scripts = [E.gold_actions(t) for t in env.unwrapped.tasks]
    steps = calls = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.reset(options={"task_index": episodes % len(scripts)})
        for action in scripts[episodes % len(scripts)]:
            _, _, terminated, truncated, info = env.step(action)
            steps += 1
            calls += info["tool_calls"]
            if terminated or truncated:
                break
        assert info["correct"], "a gold episode must succeed"
        episodes += 1
    elapsed = time.perf_counter() - start
    return {"steps_per_s": steps / elapsed, "tool_calls_per_s": calls / elapsed, "episodes_per_s": episodes / elapsed,
            "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default=None, help="markdown file to write (e.g. /tmp/bench_envs.md; paste the table into docs/benchmarks.md)")
    args = parser.parse_args()
    r = run(args.seconds)
    cpu = platform.processor() or platform.machine()
    text = (
        "# Environment benchmarks\n\n"
        "Calculator env (`jaxrl_agent/Calculator-v0`), one process, one env, scripted gold actions "
        "(one calculator call per turn, then `<answer>`), resets included.\n\n"
        f"- date: {datetime.date.today().isoformat()}\n"
        f"- hardware: {cpu}, {os.cpu_count()} CPU cores visible (shared with other jobs; load average "
        f"{os.getloadavg()[0]:.1f}), Python {platform.python_version()}\n"
        f"- command: `/work/venv/bin/python bench/bench_envs.py --seconds {args.seconds:g} --out /tmp/bench_envs.md`\n\n"
        "| metric | value |\n|---|---|\n"
        f"| env steps / s | {r['steps_per_s']:.0f} |\n"
        f"| tool calls / s | {r['tool_calls_per_s']:.0f} |\n"
        f"| episodes / s | {r['episodes_per_s']:.0f} |\n"
    )
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
