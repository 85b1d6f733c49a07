// Per-episode random numbers for the env engines, seeded by the episode seed alone so that an
// episode never depends on the slot or thread that runs it.
//
// SplitMix64 (Steele et al. 2014) with 53-bit uniforms and Box-Muller normals: tiny and fully
// specified, so every platform draws the same numbers and Python tests can reproduce them
// (e.g. the Atari seed -> (ALE seed, no-op count) mapping).

#ifndef NEUROEVO_CUSTOM_OPS_COMMON_EPISODE_RNG_H_
#define NEUROEVO_CUSTOM_OPS_COMMON_EPISODE_RNG_H_

#include <cmath>
#include <cstdint>

namespace neuroevo {

class EpisodeRng {
 public:
  explicit EpisodeRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Uniform(double low, double high) { return low + (high - low) * Uniform(); }
  double Normal() {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - Uniform()));  // 1 - U is in (0, 1]
    return radius * std::cos(2.0 * M_PI * Uniform());
  }

 private:
  uint64_t state_;
};

}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_EPISODE_RNG_H_
