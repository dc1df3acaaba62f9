"""Credit assignment: advantage estimators as pure, jittable functions.

Every function takes arrays and Python scalars and returns arrays; all are
jit/vmap/grad-safe, keep static shapes, and never produce NaN or inf for finite
input. In `grpo`, `dr_grpo` and `rloo`, constant groups, singleton groups and
masked rows give exactly 0; `reinforce_pp_baseline` gives them 0 before its
batch whitening, which then shifts every token by the batch mean (as verl).
Masks are read as bool (any nonzero value is true).

Three levels (docs/DESIGN.md, "Credit assignment"):

- Token level: `gae`, `discounted_returns`, `reinforce_pp` run over the tokens
  where `loss_mask` is true and pass straight through the others (prompt, tool
  observations, padding): an unmasked token neither discounts nor resets the
  trace. Equivalently, the result equals the estimator applied to the
  compressed sequence of masked tokens (observation tokens deleted), with the
  rewards of unmasked tokens added to the preceding masked token.
- Step level: `step_gae`, `step_discounted_returns` run the same recurrences over
  turns; `step_values_from_token_values` and `broadcast_step_advantages` move
  between tokens and turns.
- Outcome level: `grpo`, `dr_grpo`, `rloo`, `reinforce_pp_baseline` over groups
  given as integer ids (segment ops with a static `num_groups`; groups need
  not be contiguous, ordered or of equal size).

The recurrences x_t = a_t x_{t+1} + b_t behind GAE and returns are solved by
`jaxrl_agent.scans`: `method="serial"` (lax.scan, depth T), `"associative"`
(lax.associative_scan, depth O(log T)), `"chunked"` (two-level scan) or
`"blocked"` (closed form per block of positions, matmuls, no transpose; falls
back to "chunked" for gamma * lambda_ < scans.BLOCKED_MIN_DECAY) or, on CPU,
`"native"` (one C++ pass per row, an XLA FFI custom call compiled on first use:
`jaxrl_agent.native`); all agree to float32 rounding. The default is the
fastest pure-JAX method on CPU (docs/benchmarks.md): "blocked" over tokens and
turns (2-4x faster than "chunked" at T = 4096-32768; at S = 64-512 as fast as
or faster than "serial"); it runs unchanged on GPU/TPU and under any sharding.
On CPU, "native" is faster still (0.7-2.7x the memory-copy floor where
"blocked" is at 1.4-6.1x) but needs a C++17 compiler at first use.

Standard-deviation convention: all group and whitening statistics use the
unbiased estimator (ddof=1, Bessel's correction), as `torch.std` does by default
and therefore verl (`compute_grpo_outcome_advantage`, `masked_whiten`) and TRL
(`GRPOTrainer`); we keep it so advantages match those stacks numerically.
"""

from __future__ import annotations

import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_agent.checks import check_choice, check_scalar, check_shape, check_static_int
from jaxrl_agent.scans import (DEFAULT_METHOD, METHODS, masked_discounted_returns,
                                masked_gae_trace_and_returns)

Array = jax.Array


# ----------------------------------------------------------------------------
# Argument checks.


def _check_unit_interval(name: str, value: Any) -> None:
    """Raises ValueError unless value is a scalar (one for the whole batch) in [0, 1]."""
    check_scalar(name, value, low=0.0, high=1.0)


def _float_dtype(*xs: Any) -> Any:
    """The float dtype of the result (at least float32); nested lists are read as arrays."""
    xs = tuple(np.asarray(x) if isinstance(x, (list, tuple)) else x for x in xs)
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def _boundary(bootstrap_value, truncated, dims, dtype) -> Array:
    """[B] value of the state after the last masked position (0 when terminal)."""
    b = dims["B"]
    if bootstrap_value is None:
        if truncated is not None:
            raise ValueError(
                "truncated: given without bootstrap_value; truncated episodes bootstrap "
                "from bootstrap_value [B] (pass zeros if no row is truncated)"
            )
        return jnp.zeros((b,), dtype)
    check_shape("bootstrap_value", bootstrap_value, ("B",), dims)
    boot = jnp.asarray(bootstrap_value, dtype)
    if truncated is None:
        return boot
    check_shape("truncated", truncated, ("B",), dims)
    return jnp.where(jnp.asarray(truncated, bool), boot, jnp.zeros_like(boot))


# ----------------------------------------------------------------------------
# GAE and discounted returns (tokens or turns).


