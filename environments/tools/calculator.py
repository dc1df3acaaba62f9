"""A safe arithmetic calculator: `ast` parsing of numbers and + - * / // % ** only.

The expression is parsed with `ast.parse(mode="eval")` and the tree is walked
by hand; only numeric literals (int, float), the binary operators
+ - * / // % **, unary + and -, and parentheses are accepted. Names,
attribute access, calls, subscripts, comparisons, strings, lambdas... are
rejected with a `ToolError` naming the construct. Nothing is ever passed to
`eval`/`exec`.

Limits: expression length <= `max_chars`; exponent |b| <= `max_exponent`;
every intermediate integer stays below 2**`max_bits` (so `9**9**9` or
`(10**100)**100` are refused instead of hanging the actor).
"""

from __future__ import annotations

import ast
import warnings
import math
import operator

from jaxrl_agent.agent.tool_calls import ToolSpec
from jaxrl_agent.environments.tools.base import Tool, ToolError

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def format_number(x: int | float) -> str:
    """Integers (and integral floats below 1e15) print without a decimal point; others with 12 digits."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if isinstance(x, float):
        return format(x, ".12g")
    return str(x)


class Calculator(Tool):
    """Evaluates an arithmetic expression safely; see the module docstring."""

    spec = ToolSpec(
        name="calculator",
        description=(
            "Evaluate an arithmetic expression with numbers, + - * / // % ** and parentheses. "
            "Returns the numeric result."
        ),
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The expression, e.g. \"(3 + 4) * 12\".",
                    "maxLength": 200,
                }
            },
            "required": ["expression"],
        },
    )

    def __init__(self, max_chars: int = 200, max_exponent: int = 100, max_bits: int = 4096):
        self.max_chars = max_chars
        self.max_exponent = max_exponent
        self.max_bits = max_bits

    def run(self, expression: str) -> str:
        return format_number(self.evaluate(expression))

    def evaluate(self, expression: str) -> int | float:
        """Returns the value of `expression`.

        Raises:
            ToolError: for anything but numeric arithmetic, too long input, too
                large exponents/results, division by zero, or overflow.
        """
        if not isinstance(expression, str):
            raise ToolError(f"expression must be a string, got {type(expression).__name__}")
        if len(expression) > self.max_chars:
            raise ToolError(f"expression too long ({len(expression)} chars > {self.max_chars})")
        try:
            with warnings.catch_warnings():  # e.g. "invalid decimal literal" for "3x": an error, not noise
                warnings.simplefilter("error", SyntaxWarning)
                tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxWarning as e:
            raise ToolError(f"cannot parse expression: {e}")
        except (SyntaxError, ValueError) as e:
            raise ToolError(f"cannot parse expression: {e.msg if isinstance(e, SyntaxError) else e}")
        try:
            return self._eval(tree.body)
        except ZeroDivisionError:
            raise ToolError("division by zero")
        except OverflowError:
            raise ToolError("numeric overflow")

    def _check(self, value: int | float) -> int | float:
        if isinstance(value, int) and value.bit_length() > self.max_bits:
            raise ToolError(f"intermediate result too large (more than {self.max_bits} bits)")
        if isinstance(value, float) and not math.isfinite(value):
            raise ToolError("result is not a finite number")
        return value

    def _eval(self, node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ToolError(f"only numbers are allowed, got literal {node.value!r:.40}")
            return self._check(node.value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self._eval(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = self._eval(node.left), self._eval(node.right)
            if isinstance(node.op, ast.Pow):
                self._check_power(left, right)
            if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int) and right < 0 and left == 0:
                raise ZeroDivisionError
            return self._check(_BINOPS[type(node.op)](left, right))
        raise ToolError(f"unsupported syntax: {type(node).__name__} (only numbers and + - * / // % ** ( ) are allowed)")

    def _check_power(self, base: int | float, exponent: int | float) -> None:
        if abs(exponent) > self.max_exponent:
            raise ToolError(f"exponent {format_number(exponent)} too large (|exponent| <= {self.max_exponent})")
        if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
            if base.bit_length() * exponent > self.max_bits + exponent:
                raise ToolError(f"power result too large (more than {self.max_bits} bits)")
        if isinstance(base, (int, float)) and base < 0 and isinstance(exponent, float) and not exponent.is_integer():
            raise ToolError("fractional power of a negative number")
