// The inner loops of the indexed matmul and conv2d ops (indexed_matmul.cc holds the op glue:
// validation, work splitting, scratch buffers, registration).
//
// Every loop is written once against simd.h, so AVX-512, AVX2, SSE and NEON builds all come
// from this source with their own vector width. The dense layers' weights may be float32 or
// bfloat16: bfloat16 is widened to float32 in registers as it is loaded and products
// accumulate in float32, so a memory-bound policy step reads half the bytes. (Convolutions
// reuse each weight across many positions; the op widens a bfloat16 kernel once per work
// unit.) One extra sits on top, used where the CPU has it: `vdpbf16ps` dot products for
// bfloat16 weights (AVX512_BF16).

#ifndef NEUROEVO_CUSTOM_OPS_CORE_KERNELS_H_
#define NEUROEVO_CUSTOM_OPS_CORE_KERNELS_H_

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <cstdint>

#include "core/simd.h"

namespace neuroevo {
namespace kernels {

using simd::bfloat16;
using simd::kWidth;
using simd::Vec;
using simd::Widen;

// How far ahead (in bfloat16 weights, 1 KB) the bfloat16 dot products prefetch each row: the
// hardware prefetcher alone kept fewer bfloat16 loads in flight than float32 ones.
constexpr int64_t kPrefetchBf16 = 512;

// ------------------------------------------------------------------------------- dense layers

// The float32 dot products of a policy step add their terms in one order on every target, so
// an evaluation gives the same bits on AVX-512, AVX2 and NEON (any target with fused
// multiply-add): a run resumed, or a genome re-evaluated, on another CPU scores the same. The
// order is AVX-512's: 16 lanes, lane l summing w[i] x[i] over i = l (mod 16) with fused
// multiply-adds (a last partial chunk padded with zeros), then the lanes pairwise (l + 8, + 4,
// + 2, + 1, as _mm512_reduce_add_ps). Narrower targets keep the 16 lanes in 16 / kWidth vectors.
// Targets without fused multiply-add (the x86-64 baseline) cannot give those bits anyway; they
// sum in their own width, which is faster there.
#if defined(__FMA__) || defined(__aarch64__)
constexpr int kDotLanes = 16;
#else
constexpr int kDotLanes = kWidth;
#endif
constexpr int kDotParts = kDotLanes / kWidth;
static_assert(kDotParts * kWidth == kDotLanes, "the vector width must divide 16 floats");
using DotLanes = Vec[kDotParts];

inline void LoadDotLanes(const float* p, DotLanes& v) {
#pragma GCC unroll 4
  for (int part = 0; part < kDotParts; ++part) v[part] = simd::Load(p + part * kWidth);
}

// Loads the last chunk of a row, n < kDotLanes floats, zeros after; the masks are made once per
// call. Nothing past p + n is read, except where `end` (the end of readable memory) leaves room for
// whole vectors: targets without masked loads then load whole vectors and clear the extra
// lanes' bits (a neighbour's value, even NaN, becomes +0) instead of copying through the stack.
class PartialChunk {
 public:
  PartialChunk(int64_t n, const float* end) : n_(n), end_(end) {
#if defined(__AVX512F__)
    mask_ = static_cast<__mmask16>((1u << n) - 1);
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i count = _mm256_set1_epi32(static_cast<int>(n));
    mask_[0] = _mm256_cmpgt_epi32(count, lane);
    mask_[1] = _mm256_cmpgt_epi32(count, _mm256_add_epi32(lane, _mm256_set1_epi32(8)));
#else
    for (int part = 0; part < kDotParts; ++part) {
      const int64_t left = std::clamp<int64_t>(n - part * kWidth, 0, kWidth);
      keep_[part] = simd::KeepFirst(simd::AllOnes(), left);
    }
#endif
  }

