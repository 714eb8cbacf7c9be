// Building blocks of decode_attention.cpp: fp32 loads, the horizontal sums of a key chunk's scores, and the
// register-tiled p @ V update. Included once, by decode_attention.cpp (inside its anonymous namespace).
#pragma once

using at::vec::Vectorized;
using fVec = Vectorized<float>;
constexpr int64_t kBlock = 32;     // positions per online-softmax step
constexpr int64_t kMinSplit = 64;  // positions: a split shorter than this costs more to merge than it saves
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline void load_floats(const float* p, fVec& out) { out = fVec::loadu(p); }
inline void load_floats(const at::BFloat16* p, fVec& out) { at::vec::load_to_float<at::BFloat16>(p, out); }

// The horizontal sums of W vectors, as one vector: lane j holds the sum of a[j]'s lanes. A transpose-and-add tree
// costs about 3 instructions a sum where reducing each vector alone costs about 8.
inline fVec lane_sums(const fVec* a) {
#if defined(CPU_CAPABILITY_AVX512)
  __m512 u[4];
  for (int g = 0; g < 4; ++g) {  // u[g]'s 128-bit lane L: [a[4g + j] summed over its lane L, j = 0..3]
    const __m512 a0 = a[4 * g], a1 = a[4 * g + 1], a2 = a[4 * g + 2], a3 = a[4 * g + 3];
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    u[g] = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
#elif defined(CPU_CAPABILITY_AVX2)
  __m256 u[2];
  for (int g = 0; g < 2; ++g) {
    const __m256 a0 = a[4 * g], a1 = a[4 * g + 1], a2 = a[4 * g + 2], a3 = a[4 * g + 3];
    const __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
    const __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
    u[g] = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
#else
  alignas(64) float out[fVec::size()];
  for (int j = 0; j < fVec::size(); ++j)
    out[j] = at::vec::vec_reduce_all<float>([](fVec& x, fVec& y) { return x + y; }, a[j]);
  return fVec::loadu(out);
#endif
}

// Query rows a value tile holds in registers (R * NV accumulators).
template <int NV>
constexpr int64_t tile_rows() { return NV >= 16 ? 1 : 16 / NV; }

// Per-thread scratch of `attend` for `rows` query rows of head size D.
struct Scratch {
  std::vector<float> buf;
  float *qf, *kf, *vf, *scores, *acc, *mx, *sum, *alpha;
  Scratch(int64_t rows, int64_t D) : buf(rows * D * 2 + 2 * kBlock * D + rows * kBlock + 3 * rows, 0.f) {
    qf = buf.data(); acc = qf + rows * D; kf = acc + rows * D; vf = kf + kBlock * D; scores = vf + kBlock * D;
    mx = scores + rows * kBlock; sum = mx + rows; alpha = sum + rows;
  }
};

// acc[r0 .. r0 + RR) = acc * alpha + p @ V over this block's nb positions, the RR rows' accumulators in registers.
template <int NV, int RR>
inline void pv_tile(Scratch& s, const float* vf, int64_t r0, int64_t nb) {
  constexpr int W = fVec::size();
  constexpr int64_t D = NV * W;
  fVec ac[RR][NV];
  for (int rr = 0; rr < RR; ++rr)
    for (int i = 0; i < NV; ++i) ac[rr][i] = fVec::loadu(s.acc + (r0 + rr) * D + i * W) * fVec(s.alpha[r0 + rr]);
  for (int64_t n = 0; n < nb; ++n) {
    fVec vv[NV];
    for (int i = 0; i < NV; ++i) vv[i] = fVec::loadu(vf + n * D + i * W);
    for (int rr = 0; rr < RR; ++rr) {
      const fVec p(s.scores[(r0 + rr) * kBlock + n]);
      for (int i = 0; i < NV; ++i) ac[rr][i] = at::vec::fmadd(p, vv[i], ac[rr][i]);
    }
  }
  for (int rr = 0; rr < RR; ++rr)
    for (int i = 0; i < NV; ++i) ac[rr][i].store(s.acc + (r0 + rr) * D + i * W);
}

// pv_tile for a run-time row count n <= RR (the last tile of a task, or a task of fewer rows than a tile).
template <int NV, int RR>
inline void pv_rows(int64_t n, Scratch& s, const float* vf, int64_t r0, int64_t nb) {
  if constexpr (RR >= 1) {
    if (n == RR) return pv_tile<NV, RR>(s, vf, r0, nb);
    pv_rows<NV, RR - 1>(n, s, vf, r0, nb);
  }
}
