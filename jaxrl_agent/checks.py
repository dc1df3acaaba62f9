"""Shape and dtype checks at the door.

Every public function in `advantages`, `losses` and friends checks its inputs
with these helpers at trace time, so a mistake is reported as a `ValueError`
naming the argument and the expected shape instead of a broadcasting error
deep inside XLA.

Shape letters (see docs/DESIGN.md): B batch, T tokens, S steps (turns), G group
size, V vocabulary, D model width, H heads, K key/value heads.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np


def _shape_str(spec: Sequence[str | int | None]) -> str:
    return "[" + ", ".join("?" if s is None else str(s) for s in spec) + "]"


def check_shape(
    name: str,
    x: Any,
    spec: Sequence[str | int | None],
    dims: dict[str, int] | None = None,
) -> dict[str, int]:
    """Checks that `x` has rank len(spec) and that named dims agree.

    Args:
      name: argument name, used in the error message.
      x: an array (numpy or jax, concrete or traced).
      spec: expected shape; each entry is a letter such as "B" (bound on first
        use, then must match), an int (must equal), or None (anything).
      dims: letters already bound by earlier arguments; updated in place.

    Returns:
      The `dims` dict with any newly bound letters.

    Raises:
      ValueError: naming `name`, the expected shape and the actual shape.
    """
    dims = {} if dims is None else dims
    shape = tuple(np.shape(x))
    if len(shape) != len(spec):
        raise ValueError(
            f"{name}: expected rank {len(spec)} with shape {_shape_str(spec)}, "
            f"got shape {list(shape)} (rank {len(shape)})"
        )
    for axis, (want, got) in enumerate(zip(spec, shape)):
        if want is None:
            continue
        if isinstance(want, int):
            if want != got:
                raise ValueError(
                    f"{name}: expected shape {_shape_str(spec)}, got {list(shape)} "
                    f"(axis {axis} must be {want})"
                )
            continue
        if want in dims and dims[want] != got:
            bound = ", ".join(f"{k}={v}" for k, v in dims.items())
            raise ValueError(
                f"{name}: expected shape {_shape_str(spec)} with {bound}, "
                f"got {list(shape)} (axis {axis} is {got}, {want} is {dims[want]})"
            )
        dims[want] = got
    return dims


def check_same_shape(names: Sequence[str], arrays: Sequence[Any]) -> None:
    """Raises ValueError unless all arrays share the shape of the first one."""
    ref = tuple(np.shape(arrays[0]))
    for n, a in zip(names[1:], arrays[1:]):
        if tuple(np.shape(a)) != ref:
            raise ValueError(
                f"{n}: expected the same shape as {names[0]} {list(ref)}, "
                f"got {list(np.shape(a))}"
            )


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises ValueError unless `value` is one of `choices`, listing them."""
    if value not in choices:
        raise ValueError(
            f"{name}: unknown value {value!r}; expected one of {sorted(map(str, choices))}"
        )


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    """Raises ValueError unless a Python scalar is > 0 (or >= 0)."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a value {bound}, got {value!r}")


def check_static_int(name: str, value: Any, *, low: int = 1) -> int:
    """int(value) for a Python/NumPy integer >= low (not a bool); raises ValueError otherwise.

    For sizes that fix array shapes (num_groups, num_steps): they must be known
    at trace time.
    """
    is_int = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if not is_int or value < low:
        raise ValueError(f"{name}: expected a static int >= {low}, got {value!r}")
    return int(value)


def static_value(value: Any) -> float | None:
    """float(value) for a Python/NumPy scalar or a concrete 0-d array; None when traced."""
    try:
        return float(value)
    except (TypeError, jax.errors.ConcretizationTypeError):  # a tracer (or not a number)
        return None


def check_scalar(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raises ValueError unless `value` is a scalar inside the given bounds.

    Python and NumPy real scalars, 0-d real arrays and traced 0-d values are
    scalars (None, strings, complex numbers are not); a value known at trace
    time (everything but a tracer) must also lie in
    [low, high] (open at a side with low_open / high_open; None: unbounded). NaN
    is outside every interval.

    Raises:
      ValueError: naming `name`, the expected interval and what was given
        (including a per-row array where one scalar is expected).
    """
    dtype = getattr(value, "dtype", None)
    numeric = isinstance(value, (numbers.Real, np.ndarray, np.generic, jax.Array)) and (
        dtype is None or jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
        or jnp.issubdtype(dtype, jnp.bool_))
    if not numeric:
        raise ValueError(f"{name}: expected a real scalar, got {value!r}")
    shape = np.shape(value)
    if shape != ():
        raise ValueError(f"{name}: expected a scalar, got an array of shape {list(shape)}")
    v = static_value(value)
    if v is None:
        return
    ok = not math.isnan(v)
    if low is not None:
        ok = ok and (v > low if low_open else v >= low)
    if high is not None:
        ok = ok and (v < high if high_open else v <= high)
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        left = "(" if low_open or low is None else "["
        right = ")" if high_open or high is None else "]"
        interval = f"{left}{lo}, {hi}{right}"
        raise ValueError(f"{name}: expected a value in {interval}, got {value!r}")