def _gae(names, rewards, values, mask, gamma, lambda_, bootstrap_value, truncated, method):
    r_name, v_name, m_name = names
    dims = check_shape(r_name, rewards, ("B", "T"))
    check_shape(v_name, values, ("B", "T"), dims)
    check_shape(m_name, mask, ("B", "T"), dims)
    _check_unit_interval("gamma", gamma)
    _check_unit_interval("lambda_", lambda_)
    check_choice("method", method, METHODS)
    dtype = _float_dtype(rewards, values)
    r = jnp.asarray(rewards, dtype)
    v = jnp.asarray(values, dtype)
    m = jnp.asarray(mask).astype(bool)
    init = _boundary(bootstrap_value, truncated, dims, dtype)
    return masked_gae_trace_and_returns(r, v, m, init, gamma=gamma, gamma_lambda=gamma * lambda_,
                                        method=method)


def gae(
    rewards: Array,
    values: Array,
    loss_mask: Array,
    *,
    gamma: float,
    lambda_: float,
    bootstrap_value: Array | None = None,
    truncated: Array | None = None,
    method: str = DEFAULT_METHOD,
) -> tuple[Array, Array]:
    """Token-level generalized advantage estimation with masked pass-through.

    Over the masked positions t_1 < t_2 < ... < t_n of a row (Schulman et al.
    2016, "High-Dimensional Continuous Control Using GAE", eq. 11-16):

        delta_{t_i} = r'_{t_i} + gamma * v_{t_{i+1}} - v_{t_i}
        A_{t_i}     = delta_{t_i} + gamma * lambda_ * A_{t_{i+1}}
        R_{t_i}     = A_{t_i} + v_{t_i}

    with v_{t_{n+1}} = bootstrap_value if the row is truncated, else 0
    (terminated: no bootstrap), and A_{t_{n+1}} = 0. Positions where
    `loss_mask` is false (prompt, tool observations, padding) pass the trace
    straight through: gamma and gamma*lambda_ apply once between consecutive
    masked tokens whatever the gap, and the delta of a masked token uses the
    value of the NEXT masked token.

    Rewards on unmasked positions: r'_{t_i} = r_{t_i} + the sum of rewards on
    the unmasked positions between t_i and t_{i+1} (to the end of the row for
    t_n), undiscounted: a reward on a tool observation or on padding is credited
    to the action that preceded it. Rewards before the first masked token (on
    the prompt) are dropped.

    Value alignment: values[b, t] is the value of the state before token t,
    V(tokens[:t]) (the head output at position t-1), as in types.py.

    Args:
      rewards: [B, T] float, reward r_t per token (e.g. the outcome on the last
        action token, minus a per-token KL penalty); finite everywhere, the
        prompt and padding included (a non-finite reward before the first
        masked token is dropped by "serial" but reaches the sums of the other
        methods and the gamma gradient of "native").
      values: [B, T] float, critic values v_t; may be inf/NaN where loss_mask
        is false (never read there).
      loss_mask: [B, T] bool (or 0/1), true on policy-generated tokens.
      gamma: discount, a scalar in [0, 1] (per masked step; one for the batch,
        a Python number or a traced 0-d array).
      lambda_: GAE lambda, a scalar in [0, 1] (as gamma).
      bootstrap_value: optional [B] float, value of the state after the last
        token; used for rows that are truncated.
      truncated: optional [B] bool; None with bootstrap_value bootstraps every
        row. Requires bootstrap_value.
      method: "blocked" (closed form per block, the default), "chunked"
        (two-level lax.scan), "serial" (lax.scan), "associative"
        (lax.associative_scan), or "native" (CPU only: a C++ XLA FFI kernel,
        the fastest there; `jaxrl_agent.native`); see `jaxrl_agent.scans`.

    Returns:
      (advantages, returns), both [B, T] float32 (float64 for float64 input),
      exactly 0 where loss_mask is false.

    Raises:
      ValueError: on shapes other than the above (naming the argument), gamma or
        lambda_ not a scalar or (when known at trace time) outside [0, 1], an
        unknown method, truncated without bootstrap_value, or "native" off the
        CPU backend.
      RuntimeError: "native" when its kernel cannot be compiled (no C++17
        compiler; the message says why).
    """
    return _gae(("rewards", "values", "loss_mask"), rewards, values, loss_mask,
                gamma, lambda_, bootstrap_value, truncated, method)


