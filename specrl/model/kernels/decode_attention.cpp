// Decode and verify attention over a position-indexed KV cache, for the CPU.
//
// out[b, h, t] = softmax(scale * q[b, h, t] . K[slot b, h / G, 0..pos[b, t]]) V[slot b, h / G, 0..pos[b, t]]
//
// Why a kernel: decode attention is a stream over each row's keys and values, so its floor is memory bandwidth.
// The work is cut into tasks of (row, KV head, stretch of positions); a task reads its keys and values once for all
// G query heads of its KV head and all T queries of its row (G * T query rows in one pass), and each row reads its
// own length only. When rows are few (batch 1, the tail of a rollout) long rows are split over positions so that
// every thread has work, and the splits are merged by their log-sum-exp. Accumulation is fp32 whatever the input.
// Keys and values are read in place from the cache; bf16 is widened to fp32 as it is read, except that a task of few
// query rows scores bf16 keys with AVX512-BF16's dot product where the build has it, and a task of many converts each
// block's keys (and values, past one register tile) to fp32 once for all its rows. Vectorised with ATen's at::vec
// (AVX-512 or AVX2, chosen by the build for the machine it runs on) and threaded with at::parallel_for over a
// cost-balanced partition of the tasks.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

#include "attention_blocks.h"

struct Task {
  int64_t row, start, end;  // cache positions [start, end) of batch row `row`
  int64_t part;             // index into the split buffers, -1: the row is not split (write the output directly)
};

struct Geometry {
  int64_t H, Hkv, G, T, D;
  int64_t q_sb, q_sh, q_st;  // strides of q [B, H, T, D]
  int64_t k_ss, k_sh, k_sl;  // strides of k_cache [S, Hkv, L, D]
  int64_t v_ss, v_sh, v_sl;
  float scale;
  bool native_bf16;  // bf16 keys scored by dpbf16 where the build has it (else at::vec in fp32)
};

// Query row r's scores over the block's first `upto` positions into sr: from fp32 keys kf (stride ks), or on the
// native path from the bf16 keys kraw in place (stride k_sl) and scaled here.
template <typename T, int NV>
inline void row_scores(const Geometry& g, const Scratch& s, int64_t r, bool native, const T* kraw, const float* kf,
                       int64_t ks, int64_t upto, float* sr) {
  constexpr int W = fVec::size();
  constexpr int64_t D = NV * W;
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, at::BFloat16>)
    if (native) {
      constexpr int NB = NV / 2;  // bf16 vectors per key row
      __m512bh qb[NB];
      for (int i = 0; i < NB; ++i) qb[i] = (__m512bh)_mm512_loadu_si512(s.qb + r * D + i * 32);
      const fVec scale(g.scale);
      int64_t c = 0;
      for (; c + W <= upto; c += W)
        (chunk_scores_bf16<NB, true>(qb, kraw + c * g.k_sl, g.k_sl, W) * scale).store(sr + c);
      if (c < upto) (chunk_scores_bf16<NB, false>(qb, kraw + c * g.k_sl, g.k_sl, upto - c) * scale).store(sr + c);
      return;
    }
#endif
  fVec qv[NV];
  for (int i = 0; i < NV; ++i) qv[i] = fVec::loadu(s.qf + r * D + i * W);
  int64_t c = 0;
  for (; c + W <= upto; c += W) chunk_scores<NV, true>(qv, kf + c * ks, ks, W).store(sr + c);
  if (c < upto) chunk_scores<NV, false>(qv, kf + c * ks, ks, upto - c).store(sr + c);
}

