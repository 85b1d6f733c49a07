// Runs the Atari pixel kernels (custom_ops/atari/atari_kernels.h) at every vector width on
// images from a file, for tests/test_atari_kernels.py to compare with NumPy and OpenCV.
//
// Usage: atari_kernels_driver IN PALETTE SIZE OUT
//   IN: n screens, n x 210 x 160 uint8 palette indices; PALETTE: 128 bytes, the luminance of
//   the even palette indices; SIZE: resize target. For each variant (the target's default
//   widths first, then fixed ones) OUT gets, in order: the n grayscale screens, the n - 1
//   max-pools of consecutive grayscale screens (grayscale pooled in ToGray, then again with
//   MaxPoolInPlace), the n resized grayscale screens (SIZE x SIZE), and the [SIZE, SIZE, 4]
//   stack after filling it with the first resized screen and pushing the others.

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "atari/atari_kernels.h"

namespace {

using neuroevo::atari::kScreenPixels;

template <int kShuffle, int kBytes>
void RunVariant(const std::vector<uint8_t>& screens, const neuroevo::atari::GrayPalette& palette,
                int size, std::ofstream& out) {
  namespace atari = neuroevo::atari;
  const int64_t n = static_cast<int64_t>(screens.size()) / kScreenPixels;
  std::vector<uint8_t> gray(screens.size());
  for (int64_t i = 0; i < n; ++i) {
    atari::ToGray<kShuffle, kBytes>(palette, screens.data() + i * kScreenPixels,
                                    gray.data() + i * kScreenPixels);
  }
  out.write(reinterpret_cast<const char*>(gray.data()), gray.size());

  std::vector<uint8_t> pooled(kScreenPixels), again(kScreenPixels);
  for (int64_t i = 0; i + 1 < n; ++i) {
    atari::ToGray<kShuffle, kBytes>(palette, screens.data() + (i + 1) * kScreenPixels,
                                    pooled.data(), gray.data() + i * kScreenPixels);
    again.assign(gray.begin() + i * kScreenPixels, gray.begin() + (i + 1) * kScreenPixels);
    atari::MaxPoolInPlace<kBytes>(again.data(), gray.data() + (i + 1) * kScreenPixels,
                                  kScreenPixels);
    if (again != pooled) {
      std::fprintf(stderr, "ToGray pooling and MaxPoolInPlace differ at screen %ld\n",
                   static_cast<long>(i));
      std::exit(1);
    }
    out.write(reinterpret_cast<const char*>(pooled.data()), pooled.size());
  }

  const atari::BasicAreaResizer<kShuffle, kBytes> resizer(size);
  std::vector<float> scratch(resizer.scratch_floats());
  const int64_t frame = int64_t{size} * size;
  std::vector<uint8_t> resized(n * frame);
  for (int64_t i = 0; i < n; ++i) {
    resizer.Resize(gray.data() + i * kScreenPixels, resized.data() + i * frame, scratch.data());
  }
  out.write(reinterpret_cast<const char*>(resized.data()), resized.size());

  std::vector<uint32_t> stack(frame);
  atari::FillStack(reinterpret_cast<uint8_t*>(stack.data()), resized.data(), frame, 4);
  for (int64_t i = 1; i < n; ++i) {
    atari::PushFrame4<kBytes>(stack.data(), resized.data() + i * frame, frame);
  }
  out.write(reinterpret_cast<const char*>(stack.data()), frame * 4);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s IN PALETTE SIZE OUT\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary), pal(argv[2], std::ios::binary);
  const std::vector<uint8_t> screens((std::istreambuf_iterator<char>(in)), {});
  const std::vector<uint8_t> even((std::istreambuf_iterator<char>(pal)), {});
  if (screens.empty() || screens.size() % kScreenPixels != 0 || even.size() != 128) {
    std::fprintf(stderr, "IN must hold n >= 1 screens of 210 x 160 bytes, PALETTE 128 bytes\n");
    return 2;
  }
  std::array<uint8_t, 128> even_gray;
  std::copy(even.begin(), even.end(), even_gray.begin());
  const auto palette = neuroevo::atari::GrayPalette::Make(even_gray);
  const int size = std::stoi(argv[3]);
  std::ofstream out(argv[4], std::ios::binary);
  using neuroevo::atari::kShuffleBytes;
  using neuroevo::atari::kVectorBytes;
  RunVariant<kShuffleBytes, kVectorBytes>(screens, palette, size, out);
  RunVariant<0, 16>(screens, palette, size, out);   // scalar lookups (the SSE2 baseline)
  RunVariant<16, 16>(screens, palette, size, out);  // SSSE3 / NEON widths
  RunVariant<32, 32>(screens, palette, size, out);  // AVX2
  RunVariant<64, 64>(screens, palette, size, out);  // AVX-512 VBMI
  RunVariant<32, 64>(screens, palette, size, out);  // AVX-512 without VBMI
  std::printf("variants 6\n");
  return out.good() ? 0 : 1;
}
