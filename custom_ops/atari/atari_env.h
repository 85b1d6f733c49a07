// One Atari 2600 game instance with DQN-style preprocessing, single-threaded.
//
// Layers (as in envpool): `AtariSpec` holds the static configuration (the op's attrs) and the
// shapes derived from it; `AtariConfig` adds the 210x160 -> SxS area resizer shared read-only
// by all slots; `AtariEnv` is one emulator plus its frame buffers and knows nothing about
// threads or TensorFlow. The generic pool in common/env_pool.h runs many of them. The pixel
// kernels (grayscale, max-pool, resize, frame stack) are in atari_kernels.h.
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
//   * preprocessing "uber": the pipeline of Uber's deep-neuroevolution GPU code instead
//     (gym_tensorflow/atari/tf_atari.cpp, tf_atari.py, wrappers/stack_frames.py): float
//     observations; each frame's palette indices are kept, the last two emulated frames go
//     through the float grayscale palette, are max-pooled and bilinearly resized with aligned
//     corners; the stack starts from zeros with the first frame newest. Reset: n no-ops (game
//     over resets the game), then, when action 1 is FIRE, one agent step of action 1 and one
//     of action 2, each followed by a game reset on game over. Every step refreshes the
//     pooled frames, also the one that ends an episode.
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
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ale/ale_interface.hpp"
#include "atari/atari_kernels.h"
#include "common/episode_rng.h"

namespace neuroevo {
namespace atari {

constexpr int kRamBytes = 128;

// Static configuration of every slot of one env op (its attrs).
struct AtariSpec {
  std::string game;
  std::string rom_path;
  int32_t num_slots{};
  int32_t frame_skip{};
  int32_t noop_max{};
  float sticky_action_prob{};
  bool fire_reset{};
  bool terminal_on_life_loss{};
  bool full_action_space{};
  int32_t max_episode_steps{};  // agent steps; 0 = no cutoff
  int32_t screen_size{};
  int32_t stack{};
  bool uber{};  // preprocessing "uber": float observations (see the top of this file)

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

// ALE logs a banner and the seed on every ROM load; keep only errors. The logger is a static
// of the ALE copy linked into each op library (ale-py's own copy is unaffected). Internal
// linkage on purpose: each library (atari, atari_bench) must set its own copy's logger, and the
// once_flag of an inline function would be one object shared by every library in the process.
[[maybe_unused]] static void QuietAle() {
  static std::once_flag once;
  std::call_once(once, [] { ale::Logger::setMode(ale::Logger::Error); });
}

// ALE calls std::exit() on a ROM it cannot wrap, so check first.
inline absl::Status CheckRom(const std::string& game, const std::string& rom_path) {
  try {
    if (!ale::ALEInterface::isSupportedROM(rom_path).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rom_path ", rom_path, " (game ", game, ") is not a ROM that ALE ",
          ALE_VERSION, " supports (unknown MD5)"));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read rom_path '", rom_path, "' (game ", game, "): ", e.what()));
  }
  return absl::OkStatus();
}

// The read-only part every slot of one env op shares.
struct AtariConfig {
  explicit AtariConfig(AtariSpec s)
      : spec(std::move(s)), resizer(spec.screen_size), bilinear(spec.screen_size) {}
  AtariSpec spec;
  AreaResizer resizer;
  AlignedBilinearResizer bilinear;
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
    if (spec_.uber) {
      ResetUber(seed);
      return;
    }
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
    if (spec_.uber) {
      const StepOutcome out = RepeatAction(action, [this](int32_t) { CaptureScreenUber(); });
      if (out.terminated) CaptureScreenUber();  // Uber's buffers hold the last frame too
      PushObservationUber();
      return out;
    }
    const int32_t skip = spec_.frame_skip;
    const StepOutcome out = RepeatAction(action, [&](int32_t t) {
      if (t == skip - 2) {
        CaptureGray(second_.data());
      } else if (t == skip - 1) {
        CaptureGray(pooled_.data(), skip > 1 ? second_.data() : nullptr);
      }
    });
    // A step cut short did not refresh pooled_: max-pool what is there, as gymnasium does.
    if (out.terminated && skip > 1) MaxPoolInPlace(pooled_.data(), second_.data(), kScreenPixels);
    PushObservation(/*fill_stack=*/false);
    return out;
  }

