"""The README's quick start has exactly two commands, and .ci/run runs the test one."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _quick_start_commands() -> list[str]:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    python3 -m venv")]


def test_quick_start_has_two_commands_main_job_and_tests():
    commands = _quick_start_commands()
    assert len(commands) == 2, commands
    assert "-m jaxrl_agent.train --config=configs/cpu_debug.py" in commands[0]
    assert "-m pytest" in commands[1]


def test_ci_runs_the_readme_test_command_and_fails_on_no_tests():
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    assert _quick_start_commands()[1] in ci.splitlines()
    assert re.search(r'if \[ "\$rc" -eq 5 \]', ci) and "exit 1" in ci
