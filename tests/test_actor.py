"""Multi-turn actor on the calculator env with the ScriptedEngine: exact arrays, budgets,
groups, 256 episodes in flight, slow/hung/raising tools."""

import re
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from jaxrl_agent.agent.actor import Actor, EpisodeSpec
from jaxrl_agent.agent.chat import LLAMA3, QWEN
from jaxrl_agent.agent.generation import EngineError
from jaxrl_agent.data.tokenizers import train_debug_tokenizer
from jaxrl_agent.environments import gold_actions, to_observation
from jaxrl_agent.rollout.engine import SamplingParams
from jaxrl_agent.rollout.scripted import ScriptedAction, ScriptedEngine

CALC = "jaxrl_agent/Calculator-v0"
ENV_KW = {"split": "train", "num_tasks": 16}
CALL_1X1 = '<tool_call>{"name": "calculator", "arguments": {"expression": "1 * 1"}}</tool_call>'


def spec(i, **kw):
    return EpisodeSpec(CALC, options={"task_index": i}, env_kwargs={**ENV_KW, **kw})


@pytest.fixture(scope="module")
def tok():
    return train_debug_tokenizer()


@pytest.fixture(scope="module")
def calc():
    return gym.make(CALC, **ENV_KW).unwrapped


def gold_policy(tok, calc, template=QWEN):
    """Replays the task's gold demonstration: action k on turn k (k = assistant headers - 1)."""
    gold = {to_observation(t.prompt): gold_actions(t) for t in calc.tasks}
    user_header = re.escape(template.header.format(role="user"))

    def policy(ids):
        text = tok.decode(ids)
        user = re.search(user_header + r"(.*?)" + re.escape(template.end_of_turn), text, re.S).group(1)
        turn = text.count(template.assistant_header()) - 1
        return gold[user][turn] + template.end_of_turn
    return policy


class StepHook(gym.Wrapper):
    """Calls `hook()` before every env.step (a slow, hung or failing tool)."""

    def __init__(self, env, hook):
        super().__init__(env)
        self.hook = hook

    def step(self, action):
        self.hook()
        return self.env.step(action)


def hooked(hook):
    return EpisodeSpec(lambda: StepHook(gym.make(CALC, **ENV_KW), hook), options={"task_index": 3})


