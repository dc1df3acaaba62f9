"""Tool environments: gymnasium contract, scripted episodes, rewards, monitors, task splits."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import jaxrl_agent.environments as E
from jaxrl_agent.agent.tool_calls import format_tool_call
from jaxrl_agent.environments.tasks import arithmetic, code_repair, retrieval


@pytest.mark.parametrize("env_id", sorted(E.ENV_IDS))
def test_env_checker_passes(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=3)
    assert obs in env.observation_space and obs == env.unwrapped.task.prompt
    assert {"system_prompt", "task_id", "split"} <= set(info) and "<tools>" in info["system_prompt"]


def _play(env, actions):
    rewards, out = [], None
    for a in actions:
        out = env.step(a)
        rewards.append(out[1])
        if out[2] or out[3]:
            break
    return rewards, out


@pytest.mark.parametrize("env_id, split, n", [
    ("jaxrl_agent/Calculator-v0", "train", 3), ("jaxrl_agent/Calculator-v0", "ood", 2),
    ("jaxrl_agent/Search-v0", "test", 2), ("jaxrl_agent/Search-v0", "ood", 2),
    ("jaxrl_agent/CodeRepair-v0", "train", 1), ("jaxrl_agent/CodeRepair-v0", "ood", 1),
    ("jaxrl_agent/HumanEval-v0", "test", 1),
])
def test_scripted_gold_episode_gets_full_reward(env_id, split, n):
    env = gym.make(env_id, split=split)
    for seed in range(n):
        obs, info = env.reset(seed=seed)
        rewards, (obs, _, terminated, truncated, info) = _play(env, E.gold_actions(env.unwrapped.task))
        assert terminated and not truncated and info["correct"] is True
        assert rewards[-1] == 1.0 and sum(rewards) == 1.0
        assert info["invalid_tool_call_total"] == 0 and info["no_action_total"] == 0
        assert info["answer_without_evidence"] is (info["successful_tool_calls_total"] == 0)


def test_wrong_answer_invalid_calls_no_action_and_truncation():
    env = gym.make("jaxrl_agent/Calculator-v0", split="test", max_turns=3, rewards={"truncated": -0.5})
    env.reset(seed=0, options={"task_index": 0})
    obs, r, term, trunc, info = env.step('<tool_call>{"name": "calc"}</tool_call> and <tool_call>{oops</tool_call>')
    assert r == pytest.approx(-0.2) and info["invalid_tool_call"] == 2 and obs.count("Error: invalid tool call") == 2
    obs, r, term, trunc, info = env.step("Could you tell me which numbers to use?")
    assert info["no_action"] and info["clarifying_question"] and r == pytest.approx(-0.1) and "no tool call" in obs
    obs, r, term, trunc, info = env.step(format_tool_call("calculator", {"expression": "1/0"}))
    assert trunc and not term and r == -0.5 and info["tool_errors"] == 1 and "division by zero" in obs
    assert info["invalid_tool_call_total"] == 2 and info["no_action_total"] == 1 and info["tool_calls_total"] == 1
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>1</answer>")
    env.reset(seed=0)
    *_, info = env.step("<answer>-1</answer>")
    assert info["correct"] is False and info["answer_without_evidence"] is True


def test_process_reward_for_used_results_and_options():
    env = gym.make("jaxrl_agent/Calculator-v0", split="train", rewards={"used_result": 0.1})
    task = env.unwrapped.tasks[5]
    env.reset(options={"task_id": task.task_id})
    rewards, (*_, info) = _play(env, arithmetic.gold_actions(task))
    n_used = len(task.metadata["expressions"])  # every intermediate result is reused, the last one in the answer
    assert sum(rewards) == pytest.approx(1.0 + 0.1 * n_used)
    with pytest.raises(ValueError, match="task_id"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="unknown keys"):
        env.reset(options={"level": 3})
    with pytest.raises(ValueError, match="rewards: unknown keys"):
        gym.make("jaxrl_agent/Calculator-v0", rewards={"bonus": 1})
    with pytest.raises(ValueError, match="split"):
        gym.make("jaxrl_agent/HumanEval-v0", split="train")
    for bad in (-5, 0, 2.5, True):
        with pytest.raises(ValueError, match="num_tasks: expected an int >= 1"):
            gym.make("jaxrl_agent/Calculator-v0", num_tasks=bad)


def test_observations_stay_in_the_space_and_render():
    env = gym.make("jaxrl_agent/Search-v0", render_mode="ansi")
    env.reset(seed=1)
    obs, *_ = env.step("héllo 🙂 \x00" + "x" * 20000)
    assert obs in env.observation_space
    assert E.to_observation("é\x00") == "\\xe9\\x00"
    assert "[assistant]" in env.render()


def test_arithmetic_generation_is_reproducible_and_splits_disjoint():
    a, b = arithmetic.generate("train", 300, seed=1), arithmetic.generate("train", 300, seed=1)
    assert a == b and a != arithmetic.generate("train", 300, seed=2)
    ids = {s: {t.task_id for t in arithmetic.generate(s, 1000 if s == "train" else 300, seed=0)} for s in E.SPLITS}
    assert not ids["train"] & ids["test"] and not ids["train"] & ids["ood"] and not ids["test"] & ids["ood"]
    for t in arithmetic.generate("ood", 100):
        assert min(t.metadata["operands"]) >= arithmetic.LARGE[0]
    for t in a:  # at least two tool calls, each gold step a valid calculator call
        assert len(t.metadata["expressions"]) >= 2 and len(arithmetic.gold_actions(t)) >= 3
        assert max(t.metadata["operands"]) <= arithmetic.SMALL[1]


@pytest.mark.parametrize("module", [code_repair, retrieval])
def test_fixed_task_sets_have_disjoint_nonempty_splits(module):
    splits = {s: module.generate(s) for s in E.SPLITS}
    assert all(splits.values())
    prompts = {s: {t.prompt for t in ts} for s, ts in splits.items()}
    assert not prompts["train"] & prompts["test"] and not prompts["train"] & prompts["ood"]
    assert not prompts["test"] & prompts["ood"]
    if module is retrieval:  # no entity shared between train and test
        ents = {s: {t.metadata["entity"] for t in splits[s]} for s in ("train", "test")}
        assert not ents["train"] & ents["test"]
        assert retrieval.generate("train", seed=4) == retrieval.generate("train", seed=4)


def test_code_repair_buggy_code_fails_and_fix_passes():
    env = gym.make("jaxrl_agent/CodeRepair-v0", split="test")
    env.reset(seed=0)
    task = env.unwrapped.task
    *_, info = env.step(f"<answer>```python\n{task.metadata['buggy']}```</answer>")
    assert info["correct"] is False
    env.reset(seed=0)
    *_, info = env.step(f"<answer>import sys\nsys.exit(0)\n{task.answer}</answer>")  # skipping the tests
    assert info["correct"] is False
    env.reset(seed=0)
    assert env.step(f"<answer>{task.answer}</answer>")[1] == 1.0
