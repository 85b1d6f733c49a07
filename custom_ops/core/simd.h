// The float32 vector the core kernels compute with, whatever the instruction set.
//
// `Vec` is Eigen's widest float packet for the target (bundled with TensorFlow's headers):
// 16 floats with AVX-512, 8 with AVX/AVX2, 4 with SSE or NEON. Arithmetic goes through
// Eigen's packet functions, which use fused multiply-add where the target has it; the integer
// widenings (bfloat16 and uint8 to float32) use GCC/Clang vector extensions of the same width.
// Kernels written against this header compile to every target from one source.

#ifndef NEUROEVO_CUSTOM_OPS_CORE_SIMD_H_
#define NEUROEVO_CUSTOM_OPS_CORE_SIMD_H_

#include <cstdint>
#include <cstring>
#include <utility>

#include "Eigen/Core"
#include "common/no_fma.h"

namespace neuroevo {
namespace simd {

using bfloat16 = Eigen::bfloat16;
using Vec = Eigen::internal::packet_traits<float>::type;

// Floats per vector.
constexpr int kWidth = sizeof(Vec) / sizeof(float);

// Vector registers of the target: register-tiled kernels size their accumulator tiles by it.
#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif

// Integer vectors with kWidth lanes, for widening.
using Bytes = uint8_t __attribute__((vector_size(kWidth)));
using Halves = uint16_t __attribute__((vector_size(2 * kWidth)));
using Words = uint32_t __attribute__((vector_size(4 * kWidth)));
using Ints = int32_t __attribute__((vector_size(4 * kWidth)));
using Floats = float __attribute__((vector_size(4 * kWidth)));

inline Vec Zero() { return Eigen::internal::pset1<Vec>(0.0f); }
inline Vec Broadcast(float v) { return Eigen::internal::pset1<Vec>(v); }
inline Vec Add(Vec a, Vec b) { return Eigen::internal::padd(a, b); }
inline Vec Mul(Vec a, Vec b) { return Eigen::internal::pmul(a, b); }
inline Vec Max(Vec a, Vec b) { return Eigen::internal::pmax(a, b); }
inline Vec Min(Vec a, Vec b) { return Eigen::internal::pmin(a, b); }
// a * b + c, fused where the target has FMA.
inline Vec Fma(Vec a, Vec b, Vec c) { return Eigen::internal::pmadd(a, b, c); }
inline float ReduceAdd(Vec v) { return Eigen::internal::predux(v); }

// tanh with the bits of TensorFlow's x86 Tanh kernel (Eigen's ptanh_float built without FMA:
// the [9/8] rational approximation on x clamped to +-7.90738964, each multiply and add rounded
// on its own), on every target: only correctly rounded operations, so AVX-512, AVX2, NEON and
// SSE2 builds agree with each other and with tf.math.tanh on x86.
NEUROEVO_NO_FMA inline Vec Tanh(Vec v) {
  NEUROEVO_NO_FMA_BODY
  constexpr float kClamp = 7.90738964080810547f;
  constexpr float kAlpha[] = {1.394553628e-8f, 2.102733560e-5f, 3.520756727e-3f, 1.340216100e-1f};
  constexpr float kBeta[] = {8.015776984e-7f, 3.326951409e-4f, 2.597254514e-2f, 4.673548340e-1f,
                             1.0f};
  const Vec x = Max(Min(v, Broadcast(kClamp)), Broadcast(-kClamp));
  const Vec x2 = Mul(x, x);
  Vec p = Broadcast(kAlpha[0]);
  for (int i = 1; i < 4; ++i) p = Add(Mul(p, x2), Broadcast(kAlpha[i]));
  Vec q = Broadcast(kBeta[0]);
  for (int i = 1; i < 5; ++i) q = Add(Mul(q, x2), Broadcast(kBeta[i]));
  p = Add(Mul(Mul(x2, x), p), x);
  return Eigen::internal::pdiv(p, q);
}

// kWidth elements from p (no alignment needed), as float32. A bfloat16 is the high half of a
// float32, so widening one is a 16-bit shift; uint8 values convert exactly.
inline Vec Load(const float* p) { return Eigen::internal::ploadu<Vec>(p); }
inline Vec Load(const bfloat16* p) {
  Halves bits;
  std::memcpy(&bits, p, sizeof(bits));
  const Words wide = __builtin_convertvector(bits, Words) << 16;
  Vec v;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}
inline Vec Load(const uint8_t* p) {
  Bytes bytes;
  std::memcpy(&bytes, p, sizeof(bytes));
  const Floats wide = __builtin_convertvector(__builtin_convertvector(bytes, Ints), Floats);
  Vec v;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}

// The first n < kWidth elements of p, zeros after: a vector tail without reading past p + n.
template <typename T>
inline Vec LoadPartial(const T* p, int64_t n) {
  T part[kWidth] = {};
  std::memcpy(part, p, n * sizeof(T));
  return Load(part);
}

// A vector whose every bit is set (a mask that keeps every lane).
inline Vec AllOnes() { return Eigen::internal::ptrue(Zero()); }

// The bits of a and b ANDed: with a mask, clears lanes exactly (NaN included) to +0.
inline Vec And(Vec a, Vec b) { return Eigen::internal::pand(a, b); }

// The first n lanes of v (0 <= n <= kWidth) and zeros after, bit for bit.
inline Vec KeepFirst(Vec v, int64_t n) {
  const Vec lane = Eigen::internal::plset<Vec>(0.0f);
  return And(v, Eigen::internal::pcmp_lt(lane, Broadcast(static_cast<float>(n))));
}

// 2 kWidth bfloat16 from p as two float32 vectors: the elements at even positions and those at
// odd positions. Each 32-bit lane holds one of each (little-endian: the even one low), so both
// come out of one load with a shift and a mask, with no lane-crossing widening.
inline void LoadPairs(const bfloat16* p, Vec* even, Vec* odd) {
  Words bits;
  std::memcpy(&bits, p, sizeof(bits));
  const Words low = bits << 16;
  const Words high = bits & 0xFFFF0000u;
  std::memcpy(even, &low, sizeof(Vec));
  std::memcpy(odd, &high, sizeof(Vec));
}

template <std::size_t... I>
inline void Deinterleave(Floats a, Floats b, Floats* even, Floats* odd,
                         std::index_sequence<I...>) {
  *even = __builtin_shufflevector(a, b, (2 * I)...);
  *odd = __builtin_shufflevector(a, b, (2 * I + 1)...);
}

// 2 kWidth floats from p split like LoadPairs splits bfloat16: even positions, odd positions.
inline void LoadDeinterleaved(const float* p, Vec* even, Vec* odd) {
  Floats a, b, e, o;
  std::memcpy(&a, p, sizeof(a));
  std::memcpy(&b, p + kWidth, sizeof(b));
  Deinterleave(a, b, &e, &o, std::make_index_sequence<kWidth>());
  std::memcpy(even, &e, sizeof(Vec));
  std::memcpy(odd, &o, sizeof(Vec));
}

inline void Store(float* p, Vec v) { Eigen::internal::pstoreu(p, v); }

// Stores the first n < kWidth lanes of v.
inline void StorePartial(float* p, Vec v, int64_t n) {
  float part[kWidth];
  Store(part, v);
  std::memcpy(p, part, n * sizeof(float));
}

// dst[0, n) = src[0, n) as float32.
template <typename T>
inline void WidenInto(const T* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) Store(dst + i, Load(src + i));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

inline float Widen(float v) { return v; }
inline float Widen(bfloat16 v) { return static_cast<float>(v); }
inline float Widen(uint8_t v) { return static_cast<float>(v); }

}  // namespace simd
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_CORE_SIMD_H_
