// Runs the dense-layer kernels (custom_ops/core/kernels.h) on inputs from a file, for
// tests/test_dense_kernels.py to compare the bits across builds (-march) and with float64.
//
// Usage: dense_kernels_driver IN OUT
//   IN: int64 count, then per case: int64 in, int64 rows, then in floats of x and rows * in
//   floats of w (row-major [rows, in]). OUT gets per case the rows floats DotRows computes,
//   then the rows floats AxpyCols computes from the same numbers read as [in, rows].

#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/kernels.h"

namespace {

bool Read(std::FILE* f, void* p, size_t bytes) { return std::fread(p, 1, bytes, f) == bytes; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN OUT\n", argv[0]);
    return 2;
  }
  std::FILE* in_file = std::fopen(argv[1], "rb");
  std::FILE* out_file = std::fopen(argv[2], "wb");
  if (in_file == nullptr || out_file == nullptr) return 2;
  int64_t count = 0;
  if (!Read(in_file, &count, sizeof(count))) return 3;
  for (int64_t c = 0; c < count; ++c) {
    int64_t in = 0, rows = 0;
    if (!Read(in_file, &in, sizeof(in)) || !Read(in_file, &rows, sizeof(rows))) return 3;
    std::vector<float> x(in), w(rows * in), y(rows);
    if (!Read(in_file, x.data(), in * sizeof(float)) ||
        !Read(in_file, w.data(), w.size() * sizeof(float))) {
      return 3;
    }
    neuroevo::kernels::DotRows(w.data(), in, x.data(), rows, y.data());
    std::fwrite(y.data(), sizeof(float), rows, out_file);
    neuroevo::kernels::AxpyCols(w.data(), in, rows, x.data(), rows, y.data());
    std::fwrite(y.data(), sizeof(float), rows, out_file);
  }
  return std::fclose(out_file) == 0 ? 0 : 4;
}
