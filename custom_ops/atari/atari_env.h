// One Atari 2600 game instance with DQN-style preprocessing, single-threaded.
//
// Layers (as in envpool): `AtariSpec` holds the static configuration (the op's attrs) and the
// shapes derived from it; `AreaResizer` is the 210x160 -> SxS area downscale shared read-only
// by all slots; `AtariEnv` is one emulator plus its frame buffers and knows nothing about
// threads or TensorFlow. The generic pool in common/env_pool.h runs many of them.
//
// Semantics follow gymnasium's AtariPreprocessing + FrameStackObservation on a frameskip-1 ALE
// env, stage by stage (Machado et al. 2018 terminology):
//   * reset: restore the emulator's power-on snapshot, seed ALE's sticky-action RNG, reset the
//     game, then `n` single-frame no-ops (n uniform in [1, noop_max], 0 if noop_max is 0),
//     then optionally FIRE held for one agent step; the frame stack is filled with the first
//     observation.
//   * step: the action is repeated `frame_skip` frames (each subject to sticky actions); the
//     reward is the raw sum; the loop stops early on game over (or life loss when
//     terminal_on_life_loss); grayscale copies of the last two frames are max-pooled, area-
//     resized to SxS exactly like cv2.INTER_AREA, and pushed onto the stack (newest last).
//     Like gymnasium, the step that ends an episode does not refresh the pooled frames.
//
// Licence: this header and its library link ALE (GPL-2.0); see the README.

#ifndef NEUROEVO_CUSTOM_OPS_ATARI_ATARI_ENV_H_
#define NEUROEVO_CUSTOM_OPS_ATARI_ATARI_ENV_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ale/ale_interface.hpp"
#include "common/episode_rng.h"

namespace neuroevo {
namespace atari {

constexpr int kScreenHeight = 210;
constexpr int kScreenWidth = 160;
constexpr int kScreenPixels = kScreenHeight * kScreenWidth;
constexpr int kRamBytes = 128;

// Static configuration of every slot of one env op (its attrs).
struct AtariSpec {
  std::string game;
  std::string rom_path;
  int32_t num_slots = 1;
  int32_t frame_skip = 4;
  int32_t noop_max = 30;
  float sticky_action_prob = 0.0f;
  bool fire_reset = false;
  bool terminal_on_life_loss = false;
  bool full_action_space = false;
  int32_t max_episode_steps = 27000;  // agent steps; 0 = no cutoff
  int32_t screen_size = 84;
  int32_t stack = 4;

  int64_t obs_frame_bytes() const { return int64_t{screen_size} * screen_size; }
  int64_t obs_bytes() const { return obs_frame_bytes() * stack; }
};

// What one agent step produced.
struct StepOutcome {
  int32_t reward = 0;
  bool terminated = false;
  bool truncated = false;
};

// What an episode seed decides: ALE's sticky-action seed (first draw >> 33, so it fits the
// non-negative int ALE's "random_seed" setting takes) and the no-op count (second draw).
struct EpisodeDraws {
  uint32_t ale_seed;
  int32_t noops;
};

inline EpisodeDraws DrawEpisode(int64_t seed, int32_t noop_max) {
  EpisodeRng rng(static_cast<uint64_t>(seed));
  EpisodeDraws d;
  d.ale_seed = static_cast<uint32_t>(rng.Next() >> 33);
  const uint64_t second = rng.Next();
  d.noops = noop_max > 0 ? 1 + static_cast<int32_t>(second % static_cast<uint64_t>(noop_max)) : 0;
  return d;
}

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
// With AVX-512 VBMI the horizontal pass gathers 16 outputs' source bytes with one byte
// permute per tap from a 64-byte window of the row; elsewhere a plain loop does the same sums.
class AreaResizer {
 public:
  explicit AreaResizer(int size)
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
  struct Taps {
    int count = 0;                   // taps per destination index, after padding
    int width = 0;                   // destination indices per tap row (>= dsize, padded)
    std::vector<int32_t> index;      // [count][width] source indices
    std::vector<float> weight;       // [count][width] weights (0 for padding)
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

