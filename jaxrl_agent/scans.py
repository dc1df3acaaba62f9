"""Reverse first-order linear recurrences: x_t = a_t * x_{t+1} + b_t.

The recurrence behind every discounted quantity in RL (returns, GAE traces,
the "value of the next masked position" of a masked sequence), solved along
the time axis of `[B, T]` arrays by one of three methods that agree to float32
rounding:

- "serial": one `lax.scan` over time (depth T), time-major after one
  transpose, unrolled by `SERIAL_UNROLL`.
- "associative": `lax.associative_scan` over the affine maps
  x -> a x + b (depth O(log T)); Blelloch 1990, "Prefix Sums and Their
  Applications", applied to first-order linear recurrences as in Martin &
  Cringle 2018, "Parallelizing Linear Recurrent Neural Nets Over Sequence
  Length" (ICLR), sec. 2.
- "chunked": a two-level scan (Blelloch's reduce-then-scan with chunks of
  C ~ sqrt(T/2) positions): compose each chunk's maps (scan over C, vectorized
  over the B * T/C chunks), scan over the chunk boundaries, then re-run every
  chunk from its end state: 2C + T/C sequential steps over wide vectors.
  Fastest on CPU at every size we measured (docs/benchmarks.md).

`reverse_linear_recurrence` is the general solver. `masked_gae_trace` is the
masked GAE trace of `jaxrl_agent.advantages` as one fused pass: it couples the
trace with a second recurrence (the value of the next masked position), which
"serial" and "chunked" carry in the same scan (about 2x faster on CPU than two
`reverse_linear_recurrence` calls at T = 32768) and "associative" solves as two
calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxrl_agent.checks import check_choice, check_shape

Array = jax.Array
METHODS = ("serial", "associative", "chunked")
DEFAULT_METHOD = "chunked"  # fastest on CPU, see docs/benchmarks.md
SERIAL_UNROLL = 8  # serial scan unroll (CPU timing); see docs/benchmarks.md


def affine_compose(later: tuple[Array, Array], earlier: tuple[Array, Array]) -> tuple[Array, Array]:
    """The associative operator of the reverse recurrence.

    Maps are x -> a x + b. Applying `later` (a_l, b_l) first, then `earlier`
    (a_e, b_e), gives x -> a_e a_l x + (a_e b_l + b_e); so
    (a_e, b_e) o (a_l, b_l) = (a_e a_l, a_e b_l + b_e). Associative, not
    commutative. Arrays of any (broadcastable) shape.
    """
    a_l, b_l = later
    a_e, b_e = earlier
    return a_e * a_l, a_e * b_l + b_e


def chunk_size(t: int) -> int:
    """Power of two near sqrt(T/2): minimizes the 2*C + T/C steps of "chunked"."""
    c = 1
    while c * c * 2 < t:
        c *= 2
    return c


def _serial(a: Array, b: Array, init: Array) -> Array:
    def body(x_next, inp):
        a_t, b_t = inp
        x_t = a_t * x_next + b_t
        return x_t, x_t

    _, x = lax.scan(body, init, (a.T, b.T), reverse=True, unroll=SERIAL_UNROLL)
    return x.T


def _associative(a: Array, b: Array, init: Array) -> Array:
    b = b.at[:, -1].add(a[:, -1] * init)  # fold x_T = init into the last map
    # reverse=True: the combine function's first argument is the later position.
    _, x = lax.associative_scan(affine_compose, (a, b), reverse=True, axis=1)
    return x


def _chunked(a: Array, b: Array, init: Array) -> Array:
    bsz, t = a.shape
    c = chunk_size(t)
    nc = -(-t // c)
    pad = nc * c - t
    if pad:  # left-pad: the reverse recurrence reaches these positions last, then drops them
        a, b = (jnp.pad(x, ((0, 0), (pad, 0))) for x in (a, b))

    def to_chunks(x):  # [B, NC * C] -> [C, B * NC], time-major inside chunks
        return x.reshape(bsz, nc, c).transpose(2, 0, 1).reshape(c, bsz * nc)

    xs = (to_chunks(a), to_chunks(b))

    def summarize(acc, inp):  # acc: the map from the chunk's end state to x_t
        return affine_compose(acc, inp), None

    one = jnp.ones((bsz * nc,), a.dtype)
    (a_c, b_c), _ = lax.scan(summarize, (one, jnp.zeros_like(one)), xs, reverse=True)

    def propagate(x_end, coeffs):  # x_end: state after the chunk; returns state before
        a_k, b_k = coeffs
        return a_k * x_end + b_k, x_end

    coeffs = (a_c.reshape(bsz, nc).T, b_c.reshape(bsz, nc).T)  # [NC, B]
    _, x_end = lax.scan(propagate, init, coeffs, reverse=True)  # [NC, B]

    def body(x_next, inp):
        a_t, b_t = inp
        x_t = a_t * x_next + b_t
        return x_t, x_t

    _, x = lax.scan(body, x_end.T.reshape(bsz * nc), xs, reverse=True)
    return x.reshape(c, bsz, nc).transpose(1, 2, 0).reshape(bsz, nc * c)[:, pad:]


_SOLVERS = {"serial": _serial, "associative": _associative, "chunked": _chunked}


def reverse_linear_recurrence(
    a: Array, b: Array, init: Array, *, method: str = DEFAULT_METHOD
) -> Array:
    """Solves x_t = a_t * x_{t+1} + b_t backwards in time, x_T = init.

    x_{T-1} = a_{T-1} * init + b_{T-1}, ..., x_0 = a_0 * x_1 + b_0, for every
    row independently. Composition of the affine maps x -> a_t x + b_t is
    associative (see `affine_compose`), which gives the log-depth and chunked
    solvers (Blelloch 1990; Martin & Cringle 2018, sec. 2).

    Examples: discounted returns G_t = r_t + gamma G_{t+1} are
    a = gamma, b = r, init = bootstrap value; the GAE trace is
    a = gamma * lambda_, b = delta, init = 0.

    Args:
      a: [B, T] float, multiplier of x_{t+1} (e.g. a discount, 0 resets).
      b: [B, T] float, additive term (e.g. a reward or TD error).
      init: [B] float, x_T (the state after the last position).
      method: "serial", "associative" or "chunked" (see module docstring);
        all agree to float32 rounding.

    Returns:
      x: [B, T], dtype of a * b * init promoted to at least float32.

    Raises:
      ValueError: if a or b is not [B, T], init is not [B] (naming the
        argument), or method is unknown.
    """
    dims = check_shape("a", a, ("B", "T"))
    check_shape("b", b, ("B", "T"), dims)
    check_shape("init", init, ("B",), dims)
    check_choice("method", method, METHODS)
    dtype = jnp.promote_types(jnp.result_type(a, b, init), jnp.float32)
    a, b, init = (jnp.asarray(x, dtype) for x in (a, b, init))
    if dims["T"] == 0:
        return jnp.zeros(a.shape, dtype)
    return _SOLVERS[method](a, b, init)


# ----------------------------------------------------------------------------
# The masked GAE trace (fused serial / chunked, two-pass associative).


def _next_is_masked(m: Array) -> Array:
    """[B, T] bool: m_{t+1}, with a virtual masked position at T (the bootstrap)."""
    return jnp.concatenate([m[:, 1:], jnp.ones_like(m[:, :1])], axis=1)


def _gae_step(gamma, gamma_lambda):
    """One reverse step of the fused (w, x, m_next) carry; see `masked_gae_trace`."""
    def body(carry, inp):
        w_next, x_next, m_next = carry
        r_t, v_t, m_t = inp
        x_t = (jnp.where(m_next, gamma_lambda, 1.0) * x_next + r_t
               + jnp.where(m_t, gamma * w_next - v_t, 0.0))
        return (jnp.where(m_t, v_t, w_next), x_t, m_t), x_t
    return body


def _gae_serial(r, v, m, init, gamma, gamma_lambda):
    init_carry = (init, jnp.zeros_like(init), jnp.ones(init.shape, bool))
    _, x = lax.scan(_gae_step(gamma, gamma_lambda), init_carry, (r.T, v.T, m.T), reverse=True,
                    unroll=SERIAL_UNROLL)
    return x.T


def _gae_chunked(r, v, m, init, gamma, gamma_lambda):
    """Two-level fused GAE, the same arithmetic as `_gae_serial`.

    1. Per chunk of C positions, compose the per-step affine maps of the state
       (w, x) into one map from the chunk's end state to its start state (scan
       over C, vectorized over B * NC chunks; no per-position output).
    2. Scan over the NC chunks to get each chunk's end state.
    3. Re-run the per-step recurrence inside every chunk from its end state.
    Rows are left-padded to NC * C with unmasked zero-reward positions, which
    the reverse recurrence reaches last and drops.
    """
    b, t = r.shape
    c = chunk_size(t)
    nc = -(-t // c)
    pad = nc * c - t
    if pad:
        r, v = (jnp.pad(x, ((0, 0), (pad, 0))) for x in (r, v))
        m = jnp.pad(m, ((0, 0), (pad, 0)))
    dtype = r.dtype

    def to_chunks(x):  # [B, NC * C] -> [C, B * NC], time-major inside chunks
        return x.reshape(b, nc, c).transpose(2, 0, 1).reshape(c, b * nc)

    xs = tuple(to_chunks(x) for x in (r, v, m))
    first = m.reshape(b, nc, c)[:, :, 0]  # m_{t+1} after each chunk's last position
    m_after = jnp.concatenate([first[:, 1:], jnp.ones((b, 1), bool)], axis=1).reshape(b * nc)
    one, zero = jnp.ones((b * nc,), dtype), jnp.zeros((b * nc,), dtype)

    def summarize(carry, inp):  # w_t = aw w_E + bw;  x_t = ax x_E + gx w_E + dx
        aw, bw, ax, gx, dx, m_next = carry
        r_t, v_t, m_t = inp
        a_t = jnp.where(m_next, gamma_lambda, 1.0)
        g_t = jnp.where(m_t, gamma, 0.0)
        d_t = r_t - jnp.where(m_t, v_t, 0.0)
        return (jnp.where(m_t, 0.0, aw), jnp.where(m_t, v_t, bw), a_t * ax,
                a_t * gx + g_t * aw, a_t * dx + g_t * bw + d_t, m_t), None

    (aw, bw, ax, gx, dx, _), _ = lax.scan(summarize, (one, zero, one, zero, zero, m_after), xs,
                                          reverse=True)

    def propagate(state, coeffs):
        w_e, x_e = state
        aw, bw, ax, gx, dx = coeffs
        return (aw * w_e + bw, ax * x_e + gx * w_e + dx), state

    coeffs = tuple(y.reshape(b, nc).T for y in (aw, bw, ax, gx, dx))
    _, (w_end, x_end) = lax.scan(propagate, (init, jnp.zeros_like(init)), coeffs, reverse=True)
    carry = (w_end.T.reshape(b * nc), x_end.T.reshape(b * nc), m_after)
    _, x = lax.scan(_gae_step(gamma, gamma_lambda), carry, xs, reverse=True)
    return x.reshape(c, b, nc).transpose(1, 2, 0).reshape(b, nc * c)[:, pad:]


def _gae_associative(r, v, m, init, gamma, gamma_lambda):
    mf = m.astype(r.dtype)
    w = _associative(1.0 - mf, mf * v, init)  # value at the first masked position >= t
    next_value = jnp.concatenate([w[:, 1:], init[:, None]], axis=1)
    delta = r + jnp.where(m, gamma * next_value - v, 0.0)
    a_trace = jnp.where(_next_is_masked(m), gamma_lambda, 1.0).astype(r.dtype)
    return _associative(a_trace, delta, jnp.zeros_like(init))


_GAE_SOLVERS = {"serial": _gae_serial, "associative": _gae_associative, "chunked": _gae_chunked}


def masked_gae_trace(
    rewards: Array,
    values: Array,
    mask: Array,
    init: Array,
    *,
    gamma: float | Array,
    gamma_lambda: float | Array,
    method: str = DEFAULT_METHOD,
) -> Array:
    """The GAE trace with masked pass-through, as coupled reverse recurrences.

    With w_T = init and virtual m_T = True:

        w_t = v_t if m_t else w_{t+1}          (value at the next masked position)
        x_t = a_t x_{t+1} + r_t + [m_t] (gamma w_{t+1} - v_t),  x_T = 0,
        a_t = gamma_lambda if m_{t+1} else 1,

    so on masked positions x is the GAE advantage of Schulman et al. 2016 eq. 16
    over the compressed sequence of masked positions (unmasked rewards folded
    into the preceding masked position); see `jaxrl_agent.advantages.gae`.
    Both are instances of `reverse_linear_recurrence` (w: a = 1 - m, b = m v);
    "serial" and "chunked" solve them in one fused pass.

    Args:
      rewards: [B, T] float. values: [B, T] float. mask: [B, T] bool.
      init: [B] float, the value after the last position (0 when terminal).
      gamma: discount. gamma_lambda: gamma * lambda_ (scalars or traced).
      method: "serial", "associative" or "chunked".

    Returns:
      x: [B, T] float, the trace at every position (read it where mask is true).

    Raises:
      ValueError: on shapes other than the above (naming the argument) or an
        unknown method.
    """
    dims = check_shape("rewards", rewards, ("B", "T"))
    check_shape("values", values, ("B", "T"), dims)
    check_shape("mask", mask, ("B", "T"), dims)
    check_shape("init", init, ("B",), dims)
    check_choice("method", method, METHODS)
    dtype = jnp.promote_types(jnp.result_type(rewards, values, init), jnp.float32)
    r, v, init = (jnp.asarray(x, dtype) for x in (rewards, values, init))
    m = jnp.asarray(mask).astype(bool)
    if dims["T"] == 0:
        return jnp.zeros(r.shape, dtype)
    return _GAE_SOLVERS[method](r, v, m, init, gamma, gamma_lambda)


def masked_discounted_returns(
    rewards: Array, mask: Array, init: Array, *, gamma: float | Array, method: str = DEFAULT_METHOD
) -> Array:
    """Discounted returns with masked pass-through, as one reverse recurrence.

    x_t = a_t x_{t+1} + r_t, x_T = init, a_t = gamma if m_{t+1} (virtual
    m_T = True) else 1: on masked positions, G_{t_i} = r'_{t_i} + gamma G_{t_{i+1}}
    over the compressed masked sequence (Sutton & Barto 2018, eq. 3.8), the
    rewards of unmasked positions added undiscounted to the preceding masked
    one. Equals `masked_gae_trace` with values 0 and lambda_ = 1.

    Args:
      rewards: [B, T] float. mask: [B, T] bool. init: [B] float bootstrap value.
      gamma: discount. method: as in `reverse_linear_recurrence`.

    Returns:
      [B, T] float (read it where mask is true).

    Raises:
      ValueError: as `reverse_linear_recurrence`, naming rewards/mask.
    """
    dims = check_shape("rewards", rewards, ("B", "T"))
    check_shape("mask", mask, ("B", "T"), dims)
    m = jnp.asarray(mask).astype(bool)
    a = jnp.where(_next_is_masked(m), gamma, 1.0) if dims["T"] else jnp.zeros(m.shape)
    return reverse_linear_recurrence(a, rewards, init, method=method)