  void Load(const float* p, DotLanes& v) const {
#if defined(__AVX512F__)
    v[0] = _mm512_maskz_loadu_ps(mask_, p);
#elif defined(__AVX2__) && defined(__FMA__)
    v[0] = _mm256_maskload_ps(p, mask_[0]);
    v[1] = _mm256_maskload_ps(p + 8, mask_[1]);
#else
    const bool whole = p + (n_ + kWidth - 1) / kWidth * kWidth <= end_;
    for (int part = 0; part < kDotParts; ++part) {
      const int64_t left = n_ - part * kWidth;
      if (left >= kWidth) {
        v[part] = simd::Load(p + part * kWidth);
      } else if (left <= 0) {
        v[part] = simd::Zero();
      } else if (whole) {
        v[part] = simd::And(simd::Load(p + part * kWidth), keep_[part]);
      } else {
        v[part] = simd::LoadPartial(p + part * kWidth, left);
      }
    }
#endif
  }

 private:
  int64_t n_;
  const float* end_;
#if defined(__AVX512F__)
  __mmask16 mask_;
#elif defined(__AVX2__) && defined(__FMA__)
  __m256i mask_[2];
#else
  DotLanes keep_;
#endif
};

inline void FmaDotLanes(const DotLanes& w, const DotLanes& x, DotLanes& acc) {
#pragma GCC unroll 4
  for (int part = 0; part < kDotParts; ++part) acc[part] = simd::Fma(w[part], x[part], acc[part]);
}

// The 16 lanes' sum, pairwise in the order above: parts p and p + n / 2 of n hold lanes l and
// l + 16 / 2^k, so halving the parts takes the first pairs; the last vector's lanes follow.
inline float SumDotLanes(const DotLanes& acc) {
  Vec v = acc[0];
  if constexpr (kDotParts > 1) {
    DotLanes parts;
    for (int part = 0; part < kDotParts; ++part) parts[part] = acc[part];
    for (int n = kDotParts; n > 1; n /= 2) {
      for (int part = 0; part < n / 2; ++part) {
        parts[part] = simd::Add(parts[part], parts[part + n / 2]);
      }
    }
    v = parts[0];
  }
#if defined(__x86_64__) || defined(__i386__)
  return simd::ReduceAdd(v);  // every x86 width: l + half, ..., + 1 (_mm512_reduce_add_ps's)
#elif defined(__aarch64__)
  const float32x2_t pair = vadd_f32(vget_low_f32(v), vget_high_f32(v));  // l + 2
  return vget_lane_f32(vpadd_f32(pair, pair), 0);                          // l + 1
#else
  float lanes[kWidth];
  simd::Store(lanes, v);
  for (int width = kWidth / 2; width >= 2; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0] + lanes[1];
#endif
}

// Rows that share each load of x (16 accumulator registers on AVX2, NEON and AVX-512 alike).
constexpr int kDotRowGroup = 4;

// y[r] = dot(w[r, :], x) for R rows of a row-major block, `body` = in - in % kDotLanes.
template <int R>
inline void DotRowGroup(const float* w, int64_t in, const float* x, int64_t body,
                        const PartialChunk& w_tail, const DotLanes& x_tail, float* y) {
  DotLanes acc[R], wv;
  for (auto& lanes : acc) {
    for (Vec& part : lanes) part = simd::Zero();
  }
  for (int64_t i = 0; i < body; i += kDotLanes) {
    DotLanes xv;
    LoadDotLanes(x + i, xv);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      LoadDotLanes(w + r * in + i, wv);
      FmaDotLanes(wv, xv, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (body < in) {
      w_tail.Load(w + r * in + body, wv);
      FmaDotLanes(wv, x_tail, acc[r]);
    }
    y[r] = SumDotLanes(acc[r]);
  }
}

// y[j] = dot(w[j, :], x) for `rows` rows of a row-major [rows, in] block: the memory-bound
// inner loop of a policy step.
inline void DotRows(const float* w, int64_t in, const float* x, int64_t rows, float* y) {
  const int64_t body = in - in % kDotLanes;
  const PartialChunk w_tail(in - body, w + rows * in);
  DotLanes x_tail;
  if (body < in) PartialChunk(in - body, x + in).Load(x + body, x_tail);
  int64_t j = 0;
  for (; j + kDotRowGroup <= rows; j += kDotRowGroup) {
    DotRowGroup<kDotRowGroup>(w + j * in, in, x, body, w_tail, x_tail, y + j);
  }
  for (; j < rows; ++j) DotRowGroup<1>(w + j * in, in, x, body, w_tail, x_tail, y + j);
}

// The bfloat16 rows, 2 kWidth weights at a time split into even and odd positions
// (simd::LoadPairs), x split the same way once per step for all rows; rows are prefetched
// kPrefetchBf16 weights ahead, one prefetch per cache line.
inline void DotRows(const bfloat16* w, int64_t in, const float* x, int64_t rows, float* y) {
  constexpr int64_t kStep = 2 * kWidth;
  constexpr int64_t kLine = 64 / sizeof(bfloat16);
  const int64_t body = in - in % kStep;
  for (int64_t j = 0; j < rows; j += 4) {
    const int64_t count = std::min<int64_t>(4, rows - j);
    // Past the last row, repeat it: the loop stays four rows wide and the copies are dropped.
    const bfloat16* wr[4];
    for (int r = 0; r < 4; ++r) wr[r] = w + (j + std::min<int64_t>(r, count - 1)) * in;
    Vec acc[4] = {simd::Zero(), simd::Zero(), simd::Zero(), simd::Zero()};
    for (int64_t i = 0; i < body; i += kStep) {
      if (i % kLine == 0) {
        for (int r = 0; r < 4; ++r) __builtin_prefetch(wr[r] + i + kPrefetchBf16);
      }
      Vec x_even, x_odd;
      simd::LoadDeinterleaved(x + i, &x_even, &x_odd);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        Vec even, odd;
        simd::LoadPairs(wr[r] + i, &even, &odd);
        acc[r] = simd::Fma(even, x_even, acc[r]);
        acc[r] = simd::Fma(odd, x_odd, acc[r]);
      }
    }
    for (int64_t r = 0; r < count; ++r) {
      float sum = simd::ReduceAdd(acc[r]);
      for (int64_t i = body; i < in; ++i) sum += Widen(wr[r][i]) * x[i];
      y[j + r] = sum;
    }
  }
}

#if defined(__AVX512BF16__)
// x as two bfloat16 vectors, hi = bf16(x) and lo = bf16(x - hi): hi + lo carries 16 of x's 24
// significant bits, so bfloat16 dot-product instructions multiply the bfloat16 weights by x
// almost exactly (relative error ~2^-17 per input, against 2^-9 for hi alone).
inline void SplitBf16(const float* x, int64_t n, bfloat16* hi, bfloat16* lo) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m256bh h = _mm512_cvtneps_pbh(v);
    const __m256i h_bits = reinterpret_cast<const __m256i&>(h);
    const __m512 h_wide =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h_bits), 16));
    const __m512 rest = _mm512_sub_ps(v, h_wide);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h_bits);
    const __m256bh l = _mm512_cvtneps_pbh(rest);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), reinterpret_cast<const __m256i&>(l));
  }
  for (; i < n; ++i) {
    hi[i] = bfloat16(x[i]);
    lo[i] = bfloat16(x[i] - static_cast<float>(hi[i]));
  }
}