  // For each block of 16 horizontal outputs: the first source byte of a 64-byte window that
  // holds all their taps, and each tap's offset in it. Empty if some block does not fit.
  void MakeWindows() {
    const int blocks = stride_ / 16;
    window_start_.assign(blocks, 0);
    window_offset_.assign(static_cast<size_t>(xs_.count) * stride_, 0);
    for (int b = 0; b < blocks; ++b) {
      int lo = kScreenWidth, hi = 0;
      for (int t = 0; t < xs_.count; ++t) {
        for (int j = 0; j < 16; ++j) {
          const int i = xs_.index[static_cast<size_t>(t) * stride_ + b * 16 + j];
          lo = std::min(lo, i);
          hi = std::max(hi, i);
        }
      }
      if (hi - lo >= 64) {
        window_start_.clear();
        return;
      }
      window_start_[b] = lo;
      for (int t = 0; t < xs_.count; ++t) {
        for (int j = 0; j < 16; ++j) {
          const size_t at = static_cast<size_t>(t) * stride_ + b * 16 + j;
          window_offset_[at] = static_cast<uint8_t>(xs_.index[at] - lo);
        }
      }
    }
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
  void HorizontalGeneric(const uint8_t* row, float* out) const;
  void HorizontalWindows(const uint8_t* row, float* out) const;
  // dst_row[x] = round(sum_t yw_t[d] * rows[t][x]).
  void VerticalRow(int d, const float* const* rows, uint8_t* dst_row) const;

  int size_;
  int stride_;  // scratch row length: size_ rounded up to 16
  Taps xs_;
  Taps ys_;
  int ring_;
  std::vector<int32_t> window_start_;   // [blocks], empty when the windowed path is unusable
  std::vector<uint8_t> window_offset_;  // [count][stride]
};

// The float arithmetic below must stay unfused: a fused multiply-add rounds once where OpenCV
// rounds twice, which flips about one pixel in ten thousand. Hence fp-contract=off here (GCC
// contracts across statements and through intrinsics otherwise).
#if defined(__clang__)
#define NEUROEVO_NO_FMA
#define NEUROEVO_NO_FMA_BODY _Pragma("STDC FP_CONTRACT OFF")
#elif defined(__GNUC__)
#define NEUROEVO_NO_FMA __attribute__((optimize("fp-contract=off")))
#define NEUROEVO_NO_FMA_BODY
#else
#define NEUROEVO_NO_FMA
#define NEUROEVO_NO_FMA_BODY
#endif

NEUROEVO_NO_FMA inline void AreaResizer::HorizontalGeneric(const uint8_t* row,
                                                           float* out) const {
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

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own _mm512_undefined_* placeholders as "maybe uninitialized" when
// intrinsics are inlined into a function with an optimize attribute: a known false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
NEUROEVO_NO_FMA inline void AreaResizer::HorizontalWindows(const uint8_t* row,
                                                           float* out) const {
  NEUROEVO_NO_FMA_BODY
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
  const int blocks = stride_ / 16;
  for (int b = 0; b < blocks; ++b) {
    const int start = window_start_[b];
    // Masked load: never reads past the end of the row (or the image).
    const int valid = std::min(64, kScreenWidth - start);
    const __mmask64 mask = valid >= 64 ? ~__mmask64{0} : ((__mmask64{1} << valid) - 1);
    const __m512i window = _mm512_maskz_loadu_epi8(mask, row + start);
    __m512 acc = _mm512_setzero_ps();
    for (int t = 0; t < xs_.count; ++t) {
      const size_t at = static_cast<size_t>(t) * stride_ + b * 16;
      const __m512i offsets = _mm512_zextsi128_si512(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(window_offset_.data() + at)));
      const __m128i bytes = _mm512_castsi512_si128(_mm512_permutexvar_epi8(offsets, window));
      const __m512 pixels = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
      const __m512 term = _mm512_mul_ps(pixels, _mm512_loadu_ps(xs_.weight.data() + at));
      // t == 0: 0 + term == term exactly (term >= 0), as OpenCV's first accumulation.
      acc = _mm512_add_ps(acc, term);
    }
    _mm512_storeu_ps(out + b * 16, acc);
  }
#else
  HorizontalGeneric(row, out);
#endif
}

NEUROEVO_NO_FMA inline void AreaResizer::VerticalRow(int d, const float* const* rows,
                                                     uint8_t* dst_row) const {
  NEUROEVO_NO_FMA_BODY
#if defined(__AVX512F__)
  // 16 outputs at a time; cvtps rounds half to even (MXCSR default), cvtusepi32 saturates.
  for (int x = 0; x < stride_; x += 16) {
    __m512 acc = _mm512_mul_ps(_mm512_set1_ps(ys_.weight[d]), _mm512_loadu_ps(rows[0] + x));
    for (int t = 1; t < ys_.count; ++t) {
      const __m512 w = _mm512_set1_ps(ys_.weight[static_cast<size_t>(t) * ys_.width + d]);
      acc = _mm512_add_ps(acc, _mm512_mul_ps(w, _mm512_loadu_ps(rows[t] + x)));
    }
    const __m512i rounded = _mm512_max_epi32(_mm512_cvtps_epi32(acc), _mm512_setzero_si512());
    const int left = size_ - x;
    const __mmask16 keep =
        left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
    _mm_mask_storeu_epi8(dst_row + x, keep, _mm512_cvtusepi32_epi8(rounded));
  }
#else
  float acc[kScreenWidth + 16];  // stride_ <= kScreenWidth + 15
  {
    const float w = ys_.weight[d];
    const float* in = rows[0];
    for (int x = 0; x < stride_; ++x) acc[x] = w * in[x];
  }
  for (int t = 1; t < ys_.count; ++t) {
    const float w = ys_.weight[static_cast<size_t>(t) * ys_.width + d];
    const float* in = rows[t];
    for (int x = 0; x < stride_; ++x) {
      const float term = w * in[x];
      acc[x] = acc[x] + term;
    }
  }
  for (int x = 0; x < size_; ++x) {
    // Round half to even (the FPU default, as cvRound), then saturate.
    const int r = static_cast<int>(std::nearbyint(acc[x]));
    dst_row[x] = static_cast<uint8_t>(std::min(255, std::max(0, r)));
  }
#endif
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

inline void AreaResizer::Resize(const uint8_t* src, uint8_t* dst, float* scratch) const {
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
      float* row = scratch + static_cast<int64_t>(slot) * stride_;
      if (cached[slot] != y) {
        const uint8_t* pixels = src + y * kScreenWidth;
        if (last_y >= 0 && std::memcmp(pixels, src + last_y * kScreenWidth, kScreenWidth) == 0) {
          if (row != last) std::memcpy(row, last, sizeof(float) * stride_);
        } else if (windows) {
          HorizontalWindows(pixels, row);
        } else {
          HorizontalGeneric(pixels, row);
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

// Palette index -> luminance, as ALE's getScreenGrayscale computes it, for all 256 indices.
using GrayTable = std::array<uint8_t, 256>;

// dst[i] = table[src[i]] for kScreenPixels pixels, or max(table[src[i]], pool_with[i]).
inline void ToGray(const GrayTable& table, const uint8_t* src, uint8_t* dst,
                   const uint8_t* pool_with = nullptr) {
  int i = 0;
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
  // ALE pixels are even palette indices (TIA colours ignore bit 0), so src >> 1 is a 7-bit
  // index into the 128 even entries: one two-table byte permute converts 64 pixels.
  alignas(64) uint8_t even[128];
  for (int j = 0; j < 128; ++j) even[j] = table[2 * j];
  const __m512i lo = _mm512_load_si512(even);
  const __m512i hi = _mm512_load_si512(even + 64);
  for (; i + 64 <= kScreenPixels; i += 64) {
    const __m512i px = _mm512_loadu_si512(src + i);
    // 16-bit shift: bit 7 of each byte gets a neighbour's bit, but the permute reads only
    // bits 0-6 (bit 6 picks the table half).
    __m512i gray = _mm512_permutex2var_epi8(lo, _mm512_srli_epi16(px, 1), hi);
    if (pool_with != nullptr) gray = _mm512_max_epu8(gray, _mm512_loadu_si512(pool_with + i));
    _mm512_storeu_si512(dst + i, gray);
  }
#endif
  if (pool_with == nullptr) {
    for (; i < kScreenPixels; ++i) dst[i] = table[src[i]];
  } else {
    for (; i < kScreenPixels; ++i) dst[i] = std::max(table[src[i]], pool_with[i]);
  }
}

// The read-only part every slot of one env op shares.
struct AtariConfig {
  explicit AtariConfig(AtariSpec s) : spec(std::move(s)), resizer(spec.screen_size) {}
  AtariSpec spec;
  AreaResizer resizer;
};

// One emulator with its preprocessing buffers. Not thread-safe; the pool serialises access.
class AtariEnv {
 public:
  // Loads the ROM and snapshots the power-on state. The ROM must have been checked with
  // ale::ALEInterface::isSupportedROM (ALE calls std::exit on an unsupported one).
  static absl::StatusOr<std::unique_ptr<AtariEnv>> Create(
      std::shared_ptr<const AtariConfig> config) {
    const AtariSpec& spec = config->spec;
    std::unique_ptr<AtariEnv> env(new AtariEnv(std::move(config)));
    try {
      env->Load();
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("ALE failed to load ", spec.rom_path, ": ", e.what()));
    }
    if (env->screen_height() != kScreenHeight || env->screen_width() != kScreenWidth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "game ", spec.game, " has a ", env->screen_height(), "x", env->screen_width(),
          " screen; only ", kScreenHeight, "x", kScreenWidth, " is supported"));
    }
    return env;
  }

  AtariEnv(const AtariEnv&) = delete;
  AtariEnv& operator=(const AtariEnv&) = delete;

  const AtariSpec& spec() const { return spec_; }
  int32_t num_actions() const { return static_cast<int32_t>(actions_.size()); }
  const ale::ActionVect& action_set() const { return actions_; }

  // Starts an episode fully determined by `seed` (and the spec), whatever ran here before.
  void Reset(int64_t seed) {
    const EpisodeDraws draws = DrawEpisode(seed, spec_.noop_max);
    Restart(draws.ale_seed);
    for (int32_t i = 0; i < draws.noops; ++i) {
      ale_->act(ale::PLAYER_A_NOOP);
      if (ale_->game_over(false)) Restart(draws.ale_seed);
    }
    if (spec_.fire_reset && has_fire_) {
      for (int32_t i = 0; i < spec_.frame_skip; ++i) ale_->act(ale::PLAYER_A_FIRE);
      if (ale_->game_over(false)) Restart(draws.ale_seed);
    }
    lives_ = ale_->lives();
    steps_ = 0;
    CaptureGray(pooled_.data());
    std::fill(second_.begin(), second_.end(), 0);
    PushObservation(/*fill_stack=*/true);
  }

  // One agent step with action index `action` (checked by the caller).
  StepOutcome Step(int32_t action) {
    const ale::Action a = actions_[action];
    const int32_t skip = spec_.frame_skip;
    StepOutcome out;
    for (int32_t t = 0; t < skip; ++t) {
      out.reward += ale_->act(a);
      bool terminated = ale_->game_over(false);
      if (spec_.terminal_on_life_loss) {
        const int lives = ale_->lives();
        terminated = terminated || lives < lives_;
        lives_ = lives;
      }
      if (terminated) {
        out.terminated = true;
        break;
      }
      if (t == skip - 2) {
        CaptureGray(second_.data());
      } else if (t == skip - 1) {
        CaptureGray(pooled_.data(), skip > 1 ? second_.data() : nullptr);
      }
    }
    ++steps_;
    out.truncated = !out.terminated && spec_.max_episode_steps > 0 &&
                    steps_ >= spec_.max_episode_steps;
    // A step cut short did not refresh pooled_: max-pool what is there, as gymnasium does.
    if (out.terminated && skip > 1) MaxPoolInPlace();
    PushObservation(/*fill_stack=*/false);
    return out;
  }

  // [S, S, stack] uint8, newest frame last.
  void WriteObservation(uint8_t* out) const {
    std::memcpy(out, stack_.data(), spec_.obs_bytes());
  }
  void WriteRam(uint8_t* out) const {
    std::memcpy(out, ale_->getRAM().array(), kRamBytes);
  }
  // [210, 160] grayscale or [210, 160, 3] RGB of the current raw screen, as ALEInterface's
  // getScreenGrayscale / getScreenRGB.
  void WriteScreen(uint8_t* out, bool rgb) const {
    uint8_t* pixels = ale_->getScreen().getArray();
    auto& palette = ale_->theOSystem->colourPalette();
    if (rgb) {
      palette.applyPaletteRGB(out, pixels, kScreenPixels);
    } else {
      ToGray(gray_, pixels, out);
    }
  }
  // Emulator frames since the last reset (no-ops and FIRE included).
  int64_t frames() const { return ale_->getEpisodeFrameNumber(); }
  int32_t lives() const { return ale_->lives(); }

 private:
  explicit AtariEnv(std::shared_ptr<const AtariConfig> config)
      : config_(std::move(config)),
        spec_(config_->spec),
        resizer_(config_->resizer),
        pooled_(kScreenPixels, 0),
        second_(kScreenPixels, 0),
        scratch_(resizer_.scratch_floats()),
        frame_(spec_.obs_frame_bytes(), 0),
        stack_((spec_.obs_bytes() + 3) / 4, 0) {}

  void Load() {
    ale_ = std::make_unique<ale::ALEInterface>();
    ale_->setInt("random_seed", 0);  // reseeded at every reset
    ale_->setFloat("repeat_action_probability", spec_.sticky_action_prob);
    ale_->setInt("frame_skip", 1);   // frames are repeated here, to see each one
    ale_->setInt("max_num_frames_per_episode", 0);
    ale_->loadROM(spec_.rom_path);
    // The state right after loadROM: what a freshly made ALEInterface starts every episode
    // from. Restoring it (~20 us) replaces reloading the ROM (~70 ms).
    start_ = ale_->cloneState(/*include_rng=*/false);
    actions_ = spec_.full_action_space ? ale_->getLegalActionSet() : ale_->getMinimalActionSet();
    has_fire_ = std::find(actions_.begin(), actions_.end(), ale::PLAYER_A_FIRE) != actions_.end();
    std::array<uint8_t, 128> even_indices;
    std::array<uint8_t, 128> even_gray;
    for (int i = 0; i < 128; ++i) even_indices[i] = static_cast<uint8_t>(2 * i);
    ale_->theOSystem->colourPalette().applyPaletteGrayscale(even_gray.data(),
                                                            even_indices.data(), 128);
    for (int i = 0; i < 256; ++i) gray_[i] = even_gray[i / 2];
  }

  int screen_height() const { return static_cast<int>(ale_->getScreen().height()); }
  int screen_width() const { return static_cast<int>(ale_->getScreen().width()); }

  // Power-on state, sticky-action RNG seeded, game reset: as ALEInterface after
  // setInt("random_seed", ale_seed), loadROM() and reset_game().
  void Restart(uint32_t ale_seed) {
    ale_->restoreState(start_);
    ale_->environment->getEnvironmentRNG().seed(ale_seed);
    ale_->reset_game();
  }

  // dst = luminance of the current screen, max-pooled with `pool_with` if given.
  void CaptureGray(uint8_t* dst, const uint8_t* pool_with = nullptr) const {
    ToGray(gray_, ale_->getScreen().getArray(), dst, pool_with);
  }

  void MaxPoolInPlace() {
    uint8_t* a = pooled_.data();
    const uint8_t* b = second_.data();
    for (int i = 0; i < kScreenPixels; ++i) a[i] = std::max(a[i], b[i]);
  }

  // Resizes the pooled frame and pushes it onto the stack (or fills the stack with it).
  void PushObservation(bool fill_stack) {
    resizer_.Resize(pooled_.data(), frame_.data(), scratch_.data());
    const int64_t pixels = spec_.obs_frame_bytes();
    const int32_t k = spec_.stack;
    uint8_t* s = reinterpret_cast<uint8_t*>(stack_.data());
    const uint8_t* frame = frame_.data();
    if (fill_stack) {
      for (int64_t p = 0; p < pixels; ++p) std::memset(s + p * k, frame[p], k);
    } else if (k == 4) {
      // Each pixel's 4 frames are one little-endian word: shift out the oldest byte and put
      // the new frame in the top byte (vectorises; frame_ and stack_ cannot alias).
      uint32_t* words = stack_.data();
      for (int64_t p = 0; p < pixels; ++p) {
        words[p] = (words[p] >> 8) | (static_cast<uint32_t>(frame[p]) << 24);
      }
    } else {
      for (int64_t p = 0; p < pixels; ++p) {
        uint8_t* px = s + p * k;
        std::memmove(px, px + 1, k - 1);
        px[k - 1] = frame_[p];
      }
    }
  }

  const std::shared_ptr<const AtariConfig> config_;
  const AtariSpec& spec_;
  const AreaResizer& resizer_;
  std::unique_ptr<ale::ALEInterface> ale_;
  ale::ALEState start_;
  ale::ActionVect actions_;
  bool has_fire_ = false;
  GrayTable gray_{};
  int lives_ = 0;
  int32_t steps_ = 0;
  std::vector<uint8_t> pooled_;   // newest frame, max-pooled in place with second_
  std::vector<uint8_t> second_;   // the frame before it
  std::vector<float> scratch_;    // resize scratch
  std::vector<uint8_t> frame_;    // the latest SxS observation frame
  std::vector<uint32_t> stack_;   // [S, S, stack] bytes, newest last (words for fast shifts)
};

}  // namespace atari
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_ATARI_ATARI_ENV_H_
