"""Rule-based verifiers: numeric tolerance, normalised exact match, tests pass in the sandbox."""

from __future__ import annotations

import math
import re
import secrets
import string

from jaxrl_agent.environments.tools.sandbox import SandboxLimits, SandboxResult, run_python

_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def parse_number(text: str) -> float | None:
    """The number in `text` ("1,234", "42.", " -3 ") or None when it is not one number."""
    t = text.strip().replace(",", "").rstrip(".")
    return float(t) if _NUMBER.match(t) else None


def numeric_match(prediction: str, gold: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """True when both parse as numbers within tolerance (math.isclose)."""
    p, g = parse_number(prediction), parse_number(gold)
    return p is not None and g is not None and math.isclose(p, g, rel_tol=rel_tol, abs_tol=abs_tol)


def normalize_text(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    """Normalised exact match (`normalize_text` on both sides)."""
    return normalize_text(prediction) == normalize_text(gold)


def extract_code(answer: str) -> str:
    """The first fenced ```python block of `answer`, or the whole answer when there is none."""
    m = _FENCE.search(answer)
    return m.group(1) if m else answer


def run_tests(program: str, limits: SandboxLimits = SandboxLimits(timeout_s=10.0)) -> tuple[bool, SandboxResult]:
    """Runs a test program in the sandbox; passes only if it exits 0 AND prints a fresh nonce.

    The nonce is appended as the program's last statement, so a submission that
    calls `sys.exit(0)` / `os._exit(0)` early to skip the tests does not pass.
    (A submission that reads its own file to find the nonce would; the
    sandbox cannot prevent that.)

    Returns:
        (passed, the SandboxResult).
    """
    nonce = secrets.token_hex(16)
    result = run_python(program + f"\nprint({nonce!r})\n", limits)
    return result.ok and nonce in result.stdout, result