// DotRows for bfloat16 weights with vdpbf16ps: each instruction multiplies 32 weights by 32
// inputs (hi, then lo) and adds pairs into 16 float32 lanes; no widening, so a core keeps more
// loads in flight. Inputs past the last multiple of 32 use x itself.
inline void DotRowsSplit(const bfloat16* w, int64_t in, const bfloat16* x_hi,
                         const bfloat16* x_lo, const float* x, int64_t rows, float* y) {
  const int64_t body = in - in % 32;
  for (int64_t j = 0; j < rows; j += 4) {
    const int64_t count = std::min<int64_t>(4, rows - j);
    const bfloat16* wr[4];
    for (int r = 0; r < 4; ++r) wr[r] = w + (j + std::min<int64_t>(r, count - 1)) * in;
    __m512 acc_hi[4], acc_lo[4];
    for (int r = 0; r < 4; ++r) acc_hi[r] = acc_lo[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < body; i += 32) {
      const __m512bh xh = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x_hi + i));
      const __m512bh xl = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x_lo + i));
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[r] + i + kPrefetchBf16), _MM_HINT_T0);
        const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr[r] + i));
        acc_hi[r] = _mm512_dpbf16_ps(acc_hi[r], wv, xh);
        acc_lo[r] = _mm512_dpbf16_ps(acc_lo[r], wv, xl);
      }
    }
    for (int64_t r = 0; r < count; ++r) {
      float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc_hi[r], acc_lo[r]));
      for (int64_t i = body; i < in; ++i) sum += Widen(wr[r][i]) * x[i];
      y[j + r] = sum;
    }
  }
}
#endif

