// The masked GAE trace and returns on CPU, as an XLA FFI custom call.
//
// Backs method="native" of jaxrl_agent.scans.masked_gae_trace_and_returns
// (jaxrl_agent/native.py compiles this file once per machine and jaxlib
// version, with the FFI headers of the installed jaxlib, and registers the two
// handlers below). The recurrence of the "serial" method (jaxrl_agent.scans._gae_step),
// equal to it within float32 rounding (XLA may fuse its multiply-adds into FMAs,
// this file computes a * x + (r + d) without): with w_T = init, x_T = 0 and
// virtual m_T = 1,
//
//   w_t = m_t ? v_t : w_{t+1}                        (value at the next masked position)
//   x_t = a_t x_{t+1} + r_t + (m_t ? gamma w_{t+1} - v_t : 0),
//   a_t = m_{t+1} ? gamma_lambda : 1,
//   advantages_t = m_t ? x_t : 0,   returns_t = m_t ? x_t + v_t : 0.
//
// Layout: rewards, values, mask, advantages, returns are [R, T] row-major (R =
// the product of all leading dimensions); init, gamma, gamma_lambda are [R]
// (per-row discounts, so that jax.vmap over a discount broadcasts cleanly).
//
// Speed: one reverse pass per row (float32: 4 rows at a time in vector lanes,
// RunGroup4), reading 2 floats and a byte and writing 2 floats per element;
// the selects are branch-free (a random mask would
// otherwise mispredict ~30% of branches). Rows are handed out one at a time to
// OpenMP threads (OMP_NUM_THREADS; built with -fopenmp when the compiler has it,
// else serial): dynamic scheduling keeps both cores busy when one is slowed by
// another process, which a static split measured 1.2-1.8x slower under.
// XLA's own intra-op pool (ffi::ThreadPool), and a thread per call, measured
// 1.5-2x slower than an OpenMP team on 2 cores (docs/benchmarks.md).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "xla/ffi/api/ffi.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ffi = xla::ffi;

namespace {

// Calls with fewer elements run on the calling thread only (an OpenMP team costs
// more than it saves there).
constexpr int64_t kParallelElements = 1 << 15;

template <typename F>
using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

// m ? a : b without a branch (and without arithmetic on the unselected value,
// so an inf or NaN off the mask never leaks into the result).
template <typename F>
inline F Select(bool m, F a, F b) {
  Bits<F> ua, ub;
  std::memcpy(&ua, &a, sizeof(F));
  std::memcpy(&ub, &b, sizeof(F));
  const Bits<F> keep = Bits<F>(0) - static_cast<Bits<F>>(m);
  const Bits<F> u = (ua & keep) | (ub & ~keep);
  F out;
  std::memcpy(&out, &u, sizeof(F));
  return out;
}

template <typename F>
struct Rows {
  const F* r;
  const F* v;
  const uint8_t* m;  // the PRED mask's bytes; any nonzero byte counts as true
  const F* init;
  const F* gamma;
  const F* gamma_lambda;
  F* adv;
  F* ret;
  int64_t t_len;

  // Positions t_end - 1, ..., 0 of row b, continuing from the state (x, w, a)
  // = (x_{t_end}, w_{t_end}, a_{t_end - 1}).
  void RunRow(int64_t b, int64_t t_end, F& x, F& w, F& a) const {
    const int64_t off = b * t_len;
    const F *rb = r + off, *vb = v + off;
    const uint8_t* mb = m + off;
    F *ab = adv + off, *qb = ret + off;
    const F g = gamma[b], gl = gamma_lambda[b];
    for (int64_t t = t_end - 1; t >= 0; --t) {
      const bool mt = mb[t] != 0;
      const F vt = vb[t];
      x = a * x + (rb[t] + Select<F>(mt, g * w - vt, F(0)));
      w = Select<F>(mt, vt, w);
      a = Select<F>(mt, gl, F(1));
      ab[t] = Select<F>(mt, x, F(0));
      qb[t] = Select<F>(mt, x + vt, F(0));
    }
  }

