"""`ToolEnv`: a Gymnasium environment whose actions and observations are text.

One episode is one task. `reset` returns the user's task text as the first
observation and, in `info`, what the actor needs to build the prompt
(`system_prompt` with the tool descriptions in Hermes/Qwen style, `task_id`,
`split`). Each `step(action_text)` parses the action
(`jaxrl_agent.agent.tool_calls.parse_action`):

- an `<answer>...</answer>` ends the episode (terminated=True) with the
  verifier's outcome reward; tool calls in the same action are not run;
- otherwise the valid tool calls are run in order and the observation is the
  tool responses, each wrapped in `<tool_response>...</tool_response>`
  (Qwen's chat-template convention), followed by one `Error: ...` response per
  invalid call;
- an action with neither is a "no action" turn (penalty, hint observation).

After `max_turns` turns without an answer the episode is truncated
(truncated=True, terminated=False: the state is not terminal). Rewards are
documented in `rewards.py`.

Spaces: observations and nominal actions are `gymnasium.spaces.Text` over
`CHARSET` (printable ASCII: string.printable). Observations are made ASCII
with backslash escapes (`"é"` -> `"\\xe9"`) and cut to `MAX_OBS_CHARS`;
`step` accepts any `str` (parsed up to tool_calls.MAX_ACTION_CHARS chars),
the action space's max_length only bounds `action_space.sample()`.

Per-step `info` (reward-hacking monitors read these):
    turn, task_id, split, tool_calls (valid calls run this turn),
    tool_errors (calls that ran but failed), invalid_tool_call (parse or
    validation errors this turn), no_action (bool), clarifying_question (bool:
    no call/answer and the text ends with '?'), answer (str | None), correct
    (bool | None), answer_without_evidence (bool: answered with no successful
    tool call in the episode), tool_latency_s (this turn), tool_names,
    tool_responses, reward_parts {outcome, format, process, truncation}, and
    episode totals: tool_calls_total, successful_tool_calls_total,
    invalid_tool_call_total, no_action_total, clarifying_question_total,
    tool_latency_total_s.
"""

from __future__ import annotations

import re
import string
from typing import Any, Mapping, Sequence

import gymnasium as gym

from jaxrl_agent.agent.tool_calls import parse_action, render_tools_prompt
from jaxrl_agent.environments.rewards import RewardConfig
from jaxrl_agent.environments.tasks.base import Task
from jaxrl_agent.environments.tools.base import Tool

CHARSET = string.printable  # digits, letters, punctuation, space, \t \n \r \x0b \x0c
MAX_OBS_CHARS = 8192
MAX_ACTION_SAMPLE_CHARS = 2048
NO_ACTION_HINT = ("Error: no tool call or answer found. Call a tool with <tool_call>{\"name\": ..., "
                  "\"arguments\": {...}}</tool_call> or give the final answer as <answer>...</answer>.")
ANSWER_INSTRUCTIONS = ("Think step by step. Call tools when needed; you will see their results. "
                       "When you know the final answer, reply with <answer>your answer</answer>.")
_USABLE_RESULT_CHARS = 64
_NOT_IN_CHARSET = re.compile(f"[^{re.escape(CHARSET)}]")


