// The pixel kernels of the Atari op's preprocessing: palette -> grayscale lookup, max-pool of
// two frames, the area resize (bit-identical to OpenCV's INTER_AREA) and the frame-stack push.
//
// Plain C++17 with no TensorFlow or ALE header, so the kernels compile and are tested on their
// own (tests/test_atari_kernels.py), for any target including aarch64.
//
// One source per kernel: each is written once with GCC/Clang vector extensions, the vector
// width in bytes being a template parameter. The defaults below pick the target's width at
// compile time, so -march decides what the same code becomes: 16-byte vectors on the x86-64
// baseline (SSE2) and on NEON, 32 with AVX2, 64 with AVX-512. Byte lookups (palette, resize
// taps) need a byte shuffle with variable indices, which GCC turns into pshufb (SSSE3/AVX2),
// tbl (NEON) or vpermb / vpermi2b (AVX-512 VBMI); without one (the SSE2 baseline) they run
// as scalar loops, which give the same bytes.

#ifndef NEUROEVO_CUSTOM_OPS_ATARI_ATARI_KERNELS_H_
#define NEUROEVO_CUSTOM_OPS_ATARI_ATARI_KERNELS_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/no_fma.h"

namespace neuroevo {
namespace atari {

constexpr int kScreenHeight = 210;
constexpr int kScreenWidth = 160;
constexpr int kScreenPixels = kScreenHeight * kScreenWidth;

// Bytes per vector for arithmetic (max, float math, conversions) on this target.
#if defined(__AVX512BW__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX2__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;  // SSE2 (x86-64 baseline), NEON
#endif

// Bytes per vector for byte shuffles with variable indices; 0: no such instruction (scalar).
// GCC's __builtin_shuffle expresses them; Clang has no variable-index equivalent, so a Clang
// build takes the scalar lookups.
#if defined(__clang__) || !defined(__GNUC__)
constexpr int kShuffleBytes = 0;
#elif defined(__AVX512VBMI__) && defined(__AVX512BW__)
constexpr int kShuffleBytes = 64;
#elif defined(__AVX2__)
constexpr int kShuffleBytes = 32;
#elif defined(__SSSE3__) || defined(__ARM_NEON)
constexpr int kShuffleBytes = 16;
#else
constexpr int kShuffleBytes = 0;
#endif

namespace simd {

template <typename T, int kBytes>
struct VectorOf {
  typedef T type __attribute__((vector_size(kBytes)));
};

// kBytes / sizeof(T) lanes of T.
template <typename T, int kBytes>
using Vector = typename VectorOf<T, kBytes>::type;

// Unaligned load and store.
template <typename V, typename T>
inline V Load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <typename T, typename V>
inline void Store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// Lanes of 32 bits holding bytes [4 part * kBytes / 16, ...) of `bytes`, zero-extended: one
// constant byte shuffle (GCC 12 turns __builtin_convertvector between integer widths into
// scalar code, byte shuffles into pshufb / tbl / vpermb).
template <int kBytes>
inline Vector<int32_t, kBytes> WidenBytes(Vector<uint8_t, kBytes> bytes, int part) {
  using U8 = Vector<uint8_t, kBytes>;
  U8 mask;
  for (int i = 0; i < kBytes; ++i) {
    mask[i] = static_cast<uint8_t>(i % 4 == 0 ? part * kBytes / 4 + i / 4 : kBytes);  // kBytes+: 0
  }
  return reinterpret_cast<Vector<int32_t, kBytes>>(__builtin_shuffle(bytes, U8{}, mask));
}

// The low byte of each 32-bit lane of `lanes`, packed into the first kBytes / 4 bytes.
template <int kBytes>
inline Vector<uint8_t, kBytes> NarrowToBytes(Vector<int32_t, kBytes> lanes) {
  using U8 = Vector<uint8_t, kBytes>;
  U8 mask;
  for (int i = 0; i < kBytes; ++i) mask[i] = static_cast<uint8_t>(i < kBytes / 4 ? 4 * i : 0);
  return __builtin_shuffle(reinterpret_cast<U8>(lanes), mask);
}

// Calls body(i) for i = 0, kLanes, 2 kLanes, ... and once more at n - kLanes if kLanes does
// not divide n. For element-wise kernels whose output does not feed their input (recomputing
// the overlap gives the same bytes). Needs n >= kLanes.
template <int kLanes, typename Body>
inline void ForEachVector(int64_t n, Body body) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) body(i);
  if (i < n) body(n - kLanes);
}

// table[index] for 128-entry byte tables: `tables` holds the table as 128 / kBytes vectors and
// every index is < 128. Two-vector shuffles look up 2 * kBytes entries at once (vpermi2b,
// tbl with two registers, pshufb pairs); higher index bits then select among their results.
template <int kBytes>
inline Vector<uint8_t, kBytes> Lookup128(const Vector<uint8_t, kBytes>* tables,
                                         Vector<uint8_t, kBytes> index) {
  using U8 = Vector<uint8_t, kBytes>;
  constexpr int kPairs = 128 / (2 * kBytes);
  static_assert(kPairs >= 1, "at most 64-byte vectors");
  U8 found[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    found[p] = __builtin_shuffle(tables[2 * p], tables[2 * p + 1], index);  // index mod 2 kBytes
  }
  int bit = 2 * kBytes;
  for (int count = kPairs; count > 1; count /= 2, bit *= 2) {
    const auto high = (index & static_cast<uint8_t>(bit)) != 0;
    for (int p = 0; p < count / 2; ++p) found[p] = high ? found[2 * p + 1] : found[2 * p];
  }
  return found[0];
}

}  // namespace simd

