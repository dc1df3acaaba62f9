/* Reference point for bench_advantages.py: the masked GAE recurrence as a plain C loop.
 *
 * Not part of the library. One reverse loop per row, rows split over OpenMP threads;
 * the same arithmetic as jaxrl_agent.scans._gae_step ("serial"): with virtual m_T = 1,
 *   x_t = (m_{t+1} ? gamma_lambda : 1) x_{t+1} + r_t + (m_t ? gamma w_{t+1} - v_t : 0),
 *   w_t = m_t ? v_t : w_{t+1},  w_T = init,  x_T = 0,
 * advantages = m ? x : 0, returns = m ? x + v : 0. r, v, adv, ret: [B, T] float32
 * row-major; m: [B, T] bytes (0/1); init: [B] float32.
 */
#include <stdint.h>

void gae_rows(const float *r, const float *v, const uint8_t *m, const float *init,
              float *adv, float *ret, int64_t rows, int64_t t_len, float gamma,
              float gamma_lambda) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < rows; ++b) {
    const float *rb = r + b * t_len, *vb = v + b * t_len;
    const uint8_t *mb = m + b * t_len;
    float *ab = adv + b * t_len, *qb = ret + b * t_len;
    float x = 0.f, w = init[b];
    int m_next = 1;
    for (int64_t t = t_len - 1; t >= 0; --t) {
      int mt = mb[t];
      float vt = vb[t];
      x = (m_next ? gamma_lambda : 1.f) * x + rb[t] + (mt ? gamma * w - vt : 0.f);
      w = mt ? vt : w;
      m_next = mt;
      ab[t] = mt ? x : 0.f;
      qb[t] = mt ? x + vt : 0.f;
    }
  }
}
