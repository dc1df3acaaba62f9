"""Calculator safety, search over the bundled corpus, python tool, failing tools."""

import pytest

from jaxrl_agent.environments.tools import Calculator, PythonExecutor, SandboxLimits, Search, Tool, ToolError


@pytest.mark.parametrize("expr, want", [
    ("3*4", "12"), ("(3 + 4) * 12", "84"), ("12/4", "3"), ("7/2", "3.5"), ("7//2", "3"), ("7 % 3", "1"),
    ("-2**2", "-4"), ("(-2)**2", "4"), ("2**-1", "0.5"), ("+5 - -5", "10"), ("1_000 + 1", "1001"),
    ("0.1 + 0.2", "0.3"), ("2**100", str(2**100)),
])
def test_calculator_values(expr, want):
    result = Calculator()({"expression": expr})
    assert result.ok and result.text == want


@pytest.mark.parametrize("expr, fragment", [
    ("__import__('os').system('echo hi')", "Call"),
    ("x + 1", "Name"),
    ("(1).real", "Attribute"),
    ("abs(-1)", "Call"),
    ("[1][0]", "Subscript"),
    ("'a' * 3", "only numbers"),
    ("True + 1", "only numbers"),
    ("1 if 1 else 2", "IfExp"),
    ("1 < 2", "Compare"),
    ("lambda: 1", "Lambda"),
    ("1j * 2", "only numbers"),
    ("9**9**9", "exponent"),
    ("10**100**2", "exponent"),
    ("(10**90)**99", "too large"),
    ("2**4000 * 2**4000", "too large"),
    ("1/0", "division by zero"),
    ("0**-1", "division by zero"),
    ("1e308 * 10", "finite"),
    ("(-8) ** 0.5", "negative"),
    ("1 +", "cannot parse"),
    ("1" * 201, "too long"),
])
def test_calculator_rejects_unsafe_or_huge(expr, fragment):
    result = Calculator()({"expression": expr})
    assert not result.ok and result.text.startswith("Error:") and fragment in result.text, result.text


def test_calculator_never_calls_eval(monkeypatch):
    import builtins

    def boom(*a, **k):
        raise AssertionError("eval/exec must not be used")
    monkeypatch.setattr(builtins, "eval", boom)
    monkeypatch.setattr(builtins, "exec", boom)
    assert Calculator()({"expression": "2*(3+4)"}).text == "14"


def test_search_finds_the_right_document():
    search = Search(k=2)
    result = search({"query": "Velmora founded"})
    assert result.ok and result.text.startswith("[town-000] Velmora:")
    assert not search({"query": "the of and"}).ok  # only stopwords
    assert search({"query": "zzzqqq"}).text == "No results."
    with pytest.raises(ValueError, match="k: expected >= 1"):
        Search(k=0)


def test_python_tool_output_and_errors():
    py = PythonExecutor(SandboxLimits(timeout_s=5))
    assert py({"code": "print(sum(range(10)))"}).text.strip() == "45"
    failed = py({"code": "raise ValueError('bad')"})
    assert not failed.ok and "ValueError: bad" in failed.text and "exit code 1" in failed.text
    assert py({"code": "x = 1"}).text == "(no output)"


def test_python_tool_marks_truncated_output():
    py = PythonExecutor(SandboxLimits(timeout_s=5))
    result = py({"code": "print('x' * 10_000_000)"})
    assert result.ok and result.text.startswith("xxx"), result.text[-200:]
    assert result.text.endswith("bytes, showing the first 3840]")
    assert "\n[output truncated: 10000001 bytes," in result.text
    small = py({"code": "print('x' * 100)"})
    assert small.text.strip() == "x" * 100 and "truncated" not in small.text
    failed = py({"code": "import sys\nsys.stderr.write('e' * 20000)\nsys.exit(2)"})
    assert not failed.ok and "[output truncated: 20000 bytes, showing the first" in failed.text


class _Exploding(Tool):
    from jaxrl_agent.agent.tool_calls import ToolSpec
    spec = ToolSpec("explode", "raises", {"type": "object", "properties": {}})

    def run(self):
        raise KeyError("kaboom")


def test_a_raising_tool_becomes_an_error_result():
    result = _Exploding()({})
    assert not result.ok and "KeyError" in result.text and result.latency_s >= 0
    with pytest.raises(ToolError):
        Calculator().evaluate("x")


def test_calculator_syntax_warning_is_a_tool_error_not_noise(recwarn):
    """'3x' makes ast.parse emit a SyntaxWarning; it must become a ToolError, silently."""
    from jaxrl_agent.environments.tools import Calculator, ToolError

    with pytest.raises(ToolError, match="cannot parse"):
        Calculator().evaluate("3x")
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