// ---------------------------------------------------------------------------------- grayscale

// Palette index -> luminance, as ALE's getScreenGrayscale computes it. ALE's pixels are even
// palette indices (the TIA ignores bit 0 of a colour) and `Make` gives each odd index its even
// neighbour's value, so gray[p] == even[p >> 1] for every byte p: the vector lookup reads the
// 128 even entries.
struct GrayPalette {
  // even_gray[i]: luminance of palette index 2 i.
  static GrayPalette Make(const std::array<uint8_t, 128>& even_gray) {
    GrayPalette palette;
    for (int i = 0; i < 256; ++i) palette.gray[i] = even_gray[i / 2];
    for (int i = 0; i < 128; ++i) palette.even[i] = even_gray[i];
    return palette;
  }

  std::array<uint8_t, 256> gray{};
  alignas(64) std::array<uint8_t, 128> even{};
};

// dst[x] = gray[src[x]] (or max(gray[src[x]], pool_with[x])) for one kScreenWidth row, with
// `row_gray` holding the row's luminance before pooling. `reuse`: row_gray already holds the
// luminance of a row equal to src (the previous one), so only the pooling runs.
template <int kShuffle, int kBytes>
inline void GrayRow(const GrayPalette& palette, const uint8_t* src, uint8_t* row_gray,
                    bool reuse, const uint8_t* pool_with, uint8_t* dst) {
  using U8 = simd::Vector<uint8_t, kBytes>;
  if (!reuse) {
    if constexpr (kShuffle > 0) {
      using T8 = simd::Vector<uint8_t, kShuffle>;
      T8 tables[128 / kShuffle];
      std::memcpy(tables, palette.even.data(), sizeof(tables));
      simd::ForEachVector<kShuffle>(kScreenWidth, [&](int64_t x) {
        const T8 index = simd::Load<T8>(src + x) >> 1;
        simd::Store(row_gray + x, simd::Lookup128<kShuffle>(tables, index));
      });
    } else {
      for (int x = 0; x < kScreenWidth; ++x) row_gray[x] = palette.gray[src[x]];
    }
  }
  if (pool_with == nullptr) {
    std::memcpy(dst, row_gray, kScreenWidth);
    return;
  }
  simd::ForEachVector<kBytes>(kScreenWidth, [&](int64_t x) {
    const U8 a = simd::Load<U8>(row_gray + x);
    const U8 b = simd::Load<U8>(pool_with + x);
    simd::Store(dst + x, a > b ? a : b);
  });
}