def step_gae(
    step_rewards: Array,
    step_values: Array,
    step_mask: Array,
    *,
    gamma: float,
    lambda_: float,
    bootstrap_value: Array | None = None,
    truncated: Array | None = None,
    method: str = DEFAULT_METHOD,  # "blocked": fastest at every S benchmarked (S = 64-32768)
) -> tuple[Array, Array]:
    """Step-level (per-turn) GAE: `gae`'s recurrence over turns.

    delta_k = r_k + gamma * V_{k+1} - V_k,  A_k = delta_k + gamma*lambda_*A_{k+1}
    (Schulman et al. 2016, eq. 16), over the turns where step_mask is true;
    other turns (padding) pass through as in `gae`. Process rewards go on each
    turn; an outcome reward on the last turn.

    Args:
      step_rewards: [B, S] float, reward per turn.
      step_values: [B, S] float, value of the state before each turn's action
        (see `step_values_from_token_values`).
      step_mask: [B, S] bool, true on real turns.
      gamma, lambda_, bootstrap_value ([B]), truncated ([B]), method: as in `gae`;
        bootstrap_value is the value of the state after the last turn.

    Returns:
      (step_advantages, step_returns): [B, S] float, 0 where step_mask is false.
      Put them on tokens with `broadcast_step_advantages`.

    Raises:
      ValueError: as `gae`.
    """
    return _gae(("step_rewards", "step_values", "step_mask"), step_rewards, step_values,
                step_mask, gamma, lambda_, bootstrap_value, truncated, method)


def _discounted_returns(names, rewards, mask, gamma, bootstrap_value, truncated, method):
    r_name, m_name = names
    dims = check_shape(r_name, rewards, ("B", "T"))
    check_shape(m_name, mask, ("B", "T"), dims)
    _check_unit_interval("gamma", gamma)
    check_choice("method", method, METHODS)
    dtype = _float_dtype(rewards)
    m = jnp.asarray(mask).astype(bool)
    init = _boundary(bootstrap_value, truncated, dims, dtype)
    r = jnp.asarray(rewards, dtype)
    x = masked_discounted_returns(r, m, init, gamma=gamma, method=method)
    return jnp.where(m, x, 0.0)


def discounted_returns(
    rewards: Array,
    loss_mask: Array,
    *,
    gamma: float,
    bootstrap_value: Array | None = None,
    truncated: Array | None = None,
    method: str = DEFAULT_METHOD,
) -> Array:
    """Masked discounted returns over tokens (REINFORCE-style estimators).

    G_{t_i} = r'_{t_i} + gamma * G_{t_{i+1}}, G_{t_{n+1}} = bootstrap_value for
    truncated rows, else 0 (Sutton & Barto 2018, eq. 3.8), over the masked
    positions t_i with the pass-through and reward rule of `gae` (rewards on
    unmasked tokens are credited, undiscounted, to the preceding masked token).

    Args:
      rewards: [B, T] float. loss_mask: [B, T] bool. gamma: in [0, 1].
      bootstrap_value, truncated, method: as in `gae`.

    Returns:
      [B, T] float returns, 0 where loss_mask is false.

    Raises:
      ValueError: as `gae`.
    """
    return _discounted_returns(("rewards", "loss_mask"), rewards, loss_mask, gamma,
                               bootstrap_value, truncated, method)


def step_discounted_returns(
    step_rewards: Array,
    step_mask: Array,
    *,
    gamma: float,
    bootstrap_value: Array | None = None,
    truncated: Array | None = None,
    method: str = DEFAULT_METHOD,  # as step_gae (same pass-through kernel; not benchmarked alone)
) -> Array:
    """Discounted returns over turns: `discounted_returns` on [B, S] step arrays.

    G_k = r_k + gamma * G_{k+1} over turns with step_mask true (Sutton & Barto
    2018, eq. 3.8); turns with step_mask false pass through as in `gae`.

    Args:
      step_rewards: [B, S] float, reward per turn. step_mask: [B, S] bool.
      gamma: scalar in [0, 1]. bootstrap_value: optional [B] float, value of
        the state after the last turn. truncated: optional [B] bool.
      method: as in `gae`.

    Returns:
      [B, S] float, 0 where step_mask is false.

    Raises:
      ValueError: as `gae`.
    """
    return _discounted_returns(("step_rewards", "step_mask"), step_rewards, step_mask, gamma,
                               bootstrap_value, truncated, method)


# ----------------------------------------------------------------------------
# Moving between tokens, turns and episodes.