  // [S, S, stack] uint8, newest frame last (preprocessing "gymnasium").
  void WriteObservation(uint8_t* out) const {
    std::memcpy(out, stack_.data(), spec_.obs_bytes());
  }
  // [S, S, stack] float32, newest frame last (preprocessing "uber").
  void WriteObservationFloat(float* out) const {
    std::memcpy(out, stack_float_.data(), sizeof(float) * stack_float_.size());
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
      ToGray(palette_, pixels, out);
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
        bilinear_(config_->bilinear),
        pooled_(kScreenPixels, 0),
        second_(kScreenPixels, 0),
        scratch_(spec_.uber ? bilinear_.scratch_floats() : resizer_.scratch_floats()),
        frame_(spec_.uber ? 0 : spec_.obs_frame_bytes(), 0),
        stack_(spec_.uber ? 0 : (spec_.obs_bytes() + 3) / 4, 0),
        pooled_float_(spec_.uber ? kScreenPixels : 0),
        frame_float_(spec_.uber ? spec_.obs_frame_bytes() : 0),
        stack_float_(spec_.uber ? spec_.obs_bytes() : 0) {}

  void Load() {
    ale_ = std::make_unique<ale::ALEInterface>();
    ale_->setInt("random_seed", 0);  // reseeded at every reset
    ale_->setFloat("repeat_action_probability", spec_.sticky_action_prob);
    ale_->setInt("frame_skip", 1);   // frames are repeated here, to see each one
    ale_->setInt("max_num_frames_per_episode", 0);
    ale_->loadROM(spec_.rom_path);
    // The state right after loadROM: what a freshly made ALEInterface starts every episode
    // from. Restoring it is far cheaper than reloading the ROM (docs/PERFORMANCE.md).
    start_ = ale_->cloneState(/*include_rng=*/false);
    actions_ = spec_.full_action_space ? ale_->getLegalActionSet() : ale_->getMinimalActionSet();
    has_fire_ = std::find(actions_.begin(), actions_.end(), ale::PLAYER_A_FIRE) != actions_.end();
    std::array<uint8_t, 128> even_indices;
    std::array<uint8_t, 128> even_gray;
    for (int i = 0; i < 128; ++i) even_indices[i] = static_cast<uint8_t>(2 * i);
    ale_->theOSystem->colourPalette().applyPaletteGrayscale(even_gray.data(),
                                                            even_indices.data(), 128);
    palette_ = GrayPalette::Make(even_gray);
    MakeUberPalette();
  }

  // Uber's grayscale_palette: the NTSC RGB palette scaled by 1/255 in float32, dotted with
  // (0.299, 0.587, 0.114). Odd indices never occur on screen; they repeat the even colour.
  NEUROEVO_NO_FMA void MakeUberPalette() {
    NEUROEVO_NO_FMA_BODY
    std::array<uint8_t, 256> indices;
    std::array<uint8_t, 3 * 256> rgb;
    for (int i = 0; i < 256; ++i) indices[i] = static_cast<uint8_t>(i & ~1);
    ale_->theOSystem->colourPalette().applyPaletteRGB(rgb.data(), indices.data(), 256);
    const float inv = 1.0f / 255.0f;
    for (int i = 0; i < 256; ++i) {
      const float r = static_cast<float>(rgb[3 * i]) * inv;
      const float g = static_cast<float>(rgb[3 * i + 1]) * inv;
      const float b = static_cast<float>(rgb[3 * i + 2]) * inv;
      gray_float_[i] = r * 0.299f + g * 0.587f + b * 0.114f;
    }
  }

  // ---- preprocessing "uber"

  // Keeps the palette indices of the frame just emulated and of the one before, which is
  // what Uber's op reads (previousFrameBuffer, currentFrameBuffer).
  void CaptureScreenUber() {
    std::swap(second_, pooled_);
    std::memcpy(pooled_.data(), ale_->getScreen().getArray(), kScreenPixels);
  }

  void ActUber(ale::Action a) {
    ale_->act(a);
    CaptureScreenUber();
  }

  // Repeats action index `action` for frame_skip frames, stopping at the end of the episode;
  // `on_frame(t)` runs after each frame t that did not end it.
  template <typename OnFrame>
  StepOutcome RepeatAction(int32_t action, OnFrame on_frame) {
    const ale::Action a = actions_[action];
    StepOutcome out;
    for (int32_t t = 0; t < spec_.frame_skip; ++t) {
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
      on_frame(t);
    }
    ++steps_;
    out.truncated = !out.terminated && spec_.max_episode_steps > 0 &&
                    steps_ >= spec_.max_episode_steps;
    return out;
  }

  // Uber's AtariEnvironment::reset with `noops` drawn from the seed as in Reset.
  void ResetUber(int64_t seed) {
    const EpisodeDraws draws = DrawEpisode(seed, spec_.noop_max);
    Restart(draws.ale_seed);
    // Before any frame is emulated both buffers hold the reset screen.
    std::memcpy(pooled_.data(), ale_->getScreen().getArray(), kScreenPixels);
    std::memcpy(second_.data(), pooled_.data(), kScreenPixels);
    for (int32_t i = 0; i < draws.noops; ++i) {
      ActUber(ale::PLAYER_A_NOOP);
      if (ale_->game_over(false)) ale_->reset_game();
    }
    if (actions_.size() >= 3 && actions_[1] == ale::PLAYER_A_FIRE) {
      for (int32_t action = 1; action <= 2; ++action) {
        for (int32_t t = 0; t < spec_.frame_skip; ++t) {
          ActUber(actions_[action]);
          if (ale_->game_over(false)) break;
        }
        if (ale_->game_over(false)) ale_->reset_game();
      }
    }
    lives_ = ale_->lives();
    steps_ = 0;
    std::fill(stack_float_.begin(), stack_float_.end(), 0.0f);
    PushObservationUber();
  }

  void PushObservationUber() {
    MaxGrayFloat(gray_float_, second_.data(), pooled_.data(), pooled_float_.data(),
                 kScreenPixels);
    bilinear_.Resize(pooled_float_.data(), frame_float_.data(), scratch_.data());
    PushFrame(stack_float_.data(), frame_float_.data(), spec_.obs_frame_bytes(), spec_.stack);
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
    ToGray(palette_, ale_->getScreen().getArray(), dst, pool_with);
  }


  // Resizes the pooled frame and pushes it onto the stack (or fills the stack with it).
  void PushObservation(bool fill_stack) {
    resizer_.Resize(pooled_.data(), frame_.data(), scratch_.data());
    const int64_t pixels = spec_.obs_frame_bytes();
    uint8_t* stack = reinterpret_cast<uint8_t*>(stack_.data());
    if (fill_stack) {
      FillStack(stack, frame_.data(), pixels, spec_.stack);
    } else if (spec_.stack == 4) {
      PushFrame4(stack_.data(), frame_.data(), pixels);
    } else {
      PushFrame(stack, frame_.data(), pixels, spec_.stack);
    }
  }

  const std::shared_ptr<const AtariConfig> config_;
  const AtariSpec& spec_;
  const AreaResizer& resizer_;
  const AlignedBilinearResizer& bilinear_;
  std::unique_ptr<ale::ALEInterface> ale_;
  ale::ALEState start_;
  ale::ActionVect actions_;
  bool has_fire_ = false;
  GrayPalette palette_;
  std::array<float, 256> gray_float_{};  // Uber's float grayscale palette
  int lives_ = 0;
  int32_t steps_ = 0;
  std::vector<uint8_t> pooled_;   // newest frame, max-pooled in place with second_ (uber:
                                  // palette indices of the last emulated frame)
  std::vector<uint8_t> second_;   // the frame before it
  std::vector<float> scratch_;    // resize scratch
  std::vector<uint8_t> frame_;    // the latest SxS observation frame
  std::vector<uint32_t> stack_;   // [S, S, stack] bytes, newest last (words for fast shifts)
  std::vector<float> pooled_float_;  // uber: max-pooled float grayscale screen
  std::vector<float> frame_float_;   // uber: the latest SxS float frame
  std::vector<float> stack_float_;   // uber: [S, S, stack] floats, newest last
};

}  // namespace atari
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_ATARI_ATARI_ENV_H_