// dst = luminance of a kScreenHeight x kScreenWidth palette-index screen, max-pooled with
// `pool_with` if given (dst must not alias src or pool_with). Atari screens repeat rows a lot
// (backgrounds, playfields drawn on line pairs): a row equal to the one above reuses its
// luminance.
template <int kShuffle = kShuffleBytes, int kBytes = kVectorBytes>
inline void ToGray(const GrayPalette& palette, const uint8_t* src, uint8_t* dst,
                   const uint8_t* pool_with = nullptr) {
  alignas(64) uint8_t row_gray[kScreenWidth];
  for (int y = 0; y < kScreenHeight; ++y) {
    const int64_t at = int64_t{y} * kScreenWidth;
    const bool reuse = y > 0 && std::memcmp(src + at, src + at - kScreenWidth, kScreenWidth) == 0;
    GrayRow<kShuffle, kBytes>(palette, src + at, row_gray, reuse,
                              pool_with == nullptr ? nullptr : pool_with + at, dst + at);
  }
}

// a[i] = max(a[i], b[i]) for n >= kBytes bytes.
template <int kBytes = kVectorBytes>
inline void MaxPoolInPlace(uint8_t* a, const uint8_t* b, int64_t n) {
  using U8 = simd::Vector<uint8_t, kBytes>;
  simd::ForEachVector<kBytes>(n, [&](int64_t i) {
    const U8 x = simd::Load<U8>(a + i);
    const U8 y = simd::Load<U8>(b + i);
    simd::Store(a + i, x > y ? x : y);
  });
}

// -------------------------------------------------------------------------------- frame stack

// Pushes `frame` (pixels bytes) onto `stack`, [pixels, 4] bytes with the newest frame last:
// each pixel's 4 frames are one little-endian word, shifted down a byte with the new frame put
// in the top byte. `stack` and `frame` must not overlap.
template <int kBytes = kVectorBytes>
inline void PushFrame4(uint32_t* stack, const uint8_t* frame, int64_t pixels) {
  using U8 = simd::Vector<uint8_t, kBytes>;
  using U32 = simd::Vector<uint32_t, kBytes>;
  constexpr int kLanes = kBytes / 4;
  int64_t p = 0;
  for (; p + kBytes <= pixels; p += kBytes) {
    const U8 fresh = simd::Load<U8>(frame + p);
    for (int part = 0; part < 4; ++part) {
      uint32_t* words = stack + p + part * kLanes;
      const U32 top = reinterpret_cast<U32>(simd::WidenBytes<kBytes>(fresh, part)) << 24;
      simd::Store(words, (simd::Load<U32>(words) >> 8) | top);
    }
  }
  for (; p < pixels; ++p) stack[p] = (stack[p] >> 8) | (static_cast<uint32_t>(frame[p]) << 24);
}

// The same for any depth k and element type: [pixels, k] values, newest frame last.
template <typename T>
inline void PushFrame(T* stack, const T* frame, int64_t pixels, int k) {
  for (int64_t p = 0; p < pixels; ++p) {
    T* px = stack + p * k;
    std::memmove(px, px + 1, sizeof(T) * (k - 1));
    px[k - 1] = frame[p];
  }
}

// Fills every frame of a [pixels, k] stack with `frame`.
template <typename T>
inline void FillStack(T* stack, const T* frame, int64_t pixels, int k) {
  for (int64_t p = 0; p < pixels; ++p) std::fill_n(stack + p * k, k, frame[p]);
}

// -------------------------------------------------------------------------------- area resize

// The float arithmetic of the resize must stay unfused: a fused multiply-add rounds once where
// OpenCV rounds twice, which flips about one pixel in ten thousand (common/no_fma.h).