// One task: the G * T query rows of (row b, KV head hk) over cache positions [start, end). Leaves in acc [M, D] the
// unnormalised sum of p * v, in mx [M] the running max and in sum [M] the running sum of exp(score - max).
template <typename T, int NV>
void attend(const Geometry& g, const T* q, const T* k, const T* v, const int64_t* pos, int64_t b, int64_t hk,
            int64_t start, int64_t end, Scratch& s) {
  constexpr int W = fVec::size();
  constexpr int64_t D = NV * W, R = tile_rows<NV>();
  constexpr bool kBf16 = std::is_same_v<T, at::BFloat16>;
  const int64_t M = g.G * g.T;
  const bool native = kBf16 && kHaveDpbf16 && g.native_bf16 && M <= kNativeMaxRows;  // bf16 keys scored in place
  // step 1: the queries, row r = gi * T + t: in fp32 pre-scaled, or (native) as the input's bf16, scaled later
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t t = 0; t < g.T; ++t) {
      const T* src = q + b * g.q_sb + (hk * g.G + gi) * g.q_sh + t * g.q_st;
      const int64_t r = gi * g.T + t;
      if constexpr (kBf16)
        if (native) {
          std::copy(src, src + D, s.qb + r * D);
          continue;
        }
      for (int64_t d = 0; d < D; ++d) s.qf[r * D + d] = static_cast<float>(src[d]) * g.scale;
    }
  std::fill(s.acc, s.acc + M * D, 0.f);
  std::fill(s.mx, s.mx + M, kNegInf);
  std::fill(s.sumv, s.sumv + M * W, 0.f);
  const T* kb = k + hk * g.k_sh;
  const T* vb = v + hk * g.v_sh;
  for (int64_t n0 = start; n0 < end; n0 += kBlock) {
    const int64_t nb = std::min(kBlock, end - n0);
    const int64_t nbw = (nb + W - 1) / W * W;  // the softmax's vectors cover the block's nb positions only
    // step 2: fp32 keys are read in place; bf16 keys off the native path are converted to fp32 once for all rows
    const float* kf = s.kf;
    int64_t ks = D;
    if constexpr (std::is_same_v<T, float>) {
      kf = kb + n0 * g.k_sl;
      ks = g.k_sl;
    } else if (!native) {
      for (int64_t n = 0; n < nb; ++n)
        for (int i = 0; i < NV; ++i) {
          fVec x;
          load_floats(kb + (n0 + n) * g.k_sl + i * W, x);
          x.store(s.kf + n * D + i * W);
        }
    }
    // step 3: scores and the online softmax, row by row; a position past a query's own is -inf (the verify queries
    // are causal among themselves), and a row that sees none of this block gets p = 0
    for (int64_t r = 0; r < M; ++r) {
      float* sr = s.scores + r * kBlock;
      const int64_t upto = std::min(nb, pos[r % g.T] - n0 + 1);
      if (upto <= 0) {
        std::fill(sr, sr + nbw, 0.f);
        s.alpha[r] = 1.f;
        continue;
      }
      row_scores<T, NV>(g, s, r, native, kb + n0 * g.k_sl, kf, ks, upto, sr);
      std::fill(sr + upto, sr + nbw, kNegInf);
      fVec m = fVec(s.mx[r]);
      for (int64_t c = 0; c < nbw; c += W) m = at::vec::maximum(m, fVec::loadu(sr + c));
      const float m_new = at::vec::vec_reduce_all<float>([](fVec& x, fVec& y) { return at::vec::maximum(x, y); }, m);
      s.alpha[r] = std::exp(s.mx[r] - m_new);  // exp(-inf) = 0 on a row's first block
      fVec total = fVec::loadu(s.sumv + r * W) * fVec(s.alpha[r]);  // lane-wise: reduced once, after the last block
      for (int64_t c = 0; c < nbw; c += W) {
        const fVec e = (fVec::loadu(sr + c) - fVec(m_new)).exp_u20();
        e.store(sr + c);
        total = total + e;
      }
      total.store(s.sumv + r * W);
      s.mx[r] = m_new;
    }
    // step 4: acc = acc * alpha + p @ V, R rows at a time with their accumulators in registers; the values are read
    // in place from the cache where one tile holds every row (or they are fp32), else converted to fp32 once
    const T* vr = vb + n0 * g.v_sl;
    if (std::is_same_v<T, float> || M <= R) {
      for (int64_t r0 = 0; r0 < M; r0 += R) pv_rows<NV, R>(std::min<int64_t>(R, M - r0), s, vr, g.v_sl, r0, nb);
      continue;
    }
    for (int64_t n = 0; n < nb; ++n)
      for (int i = 0; i < NV; ++i) {
        fVec x;
        load_floats(vr + n * g.v_sl + i * W, x);
        x.store(s.vf + n * D + i * W);
      }
    for (int64_t r0 = 0; r0 < M; r0 += R) pv_rows<NV, R>(std::min<int64_t>(R, M - r0), s, s.vf, D, r0, nb);
  }
  for (int64_t r = 0; r < M; ++r)
    s.sum[r] = at::vec::vec_reduce_all<float>([](fVec& x, fVec& y) { return x + y; }, fVec::loadu(s.sumv + r * W));
}

