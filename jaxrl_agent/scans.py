"""Reverse first-order linear recurrences: x_t = a_t * x_{t+1} + b_t.

The recurrence behind every discounted quantity in RL (returns, GAE traces,
the "value of the next masked position" of a masked sequence), solved along
the time axis of `[B, T]` arrays by one of four methods that agree to float32
rounding (relative 1e-5, tests/test_scans.py):

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
- "blocked" (the default): for the pass-through decays of the masked
  estimators (a_t in {base, 1}), a closed form per block of `BLOCK` positions
  in the [B, T] layout, with no transpose: decays inside a block are powers
  base**(N_j - N_t) of within-block decay counts N, so counts and suffix sums
  are matmuls by fixed triangular 0/1 matrices (`_pass_through_blocked`), and
  a reduce-then-scan over the T/BLOCK block boundaries joins the blocks. Falls
  back to "chunked" when base < BLOCKED_MIN_DECAY (e.g. lambda_ = 0), and for
  the general a of `reverse_linear_recurrence`. Runs on tiles of rows
  (`_map_row_tiles`, about ROW_TILE_ELEMENTS elements each) so that its
  intermediates stay cache-sized. Fastest on CPU at every size we measured
  (docs/benchmarks.md) among the pure-JAX methods: 2-4x "chunked" for
  token-level GAE.
- "native" (CPU only): the masked GAE trace and returns as one C++ pass per
  row, an XLA FFI custom call compiled on first use (`jaxrl_agent.native`,
  jaxrl_agent/csrc/gae_cpu.cc); "serial"'s recurrence (equal within
  rounding), float32 rows 4 at a time in vector lanes, rows over OpenMP
  threads. The fastest CPU method; for the general a of
  `reverse_linear_recurrence` it runs "chunked".

`reverse_linear_recurrence` is the general solver. `masked_gae_trace` is the
masked GAE trace of `jaxrl_agent.advantages` as one fused pass: it couples the
trace with a second recurrence (the value of the next masked position), which
"serial" and "chunked" carry in the same scan (about 2x faster on CPU than two
`reverse_linear_recurrence` calls at T = 32768), "associative" solves as two
calls and "blocked" folds into the trace (`_gae_blocked_kernel`);
`masked_gae_trace_and_returns` also gives the returns (trace + values), masking
each output once.
`masked_discounted_returns` is the pass-through return recurrence.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_agent import native
from jaxrl_agent.checks import check_choice, check_scalar, check_shape, static_value

Array = jax.Array
METHODS = ("serial", "associative", "chunked", "blocked", "native")
# The fastest pure-JAX method on CPU at every gae size (docs/benchmarks.md); "native" is faster on
# CPU but needs a compiler and gathers rows under a sharded jit (jaxrl_agent.native).
DEFAULT_METHOD = "blocked"
SERIAL_UNROLL = 8  # serial scan unroll (CPU timing); see docs/benchmarks.md
BLOCK = 64  # positions per block of "blocked" (CPU timing); see docs/benchmarks.md
# "blocked" scales by base**k for |k| <= BLOCK / 2 + 1; at 0.15, base**33 ~ 6e-28 stays far from
# float32 underflow, and the GAE rescaling 1 / lambda_ (`_gae_blocked_kernel`) is below 7.
BLOCKED_MIN_DECAY = 0.15
# "blocked" runs on tiles of about this many elements (R = ROW_TILE_ELEMENTS // T rows), so its
# [R, T] intermediates (1 MiB each) stay in cache instead of costing a [B, T] memory pass each,
# while its matmuls ([R * T / 64, 64] by [64, 64]) are still large enough for both CPU cores.
# Timed side by side on 2 CPU cores (docs/benchmarks.md, 2026-11-30): 2**18 and 2**19 tie and
# beat 2**16 by 1.2-1.4x at every gae / step_gae size; 2**20 and above lose at B=256, T=32768.
ROW_TILE_ELEMENTS = 1 << 18


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


def _vary_like(x, *refs):
    """x unchanged, typed as varying over every manual mesh axis that a ref varies over.

    Inside `jax.shard_map` a loop carry must have the same varying axes as the
    loop body's output, which follows the (sharded) data; fresh constants such
    as jnp.zeros(...) are not varying. A select on a ref-derived constant False
    carries the refs' axes over, for any dtype and any value (inf, NaN);
    outside shard_map it is a no-op that XLA removes.
    """
    for ref in refs:
        x = jnp.where(jnp.zeros_like(ref, shape=(), dtype=bool), x, x)
    return x


def _left_pad(size: int, *xs: Array) -> tuple[int, tuple[Array, ...]]:
    """(pad, xs left-padded along axis 1 to a multiple of `size`) with zeros / False.

    Left padding: the reverse recurrence reaches the padded positions last and
    the caller drops them (x[:, pad:]), so they never affect the result.
    """
    t = xs[0].shape[1]
    pad = -(-t // size) * size - t
    if pad:
        xs = tuple(jnp.pad(x, ((0, 0), (pad, 0))) for x in xs)
    return pad, xs


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
    pad, (a, b) = _left_pad(c, a, b)

    def to_chunks(x):  # [B, NC * C] -> [C, B * NC], time-major inside chunks
        return x.reshape(bsz, nc, c).transpose(2, 0, 1).reshape(c, bsz * nc)

    xs = (to_chunks(a), to_chunks(b))

    def summarize(acc, inp):  # acc: the map from the chunk's end state to x_t
        return affine_compose(acc, inp), None

    one = _vary_like(jnp.ones((bsz * nc,), a.dtype), init)
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


_SOLVERS = {"serial": _serial, "associative": _associative, "chunked": _chunked,
            "blocked": _chunked, "native": _chunked}  # general a: see `reverse_linear_recurrence`


# ----------------------------------------------------------------------------
# "blocked": closed form per block for pass-through decays a_t in {base, 1}.


def _states_after(a: Array, b: Array, init: Array) -> Array:
    """[B, N] x_{t+1} of x_t = a_t x_{t+1} + b_t (x_N = init), batch-major throughout.

    Reduce-then-scan like `_chunked`, but each step reads and writes a column of
    row-major [B, NC, C] arrays (lax.fori_loop + dynamic indexing) instead of
    transposing to time-major; the result is a plain row-major buffer, so the
    consumer (a [B, T] fusion of "blocked") reads it without a transpose.
    """
    bsz, n = a.shape
    c = chunk_size(n)
    nc = -(-n // c)
    pad, (a, b) = _left_pad(c, a, b)
    a3, b3 = (x.reshape(bsz, nc, c) for x in (a, b))

    def col(x, k):
        return lax.dynamic_index_in_dim(x, k, axis=x.ndim - 1, keepdims=False)

    def summarize(i, acc):  # acc: the map from the chunk's end state to x_k
        a_k = col(a3, c - 1 - i)
        return a_k * acc[0], a_k * acc[1] + col(b3, c - 1 - i)

    one = _vary_like(jnp.ones((bsz, nc), a.dtype), init)
    a_c, b_c = lax.fori_loop(0, c, summarize, (one, jnp.zeros_like(one)))

    def propagate(i, carry):  # x: the state after chunk j
        x, out = carry
        j = nc - 1 - i
        return col(a_c, j) * x + col(b_c, j), lax.dynamic_update_index_in_dim(out, x, j, axis=1)

    _, x_end = lax.fori_loop(0, nc, propagate, (init, jnp.zeros_like(one)))

    def rerun(i, carry):  # x: the state after position k
        x, out = carry
        k = c - 1 - i
        return col(a3, k) * x + col(b3, k), lax.dynamic_update_index_in_dim(out, x, k, axis=2)

    _, out = lax.fori_loop(0, c, rerun, (x_end, jnp.zeros_like(a3)))
    return out.reshape(bsz, nc * c)[:, pad:]


def _pass_through_blocked(b: Array, m: Array, init: Array, base: Array) -> Array:
    """x_t = a_t x_{t+1} + b_t, a_t = base if m_{t+1} else 1 (virtual m_T = True), x_T = init.

    Closed form per block of C = BLOCK positions, in the [B, T] layout (no
    transpose). With N_t the number of decays base applied between the block
    start and t (N_t = #{u in (start, t] : m_u}), the decay from t to j >= t is
    base**(N_j - N_t), so

        x_t = base**-N_t * (sum_{j >= t in block} base**N_j b_j + base**N_E x_E),

    where x_E is the state after the block and N_E its total decay count. The
    counts and the in-block suffix sums are matmuls of [B * T/C, C] by fixed
    triangular 0/1 matrices (BLAS-friendly); the block boundaries are joined by
    `_states_after` over [B, T/C]. Exponents are centred on C/2, so every
    scale is base**k with |k| <= C/2 + 1; base >= BLOCKED_MIN_DECAY keeps
    them well inside float32 (callers check it, see `_with_fallback`).
    Elementwise work stays in [B, T]/[rows, 64]-shaped fusions: XLA:CPU
    vectorizes those well, while minor dimensions of 16-32 ran ~3x slower.
    """
    bsz, t = b.shape
    c = BLOCK
    nb = -(-t // c)
    pad, (b, m) = _left_pad(c, b, m)
    dtype = b.dtype
    log_base = jnp.log(jnp.asarray(base, dtype))
    idx = np.arange(c)
    count_mat = jnp.asarray((idx[:, None] >= 1) & (idx[:, None] <= idx[None, :]), jnp.bfloat16)
    suffix_mat = jnp.asarray(idx[:, None] >= idx[None, :], dtype)
    hi = lax.Precision.HIGHEST  # no reduced-precision matmul passes on GPU/TPU
    # 0/1 inputs and counts <= c are exact in bfloat16 with float32 accumulation (and cheaper).
    n = jnp.dot(m.astype(jnp.bfloat16).reshape(bsz * nb, c), count_mat,
                preferred_element_type=jnp.float32).reshape(bsz, nb * c).astype(dtype)
    # Exponents are centred on c/2, so every scale is base**k with |k| <= c/2 + 1.
    half = c // 2
    s = jnp.dot((jnp.exp((n - half) * log_base) * b).reshape(bsz * nb, c), suffix_mat, precision=hi)
    s = s.reshape(bsz, nb, c)
    m_after = jnp.concatenate([m.reshape(bsz, nb, c)[:, 1:, 0], jnp.ones((bsz, 1), bool)], axis=1)
    n_end = n.reshape(bsz, nb, c)[:, :, -1] + m_after  # N_E, [B, NB]
    # Block maps x_start = base**N_E x_E + base**half s[..., 0]; base**N_E may underflow (a
    # negligible decay), so the carry is rescaled from x_E itself: base**(N_E - half) x_E.
    x_end = _states_after(jnp.exp(n_end * log_base), jnp.exp(half * log_base) * s[:, :, 0], init)
    carry = jnp.exp((n_end - half) * log_base) * x_end
    x = jnp.exp((half - n) * log_base) * (s + carry[:, :, None]).reshape(bsz, nb * c)
    return x[:, pad:]


def _map_row_tiles(fn, *args):
    """fn(*args) for a row-independent fn, computed on tiles of R rows at a time.

    args are [B, ...] arrays whose rows fn treats independently; fn returns
    [B, T]. R = max(1, ROW_TILE_ELEMENTS // T): a tile's intermediates (the
    [R, T] counts, scaled terms, matmul output of `_pass_through_blocked`) then
    stay in cache (L2/L3), where each full [B, T] one cost a memory pass plus
    page faults on a fresh buffer. A lax.fori_loop slices tile i at row min(i R, B - R) and
    writes its [R, T] result into the output in place; when R does not divide
    B, the last tile overlaps the one before (those rows are computed twice,
    identically). B <= R: one call, no loop. jit, vmap and grad go through the
    loop (static trip count).
    """
    bsz, t = args[0].shape[:2]
    rows = max(1, ROW_TILE_ELEMENTS // max(t, 1))
    if rows >= bsz:
        return fn(*args)
    out = jax.eval_shape(fn, *(jax.ShapeDtypeStruct((rows,) + x.shape[1:], x.dtype) for x in args))

    def body(i, acc):
        start = jnp.minimum(i * rows, bsz - rows)
        tile = fn(*(lax.dynamic_slice_in_dim(x, start, rows, axis=0) for x in args))
        return lax.dynamic_update_slice_in_dim(acc, tile, start, axis=0)

    acc = _vary_like(jnp.zeros((bsz,) + out.shape[1:], out.dtype), *args)
    return lax.fori_loop(0, -(-bsz // rows), body, acc)


def _with_fallback(decay, blocked, fallback, *args):
    """`blocked(*args)` where decay >= BLOCKED_MIN_DECAY, else `fallback(*args)`.

    A Python/NumPy scalar decay picks the branch at trace time; a traced one
    (e.g. gamma a jit argument) selects with lax.cond, compiling both.
    """
    if isinstance(decay, numbers.Real):
        return (blocked if decay >= BLOCKED_MIN_DECAY else fallback)(*args)
    return lax.cond(jnp.asarray(decay) >= BLOCKED_MIN_DECAY, blocked, fallback, *args)


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
      method: "serial", "associative", "chunked", "blocked" or "native" (see
        module docstring); all agree to float32 rounding. "blocked" and
        "native" need decays of the form a_t in {base, 1}
        (`masked_discounted_returns`, `masked_gae_trace`); for the general a
        here they run "chunked".

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
    init = _vary_like(init, a, b)  # loop carries start from init (see `_vary_like`)
    if dims["T"] == 0:
        return jnp.zeros(a.shape, dtype)
    return _SOLVERS[method](a, b, init)


# ----------------------------------------------------------------------------
# The masked GAE trace (fused serial / chunked, two-pass associative).


def _coefficient(x, dtype):
    """A discount as a Python float when known at trace time, else a traced value of `dtype`.

    Python floats keep the data's dtype (weak typing) and let "blocked" pick its
    branch at trace time; a NumPy float64 or float64 array would promote float32
    data to float64 under jax_enable_x64 (and break the scans' carry types).
    """
    value = static_value(x)
    return value if value is not None else jnp.asarray(x, dtype)


def _next_is_masked(m: Array) -> Array:
    """[B, T] bool: m_{t+1}, with a virtual masked position at T (the bootstrap)."""
    return jnp.concatenate([m[:, 1:], jnp.ones_like(m[:, :1])], axis=1)


def _pass_through_decays(m: Array, base, dtype) -> Array:
    """[B, T] a_t = base if m_{t+1} else 1: the multipliers of a masked pass-through recurrence."""
    if m.shape[1] == 0:
        return jnp.zeros(m.shape, dtype)
    return jnp.where(_next_is_masked(m), base, 1.0).astype(dtype)


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
    init_carry = (init, jnp.zeros_like(init), jnp.ones_like(init, dtype=bool))
    _, x = lax.scan(_gae_step(gamma, gamma_lambda), init_carry, (r.T, v.T, m.T), reverse=True,
                    unroll=SERIAL_UNROLL)
    return x.T


def _centre_values(r, v, m, init, gamma):
    """(r - c (1 - gamma) m, v - c, init - c), c [B] the value at each row's first masked position.

    GAE is exactly invariant under this shift (every delta_t = r_t + gamma v' - v_t
    is unchanged), while the rounding of "chunked" and "blocked", which carry
    values and traces in one sum, scales with |v|; so they run on centred values.
    c is read from v, not computed (a mean, recomputed by XLA in two fusions,
    rounded differently in v - c and init - c), so both shifts use the same
    float. Values off the mask are replaced by 0 first (they may be inf or NaN).
    c is 0 for a row without masked positions, and a constant under grad.
    """
    v = jnp.where(m, v, 0.0)
    first = jnp.argmax(m, axis=1)  # the first True (0 if none: v is 0 there)
    c = lax.stop_gradient(jnp.take_along_axis(v, first[:, None], axis=1)[:, 0])
    return r - jnp.where(m, (1.0 - gamma) * c[:, None], 0.0), v - c[:, None], init - c


def _gae_chunked(r, v, m, init, gamma, gamma_lambda):
    """Two-level fused GAE, the same arithmetic as `_gae_serial`.

    1. Per chunk of C positions, compose the per-step affine maps of the state
       (w, x) into one map from the chunk's end state to its start state (scan
       over C, vectorized over B * NC chunks; no per-position output).
    2. Scan over the NC chunks to get each chunk's end state.
    3. Re-run the per-step recurrence inside every chunk from its end state.
    Rows are left-padded to NC * C with unmasked zero-reward positions, which
    the reverse recurrence reaches last and drops. Values are centred per row
    first (`_centre_values`).
    """
    r, v, init = _centre_values(r, v, m, init, gamma)
    b, t = r.shape
    c = chunk_size(t)
    nc = -(-t // c)
    pad, (r, v, m) = _left_pad(c, r, v, m)
    dtype = r.dtype

    def to_chunks(x):  # [B, NC * C] -> [C, B * NC], time-major inside chunks
        return x.reshape(b, nc, c).transpose(2, 0, 1).reshape(c, b * nc)

    xs = tuple(to_chunks(x) for x in (r, v, m))
    first = m.reshape(b, nc, c)[:, :, 0]  # m_{t+1} after each chunk's last position
    m_after = jnp.concatenate([first[:, 1:], jnp.ones((b, 1), bool)], axis=1).reshape(b * nc)
    one = _vary_like(jnp.ones((b * nc,), dtype), init)
    zero = jnp.zeros_like(one)

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
    # value at the first masked position >= t (where, not m * v: v off the mask may be inf/NaN)
    w = _associative(jnp.where(m, 0.0, 1.0).astype(r.dtype), jnp.where(m, v, 0.0), init)
    next_value = jnp.concatenate([w[:, 1:], init[:, None]], axis=1)
    delta = r + jnp.where(m, gamma * next_value - v, 0.0)
    a_trace = _pass_through_decays(m, gamma_lambda, r.dtype)
    return _associative(a_trace, delta, jnp.zeros_like(init))


def _gae_blocked_kernel(r, v, m, init, gamma, gamma_lambda):
    """The masked GAE trace as ONE pass-through recurrence (`_pass_through_blocked`).

    The coupled term gamma * w_{t+1} of a masked t is gamma * v_j at the next
    masked position j (or gamma * init), and the trace decays by exactly
    gamma_lambda from j to t; so it is moved to j as (gamma / gamma_lambda) v_j:
    y_t = a_t y_{t+1} + r_t + [m_t] (k - 1) v_t with k = gamma / gamma_lambda
    (= 1 / lambda_) and y_T = k * init. Then y_t = x_t + k v_t on masked t,
    which subtracts the one moved term that belongs to earlier positions. The
    rounding of that subtraction is about k * eps * |v_t|; gamma_lambda >=
    BLOCKED_MIN_DECAY bounds k by 1 / BLOCKED_MIN_DECAY for gamma <= 1.

    So that error scales with the spread of the values (the value after the end,
    init, included: 0 for terminated rows), not their offset, each row runs on
    centred values (`_centre_values`). Without that, values ~1000 with
    lambda_ = 0.16 gave errors ~5e-3 on advantages of size ~0.1.
    Runs on row tiles (`_map_row_tiles`), the masking by m included, so no
    [B, T] intermediate is materialized. Returns the masked trace (0 off m).
    (Writing the returns from the tiles as well measured slower than the one
    fused [B, T] pass of `_gae_blocked`.)
    """
    def tile(r, v, m, init):
        k = gamma / gamma_lambda
        r, v, init = _centre_values(r, v, m, init, gamma)
        y = _pass_through_blocked(r + jnp.where(m, (k - 1.0) * v, 0.0), m, k * init, gamma_lambda)
        return jnp.where(m, y - k * v, 0.0)

    return _map_row_tiles(tile, r, v, m, init)


def _with_returns(m, v, x):
    """(x, x + v), both 0 where m is false."""
    x = jnp.where(m, x, 0.0)
    return x, jnp.where(m, x + v, 0.0)


def _gae_blocked(r, v, m, init, gamma, gamma_lambda):
    """(trace, trace + v), 0 where m is false: `_gae_blocked_kernel`, else "chunked"."""
    def blocked(r, v, m, init, gamma, gamma_lambda):
        x = _gae_blocked_kernel(r, v, m, init, gamma, gamma_lambda)  # already 0 off m
        return x, jnp.where(m, x + v, 0.0)

    def chunked(r, v, m, init, gamma, gamma_lambda):
        return _with_returns(m, v, _gae_chunked(r, v, m, init, gamma, gamma_lambda))

    return _with_fallback(gamma_lambda, blocked, chunked, r, v, m, init, gamma, gamma_lambda)


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
    """The GAE trace with masked pass-through: `masked_gae_trace_and_returns`[0].

    Args, errors and the recurrence: see `masked_gae_trace_and_returns`.
    Returns x: [B, T] float, the trace where mask is true and 0 elsewhere.
    """
    return masked_gae_trace_and_returns(rewards, values, mask, init, gamma=gamma,
                                        gamma_lambda=gamma_lambda, method=method)[0]


def masked_gae_trace_and_returns(
    rewards: Array,
    values: Array,
    mask: Array,
    init: Array,
    *,
    gamma: float | Array,
    gamma_lambda: float | Array,
    method: str = DEFAULT_METHOD,
) -> tuple[Array, Array]:
    """The GAE trace with masked pass-through, and the returns trace + values.

    With w_T = init and virtual m_T = True:

        w_t = v_t if m_t else w_{t+1}          (value at the next masked position)
        x_t = a_t x_{t+1} + r_t + [m_t] (gamma w_{t+1} - v_t),  x_T = 0,
        a_t = gamma_lambda if m_{t+1} else 1,

    so on masked positions x is the GAE advantage of Schulman et al. 2016 eq. 16
    over the compressed sequence of masked positions (unmasked rewards folded
    into the preceding masked position); see `jaxrl_agent.advantages.gae`.
    Both are instances of `reverse_linear_recurrence` (w: a = 1 - m, b = m v);
    "serial" and "chunked" solve them in one fused pass, "blocked" as one
    pass-through recurrence (`_gae_blocked_kernel`; it needs gamma_lambda >=
    BLOCKED_MIN_DECAY and otherwise runs "chunked", chosen at trace time for
    Python scalars and by lax.cond for traced ones).

    Args:
      rewards: [B, T] float. values: [B, T] float. mask: [B, T] bool.
      init: [B] float, the value after the last position (0 when terminal).
      gamma: discount in [0, 1]. gamma_lambda: gamma * lambda_ in [0, 1]
        (scalars or traced).
      method: "serial", "associative", "chunked", "blocked" or "native"
        (CPU only: `jaxrl_agent.native`).

    Returns:
      (x, x + values): [B, T] float each, the trace (the GAE advantages) and
      the lambda-returns where mask is true, 0 elsewhere.

    Raises:
      ValueError: on shapes other than the above (naming the argument), an
        unknown method, a gamma / gamma_lambda that is not a scalar, or
        "native" off the CPU backend.
      RuntimeError: "native" when its kernel cannot be compiled here
        (`jaxrl_agent.native.ensure_registered`).
    """
    dims = check_shape("rewards", rewards, ("B", "T"))
    check_shape("values", values, ("B", "T"), dims)
    check_shape("mask", mask, ("B", "T"), dims)
    check_shape("init", init, ("B",), dims)
    check_choice("method", method, METHODS)
    check_scalar("gamma", gamma)
    check_scalar("gamma_lambda", gamma_lambda)
    dtype = jnp.promote_types(jnp.result_type(rewards, values, init), jnp.float32)
    r, v, init = (jnp.asarray(x, dtype) for x in (rewards, values, init))
    gamma, gamma_lambda = _coefficient(gamma, dtype), _coefficient(gamma_lambda, dtype)
    m = jnp.asarray(mask).astype(bool)
    init = _vary_like(init, r, v, m)  # loop carries start from init (see `_vary_like`)
    if dims["T"] == 0:
        return jnp.zeros(r.shape, dtype), jnp.zeros(r.shape, dtype)
    if method == "blocked":  # masks inside its row tiles (no extra [B, T] pass)
        return _gae_blocked(r, v, m, init, gamma, gamma_lambda)
    if method == "native":  # one C++ pass per row, masks as it writes
        return native.gae_trace_and_returns(r, v, m, init, gamma, gamma_lambda)
    return _with_returns(m, v, _GAE_SOLVERS[method](r, v, m, init, gamma, gamma_lambda))


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
      gamma: discount in [0, 1] (scalar or traced). method: as in
        `reverse_linear_recurrence`; "blocked" runs the closed form
        (`_pass_through_blocked`) when gamma >= BLOCKED_MIN_DECAY, else
        "chunked"; "native" runs the native GAE kernel with values 0 and
        lambda_ = 1 (0 where mask is false).

    Returns:
      [B, T] float (read it where mask is true).

    Raises:
      ValueError: as `reverse_linear_recurrence`, naming rewards/mask/init,
        or a gamma that is not a scalar.
    """
    dims = check_shape("rewards", rewards, ("B", "T"))
    check_shape("mask", mask, ("B", "T"), dims)
    check_shape("init", init, ("B",), dims)
    check_choice("method", method, METHODS)
    check_scalar("gamma", gamma)
    m = jnp.asarray(mask).astype(bool)
    dtype = jnp.promote_types(jnp.result_type(rewards, init), jnp.float32)
    gamma = _coefficient(gamma, dtype)
    init = _vary_like(jnp.asarray(init, dtype), rewards, m)  # see `_vary_like`
    if method == "native" and dims["T"] > 0:  # GAE with values 0 and lambda_ = 1
        r = jnp.asarray(rewards, dtype)
        return native.gae_trace_and_returns(r, jnp.zeros_like(r), m, init, gamma, gamma)[0]
    if method != "blocked" or dims["T"] == 0:
        a = _pass_through_decays(m, gamma, dtype)
        return reverse_linear_recurrence(a, rewards, init, method=method)
    r, init = (jnp.asarray(x, dtype) for x in (rewards, init))

    def fallback(r, m, init, gamma):
        return _chunked(_pass_through_decays(m, gamma, dtype), r, init)

    def blocked(r, m, init, gamma):  # row tiles, see `_map_row_tiles`
        def tile(r, m, init):
            return _pass_through_blocked(r, m, init, gamma)

        return _map_row_tiles(tile, r, m, init)

    return _with_fallback(gamma, blocked, fallback, r, m, init, gamma)