// Area downscale of a kScreenHeight x kScreenWidth uint8 image to S x S, bit-identical to
// OpenCV's cv::resize(..., INTER_AREA) whenever a scale factor is not an integer, i.e. for
// every S but 5 and 10 (210/S and 160/S both integers: OpenCV then takes an integer path that
// rounds a few pixels differently, by at most 1).
//
// OpenCV computes, per destination pixel, a horizontal weighted sum over at most ceil(scale)+1
// source columns, then a vertical weighted sum of those row results, in float32, in a fixed
// order, and rounds half to even. The weights (and the order of the additions) are what make
// results match to the bit, so they are derived here by the same formula: each destination
// cell covers [d*scale, (d+1)*scale) of the source, split into a partial first pixel, whole
// pixels and a partial last pixel, each weighted by its covered fraction / cell width.
// Taps are stored per destination index, padded with zero weights (adding +0.0f to a
// non-negative float is exact, so padding does not change any result).
//
// Horizontal pass: each block of kShuffle / 4 outputs reads its taps from a kShuffle-byte
// window of the source row with one byte shuffle per tap (scalar where the target has no
// shuffle or a block's taps do not fit a window). Vertical pass: kBytes / 4 outputs per vector.
template <int kShuffle = kShuffleBytes, int kBytes = kVectorBytes>
class BasicAreaResizer {
 public:
  explicit BasicAreaResizer(int size)
      : size_(size),
        stride_((size + 15) / 16 * 16),
        xs_(MakeTaps(kScreenWidth, size, stride_)),
        ys_(MakeTaps(kScreenHeight, size, size)),
        ring_(RingRows(ys_)) {
    MakeWindows();
  }

  int size() const { return size_; }
  // Floats of scratch space Resize needs: a few horizontally resized rows (1.5 KB for 84).
  int64_t scratch_floats() const { return int64_t{ring_} * stride_; }

  // src: kScreenHeight x kScreenWidth, dst: size x size, scratch: scratch_floats() floats.
  //
  // Streams: each output row pulls the (at most ring_) source rows it needs through a small
  // ring of horizontally resized rows, so the working set stays in L1 whatever the image.
  void Resize(const uint8_t* src, uint8_t* dst, float* scratch) const;

 private:
  static constexpr int kBlock = kShuffle / 4;  // horizontal outputs per window
  static constexpr int kLanes = kBytes / 4;    // vertical outputs per vector

  struct Taps {
    int count = 0;               // taps per destination index, after padding
    int width = 0;               // destination indices per tap row (>= dsize, padded)
    std::vector<int32_t> index;  // [count][width] source indices
    std::vector<float> weight;   // [count][width] weights (0 for padding)
  };

  static Taps MakeTaps(int ssize, int dsize, int width) {
    const double scale = 1.0 / (static_cast<double>(dsize) / ssize);  // as OpenCV derives it
    std::vector<std::vector<std::pair<int32_t, float>>> cells(dsize);
    int most = 0;
    for (int d = 0; d < dsize; ++d) {
      const double begin = d * scale;
      const double end = begin + scale;
      const double cell_width = std::min(scale, ssize - begin);
      int first_whole = static_cast<int>(std::ceil(begin));
      const int last = std::min(static_cast<int>(std::floor(end)), ssize - 1);
      first_whole = std::min(first_whole, last);
      auto& cell = cells[d];
      if (first_whole - begin > 1e-3) {
        cell.emplace_back(first_whole - 1,
                          static_cast<float>((first_whole - begin) / cell_width));
      }
      for (int s = first_whole; s < last; ++s) {
        cell.emplace_back(s, static_cast<float>(1.0 / cell_width));
      }
      if (end - last > 1e-3) {
        cell.emplace_back(
            last, static_cast<float>(std::min(std::min(end - last, 1.0), cell_width) / cell_width));
      }
      most = std::max<int>(most, static_cast<int>(cell.size()));
    }
    Taps taps;
    taps.count = most;
    taps.width = width;
    taps.index.assign(static_cast<size_t>(most) * width, 0);
    taps.weight.assign(static_cast<size_t>(most) * width, 0.0f);
    for (int d = 0; d < width; ++d) {
      for (int t = 0; t < most; ++t) {
        const size_t at = static_cast<size_t>(t) * width + d;
        // Padding beyond the image repeats the last cell's last pixel with weight 0.
        const auto& cell = cells[std::min(d, dsize - 1)];
        if (d >= dsize) {
          taps.index[at] = cell.back().first;
          continue;
        }
        const bool real = t < static_cast<int>(cell.size());
        taps.index[at] = real ? cell[t].first : cell.back().first;
        taps.weight[at] = real ? cell[t].second : 0.0f;
      }
    }
    return taps;
  }