def step_values_from_token_values(
    values: Array, step_ids: Array, loss_mask: Array, num_steps: int
) -> Array:
    """Reads one value per turn from token values.

    The value of turn k is the value of the state before the turn's first action
    token f_k (docs/DESIGN.md): with the aligned convention of `gae`
    (values[t] = V(tokens[:t]), the head output at the last token before t),
    that is values[b, f_k]. Turns without any action token get 0.

    Args:
      values: [B, T] float, aligned token values.
      step_ids: [B, T] int, turn index per token (-1 on prompt/padding).
      loss_mask: [B, T] bool, true on action tokens.
      num_steps: S, static int >= 1.

    Returns:
      [B, S] float step values.

    Raises:
      ValueError: on shape mismatch (naming the argument) or num_steps < 1.
    """
    dims = check_shape("values", values, ("B", "T"))
    check_shape("step_ids", step_ids, ("B", "T"), dims)
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    s = check_static_int("num_steps", num_steps)
    b, t = dims["B"], dims["T"]
    sid = jnp.asarray(step_ids, jnp.int32)
    m = jnp.asarray(loss_mask).astype(bool) & (sid >= 0) & (sid < s)
    seg = jnp.where(m, jnp.arange(b, dtype=jnp.int32)[:, None] * s + sid, b * s)
    pos = jnp.where(m, jnp.arange(t, dtype=jnp.int32)[None, :], t)
    first = jax.ops.segment_min(pos.ravel(), seg.ravel(), num_segments=b * s).reshape(b, s)
    valid = first < t
    out = jnp.take_along_axis(values, jnp.clip(first, 0, t - 1), axis=1)
    return jnp.where(valid, out, jnp.zeros_like(out))


def broadcast_step_advantages(step_advantages: Array, step_ids: Array, loss_mask: Array) -> Array:
    """Puts each turn's advantage on that turn's action tokens.

    Args:
      step_advantages: [B, S] float.
      step_ids: [B, T] int, turn index per token (-1 on prompt/padding).
      loss_mask: [B, T] bool.

    Returns:
      [B, T] float: step_advantages[b, step_ids[b, t]] where loss_mask is true
      and 0 <= step_ids < S, else 0.

    Raises:
      ValueError: on shape mismatch, naming the argument.
    """
    dims = check_shape("step_advantages", step_advantages, ("B", "S"))
    check_shape("step_ids", step_ids, ("B", "T"), dims)
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    s = dims["S"]
    sid = jnp.asarray(step_ids, jnp.int32)
    valid = jnp.asarray(loss_mask).astype(bool) & (sid >= 0) & (sid < s)
    out = jnp.take_along_axis(step_advantages, jnp.clip(sid, 0, s - 1), axis=1)
    return jnp.where(valid, out, jnp.zeros_like(out))


def broadcast_episode_advantages(advantages: Array, loss_mask: Array) -> Array:
    """Puts a per-episode advantage [B] on the episode's loss_mask tokens [B, T].

    Args:
      advantages: [B] float, one advantage per episode (e.g. from `grpo`).
      loss_mask: [B, T] bool, true on the episode's action tokens.

    Returns:
      [B, T] float, advantages[b] where loss_mask is true, else 0.

    Raises:
      ValueError: on shape mismatch, naming the argument.
    """
    dims = check_shape("advantages", advantages, ("B",))
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    adv = jnp.asarray(advantages)
    return jnp.where(jnp.asarray(loss_mask).astype(bool), adv[:, None], jnp.zeros_like(adv)[:, None])


# ----------------------------------------------------------------------------
# Outcome level: groups.