def test_exact_trajectory(tok, calc):
    engine = ScriptedEngine(gold_policy(tok, calc), tokenizer=tok, logprob=lambda t, i: -(i + 1) / 100,
                            weight_version="step-7")
    with Actor(engine, tok, max_total_tokens=1024, max_turns=4) as actor:
        [traj] = actor.collect([spec(3)])
    assert calc.tasks[3].task_id == "arith-2-11-3-2"  # the task written out below
    prompt = tok.encode(
        "<|im_start|>system\n" + calc.system_prompt + "<|im_end|>\n<|im_start|>user\nA shop sells 11 red pens "
        "and 3 blue pens each day. How many pens does the shop sell in 2 days? Use the calculator for each "
        "step.<|im_end|>\n<|im_start|>assistant\n")
    act0 = tok.encode('<tool_call>{"name": "calculator", "arguments": {"expression": "11 + 3"}}</tool_call><|im_end|>')
    obs0 = tok.encode("\n<|im_start|>user\n<tool_response>\n14\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    act1 = tok.encode('<tool_call>{"name": "calculator", "arguments": {"expression": "14 * 2"}}</tool_call><|im_end|>')
    obs1 = tok.encode("\n<|im_start|>user\n<tool_response>\n28\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    act2 = tok.encode("<answer>28</answer><|im_end|>")
    p, a0, o0, a1, o1, a2 = map(len, (prompt, act0, obs0, act1, obs1, act2))
    np.testing.assert_array_equal(traj.tokens, prompt + act0 + obs0 + act1 + obs1 + act2)
    np.testing.assert_array_equal(traj.loss_mask, [0] * p + [1] * a0 + [0] * o0 + [1] * a1 + [0] * o1 + [1] * a2)
    np.testing.assert_array_equal(traj.step_ids, [-1] * p + [0] * (a0 + o0) + [1] * (a1 + o1) + [2] * a2)

    def lp(n):
        return [-(i + 1) / 100 for i in range(n)]
    expected_lp = [0.0] * p + lp(a0) + [0.0] * o0 + lp(a1) + [0.0] * o1 + lp(a2)
    np.testing.assert_array_equal(traj.rollout_logprobs, np.float32(expected_lp))
    np.testing.assert_array_equal(traj.step_rewards, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(traj.weight_versions, [7, 7, 7])
    assert traj.tokens.dtype == np.int32 and traj.weight_versions.dtype == np.int32
    assert (traj.terminated, traj.truncated, traj.group_id) == (True, False, 0)
    info = traj.info
    assert info["task_id"] == "arith-2-11-3-2" and info["finish_reasons"] == ["stop"] * 3
    assert (info["tool_calls"], info["invalid_tool_calls"], info["num_turns"]) == (2, 0, 3)
    counters = info["env_counters"]
    assert counters["tool_calls_total"] == 2 and counters["correct"] == 1 and counters["reward_parts/outcome"] == 1.0
    assert info["truncation"] is None and "env_error" not in info and info["prompt_tokens"] == p


@pytest.mark.parametrize("template", [QWEN, LLAMA3])
def test_decoded_episode_equals_rendered_messages(tok, calc, template):
    engine = ScriptedEngine(gold_policy(tok, calc, template), tokenizer=tok)
    [traj] = Actor(engine, tok, chat_template=template).collect([spec(0)])
    actions = gold_actions(calc.tasks[0])
    msgs = [{"role": "system", "content": calc.system_prompt}, {"role": "user", "content": calc.tasks[0].prompt},
            {"role": "assistant", "content": actions[0]}, {"role": "tool", "content": "<tool_response>\n3\n</tool_response>"},
            {"role": "assistant", "content": actions[1]}, {"role": "tool", "content": "<tool_response>\n12\n</tool_response>"},
            {"role": "assistant", "content": actions[2]}]
    rendered = template.render_messages(msgs)
    assert tok.decode(traj.tokens) == rendered[: len(rendered) - len(template.turn_separator)]
    assert traj.score == 1.0


def test_truncation_by_turns(tok):
    engine = ScriptedEngine(lambda ids: CALL_1X1 + "<|im_end|>", tokenizer=tok)
    actor = Actor(engine, tok, max_turns=3)
    [traj] = actor.collect([spec(0)])
    assert (traj.terminated, traj.truncated, traj.num_steps) == (False, True, 3)
    assert traj.info["truncation"] == "max_turns" and traj.info["tool_calls"] == 3
    assert traj.loss_mask[-1] and traj.step_ids[-1] == 2  # ends with the last action, no observation
    assert traj.tokens[-1] == tok.eos_id
    [traj] = actor.collect([spec(0, max_turns=2)])  # the env's own turn limit
    assert traj.truncated and traj.num_steps == 2 and traj.info["truncation"] == "env"


class RecordingEngine(ScriptedEngine):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = []

    def generate(self, prompts, sampling: SamplingParams):
        self.requests += [(len(p), sampling.max_new_tokens) for p in prompts]
        return super().generate(prompts, sampling)


def test_truncation_by_tokens_clips_max_new_tokens(tok, calc):
    engine = RecordingEngine(lambda ids: CALL_1X1 + "<|im_end|>", tokenizer=tok)
    prompt_len = len(tok.encode(QWEN.prompt(calc.system_prompt, calc.tasks[0].prompt)))
    act = len(tok.encode(CALL_1X1 + "<|im_end|>"))
    obs = len(tok.encode(QWEN.observation("<tool_response>\n1\n</tool_response>", turn_closed=True)))
    budget = prompt_len + act + obs + act // 2  # the second action is cut at the budget
    [traj] = Actor(engine, tok, max_total_tokens=budget, max_new_tokens=act + 5).collect([spec(0)])
    assert engine.requests == [(prompt_len, act + 5), (prompt_len + act + obs, act // 2)]
    assert traj.num_tokens == budget and (traj.truncated, traj.terminated) == (True, False)
    assert traj.info["truncation"] == "context" and traj.info["finish_reasons"] == ["stop", "length"]
    np.testing.assert_array_equal(traj.step_rewards, [0.0, 0.0])
    assert traj.loss_mask[-(act // 2):].all()
    # An observation that does not fit (with one token to spare) ends the episode before it.
    engine.requests.clear()
    [traj] = Actor(engine, tok, max_total_tokens=prompt_len + act + obs).collect([spec(0)])
    assert traj.num_tokens == prompt_len + act and traj.truncated and traj.info["truncation"] == "context"
    assert len(engine.requests) == 1


def test_length_finish_below_budget_closes_turn(tok):
    # Per-turn cap of 5 tokens: the action is cut (no <|im_end|>), the env still steps
    # (an invalid call), and the observation suffix closes the assistant turn.
    engine = ScriptedEngine(lambda ids: CALL_1X1 + "<|im_end|>", tokenizer=tok)
    [traj] = Actor(engine, tok, max_new_tokens=5, max_turns=2).collect([spec(0)])
    assert traj.info["finish_reasons"] == ["length", "length"] and traj.info["invalid_tool_calls"] == 2
    np.testing.assert_allclose(traj.step_rewards, [-0.1, -0.1])
    first_obs = tok.decode(traj.tokens[(traj.step_ids == 0) & ~traj.loss_mask])
    assert first_obs.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\nError: invalid tool call")
    assert first_obs.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_abort_truncates(tok):
    engine = ScriptedEngine(lambda ids: ScriptedAction("<answer>1", finish_reason="abort"), tokenizer=tok)
    [traj] = Actor(engine, tok).collect([spec(0)])
    assert traj.truncated and traj.info["aborted"] and traj.info["truncation"] == "abort"
    assert traj.num_steps == 1 and traj.loss_mask.sum() == len(tok.encode("<answer>1"))


def test_group_ids_and_samples(tok, calc):
    actor = Actor(ScriptedEngine(gold_policy(tok, calc), tokenizer=tok), tok)
    trajs = actor.collect([spec(i) for i in (5, 6, 7)], num_samples_per_task=4)
    assert [t.group_id for t in trajs] == [0] * 4 + [1] * 4 + [2] * 4
    assert [t.info["sample_index"] for t in trajs] == [0, 1, 2, 3] * 3
    assert [t.info["task_id"] for t in trajs] == [calc.tasks[i].task_id for i in (5, 6, 7) for _ in range(4)]
    more = actor.collect([spec(1)], num_samples_per_task=2)  # ids keep counting
    assert [t.group_id for t in more] == [3, 3]
    groups = list(actor.stream([spec(i) for i in range(3)], 2, groups=True))
    assert sorted(len(g) for g in groups) == [2, 2, 2]
    assert all(g[0].group_id == g[1].group_id and g[0].info["task_id"] == g[1].info["task_id"] for g in groups)
    actor.close()


def test_256_episodes_in_flight(tok, calc):
    lock, live = threading.Lock(), {"now": 0, "max": 0}

    class Counting(gym.Wrapper):  # episodes between reset and their last step
        def reset(self, **kw):
            with lock:
                live["now"] += 1
                live["max"] = max(live["max"], live["now"])
            return self.env.reset(**kw)

        def step(self, action):
            out = self.env.step(action)
            if out[2] or out[3]:
                with lock:
                    live["now"] -= 1
            return out

    def make():
        return Counting(gym.make(CALC, **ENV_KW))
    engine = ScriptedEngine(gold_policy(tok, calc), tokenizer=tok)
    with Actor(engine, tok, max_in_flight=256) as actor:
        trajs = actor.collect([EpisodeSpec(make, options={"task_index": i % 16}) for i in range(256)])
    assert len(trajs) == 256 and all(t.terminated and t.score == 1.0 for t in trajs)
    assert live == {"now": 0, "max": 256}
    assert max(engine.batch_sizes) > 1 and engine.num_requests == sum(t.num_steps for t in trajs)


def test_infinite_stream_closes_early(tok, calc):
    actor = Actor(ScriptedEngine(gold_policy(tok, calc), tokenizer=tok), tok, max_in_flight=8)

    def forever():
        i = 0
        while True:
            yield spec(i % 16)
            i += 1

    it = actor.stream(forever(), max_buffered=4)
    got = [next(it) for _ in range(10)]
    it.close()
    assert len(got) == 10 and all(t.terminated for t in got)


def test_hung_tool_does_not_block_others(tok, calc):
    release = threading.Event()
    actor = Actor(ScriptedEngine(gold_policy(tok, calc), tokenizer=tok), tok, step_timeout_s=0.5, env_workers=4)
    start = time.perf_counter()
    try:
        trajs = actor.collect([hooked(lambda: release.wait(20))] + [spec(i) for i in range(16)])
    finally:
        release.set()
    assert time.perf_counter() - start < 5.0
    assert trajs[0].truncated and "timed out" in trajs[0].info["env_error"]
    assert trajs[0].info["truncation"] == "env_timeout" and trajs[0].num_steps == 1
    assert all(t.terminated and t.score == 1.0 for t in trajs[1:])


def test_slow_tool_does_not_delay_others(tok, calc):
    actor = Actor(ScriptedEngine(gold_policy(tok, calc), tokenizer=tok), tok, step_timeout_s=None, env_workers=4)
    start = time.perf_counter()
    specs = [hooked(lambda: time.sleep(0.7))] + [spec(i) for i in range(8)]
    arrivals = [(t.info["task_id"], time.perf_counter() - start) for t in actor.stream(specs)]
    assert arrivals[-1][0] == calc.tasks[3].task_id and arrivals[-1][1] >= 2.1  # three slow steps
    assert max(t for _, t in arrivals[:-1]) < 0.7


def test_env_step_raising_becomes_terminated_episode(tok, calc):
    def boom():
        raise ZeroDivisionError("tool crashed")

    trajs = Actor(ScriptedEngine(gold_policy(tok, calc), tokenizer=tok), tok).collect([hooked(boom), spec(1)])
    assert trajs[0].terminated and not trajs[0].truncated
    assert trajs[0].info["env_error"] == "ZeroDivisionError: tool crashed"
    np.testing.assert_array_equal(trajs[0].step_rewards, [0.0])
    assert trajs[1].terminated and trajs[1].score == 1.0


def test_engine_error_propagates(tok):
    def broken(ids):
        raise RuntimeError("server down")

    with pytest.raises(EngineError, match="server down"):
        Actor(ScriptedEngine(broken, tokenizer=tok), tok).collect([spec(0)] * 3)


def test_bad_arguments(tok):
    engine = ScriptedEngine(lambda ids: "x", tokenizer=tok)
    with pytest.raises(ValueError, match="max_turns"):
        Actor(engine, tok, max_turns=0)
    with pytest.raises(ValueError, match="chat_template"):
        Actor(engine, tok, chat_template="vicuna")
    with pytest.raises(TypeError, match="task"):
        Actor(engine, tok).collect([3])
    with pytest.raises(RuntimeError, match="reset failed.*task_index"):
        Actor(engine, tok).collect([spec(999)])


def test_scripted_engine_contract(tok):
    stop = tok.eos_id
    engine = ScriptedEngine(lambda ids: [5, 6, stop, 7], logprob=-0.25, weight_version="3")
    [out] = engine.generate([[1, 2]], SamplingParams(max_new_tokens=8, stop_token_ids=(stop,)))
    assert (out.output_ids, out.logprobs, out.finish_reason) == ([5, 6, stop], [-0.25] * 3, "stop")
    [out] = engine.generate([[1]], SamplingParams(max_new_tokens=2, stop_token_ids=(stop,)))
    assert (out.output_ids, out.finish_reason) == ([5, 6], "length")
    engine.update_weights(None, "9")
    assert engine.weight_version == "9" and engine.health() and engine.num_calls == 2
    with pytest.raises(ValueError, match="tokenizer"):
        ScriptedEngine(lambda ids: "text").generate([[1]], SamplingParams())


@pytest.mark.parametrize("template", ["qwen", "llama3"])
def test_prompt_ids_equal_whole_prompt_encoding(tok, calc, template):
    actor = Actor(ScriptedEngine(lambda ids: [1]), tok, chat_template=template)
    for task in calc.tasks[:3]:
        for system in (calc.system_prompt, None):
            assert actor._encode_prompt(system, task.prompt) == tok.encode(actor.template.prompt(system, task.prompt))


def test_parse_weight_version():
    from jaxrl_agent.agent.episode import parse_weight_version
    assert [parse_weight_version(v) for v in ("12", "step-12", "-1", "init", 4)] == [12, 12, -1, -1, 4]


def test_stream_close_with_all_slots_busy(tok, calc):
    release = threading.Event()
    actor = Actor(ScriptedEngine(gold_policy(tok, calc), tokenizer=tok), tok, max_in_flight=2, step_timeout_s=None)
    specs = [spec(0)] + [hooked(lambda: release.wait(20))] * 4
    try:
        it = actor.stream(specs)
        first = next(it)  # the one normal episode; then both slots hold hung episodes
        start = time.perf_counter()
        it.close()
        assert time.perf_counter() - start < 2.0 and first.terminated
    finally:
        release.set()