def to_observation(text: str) -> str:
    """Makes `text` a member of the observation space: ASCII escapes, cut to MAX_OBS_CHARS."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = _NOT_IN_CHARSET.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if len(text) > MAX_OBS_CHARS:
        marker = "\n...[observation truncated]"
        text = text[: MAX_OBS_CHARS - len(marker)] + marker
    return text


class ToolEnv(gym.Env):
    """Base class of the text tool environments; subclasses provide tasks, tools and a verifier.

    Subclasses implement `_load_tasks(split)`, `_make_tools()`, `_verify(task, answer)` and may
    override `instructions` (the head of the system prompt).

    Args:
        split: task split ("train", "test", "ood"; HumanEval: "test").
        max_turns: turn budget; reaching it without an answer truncates the episode.
        rewards: RewardConfig or a dict of overrides (see rewards.py).
        render_mode: None or "ansi" (render() returns the transcript).

    Raises:
        ValueError: unknown split or render_mode, max_turns < 1, empty split.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # fps is meaningless for text; set to silence gymnasium
    instructions = "You are a helpful assistant that solves tasks with tools."

    def __init__(self, split: str = "train", max_turns: int = 6,
                 rewards: RewardConfig | Mapping[str, Any] | None = None, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: unknown value {render_mode!r}; expected None or 'ansi'")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns: expected an int >= 1, got {max_turns!r}")
        self.split = split
        self.max_turns = max_turns
        self.rewards = RewardConfig.make(rewards)
        self.render_mode = render_mode
        self.tasks: list[Task] = list(self._load_tasks(split))
        if not self.tasks:
            raise ValueError(f"split: {split!r} holds no tasks")
        self._task_index = {t.task_id: i for i, t in enumerate(self.tasks)}
        self.tools: dict[str, Tool] = {t.name: t for t in self._make_tools()}
        self._specs = {name: t.spec for name, t in self.tools.items()}
        self.system_prompt = f"{self.instructions}\n{ANSWER_INSTRUCTIONS}\n\n{render_tools_prompt(list(self._specs.values()))}"
        self.observation_space = gym.spaces.Text(max_length=MAX_OBS_CHARS, min_length=0, charset=CHARSET)
        self.action_space = gym.spaces.Text(max_length=MAX_ACTION_SAMPLE_CHARS, min_length=0, charset=CHARSET)
        self.task: Task | None = None
        self._done = True

    # ---- subclass hooks ----
    def _load_tasks(self, split: str) -> Sequence[Task]:
        raise NotImplementedError

    def _make_tools(self) -> Sequence[Tool]:
        raise NotImplementedError

    def _verify(self, task: Task, answer: str) -> bool:
        raise NotImplementedError

    # ---- gymnasium API ----
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Starts an episode on a task drawn with the env's RNG, or the one named in options.

        Args:
            seed: seeds the env RNG (gymnasium semantics).
            options: {"task_id": str} or {"task_index": int} to pick the task.

        Raises:
            ValueError: unknown option, task_id or out-of-range task_index.
        """
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"task_id", "task_index"})
        if unknown:
            raise ValueError(f"options: unknown keys {unknown}; expected 'task_id' or 'task_index'")
        if "task_id" in options:
            if options["task_id"] not in self._task_index:
                raise ValueError(f"options['task_id']: {options['task_id']!r} is not in split {self.split!r}")
            index = self._task_index[options["task_id"]]
        elif "task_index" in options:
            index = int(options["task_index"])
            if not 0 <= index < len(self.tasks):
                raise ValueError(f"options['task_index']: expected 0 <= index < {len(self.tasks)}, got {index}")
        else:
            index = int(self.np_random.integers(len(self.tasks)))
        self.task = self.tasks[index]
        self._done = False
        self._turn = 0
        self._totals = dict(tool_calls_total=0, successful_tool_calls_total=0, invalid_tool_call_total=0,
                            no_action_total=0, clarifying_question_total=0, tool_latency_total_s=0.0)
        self._usable_results: list[str] = []
        obs = to_observation(self.task.prompt)
        self._transcript = [f"[user]\n{obs}"]
        info = {"system_prompt": self.system_prompt, "task_id": self.task.task_id, "split": self.split,
                "max_turns": self.max_turns, "tools": sorted(self.tools)}
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Applies one action; see the module docstring for observations, rewards and info.

        Raises:
            RuntimeError: step before reset or after the episode ended.
            TypeError: when `action` is not a str.
        """
        if self.task is None or self._done:
            raise RuntimeError("step() called before reset() or after the episode ended; call reset()")
        if not isinstance(action, str):
            raise TypeError(f"action: expected str, got {type(action).__name__}")
        self._turn += 1
        parsed = parse_action(action, self._specs)
        parts = {"outcome": 0.0, "format": self.rewards.invalid_tool_call * len(parsed.errors) if parsed.errors else 0.0,
                 "process": self._process_reward(action), "truncation": 0.0}
        info: dict[str, Any] = {"turn": self._turn, "task_id": self.task.task_id, "split": self.split,
                                "tool_calls": 0, "tool_errors": 0, "invalid_tool_call": len(parsed.errors),
                                "no_action": False, "clarifying_question": False, "answer": parsed.answer,
                                "correct": None, "answer_without_evidence": False, "tool_latency_s": 0.0,
                                "tool_names": [], "tool_responses": [], "parse_errors": list(parsed.errors)}
        terminated = False
        if parsed.answer is not None:
            correct = bool(self._verify(self.task, parsed.answer))
            parts["outcome"] = self.rewards.correct if correct else self.rewards.incorrect
            info["correct"] = correct
            info["answer_without_evidence"] = self._totals["successful_tool_calls_total"] == 0
            terminated, obs = True, ""
        else:
            responses = [self._run_call(call, info) for call in parsed.tool_calls]
            responses += [f"Error: invalid tool call: {e}" for e in parsed.errors]
            if not responses:
                info["no_action"] = True
                info["clarifying_question"] = action.rstrip().endswith("?")
                parts["format"] += self.rewards.no_action
                responses = [NO_ACTION_HINT]
            info["tool_responses"] = list(responses)
            obs = to_observation("\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in responses))
        truncated = not terminated and self._turn >= self.max_turns
        if truncated:
            parts["truncation"] = self.rewards.truncated
        self._done = terminated or truncated
        self._update_totals(info)
        info["reward_parts"] = parts
        self._transcript += [f"[assistant]\n{action}", f"[environment]\n{obs}"] if obs else [f"[assistant]\n{action}"]
        return obs, float(sum(parts.values())), terminated, truncated, info

    def render(self) -> str | None:
        """"ansi": the transcript so far; None otherwise."""
        if self.render_mode != "ansi":
            return None
        return "\n\n".join(getattr(self, "_transcript", []))

    def close(self) -> None:
        self.task, self._done = None, True

    # ---- helpers ----
    def _run_call(self, call, info: dict[str, Any]) -> str:
        result = self.tools[call.name](call.arguments)
        info["tool_calls"] += 1
        info["tool_names"].append(call.name)
        info["tool_latency_s"] += result.latency_s
        if result.ok:
            self._totals["successful_tool_calls_total"] += 1
            value = result.text.strip()
            if 0 < len(value) <= _USABLE_RESULT_CHARS:
                self._usable_results.append(value)
        else:
            info["tool_errors"] += 1
        return result.text

    def _process_reward(self, action: str) -> float:
        """`used_result` once per earlier successful tool result that reappears in this action."""
        if not self.rewards.used_result or not self._usable_results:
            return 0.0
        used = [r for r in self._usable_results if re.search(rf"(?<![\w.]){re.escape(r)}(?![\w]|\.\d)", action)]
        self._usable_results = [r for r in self._usable_results if r not in used]
        return self.rewards.used_result * len(used)

    def _update_totals(self, info: dict[str, Any]) -> None:
        t = self._totals
        t["tool_calls_total"] += info["tool_calls"]
        t["invalid_tool_call_total"] += info["invalid_tool_call"]
        t["no_action_total"] += int(info["no_action"])
        t["clarifying_question_total"] += int(info["clarifying_question"])
        t["tool_latency_total_s"] += info["tool_latency_s"]
        info.update(t)