template <typename T>
void store_row(T* out, const float* acc, float inv, int64_t D) {
  for (int64_t d = 0; d < D; ++d) out[d] = static_cast<T>(acc[d] * inv);
}

// Tasks of a batch: each row's positions [0, its longest query's position], cut into splits of about `chunk`
// positions when that leaves the threads too few tasks.
std::vector<Task> plan(const int64_t* lengths, int64_t B, int64_t Hkv, int64_t threads, int64_t* parts) {
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) total += lengths[b];
  const int64_t want = 4 * threads;  // tasks per KV head count: enough for balance, few enough for low overhead
  int64_t chunk = std::max(kMinSplit, (total * Hkv + want - 1) / want);
  chunk = (chunk + kSplitStep - 1) / kSplitStep * kSplitStep;
  std::vector<Task> tasks;
  *parts = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = (lengths[b] + chunk - 1) / chunk;
    for (int64_t j = 0; j < n; ++j) {
      tasks.push_back({b, j * chunk, std::min(lengths[b], (j + 1) * chunk), n > 1 ? *parts : -1});
      if (n > 1) ++*parts;
    }
  }
  return tasks;
}

// Each row's length (its longest query's position + 1), checking every position and slot against the cache.
std::vector<int64_t> row_lengths(const int64_t* pos, const int64_t* slot, int64_t B, int64_t T, int64_t L,
                                 int64_t S) {
  std::vector<int64_t> lengths(B);
  for (int64_t b = 0; b < B; ++b) {
    int64_t top = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = pos[b * T + t];
      TORCH_CHECK(p >= 0 && p < L, "decode_attention: positions[", b, ", ", t, "] = ", p, " is outside the cache's ",
                  L, " positions");
      top = std::max(top, p);
    }
    TORCH_CHECK(slot[b] >= 0 && slot[b] < S, "decode_attention: slots[", b, "] = ", slot[b],
                " is outside the cache's ", S, " slots");
    lengths[b] = top + 1;
  }
  return lengths;
}

// Contiguous ranges of the work items (task w / Hkv, KV head w % Hkv) of about equal cost (positions plus a fixed
// cost per task), one per thread: thread i runs items [cut[i], cut[i + 1]).
std::vector<int64_t> balance(const std::vector<Task>& tasks, int64_t Hkv, int64_t threads) {
  const int64_t n_work = static_cast<int64_t>(tasks.size()) * Hkv;
  std::vector<double> cost(n_work + 1, 0.);
  for (int64_t w = 0; w < n_work; ++w) {
    const Task& tk = tasks[w / Hkv];
    cost[w + 1] = cost[w] + static_cast<double>(tk.end - tk.start) + kTaskCost;
  }
  std::vector<int64_t> cut(threads + 1, n_work);
  cut[0] = 0;
  int64_t w = 0;
  for (int64_t i = 1; i < threads; ++i) {
    const double goal = cost[n_work] * i / threads;
    while (w < n_work && cost[w + 1] <= goal) ++w;
    cut[i] = w;
  }
  return cut;
}