  void Run(int64_t b) const {
    F x = F(0), w = init[b], a = gamma_lambda[b];
    RunRow(b, t_len, x, w, a);
  }
};

// float32, 4 rows at a time: the same arithmetic, in the same order, on 4-lane
// vectors (lane j = row b0 + j; bit-identical to Rows::Run), with 4 x 4 tiles
// transposed in registers. GCC/Clang vector extensions: SSE2 on x86-64, NEON
// on AArch64, scalar code elsewhere. Measured 1.6-1.8x faster than Rows::Run
// on one x86-64 core (docs/benchmarks.md).
typedef float V4 __attribute__((vector_size(16)));
typedef int32_t V4i __attribute__((vector_size(16)));
typedef uint8_t V4u8 __attribute__((vector_size(4)));

#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define JAXRL_SHUFFLE(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
#else
#define JAXRL_SHUFFLE(a, b, i, j, k, l) __builtin_shuffle(a, b, V4i{i, j, k, l})
#endif

inline void Transpose4(V4& a, V4& b, V4& c, V4& d) {
  const V4 t0 = JAXRL_SHUFFLE(a, b, 0, 4, 1, 5), t1 = JAXRL_SHUFFLE(a, b, 2, 6, 3, 7);
  const V4 t2 = JAXRL_SHUFFLE(c, d, 0, 4, 1, 5), t3 = JAXRL_SHUFFLE(c, d, 2, 6, 3, 7);
  a = JAXRL_SHUFFLE(t0, t2, 0, 1, 4, 5);
  b = JAXRL_SHUFFLE(t0, t2, 2, 3, 6, 7);
  c = JAXRL_SHUFFLE(t1, t3, 0, 1, 4, 5);
  d = JAXRL_SHUFFLE(t1, t3, 2, 3, 6, 7);
}

inline V4 Select4(V4i keep, V4 a, V4 b) {  // lanes of keep: all ones or 0
  return reinterpret_cast<V4>((reinterpret_cast<V4i>(a) & keep) | (reinterpret_cast<V4i>(b) & ~keep));
}

inline V4 Load4(const float* p) {
  V4 x;
  std::memcpy(&x, p, sizeof(x));
  return x;
}

inline void Store4(float* p, V4 x) { std::memcpy(p, &x, sizeof(x)); }

inline V4 LoadMask4(const uint8_t* p) {  // 4 mask bytes -> lanes of all ones (nonzero) / 0, as V4 bits
  V4u8 bytes;
  std::memcpy(&bytes, p, sizeof(bytes));
  return reinterpret_cast<V4>(__builtin_convertvector(bytes, V4i) != 0);
}

// Rows b0 .. b0 + 3 of `rows`.
inline void RunGroup4(const Rows<float>& rows, int64_t b0) {
  const int64_t T = rows.t_len, off = b0 * T;
  const float* r[4];
  const float* v[4];
  const uint8_t* m[4];
  float* ad[4];
  float* q[4];
  for (int j = 0; j < 4; ++j) {
    r[j] = rows.r + off + j * T;
    v[j] = rows.v + off + j * T;
    m[j] = rows.m + off + j * T;
    ad[j] = rows.adv + off + j * T;
    q[j] = rows.ret + off + j * T;
  }
  const V4 g = Load4(rows.gamma + b0), gl = Load4(rows.gamma_lambda + b0);
  const V4 one = {1.f, 1.f, 1.f, 1.f}, zero = {0.f, 0.f, 0.f, 0.f};
  V4 x = zero, w = Load4(rows.init + b0), a = gl;
  const int64_t head = T % 4;  // positions 0 .. head - 1 run per row below
  for (int64_t t = T - 4; t >= head; t -= 4) {
    V4 R0 = Load4(r[0] + t), R1 = Load4(r[1] + t), R2 = Load4(r[2] + t), R3 = Load4(r[3] + t);
    V4 W0 = Load4(v[0] + t), W1 = Load4(v[1] + t), W2 = Load4(v[2] + t), W3 = Load4(v[3] + t);
    V4 M0 = LoadMask4(m[0] + t), M1 = LoadMask4(m[1] + t), M2 = LoadMask4(m[2] + t),
       M3 = LoadMask4(m[3] + t);
    Transpose4(R0, R1, R2, R3);  // now Rk, Wk, Mk: position t + k of the 4 rows
    Transpose4(W0, W1, W2, W3);
    Transpose4(M0, M1, M2, M3);
#define JAXRL_STEP(K)                                                      \
  {                                                                        \
    const V4i keep = reinterpret_cast<V4i>(M##K);                          \
    x = a * x + (R##K + Select4(keep, g * w - W##K, zero));                \
    w = Select4(keep, W##K, w);                                            \
    a = Select4(keep, gl, one);                                            \
    R##K = Select4(keep, x, zero);      /* advantages */                   \
    W##K = Select4(keep, x + W##K, zero); /* returns */                    \
  }
    JAXRL_STEP(3) JAXRL_STEP(2) JAXRL_STEP(1) JAXRL_STEP(0)
#undef JAXRL_STEP
    Transpose4(R0, R1, R2, R3);
    Transpose4(W0, W1, W2, W3);
    Store4(ad[0] + t, R0), Store4(ad[1] + t, R1), Store4(ad[2] + t, R2), Store4(ad[3] + t, R3);
    Store4(q[0] + t, W0), Store4(q[1] + t, W1), Store4(q[2] + t, W2), Store4(q[3] + t, W3);
  }
  for (int j = 0; j < 4; ++j) {
    float xs = x[j], ws = w[j], as = a[j];
    rows.RunRow(b0 + j, head, xs, ws, as);
  }
}

// Work unit u of a call: float32 runs groups of 4 rows, then the last rows one
// by one; float64 runs single rows.
template <typename F>
struct Units {
  const Rows<F>& rows;
  int64_t num_rows;

  int64_t groups() const { return std::is_same_v<F, float> ? num_rows / 4 : 0; }
  int64_t count() const { return groups() + (num_rows - 4 * groups()); }
  void Run(int64_t u) const {
    if constexpr (std::is_same_v<F, float>) {
      if (u < groups()) return RunGroup4(rows, 4 * u);
    }
    rows.Run(4 * groups() + (u - groups()));
  }
};

template <ffi::DataType D>
ffi::Error GaeImpl(ffi::Buffer<D> rewards, ffi::Buffer<D> values,
                   ffi::Buffer<ffi::PRED> mask, ffi::Buffer<D> init, ffi::Buffer<D> gamma,
                   ffi::Buffer<D> gamma_lambda, ffi::ResultBuffer<D> advantages,
                   ffi::ResultBuffer<D> returns) {
  using F = ffi::NativeType<D>;
  const auto dims = rewards.dimensions();
  if (dims.size() < 1) return ffi::Error::InvalidArgument("gae_cpu: rewards must have rank >= 1");
  const int64_t t_len = dims.back();
  const int64_t n = static_cast<int64_t>(rewards.element_count());
  const int64_t num_rows = t_len == 0 ? 0 : n / t_len;
  if (static_cast<int64_t>(values.element_count()) != n ||
      static_cast<int64_t>(mask.element_count()) != n ||
      static_cast<int64_t>(advantages->element_count()) != n ||
      static_cast<int64_t>(returns->element_count()) != n) {
    return ffi::Error::InvalidArgument("gae_cpu: rewards, values, mask and outputs must match");
  }
  if (t_len == 0) return ffi::Error::Success();
  if (static_cast<int64_t>(init.element_count()) != num_rows ||
      static_cast<int64_t>(gamma.element_count()) != num_rows ||
      static_cast<int64_t>(gamma_lambda.element_count()) != num_rows) {
    return ffi::Error::InvalidArgument("gae_cpu: init, gamma, gamma_lambda must have one entry per row");
  }
  // PRED elements are bytes; read them as uint8_t (a bool holding 2 would be undefined).
  const auto* mask_bytes = reinterpret_cast<const uint8_t*>(mask.untyped_data());
  const Rows<F> rows{rewards.typed_data(), values.typed_data(), mask_bytes,
                     init.typed_data(),    gamma.typed_data(),  gamma_lambda.typed_data(),
                     advantages->typed_data(), returns->typed_data(), t_len};
  const Units<F> units{rows, num_rows};
  const int64_t count = units.count();
#ifdef _OPENMP
  if (n >= kParallelElements && count > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t u = 0; u < count; ++u) units.Run(u);
    return ffi::Error::Success();
  }
#endif
  for (int64_t u = 0; u < count; ++u) units.Run(u);
  return ffi::Error::Success();
}

}  // namespace

#define JAXRL_GAE_BINDING(D)                   \
  ffi::Ffi::Bind()                             \
      .Arg<ffi::Buffer<D>>()   /* rewards */   \
      .Arg<ffi::Buffer<D>>()   /* values */    \
      .Arg<ffi::Buffer<ffi::PRED>>() /* mask */ \
      .Arg<ffi::Buffer<D>>()   /* init */      \
      .Arg<ffi::Buffer<D>>()   /* gamma */     \
      .Arg<ffi::Buffer<D>>()   /* gamma_lambda */ \
      .Ret<ffi::Buffer<D>>()   /* advantages */ \
      .Ret<ffi::Buffer<D>>()   /* returns */

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxrlAgentGaeF32, GaeImpl<ffi::F32>, JAXRL_GAE_BINDING(ffi::F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxrlAgentGaeF64, GaeImpl<ffi::F64>, JAXRL_GAE_BINDING(ffi::F64));

// Threads a large call uses (OpenMP's team size; 1 when built without OpenMP).
extern "C" int JaxrlAgentGaeThreads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