  // For each block of kBlock horizontal outputs: the first byte of a kShuffle-byte window of
  // the row that holds all their taps (never reaching past the row's end), and each tap's
  // offset in it. Left empty (scalar pass) without a shuffle or if some block does not fit.
  void MakeWindows() {
    if (kShuffle == 0 || kShuffle > kScreenWidth) return;
    const int blocks = stride_ / kBlock;
    std::vector<int32_t> start(blocks, 0);
    window_offset_.assign(static_cast<size_t>(xs_.count) * blocks * kShuffle, 0);
    for (int b = 0; b < blocks; ++b) {
      int lo = kScreenWidth, hi = 0;
      for (int t = 0; t < xs_.count; ++t) {
        for (int j = 0; j < kBlock; ++j) {
          const int i = xs_.index[static_cast<size_t>(t) * stride_ + b * kBlock + j];
          lo = std::min(lo, i);
          hi = std::max(hi, i);
        }
      }
      if (hi - lo >= kShuffle) {
        window_offset_.clear();
        return;
      }
      start[b] = std::min(lo, kScreenWidth - kShuffle);
      for (int t = 0; t < xs_.count; ++t) {
        for (int j = 0; j < kBlock; ++j) {
          const int i = xs_.index[static_cast<size_t>(t) * stride_ + b * kBlock + j];
          window_offset_[(static_cast<size_t>(t) * blocks + b) * kShuffle + j] =
              static_cast<uint8_t>(i - start[b]);
        }
      }
    }
    window_start_ = std::move(start);
  }

  // Rows of the ring: the widest span of source rows one output row reads, as a power of 2.
  static int RingRows(const Taps& ys) {
    int span = 1;
    for (int d = 0; d < ys.width; ++d) {
      int lo = kScreenHeight, hi = 0;
      for (int t = 0; t < ys.count; ++t) {
        lo = std::min(lo, ys.index[static_cast<size_t>(t) * ys.width + d]);
        hi = std::max(hi, ys.index[static_cast<size_t>(t) * ys.width + d]);
      }
      span = std::max(span, hi - lo + 1);
    }
    int ring = 1;
    while (ring < span) ring *= 2;
    return ring;
  }

  // out[d] = sum_t row[xi_t[d]] * xw_t[d] for d < stride_ (one source row).
  NEUROEVO_NO_FMA void HorizontalScalar(const uint8_t* row, float* out) const {
    NEUROEVO_NO_FMA_BODY
    const int n = stride_;
    const int32_t* idx = xs_.index.data();
    const float* w = xs_.weight.data();
    for (int d = 0; d < n; ++d) out[d] = static_cast<float>(row[idx[d]]) * w[d];
    for (int t = 1; t < xs_.count; ++t) {
      idx += n;
      w += n;
      for (int d = 0; d < n; ++d) {
        const float term = static_cast<float>(row[idx[d]]) * w[d];
        out[d] = out[d] + term;
      }
    }
  }