// y[o] = sum_i x[i] w[i, o] for `cols` columns of a row-major [in, out] matrix (w already
// offset to the first column).
template <typename T>
void AxpyCols(const T* w, int64_t in, int64_t out, const float* x, int64_t cols, float* y) {
  std::fill(y, y + cols, 0.0f);
  const int64_t body = cols - cols % kWidth;
  for (int64_t i = 0; i < in; ++i) {
    const Vec xv = simd::Broadcast(x[i]);
    const T* wi = w + i * out;
    for (int64_t o = 0; o < body; o += kWidth) {
      simd::Store(y + o, simd::Fma(xv, simd::Load(wi + o), simd::Load(y + o)));
    }
    for (int64_t o = body; o < cols; ++o) y[o] += x[i] * Widen(wi[o]);
  }
}

// What a layer applies to its outputs after the bias.
enum class Activation { kLinear, kRelu, kTanh };

inline Vec Activate(Vec v, Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return simd::Max(v, simd::Zero());
    case Activation::kTanh:
      return simd::Tanh(v);
    case Activation::kLinear:
      break;
  }
  return v;
}

// y[r, j] = act(y[r, j] + bias[j]) for `rows` rows of `cols` outputs, `stride` apart; a null
// bias adds nothing. A row's last cols % kWidth outputs go through one partial vector, so every
// output gets the same vector arithmetic.
inline void BiasActivation(float* y, int64_t rows, int64_t cols, int64_t stride,
                           const float* bias, Activation activation) {
  if (bias == nullptr && activation == Activation::kLinear) return;
  const int64_t tail = cols % kWidth;
  const int64_t body = cols - tail;
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * stride;
    for (int64_t j = 0; j < body; j += kWidth) {
      Vec v = simd::Load(yr + j);
      if (bias != nullptr) v = simd::Add(v, simd::Load(bias + j));
      simd::Store(yr + j, Activate(v, activation));
    }
    if (tail > 0) {
      Vec v = simd::LoadPartial(yr + body, tail);
      if (bias != nullptr) v = simd::Add(v, simd::LoadPartial(bias + body, tail));
      simd::StorePartial(yr + body, Activate(v, activation), tail);
    }
  }
}

// --------------------------------------------------------------------------- convolution GEMM

