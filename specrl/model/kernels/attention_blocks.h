// Building blocks of decode_attention.cpp: fp32 loads, the scores of a chunk of W keys (in fp32, or straight from
// bf16 keys with AVX512-BF16's dot-product instruction), and the register-tiled p @ V update that reads the values
// in place from the cache. Included once, by decode_attention.cpp (inside its anonymous namespace).
#pragma once

using at::vec::Vectorized;
using fVec = Vectorized<float>;
constexpr int64_t kBlock = 128;    // positions per online-softmax step: its per-row cost (a max, an exp, the
                                   // rescale of the accumulators) spread over more positions
constexpr int64_t kMinSplit = 64;  // positions: a split shorter than this costs more to merge than it saves
constexpr int64_t kSplitStep = 32;  // positions: splits are cut at its multiples (finer than kBlock, for balance)
constexpr int64_t kTaskCost = 32;  // positions' worth of a task's fixed cost (its queries, its last block's tail)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Whether this build scores bf16 keys with _mm512_dpbf16_ps (-march=native on a CPU with avx512_bf16); a call may
// still ask for the at::vec path (`native_bf16` false), which every other build takes always.
// The native path scores a task's rows from the keys in place, row by row; past kNativeMaxRows rows (a verify of
// several queries a head) converting the block's keys to fp32 once for every row costs less.
constexpr int64_t kNativeMaxRows = 8;
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
constexpr bool kHaveDpbf16 = true;
#else
constexpr bool kHaveDpbf16 = false;
#endif

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

// The scores of a chunk of `cnt` <= W keys as one vector: lane j is dot(j), the score of key j; lanes past cnt are
// 0 and dot is not called for them (the last chunk of a row may end at the cache's last position).
template <bool Full, typename Dot>
inline fVec chunk_of(int64_t cnt, Dot dot) {
  constexpr int W = fVec::size();
  fVec a[W];
  for (int j = 0; j < W; ++j) a[j] = (!Full && j >= cnt) ? fVec(0.f) : dot(j);
  return lane_sums(a);
}

// Scores of fp32 keys (row j at k + j * ks) against the pre-scaled query qv.
template <int NV, bool Full>
inline fVec chunk_scores(const fVec* qv, const float* k, int64_t ks, int64_t cnt) {
  constexpr int W = fVec::size();
  return chunk_of<Full>(cnt, [&](int j) {
    const float* kr = k + j * ks;
    fVec x = qv[0] * fVec::loadu(kr);
    for (int i = 1; i < NV; ++i) x = at::vec::fmadd(qv[i], fVec::loadu(kr + i * W), x);
    return x;
  });
}

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
// chunk_scores for bf16 keys read in place: the query's bf16 pairs (NB = D / 32 vectors, unscaled, so exactly the
// input) dotted with each key's by _mm512_dpbf16_ps, whose products of bf16 are exact in fp32 and whose sums are
// fp32; the caller scales the result.
template <int NB, bool Full>
inline fVec chunk_scores_bf16(const __m512bh* qb, const at::BFloat16* k, int64_t ks, int64_t cnt) {
  return chunk_of<Full>(cnt, [&](int j) {
    const at::BFloat16* kr = k + j * ks;
    __m512 x = _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[0], (__m512bh)_mm512_loadu_si512(kr));
    for (int i = 1; i < NB; ++i) x = _mm512_dpbf16_ps(x, qb[i], (__m512bh)_mm512_loadu_si512(kr + i * 32));
    return fVec(x);
  });
}
#endif

// Query rows a value tile holds in registers (R * NV accumulators).
template <int NV>
constexpr int64_t tile_rows() { return NV >= 16 ? 1 : 16 / NV; }

// Scratch of `attend` for `rows` query rows of head size D: one buffer per thread, kept across calls and grown when
// a call needs more (nothing in it needs zeroing: `attend` sets every value it reads).
struct Scratch {
  float *qf, *kf, *vf, *scores, *acc, *mx, *sum, *sumv, *alpha;
  at::BFloat16* qb;  // the queries as bf16, unscaled, for chunk_scores_bf16
  Scratch(int64_t rows, int64_t D) {
    constexpr int64_t W = fVec::size();
    const int64_t floats = rows * D * 2 + 2 * kBlock * D + rows * kBlock + 3 * rows + rows * W + rows * D / 2;
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < floats) buf.resize(floats);
    qf = buf.data(); acc = qf + rows * D; kf = acc + rows * D; vf = kf + kBlock * D; scores = vf + kBlock * D;
    sumv = scores + rows * kBlock; mx = sumv + rows * W; sum = mx + rows; alpha = sum + rows;
    qb = reinterpret_cast<at::BFloat16*>(alpha + rows);
  }
};

// acc[r0 .. r0 + RR) = acc * alpha + p @ V over this block's nb positions (value n at v + n * vs, in the cache's
// dtype, converted to fp32 as it is read), the RR rows' accumulators in registers.
template <int NV, int RR, typename T>
inline void pv_tile(Scratch& s, const T* v, int64_t vs, int64_t r0, int64_t nb) {
  constexpr int W = fVec::size();
  constexpr int64_t D = NV * W;
  fVec ac[RR][NV];
  for (int rr = 0; rr < RR; ++rr)
    for (int i = 0; i < NV; ++i) ac[rr][i] = fVec::loadu(s.acc + (r0 + rr) * D + i * W) * fVec(s.alpha[r0 + rr]);
  for (int64_t n = 0; n < nb; ++n) {
    fVec vv[NV];
    for (int i = 0; i < NV; ++i) load_floats(v + n * vs + i * W, vv[i]);
    for (int rr = 0; rr < RR; ++rr) {
      const fVec p(s.scores[(r0 + rr) * kBlock + n]);
      for (int i = 0; i < NV; ++i) ac[rr][i] = at::vec::fmadd(p, vv[i], ac[rr][i]);
    }
  }
  for (int rr = 0; rr < RR; ++rr)
    for (int i = 0; i < NV; ++i) ac[rr][i].store(s.acc + (r0 + rr) * D + i * W);
}

// pv_tile for a run-time row count n <= RR (the last tile of a task, or a task of fewer rows than a tile).
template <int NV, int RR, typename T>
inline void pv_rows(int64_t n, Scratch& s, const T* v, int64_t vs, int64_t r0, int64_t nb) {
  if constexpr (RR >= 1) {
    if (n == RR) return pv_tile<NV, RR>(s, v, vs, r0, nb);
    pv_rows<NV, RR - 1>(n, s, v, vs, r0, nb);
  }
}
