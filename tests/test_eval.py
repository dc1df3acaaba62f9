"""python -m jaxrl_agent.eval: restores a run's checkpoint and evaluates it greedily."""

import importlib.util
import json
import os

import pytest
from absl import flags

from jaxrl_agent import eval as eval_main
from jaxrl_agent.pipeline.evaluation import (EvalInputError, TABLE_COLUMNS, evaluate_checkpoint, format_table,
                                             resolve_checkpoint)
from jaxrl_agent.pipeline.run import run_training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny_cpu_debug_config():
    spec = importlib.util.spec_from_file_location("cpu_debug", os.path.join(ROOT, "configs", "cpu_debug.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.model.hidden_size, c.model.intermediate_size, c.model.num_layers = 32, 64, 1
    c.model.num_heads, c.model.num_kv_heads, c.model.head_dim = 2, 1, 16
    c.warmstart.steps, c.warmstart.num_demos, c.warmstart.batch_size = 2, 8, 8
    c.rollout.tasks_per_iter, c.rollout.samples_per_task = 4, 2  # 8 episodes: one per fake device
    c.mesh.shape = (8, 1, 1)
    c.learner.num_minibatches = 1
    c.train.iterations = 1
    c.eval.num_tasks = 4
    c.eval.max_new_tokens = 8
    return c


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("eval_run"))
    summary = run_training(_tiny_cpu_debug_config(), workdir)
    return workdir, summary


@pytest.fixture()
def parse_flags():
    """Parses eval.py's absl flags for one test, then restores them."""
    fv = flags.FLAGS

    def parse(*args):
        fv.unparse_flags()
        fv(["eval", *args])

    yield parse
    fv.unparse_flags()


@pytest.mark.slow
def test_eval_main_prints_table_and_writes_json(run_dir, parse_flags, capsys):
    workdir, summary = run_dir
    parse_flags(f"--workdir={workdir}", "--splits=test,ood", "--num_tasks=4")
    eval_main.main(["eval"])
    out = capsys.readouterr().out
    report = json.load(open(os.path.join(workdir, "eval_1.json")))
    assert report["step"] == 1 and report["iteration"] == 1
    assert report["checkpoint"] == os.path.join(workdir, "checkpoints", "1")
    assert list(report["splits"]) == ["test/greedy", "ood/greedy", "test/sampled", "ood/sampled"]
    for split, row in report["splits"].items():
        assert row["num_tasks"] == 4
        for key, _, _ in TABLE_COLUMNS:
            assert key in row, key
        assert 0.0 <= row["success"] <= 1.0 and row["tokens_per_episode"] > 0 and row["latency_s"] > 0
        assert f"\n{split} " in out
    assert "tool calls/ep" in out and "latency s/ep" in out and "eval_1.json" in out
    # Greedy decoding of the restored checkpoint reproduces the run's own final evaluation.
    for mode in ("greedy", "sampled"):  # sampled eval is seeded: also reproducible
        test = report["splits"][f"test/{mode}"]
        for key in ("success", "reward_mean", "tokens_per_episode", "tool_calls_per_episode"):
            assert test[key] == pytest.approx(summary["after"][f"eval/test/{mode}/{key}"]), (mode, key)


@pytest.mark.slow
def test_checkpoint_by_path_and_output_flag(run_dir, tmp_path, parse_flags, capsys):
    workdir, summary = run_dir
    output = str(tmp_path / "reports" / "step0.json")
    parse_flags(f"--workdir={workdir}", f"--checkpoint={os.path.join(workdir, 'checkpoints', '0')}",
                "--splits=test", f"--output={output}", "--mesh_shape=-1,1,1")
    eval_main.main(["eval"])
    report = json.load(open(output))
    assert report["step"] == 0 and report["splits"]["test/greedy"]["num_tasks"] == 4
    assert report["splits"]["test/greedy"]["success"] == pytest.approx(
        summary["before"]["eval/test/greedy/success"])
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["split", "tasks", "success"] and table[3].split()[:2] == ["test/greedy", "4"]
    rows = format_table(report).splitlines()[1:]
    assert len(rows) == 4 and rows == table[1:5]  # header, rule, test/greedy, test/sampled
    with pytest.raises(EvalInputError, match=r"checkpoint step 7 not found in .*checkpoints; available: \[0, 1\]"):
        resolve_checkpoint(workdir, "7")


def test_missing_inputs_name_the_path(tmp_path, parse_flags, capsys):
    with pytest.raises(EvalInputError, match="checkpoint directory .*nowhere/3 does not exist"):
        resolve_checkpoint(str(tmp_path), str(tmp_path / "nowhere" / "3"))
    with pytest.raises(EvalInputError, match=r"checkpoints does not exist"):
        resolve_checkpoint(str(tmp_path), None)
    with pytest.raises(EvalInputError, match="config.json not found"):
        evaluate_checkpoint(str(tmp_path))
    missing = str(tmp_path / "no_such_run")
    parse_flags(f"--workdir={missing}")
    with pytest.raises(SystemExit) as exit_info:
        eval_main.main(["eval"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == f"eval: error: workdir {missing} does not exist"