def _group_stats(scores, group_ids, mask, num_groups):
    """Per-row group statistics. Rows masked out or with an id outside
    [0, num_groups) take part in no group."""
    dims = check_shape("scores", scores, ("B",))
    check_shape("group_ids", group_ids, ("B",), dims)
    if isinstance(group_ids, (list, tuple)):
        group_ids = np.asarray(group_ids)
    if not jnp.issubdtype(jnp.result_type(group_ids), jnp.integer):
        raise ValueError(f"group_ids: expected an integer dtype, got {jnp.result_type(group_ids)}")
    if mask is not None:
        check_shape("mask", mask, ("B",), dims)
    num_groups = check_static_int("num_groups", num_groups)
    dtype = _float_dtype(scores)
    s = jnp.asarray(scores, dtype)
    if isinstance(group_ids, (np.ndarray, np.generic)):  # range first: int64 ids would wrap in int32
        group_ids = np.where((group_ids >= 0) & (group_ids < num_groups), group_ids, -1)
    gid = jnp.asarray(group_ids)
    valid = (gid >= 0) & (gid < num_groups)
    gid = gid.astype(jnp.int32)
    if mask is not None:
        valid = valid & jnp.asarray(mask).astype(bool)
    seg = jnp.where(valid, gid, num_groups)  # out of range: dropped by segment ops
    row = jnp.clip(seg, 0, num_groups - 1)

    def gsum(x):
        return jax.ops.segment_sum(x, seg, num_segments=num_groups)

    n = gsum(valid.astype(dtype))
    mean = gsum(jnp.where(valid, s, 0.0)) / jnp.maximum(n, 1.0)
    centered = jnp.where(valid, s - mean[row], 0.0)  # two-pass variance
    sumsq = gsum(centered * centered)
    s_const = lax.stop_gradient(s)
    gmax = jax.ops.segment_max(jnp.where(valid, s_const, -jnp.inf), seg, num_segments=num_groups)
    gmin = jax.ops.segment_min(jnp.where(valid, s_const, jnp.inf), seg, num_segments=num_groups)
    informative = (n > 1) & (gmax > gmin)  # else every advantage of the group is 0
    keep = valid & informative[row]
    return centered, n[row], sumsq[row], keep


def grpo(
    scores: Array,
    group_ids: Array,
    *,
    num_groups: int,
    mask: Array | None = None,
    eps: float = 1e-6,
) -> Array:
    """GRPO outcome advantages: A_i = (s_i - mean_g) / (std_g + eps).

    Shao et al. 2024, "DeepSeekMath", sec. 4.1.2 (outcome supervision); std_g is
    unbiased (ddof=1, as verl/TRL via torch.std), floored so gradients stay
    finite. A group whose scores are all equal, a singleton group (verl returns
    the raw score there; we return 0: no baseline, no signal), a masked row and
    a row with group id outside [0, num_groups) all get exactly 0.

    Args:
      scores: [B] float episode scores.
      group_ids: [B] integer group (prompt) id per episode, any order and any
        integer dtype (ids outside [0, num_groups) take part in no group).
      num_groups: static int, number of group ids (upper bound).
      mask: optional [B] bool, false on padding episodes.
      eps: scalar >= 0 added to the std.

    Returns:
      [B] float advantages (use `broadcast_episode_advantages` for tokens).

    Raises:
      ValueError: on shape mismatch (naming the argument), non-integer
        group_ids, num_groups not a static int >= 1, or eps < 0.
    """
    check_scalar("eps", eps, low=0.0)
    centered, n, sumsq, keep = _group_stats(scores, group_ids, mask, num_groups)
    var = sumsq / jnp.maximum(n - 1.0, 1.0)
    std = jnp.sqrt(jnp.maximum(var, jnp.finfo(var.dtype).tiny))
    return jnp.where(keep, centered / (std + eps), 0.0)


def dr_grpo(
    scores: Array, group_ids: Array, *, num_groups: int, mask: Array | None = None
) -> Array:
    """Dr. GRPO outcome advantages: A_i = s_i - mean_g (no std division).

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
    Perspective", sec. 3.2. Constant/singleton groups, masked rows: exactly 0.

    Args/Returns/Raises: as `grpo` (no eps).
    """
    centered, _, _, keep = _group_stats(scores, group_ids, mask, num_groups)
    return jnp.where(keep, centered, 0.0)


def rloo(
    scores: Array, group_ids: Array, *, num_groups: int, mask: Array | None = None
) -> Array:
    """RLOO: leave-one-out baseline, A_i = s_i - mean_{j != i in g} s_j.

    Equals n/(n-1) * (s_i - mean_g). Kool et al. 2019, "Buy 4 REINFORCE Samples,
    Get a Baseline for Free!"; Ahmadian et al. 2024, "Back to Basics", eq. 5.
    Constant/singleton groups, masked rows: exactly 0.

    Args/Returns/Raises: as `grpo` (no eps).
    """
    centered, n, _, keep = _group_stats(scores, group_ids, mask, num_groups)
    return jnp.where(keep, centered * (n / jnp.maximum(n - 1.0, 1.0)), 0.0)