  NEUROEVO_NO_FMA void HorizontalWindows(const uint8_t* row, float* out) const {
    NEUROEVO_NO_FMA_BODY
    if constexpr (kShuffle > 0) {
      using U8 = simd::Vector<uint8_t, kShuffle>;
      using F32 = simd::Vector<float, kShuffle>;
      const int blocks = stride_ / kBlock;
      for (int b = 0; b < blocks; ++b) {
        const U8 window = simd::Load<U8>(row + window_start_[b]);
        F32 acc = {};
        for (int t = 0; t < xs_.count; ++t) {
          const size_t at = static_cast<size_t>(t) * stride_ + b * kBlock;
          const U8 offsets =
              simd::Load<U8>(window_offset_.data() + (static_cast<size_t>(t) * blocks + b) * kShuffle);
          const U8 gathered = __builtin_shuffle(window, offsets);
          const F32 pixels =
              __builtin_convertvector(simd::WidenBytes<kShuffle>(gathered, 0), F32);
          const F32 term = pixels * simd::Load<F32>(xs_.weight.data() + at);
          // t == 0: 0 + term == term exactly (term >= 0), as OpenCV's first accumulation.
          acc = acc + term;
        }
        simd::Store(out + b * kBlock, acc);
      }
    }
  }

  // dst_row[x] = round(sum_t yw_t[d] * rows[t][x]) for x < size_.
  NEUROEVO_NO_FMA void VerticalRow(int d, const float* const* rows, uint8_t* dst_row) const {
    NEUROEVO_NO_FMA_BODY
    using F32 = simd::Vector<float, kBytes>;
    using I32 = simd::Vector<int32_t, kBytes>;
    // x + 1.5 * 2^23 - 1.5 * 2^23 rounds x half to even (the default rounding mode, as cvRound)
    // for 0 <= x < 2^22; sums of pixels and weights that add up to 1 stay in [0, 256).
    const F32 magic = F32{} + 12582912.0f;
    alignas(64) uint8_t padded[kScreenWidth + 16];  // stride_ <= kScreenWidth + 15
    for (int x = 0; x < stride_; x += kLanes) {
      F32 acc = ys_.weight[d] * simd::Load<F32>(rows[0] + x);
      for (int t = 1; t < ys_.count; ++t) {
        const float w = ys_.weight[static_cast<size_t>(t) * ys_.width + d];
        const F32 term = w * simd::Load<F32>(rows[t] + x);
        acc = acc + term;
      }
      const F32 rounded = (acc + magic) - magic;
      I32 value = __builtin_convertvector(rounded, I32);
      value = value < 0 ? 0 : value;
      value = value > 255 ? 255 : value;
      const auto bytes = simd::NarrowToBytes<kBytes>(value);
      std::memcpy(padded + x, &bytes, kLanes);
    }
    std::memcpy(dst_row, padded, size_);
  }

  int size_;
  int stride_;  // scratch row length: size_ rounded up to 16
  Taps xs_;
  Taps ys_;
  int ring_;
  std::vector<int32_t> window_start_;   // [blocks], empty when the windowed pass is unusable
  std::vector<uint8_t> window_offset_;  // [count][blocks][kShuffle]
};

template <int kShuffle, int kBytes>
void BasicAreaResizer<kShuffle, kBytes>::Resize(const uint8_t* src, uint8_t* dst,
                                                float* scratch) const {
  const bool windows = !window_start_.empty();
  // Source row held by each ring slot, and each tap's row. For any size >= 1 there are at
  // most kScreenHeight + 1 taps and ring_ <= 256.
  int cached[256];
  std::fill(cached, cached + ring_, -1);
  const float* rows[kScreenHeight + 1];
  // Atari screens repeat rows a lot (backgrounds, sprites drawn on line pairs): a source row
  // equal to the last one resized reuses its result (same bytes in, same floats out).
  int last_y = -1;
  const float* last = nullptr;
  for (int d = 0; d < size_; ++d) {
    for (int t = 0; t < ys_.count; ++t) {
      const int y = ys_.index[static_cast<size_t>(t) * ys_.width + d];
      const int slot = y & (ring_ - 1);
      float* row = scratch + int64_t{slot} * stride_;
      if (cached[slot] != y) {
        const uint8_t* pixels = src + y * kScreenWidth;
        if (last_y >= 0 && std::memcmp(pixels, src + last_y * kScreenWidth, kScreenWidth) == 0) {
          if (row != last) std::memcpy(row, last, sizeof(float) * stride_);
        } else if (windows) {
          HorizontalWindows(pixels, row);
        } else {
          HorizontalScalar(pixels, row);
        }
        cached[slot] = y;
        last_y = y;
        last = row;
      }
      rows[t] = row;
    }
    VerticalRow(d, rows, dst + d * size_);
  }
}