// Merges the splits of each split row by their log-sum-exp into out (the tasks of one row are consecutive).
template <typename T>
void merge_splits(const Geometry& g, const std::vector<Task>& tasks, int64_t parts, const float* pbuf, T* op) {
  const int64_t M = g.G * g.T, D = g.D;
  std::vector<std::pair<int64_t, int64_t>> rows;  // (batch row, first part)
  for (const Task& tk : tasks)
    if (tk.part >= 0 && (rows.empty() || rows.back().first != tk.row)) rows.push_back({tk.row, tk.part});
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  // a small merge (batch 1: a few splits of a few heads) runs on this thread: a parallel region costs more
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, parts / n_rows * M * D));
  at::parallel_for(0, n_rows * g.Hkv, grain, [&](int64_t lo, int64_t hi) {
    std::vector<float> merged(D);
    for (int64_t w = lo; w < hi; ++w) {
      const int64_t b = rows[w / g.Hkv].first, first = rows[w / g.Hkv].second, hk = w % g.Hkv;
      const int64_t last = (w / g.Hkv + 1 < n_rows) ? rows[w / g.Hkv + 1].second : parts;
      for (int64_t r = 0; r < M; ++r) {
        float top = kNegInf;
        for (int64_t j = first; j < last; ++j) top = std::max(top, pbuf[((j * g.Hkv + hk) * M + r) * (D + 2) + D]);
        std::fill(merged.begin(), merged.end(), 0.f);
        float total = 0.f;
        for (int64_t j = first; j < last; ++j) {
          const float* src = pbuf + ((j * g.Hkv + hk) * M + r) * (D + 2);
          if (src[D] == kNegInf) continue;  // this split lies past the query's position
          const float f = std::exp(src[D] - top);
          total += f * src[D + 1];
          for (int64_t d = 0; d < D; ++d) merged[d] += f * src[d];
        }
        const int64_t h = hk * g.G + r / g.T, t = r % g.T;
        store_row(op + ((b * g.H + h) * g.T + t) * D, merged.data(), 1.f / total, D);
      }
    }
  });
}

template <typename T, int NV>
void run(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& slots,
         const at::Tensor& positions, double scale, bool native_bf16, at::Tensor& out) {
  const int64_t B = q.size(0), T_ = q.size(2), L = kc.size(2);
  Geometry g{q.size(1), kc.size(1), q.size(1) / kc.size(1), T_, q.size(3),
             q.stride(0), q.stride(1), q.stride(2),
             kc.stride(0), kc.stride(1), kc.stride(2),
             vc.stride(0), vc.stride(1), vc.stride(2), static_cast<float>(scale), native_bf16};
  const int64_t M = g.G * g.T, D = g.D;
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  const std::vector<int64_t> lengths = row_lengths(pos, slot, B, T_, L, kc.size(0));
  const int64_t threads = at::get_num_threads();
  int64_t parts = 0;
  const std::vector<Task> tasks = plan(lengths.data(), B, g.Hkv, threads, &parts);
  const std::vector<int64_t> cut = balance(tasks, g.Hkv, threads);
  at::Tensor part_acc;  // [parts, Hkv, M, D + 2], only where some row is split
  if (parts > 0) part_acc = at::empty({parts, g.Hkv, M, D + 2}, q.options().dtype(at::kFloat));
  float* pbuf = parts > 0 ? part_acc.data_ptr<float>() : nullptr;
  const T* qp = q.data_ptr<T>();
  const T* kp = kc.data_ptr<T>();
  const T* vp = vc.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
    Scratch scratch(M, D);
    const float *acc = scratch.acc, *mx = scratch.mx, *sm = scratch.sum;
    for (int64_t w = cut[lo]; w < cut[hi]; ++w) {
      const Task& tk = tasks[w / g.Hkv];
      const int64_t hk = w % g.Hkv, b = tk.row;
      attend<T, NV>(g, qp, kp + slot[b] * g.k_ss, vp + slot[b] * g.v_ss, pos + b * T_, b, hk, tk.start, tk.end,
                    scratch);
      for (int64_t r = 0; r < M; ++r) {
        if (tk.part < 0) {
          const int64_t h = hk * g.G + r / g.T, t = r % g.T;
          store_row(op + ((b * g.H + h) * g.T + t) * D, acc + r * D, 1.f / sm[r], D);
        } else {  // [D values, max, sum] per query row of this split
          float* dst = pbuf + ((tk.part * g.Hkv + hk) * M + r) * (D + 2);
          std::copy(acc + r * D, acc + (r + 1) * D, dst);
          dst[D] = mx[r];
          dst[D + 1] = sm[r];
        }
      }
    }
  });
  if (parts == 0) return;
  merge_splits(g, tasks, parts, pbuf, op);
}