// The GEMM of a convolution reads its left operand A (patches x kernel elements) through one
// pointer per register tile: row r of A starts at a + step r (step 16 or 32 floats) and its
// chunk c of 16 elements at offsets[c] from there. A register tile then broadcasts its rows'
// elements at fixed offsets (one pointer per row would not fit the general-purpose registers
// and spill). Two layouts have this form:
// - packed patches, groups of kTileRows positions, [group][k / 16][row][k % 16]
//   (step 16, offsets[c] = 16 kTileRows c), written by Im2Col;
// - the zero-padded image itself when a window moves by exactly 16 or 32 floats per output
//   column (step = stride * channels: the Atari nets' 8x8/4 first layer on 4 frames, and the
//   4x4/2 second layer on 16 channels), where chunk c of kernel row ky lies ky padded-image
//   rows down: no patches are built at all.
// The layouts do not depend on the vector width: A is read one broadcast element at a time.
constexpr int64_t kTileRows = 24;
constexpr int64_t kChunk = 16;

// A register tile: kAccumulators accumulator vectors (rows x column vectors), the weight
// vectors of one step (at most kPanelVectors) and a broadcast all stay in registers: 24 + 4 + 1
// of 32 (a 6 x 64 tile with AVX-512), 12 + 2 + 1 of 16 (6 x 16 with AVX2).
constexpr int kAccumulators = simd::kRegisters == 32 ? 24 : 12;
constexpr int kPanelVectors = simd::kRegisters == 32 ? 4 : 2;

static_assert(kTileRows % kAccumulators == 0 && kTileRows % (kAccumulators / 2) == 0 &&
                  (kPanelVectors < 3 || kTileRows % (kAccumulators / 3) == 0) &&
                  (kPanelVectors < 4 || kTileRows % (kAccumulators / 4) == 0),
              "every tile height must divide a packed group");

inline int64_t PackedGroupSize(int64_t k_size) {
  return (k_size + kChunk - 1) / kChunk * kChunk * kTileRows;
}

// Y[kRows, NV vectors] += A[kRows, chunk] W[chunk, NV vectors] for `depth` <= 16 elements of a
// chunk (kDepth > 0 fixes it at compile time). With kPartial the last vector holds only `tail`
// columns.
template <int NV, int kRows, int64_t kStep, int64_t kDepth, bool kPartial>
inline void GemmChunk(const float* a, int64_t depth, const float* w, int64_t w_stride,
                      int64_t tail, Vec (&acc)[kRows][NV]) {
  const int64_t n = kDepth > 0 ? kDepth : depth;
#pragma GCC unroll 16
  for (int64_t k = 0; k < n; ++k, w += w_stride) {
    Vec wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const float* wk = w + kWidth * v;
      wv[v] = kPartial && v == NV - 1 ? simd::LoadPartial(wk, tail) : simd::Load(wk);
    }
#pragma GCC unroll 24
    for (int r = 0; r < kRows; ++r) {
      const Vec ar = simd::Broadcast(a[r * kStep + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = simd::Fma(ar, wv[v], acc[r][v]);
    }
  }
}

// Y[kRows, NV vectors] = A[kRows, K] W[K, NV vectors] for one column panel and the tile whose
// first row starts at `a`; the whole tile of accumulators stays in registers. Only the first
// `valid` rows are stored.
template <int NV, int64_t kStep, bool kPartial>
void GemmTile(const float* a, const int64_t* offsets, int64_t k_size, const float* w,
              int64_t w_stride, float* y, int64_t y_stride, int64_t valid, int64_t tail) {
  constexpr int kRows = kAccumulators / NV;
  Vec acc[kRows][NV];
#pragma GCC unroll 24
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = simd::Zero();
  }
  const int64_t full = k_size / kChunk;
  for (int64_t c = 0; c < full; ++c) {
    GemmChunk<NV, kRows, kStep, kChunk, kPartial>(a + offsets[c], kChunk,
                                                  w + c * kChunk * w_stride, w_stride, tail, acc);
  }
  if (k_size > full * kChunk) {
    GemmChunk<NV, kRows, kStep, 0, kPartial>(a + offsets[full], k_size - full * kChunk,
                                             w + full * kChunk * w_stride, w_stride, tail, acc);
  }
#pragma GCC unroll 24
  for (int r = 0; r < kRows; ++r) {
    if (r >= valid) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* yv = y + r * y_stride + kWidth * v;
      if (kPartial && v == NV - 1) {
        simd::StorePartial(yv, acc[r][v], tail);
      } else {
        simd::Store(yv, acc[r][v]);
      }
    }
  }
}