def whiten(x: Array, mask: Array, *, shift_mean: bool = True, eps: float = 1e-8) -> Array:
    """Masked whitening: (x - mean) / sqrt(var + eps) over the masked entries.

    mean and unbiased var (ddof=1) over entries where mask is true, as verl's
    `masked_whiten`. shift_mean=False adds the mean back. Unmasked entries
    give 0; if all masked entries are equal (or there is one), shift_mean=True
    gives exactly 0 and shift_mean=False returns x there. All-masked: 0.

    Args:
      x: float array of any shape. mask: bool array of the same shape.
      shift_mean: whether the output keeps mean 0.
      eps: scalar >= 0 added to the variance.

    Returns:
      Whitened x, same shape, float.

    Raises:
      ValueError: if mask's shape differs from x's, or eps < 0.
    """
    check_shape("mask", mask, tuple(jnp.shape(x)))
    check_scalar("eps", eps, low=0.0)
    dtype = _float_dtype(x)
    x = jnp.asarray(x, dtype)
    m = jnp.asarray(mask).astype(bool)
    n = jnp.sum(m, dtype=dtype)
    mean = jnp.sum(jnp.where(m, x, 0.0)) / jnp.maximum(n, 1.0)
    centered = jnp.where(m, x - mean, 0.0)
    var = jnp.sum(centered * centered) / jnp.maximum(n - 1.0, 1.0)
    out = centered * lax.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    x_const = lax.stop_gradient(x)
    constant = jnp.max(jnp.where(m, x_const, -jnp.inf)) <= jnp.min(jnp.where(m, x_const, jnp.inf))
    out = jnp.where(constant, 0.0 if shift_mean else x, out)
    return jnp.where(m, out, 0.0)


def reinforce_pp(
    token_rewards: Array, loss_mask: Array, *, gamma: float = 1.0, method: str = DEFAULT_METHOD
) -> Array:
    """REINFORCE++ advantages: masked discounted token returns, whitened globally.

    A = whiten(G) with G from `discounted_returns` (pass-through masking, no
    bootstrap: critic-free) and `whiten` over all masked tokens of the batch.
    Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large
    Language Models", sec. 3; token_rewards usually hold the outcome on the last
    action token minus a per-token KL penalty.

    Args:
      token_rewards: [B, T] float. loss_mask: [B, T] bool. gamma: in [0, 1].
      method: as in `gae`.

    Returns:
      [B, T] float advantages, 0 where loss_mask is false.

    Raises:
      ValueError: as `discounted_returns`.
    """
    returns = _discounted_returns(("token_rewards", "loss_mask"), token_rewards, loss_mask,
                                  gamma, None, None, method)
    return whiten(returns, loss_mask)


def reinforce_pp_baseline(
    scores: Array,
    group_ids: Array,
    loss_mask: Array,
    *,
    num_groups: int,
    mask: Array | None = None,
) -> Array:
    """REINFORCE++-baseline: subtract the group mean, then whiten over tokens.

    A_{b,t} = whiten(s_b - mean_{g(b)}) over the batch's masked tokens, as verl's
    `compute_reinforce_plus_plus_baseline_outcome_advantage` (Hu 2025). A
    constant or singleton group gives 0 before whitening (verl keeps the raw
    score of a singleton); the whitening then subtracts the batch's token mean,
    so those tokens end up at -mean / std, not 0. Episodes with mask false take
    no part: their tokens are 0 and left out of the whitening statistics.

    Args:
      scores: [B] float. group_ids: [B] integer (as `grpo`).
      loss_mask: [B, T] bool. num_groups: static int. mask: optional [B] bool.

    Returns:
      [B, T] float advantages, 0 where loss_mask (or mask) is false.

    Raises:
      ValueError: as `grpo`.
    """
    dims = check_shape("scores", scores, ("B",))
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    token_mask = jnp.asarray(loss_mask).astype(bool)
    if mask is not None:
        check_shape("mask", mask, ("B",), dims)
        token_mask = token_mask & jnp.asarray(mask).astype(bool)[:, None]
    centered = dr_grpo(scores, group_ids, num_groups=num_groups, mask=mask)
    tokens = broadcast_episode_advantages(centered, token_mask)
    return whiten(tokens, token_mask)


# ----------------------------------------------------------------------------
# Registry.

ESTIMATORS: types.MappingProxyType[str, Callable[..., Any]] = types.MappingProxyType({
    "gae": gae,
    "step_gae": step_gae,
    "discounted_returns": discounted_returns,
    "step_discounted_returns": step_discounted_returns,
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
})


def get_estimator(name: str) -> Callable[..., Any]:
    """Returns ESTIMATORS[name]; raises ValueError listing the valid names."""
    check_choice("estimator", name, tuple(ESTIMATORS))
    return ESTIMATORS[name]