// The resizer for this target's vector widths.
using AreaResizer = BasicAreaResizer<>;

// ------------------------------------------------------------ Uber's float pipeline (uber)
//
// The observation pipeline of Uber's deep-neuroevolution GPU code (gym_tensorflow/atari/
// tf_atari.py): palette indices -> float grayscale in [0, 1], max of the last two frames, then
// tf.image.resize_bilinear(..., align_corners=True). Its multiplications stay unfused like
// TensorFlow's CPU kernel (fp-contract=off).

// dst[i] = max(gray[a[i]], gray[b[i]]): the palette lookup and the two-frame max in one pass.
inline void MaxGrayFloat(const std::array<float, 256>& gray, const uint8_t* a, const uint8_t* b,
                         float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::max(gray[a[i]], gray[b[i]]);
}

// Bilinear resize of a kScreenHeight x kScreenWidth float image to S x S with aligned corners,
// TensorFlow's legacy ResizeBilinear (align_corners=True, half_pixel_centers=False): source
// coordinate in = out * ((in_size - 1) / (out_size - 1)) in float32, taps floor(in) and
// min(floor(in) + 1, in_size - 1), and per pixel
//   top = tl + (tr - tl) * xl; bottom = bl + (br - bl) * xl; out = top + (bottom - top) * yl.
// Both rows of a destination row are interpolated horizontally into scratch first, so the
// vertical pass runs over contiguous floats.
class AlignedBilinearResizer {
 public:
  explicit AlignedBilinearResizer(int size)
      : size_(size),
        xs_(Taps(kScreenWidth, size)),
        ys_(Taps(kScreenHeight, size)) {}

  int size() const { return size_; }
  int scratch_floats() const { return 2 * size_; }

  NEUROEVO_NO_FMA void Resize(const float* src, float* dst, float* scratch) const {
    NEUROEVO_NO_FMA_BODY
    float* top = scratch;
    float* bottom = scratch + size_;
    for (int d = 0; d < size_; ++d) {
      Horizontal(src + ys_.lower[d] * kScreenWidth, top);
      Horizontal(src + ys_.upper[d] * kScreenWidth, bottom);
      const float yl = ys_.lerp[d];
      float* out = dst + int64_t{d} * size_;
      for (int x = 0; x < size_; ++x) out[x] = top[x] + (bottom[x] - top[x]) * yl;
    }
  }

 private:
  struct Axis {
    std::vector<int> lower, upper;
    std::vector<float> lerp;
  };

  static Axis Taps(int in_size, int out_size) {
    const float scale =
        out_size > 1 ? static_cast<float>(in_size - 1) / static_cast<float>(out_size - 1) : 0.0f;
    Axis axis;
    for (int i = 0; i < out_size; ++i) {
      const float in = static_cast<float>(i) * scale;
      const int lower = static_cast<int>(in);
      axis.lower.push_back(lower);
      axis.upper.push_back(std::min(lower + 1, in_size - 1));
      axis.lerp.push_back(in - static_cast<float>(lower));
    }
    return axis;
  }

  NEUROEVO_NO_FMA void Horizontal(const float* row, float* out) const {
    NEUROEVO_NO_FMA_BODY
    for (int x = 0; x < size_; ++x) {
      const float left = row[xs_.lower[x]];
      out[x] = left + (row[xs_.upper[x]] - left) * xs_.lerp[x];
    }
  }

  int size_;
  Axis xs_;
  Axis ys_;
};

}  // namespace atari
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_ATARI_ATARI_KERNELS_H_
