// Times the dense-layer kernel of a policy step (custom_ops/core/kernels.h, DotRows) for
// `python -m benchmarks dense`, which compiles this file once per -march and runs it.
//
// Usage: dense_kernels NETS SIZE0 SIZE1 ... SIZEn
//   NETS distinct networks of layers SIZE0 -> SIZE1 -> ... -> SIZEn, weights [out, in] per
//   network, each network's layers run back to back as a policy step does. Prints the best
//   time of one forward of all networks, in microseconds, over 30 repetitions of 20.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/kernels.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s NETS SIZE0 SIZE1 [SIZE2 ...]\n", argv[0]);
    return 2;
  }
  const int64_t nets = std::atol(argv[1]);
  std::vector<int64_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atol(argv[i]));
  const int64_t widest = *std::max_element(sizes.begin(), sizes.end());
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> weights(sizes.size() - 1);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    weights[l].resize(nets * sizes[l] * sizes[l + 1]);
    for (float& v : weights[l]) v = normal(gen) / 8;
  }
  std::vector<float> a(widest), b(widest);
  for (float& v : a) v = normal(gen);
  double best = 1e30;
  for (int rep = 0; rep < 30; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < 20; ++it) {
      for (int64_t n = 0; n < nets; ++n) {
        for (size_t l = 0; l + 1 < sizes.size(); ++l) {
          const int64_t in = sizes[l], out = sizes[l + 1];
          neuroevo::kernels::DotRows(weights[l].data() + n * in * out, in, a.data(), out,
                                     b.data());
          std::swap(a, b);
        }
      }
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / 20);
  }
  std::printf("%.3f\n", best * 1e6);
  return 0;
}