template <int NV, int64_t kStep, bool kPartial>
void GemmPanel(const float* a, const int64_t* offsets, int64_t rows, int64_t k_size,
               const float* w, int64_t w_stride, float* y, int64_t y_stride, int64_t tail) {
  constexpr int kRows = kAccumulators / NV;
  for (int64_t r = 0; r < rows; r += kRows) {
    GemmTile<NV, kStep, kPartial>(a + r * kStep, offsets, k_size, w, w_stride, y + r * y_stride,
                                  y_stride, rows - r, tail);
  }
}

// One panel of `cols` <= kPanelVectors * kWidth columns.
template <int NV, int64_t kStep>
void GemmPanelCols(const float* a, const int64_t* offsets, int64_t rows, int64_t k_size,
                   const float* w, int64_t f, int64_t cols, float* y) {
  const int64_t tail = cols - kWidth * (NV - 1);
  if (tail == kWidth) {
    GemmPanel<NV, kStep, false>(a, offsets, rows, k_size, w, f, y, f, tail);
  } else {
    GemmPanel<NV, kStep, true>(a, offsets, rows, k_size, w, f, y, f, tail);
  }
}

// Columns [0, cols) of one panel, NV vectors wide at most: the narrowest NV that covers them.
template <int64_t kStep, int NV = kPanelVectors>
void GemmPanelFit(const float* a, const int64_t* offsets, int64_t rows, int64_t k_size,
                  const float* w, int64_t f, int64_t cols, float* y) {
  if constexpr (NV > 1) {
    if (cols <= kWidth * (NV - 1)) {
      GemmPanelFit<kStep, NV - 1>(a, offsets, rows, k_size, w, f, cols, y);
      return;
    }
  }
  GemmPanelCols<NV, kStep>(a, offsets, rows, k_size, w, f, cols, y);
}

template <int64_t kStep>
void GemmPanels(const float* a, const int64_t* offsets, int64_t rows, int64_t k_size,
                const float* w, int64_t f, float* y) {
  constexpr int64_t kPanel = kPanelVectors * kWidth;
  for (int64_t c0 = 0; c0 < f; c0 += kPanel) {
    GemmPanelFit<kStep>(a, offsets, rows, k_size, w + c0, f, std::min(kPanel, f - c0), y + c0);
  }
}

// Y[rows, F] = A[rows, K] W[K, F], A addressed by `a`, `step` (kChunk or 2 kChunk) and
// `offsets` (see above; tiles read, but never store, up to kTileRows - 1 rows past `rows`),
// W and Y row-major.
inline void GemmRows(const float* a, int64_t step, const int64_t* offsets, int64_t rows,
                     int64_t k_size, const float* w, int64_t f, float* y) {
  if (step == 2 * kChunk) {
    GemmPanels<2 * kChunk>(a, offsets, rows, k_size, w, f, y);
  } else {
    GemmPanels<kChunk>(a, offsets, rows, k_size, w, f, y);
  }
}

// ---------------------------------------------------------------------------- patch packing

// One call's geometry: x is [rows, m, h, w, c], each slot's kernel [kh, kw, c, f].
struct ConvGeometry {
  int64_t rows = 0, m = 0;
  int64_t h = 0, w = 0, c = 0;
  int64_t kh = 0, kw = 0, f = 0;
  int64_t stride = 1;
  int64_t oh = 0, ow = 0;
  int64_t pad_top = 0, pad_left = 0;

  int64_t patch_size() const { return kh * kw * c; }
  int64_t positions() const { return oh * ow; }
};