template <typename T>
void dispatch_width(const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& slots,
                    const at::Tensor& positions, double scale, bool native_bf16, at::Tensor& out) {
  constexpr int W = fVec::size();
  const int64_t D = q.size(3);
  TORCH_CHECK(D == 32 || D == 64 || D == 128 || D == 256, "decode_attention: head size ", D,
              " is not one of 32, 64, 128, 256");
  switch (D / W) {
    case 32 / W: return run<T, 32 / W>(q, kc, vc, slots, positions, scale, native_bf16, out);
    case 64 / W: return run<T, 64 / W>(q, kc, vc, slots, positions, scale, native_bf16, out);
    case 128 / W: return run<T, 128 / W>(q, kc, vc, slots, positions, scale, native_bf16, out);
    case 256 / W: return run<T, 256 / W>(q, kc, vc, slots, positions, scale, native_bf16, out);
  }
  TORCH_CHECK(false, "decode_attention: head size ", q.size(3), " is not one of 32, 64, 128, 256");
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& slots, const at::Tensor& positions, double scale, bool native_bf16) {
  TORCH_CHECK(q.dim() == 4 && k_cache.dim() == 4 && v_cache.dim() == 4,
              "decode_attention: q [B, H, T, D] and caches [S, Hkv, L, D] expected");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "decode_attention: k_cache and v_cache differ in shape");
  TORCH_CHECK(q.size(3) == k_cache.size(3) && q.size(1) % k_cache.size(1) == 0,
              "decode_attention: q's head size or head count does not fit the cache's");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && q.scalar_type() == v_cache.scalar_type(),
              "decode_attention: q, k_cache and v_cache must share a dtype");
  TORCH_CHECK(q.stride(3) == 1 && k_cache.stride(3) == 1 && v_cache.stride(3) == 1,
              "decode_attention: the head dimension must be contiguous");
  TORCH_CHECK(slots.scalar_type() == at::kLong && positions.scalar_type() == at::kLong,
              "decode_attention: slots and positions must be int64");
  const at::Tensor s = slots.contiguous(), p = positions.contiguous();
  TORCH_CHECK(s.numel() == q.size(0) && p.size(0) == q.size(0) && p.size(1) == q.size(2),
              "decode_attention: slots [B] and positions [B, T] must match q [B, H, T, D]");
  at::Tensor out = at::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  if (q.scalar_type() == at::kFloat) {
    dispatch_width<float>(q, k_cache, v_cache, s, p, scale, native_bf16, out);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kBFloat16, "decode_attention: dtype ", q.scalar_type(),
                " is not float32 or bfloat16");
    dispatch_width<at::BFloat16>(q, k_cache, v_cache, s, p, scale, native_bf16, out);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(specrl_kernels, m) {
  // native_bf16=False: bf16 keys take the at::vec path even where the build has dpbf16 (the tests compare both)
  m.def("decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor slots, Tensor positions, float scale, "
        "bool native_bf16=True) -> Tensor");
  m.def("has_native_bf16() -> bool", [] { return kHaveDpbf16; });
}

TORCH_LIBRARY_IMPL(specrl_kernels, CPU, m) { m.impl("decode_attention", &decode_attention); }