// dst[0, n) = scale * src[0, n) (or 0 without src). im2col moves many short runs (n <= 16),
// too short for a memcpy call to pay; uint8 inputs (raw observations) are widened here, so the
// float image never exists in memory.
template <typename X>
inline void CopyPiece(float* dst, const X* src, int64_t n, float scale) {
  int64_t i = 0;
  if (src == nullptr) {
    for (; i + kWidth <= n; i += kWidth) simd::Store(dst + i, simd::Zero());
    for (; i < n; ++i) dst[i] = 0.0f;
    return;
  }
  const Vec s = simd::Broadcast(scale);
  for (; i + kWidth <= n; i += kWidth) simd::Store(dst + i, simd::Mul(simd::Load(src + i), s));
  for (; i < n; ++i) dst[i] = Widen(src[i]) * scale;
}

// Writes n values of src (zeros without src) at patch element k of a packed row (`row` points
// at the row's first chunk), in pieces that do not cross a chunk.
template <typename X>
inline void PackRun(float* row, int64_t k, const X* src, int64_t n, float scale) {
  while (n > 0) {
    const int64_t piece = std::min(n, kChunk - k % kChunk);
    CopyPiece(row + (k / kChunk) * kChunk * kTileRows + k % kChunk, src, piece, scale);
    k += piece;
    n -= piece;
    if (src) src += piece;
  }
}

// Writes the patches of output positions [p0, p0 + count) of one image [h, w, c], times
// `scale`, packed (see GemmRows): kh * kw * c values per position in kernel order, zeros
// where the window leaves the image.
template <typename X>
void Im2Col(const X* image, const ConvGeometry& g, float scale, int64_t p0, int64_t count,
            float* packed) {
  const int64_t row_len = g.kw * g.c;
  const int64_t group_size = PackedGroupSize(g.patch_size());
  const X* none = nullptr;
  // The output position is walked, not divided out: a division per position costs as much as
  // copying a small kernel's patch.
  int64_t oy = p0 / g.ow;
  int64_t ox = p0 % g.ow;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t iy0 = oy * g.stride - g.pad_top;
    const int64_t ix0 = ox * g.stride - g.pad_left;
    const int64_t lo = std::max<int64_t>(0, -ix0) * g.c;
    const int64_t hi = std::max(lo, std::min<int64_t>(g.kw, g.w - ix0) * g.c);
    float* row = packed + (i / kTileRows) * group_size + (i % kTileRows) * kChunk;
    for (int64_t ky = 0, k = 0; ky < g.kh; ++ky, k += row_len) {
      const int64_t iy = iy0 + ky;
      if (iy < 0 || iy >= g.h || hi == lo) {
        PackRun(row, k, none, row_len, scale);
        continue;
      }
      const X* src = image + (iy * g.w + ix0) * g.c;
      if (lo > 0) PackRun(row, k, none, lo, scale);
      PackRun(row, k + lo, src + lo, hi - lo, scale);
      if (hi < row_len) PackRun(row, k + hi, none, row_len - hi, scale);
    }
    if (++ox == g.ow) {
      ox = 0;
      ++oy;
    }
  }
}

// Whether the zero-padded image can be the GEMM's operand itself (see GemmRows).
inline bool DirectConv(const ConvGeometry& g) {
  return (g.stride * g.c == kChunk || g.stride * g.c == 2 * kChunk) &&
         (g.kw * g.c) % kChunk == 0;
}

// Writes scale * image [h, w, c] into the interior of a zero-padded [*, wp, c] image.
template <typename X>
void PadImage(const X* image, const ConvGeometry& g, float scale, int64_t wp, float* padded) {
  const int64_t row = g.w * g.c;
  for (int64_t iy = 0; iy < g.h; ++iy) {
    CopyPiece(padded + ((iy + g.pad_top) * wp + g.pad_left) * g.c, image + iy * row, row, scale);
  }
}

}  // namespace kernels
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_CORE_KERNELS_H_
