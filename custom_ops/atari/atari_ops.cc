// TensorFlow ops that run batches of Atari 2600 emulators (ALE) with DQN preprocessing.
//
// Python wrapper and user documentation: neuroevo/envs/atari.py. Semantics of one slot:
// atari_env.h. Slot bookkeeping, index validation and the worker-pool loop: common/env_pool.h.
//
// NeuroevoAtariMake creates `num_slots` emulators (in parallel) and returns a ref-counting
// resource handle: the emulators are freed when the last tensor holding the handle is gone.
// Every other op takes that handle plus an int32 index vector and touches only those slots.
// Static settings are attrs, per-call data are inputs; every output has a static shape
// (k, the number of indices, is whatever the index vector has; the action set is [?]).
//
// This library links ALE (GPL-2.0) and is built apart from neuroevo's other ops.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "atari/atari_env.h"
#include "common/env_pool.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace neuroevo {
namespace atari {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

using AtariPool = EnvPool<AtariEnv>;
using AtariCall = SlotCall<AtariEnv>;

// ALE logs a banner and the seed on every ROM load; keep only errors. The logger is a static
// of the ALE copy linked into this library only (ale-py's own copy is unaffected).
void QuietAle() {
  static std::once_flag once;
  std::call_once(once, [] { ale::Logger::setMode(ale::Logger::Error); });
}

// ALE calls std::exit() on a ROM it cannot wrap, so check first.
absl::Status CheckRom(const std::string& game, const std::string& rom_path) {
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

// Shape fn helper: input 1 is the index vector [k]; returns k.
absl::Status IndexCount(InferenceContext* c, DimensionHandle* k) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
  ShapeHandle indices;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &indices));
  *k = c->Dim(indices, 0);
  return absl::OkStatus();
}

// Shape fn of ops that return one [k, dims...] tensor.
template <int... kDims>
absl::Status PerSlotShape(InferenceContext* c) {
  DimensionHandle k;
  TF_RETURN_IF_ERROR(IndexCount(c, &k));
  c->set_output(0, c->MakeShape({k, c->MakeDim(kDims)...}));
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------------ make

REGISTER_OP("NeuroevoAtariMake")
    .Output("handle: resource")
    .Attr("game: string")
    .Attr("rom_path: string")
    .Attr("num_slots: int >= 1")
    .Attr("frame_skip: int >= 1 = 4")
    .Attr("noop_max: int >= 0 = 30")
    .Attr("sticky_action_prob: float = 0.0")
    .Attr("fire_reset: bool = false")
    .Attr("terminal_on_life_loss: bool = false")
    .Attr("full_action_space: bool = false")
    .Attr("max_episode_steps: int >= 0 = 27000")
    .Attr("screen_size: int >= 1 = 84")
    .Attr("stack: int >= 1 = 4")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Creates num_slots Atari emulators of one game (in parallel) and returns their handle.

The handle holds the only reference: the emulators are freed with the last tensor holding it.
max_episode_steps counts agent steps (frames = steps * frame_skip); 0 disables the cutoff.
)doc");

class AtariMakeOp : public OpKernel {
 public:
  explicit AtariMakeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    AtariSpec& s = spec_;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("game", &s.game));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rom_path", &s.rom_path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &s.num_slots));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("frame_skip", &s.frame_skip));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("noop_max", &s.noop_max));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sticky_action_prob", &s.sticky_action_prob));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fire_reset", &s.fire_reset));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("terminal_on_life_loss", &s.terminal_on_life_loss));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("full_action_space", &s.full_action_space));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_episode_steps", &s.max_episode_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("screen_size", &s.screen_size));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stack", &s.stack));
    OP_REQUIRES(ctx, s.sticky_action_prob >= 0.0f && s.sticky_action_prob <= 1.0f,
                absl::InvalidArgumentError(absl::StrCat(
                    "sticky_action_prob must be in [0, 1], got ", s.sticky_action_prob)));
    OP_REQUIRES(ctx, s.screen_size <= kScreenWidth,
                absl::InvalidArgumentError(absl::StrCat("screen_size must be in [1, ",
                                                        kScreenWidth,
                                                        "] (area resize only shrinks), got ",
                                                        s.screen_size)));
    OP_REQUIRES(ctx, s.frame_skip <= 64,
                absl::InvalidArgumentError(
                    absl::StrCat("frame_skip must be in [1, 64], got ", s.frame_skip)));
    OP_REQUIRES(ctx, s.stack <= 64,
                absl::InvalidArgumentError(
                    absl::StrCat("stack must be in [1, 64], got ", s.stack)));
  }

  void Compute(OpKernelContext* ctx) override {
    QuietAle();
    OP_REQUIRES_OK(ctx, CheckRom(spec_.game, spec_.rom_path));
    auto config = std::make_shared<const AtariConfig>(spec_);
    const int32_t n = spec_.num_slots;
    std::vector<std::unique_ptr<AtariEnv>> envs(n);
    std::vector<absl::Status> errors(n);
    // Each emulator takes tens of milliseconds to load: build them on the worker pool.
    ParallelForSlots(ctx, n, [&](int64_t i) {
      auto env = AtariEnv::Create(config);
      if (env.ok()) {
        envs[i] = std::move(*env);
      } else {
        errors[i] = env.status();
      }
    });
    for (const absl::Status& e : errors) OP_REQUIRES_OK(ctx, e);

    auto* pool = new AtariPool(
        absl::StrCat("NeuroevoAtari(", spec_.game, ", ", n, " slots)"), std::move(envs));
    Tensor* handle = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &handle));
    handle->scalar<tensorflow::ResourceHandle>()() =
        tensorflow::ResourceHandle::MakeRefCountingHandle<AtariPool>(pool, ctx->device()->name());
  }

 private:
  AtariSpec spec_;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariMake").Device(DEVICE_CPU), AtariMakeOp);

// ------------------------------------------------------------------------------- action set

REGISTER_OP("NeuroevoAtariActionSet")
    .Input("handle: resource")
    .Output("actions: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    })
    .Doc("ALE action ids (ale_py.Action values) of the env's action indices, in order.");

class AtariActionSetOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<AtariPool> pool;
    OP_REQUIRES_OK(ctx, LookupPool<AtariEnv>(ctx, &pool));
    // The action set is fixed at load time and read-only: no claim needed.
    const ale::ActionVect& set = pool->env(0).action_set();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(set.size())}),
                                             &out));
    auto flat = out->flat<int32_t>();
    for (size_t i = 0; i < set.size(); ++i) flat(i) = static_cast<int32_t>(set[i]);
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariActionSet").Device(DEVICE_CPU), AtariActionSetOp);

// ------------------------------------------------------------------------------------ reset

REGISTER_OP("NeuroevoAtariReset")
    .Input("handle: resource")
    .Input("indices: int32")
    .Input("seeds: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle k;
      TF_RETURN_IF_ERROR(IndexCount(c, &k));
      ShapeHandle seeds;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &seeds));
      DimensionHandle merged;
      return c->Merge(k, c->Dim(seeds, 0), &merged);
    })
    .Doc(R"doc(
Starts a new episode in each listed slot; seeds[i] alone decides slot indices[i]'s episode
(no-op count, sticky-action draws), whichever slot or thread runs it.
)doc");

class AtariResetOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    AtariCall call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const Tensor& seeds = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckBatchInput(seeds, "seeds", tensorflow::DT_INT64, call.size()));
    const auto seed = seeds.flat<int64_t>();
    AtariPool* pool = call.pool.get();
    ParallelForSlots(ctx, call.size(), [&](int64_t i) {
      const int32_t slot = call.slots[i];
      pool->env(slot).Reset(seed(i));
      pool->set_status(slot, SlotStatus::kRunning);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariReset").Device(DEVICE_CPU), AtariResetOp);

// ------------------------------------------------------------------------------------- step

REGISTER_OP("NeuroevoAtariStep")
    .Input("handle: resource")
    .Input("indices: int32")
    .Input("actions: int32")
    .Output("reward: float32")
    .Output("terminated: bool")
    .Output("truncated: bool")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle k;
      TF_RETURN_IF_ERROR(IndexCount(c, &k));
      ShapeHandle actions;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &actions));
      TF_RETURN_IF_ERROR(c->Merge(k, c->Dim(actions, 0), &k));
      for (int i = 0; i < 3; ++i) c->set_output(i, c->Vector(k));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Advances each listed slot by one agent step (frame_skip emulator frames). reward is the raw
sum over those frames. A slot whose episode ended must be reset before it is stepped again.
)doc");

class AtariStepOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    AtariCall call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const int64_t k = call.size();
    const Tensor& actions = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckBatchInput(actions, "actions", tensorflow::DT_INT32, k));
    AtariPool* pool = call.pool.get();
    const auto action = actions.flat<int32_t>();
    for (int64_t i = 0; i < k; ++i) {
      const AtariEnv& env = pool->env(call.slots[i]);
      OP_REQUIRES(ctx, action(i) >= 0 && action(i) < env.num_actions(),
                  absl::InvalidArgumentError(absl::StrCat(
                      "actions[", i, "] = ", action(i), " is out of range: ", env.spec().game,
                      " has ", env.num_actions(), " actions [0, ", env.num_actions(), ")")));
    }
    OP_REQUIRES_OK(ctx, pool->CheckSteppable(call.slots));

    Tensor *reward = nullptr, *terminated = nullptr, *truncated = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k}), &reward));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({k}), &terminated));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({k}), &truncated));
    auto r = reward->flat<float>();
    auto term = terminated->flat<bool>();
    auto trunc = truncated->flat<bool>();
    ParallelForSlots(ctx, k, [&](int64_t i) {
      const int32_t slot = call.slots[i];
      const StepOutcome out = pool->env(slot).Step(action(i));
      r(i) = static_cast<float>(out.reward);
      term(i) = out.terminated;
      trunc(i) = out.truncated;
      if (out.terminated || out.truncated) pool->set_status(slot, SlotStatus::kDone);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariStep").Device(DEVICE_CPU), AtariStepOp);

// ------------------------------------------------------------------------------ observation

REGISTER_OP("NeuroevoAtariObservation")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("observation: uint8")
    .Attr("screen_size: int >= 1 = 84")
    .Attr("stack: int >= 1 = 4")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle k;
      TF_RETURN_IF_ERROR(IndexCount(c, &k));
      int64_t size = 0, stack = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("screen_size", &size));
      TF_RETURN_IF_ERROR(c->GetAttr("stack", &stack));
      c->set_output(0, c->MakeShape({k, size, size, stack}));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Current preprocessed observation of each listed slot, [k, screen_size, screen_size, stack],
newest frame last. The attrs restate the make op's so the shape is static; they must match.
)doc");

class AtariObservationOp : public OpKernel {
 public:
  explicit AtariObservationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("screen_size", &size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stack", &stack_));
  }

  void Compute(OpKernelContext* ctx) override {
    AtariCall call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    AtariPool* pool = call.pool.get();
    const AtariSpec& spec = pool->env(0).spec();
    OP_REQUIRES(ctx, spec.screen_size == size_ && spec.stack == stack_,
                absl::InvalidArgumentError(absl::StrCat(
                    "observation attrs screen_size=", size_, ", stack=", stack_,
                    " do not match the env's screen_size=", spec.screen_size,
                    ", stack=", spec.stack)));
    const int64_t k = call.size();
    Tensor* obs = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k, size_, size_, stack_}), &obs));
    uint8_t* base = obs->flat<uint8_t>().data();
    const int64_t bytes = spec.obs_bytes();
    ParallelForSlots(
        ctx, k, [&](int64_t i) { pool->env(call.slots[i]).WriteObservation(base + i * bytes); },
        kCheapSlotNanos);
  }

 private:
  int32_t size_ = 0;
  int32_t stack_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariObservation").Device(DEVICE_CPU), AtariObservationOp);

// ----------------------------------------------------------------------------------- screen

REGISTER_OP("NeuroevoAtariScreen")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("screen: uint8")
    .Attr("rgb: bool = false")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle k;
      TF_RETURN_IF_ERROR(IndexCount(c, &k));
      bool rgb = false;
      TF_RETURN_IF_ERROR(c->GetAttr("rgb", &rgb));
      if (rgb) {
        c->set_output(0, c->MakeShape({k, kScreenHeight, kScreenWidth, 3}));
      } else {
        c->set_output(0, c->MakeShape({k, kScreenHeight, kScreenWidth}));
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
Raw current screen of each listed slot (debug/parity): [k, 210, 160] grayscale or
[k, 210, 160, 3] RGB, as ALEInterface.getScreenGrayscale / getScreenRGB return it.
)doc");

class AtariScreenOp : public OpKernel {
 public:
  explicit AtariScreenOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rgb", &rgb_));
  }

  void Compute(OpKernelContext* ctx) override {
    AtariCall call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const int64_t k = call.size();
    TensorShape shape({k, kScreenHeight, kScreenWidth});
    if (rgb_) shape.AddDim(3);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    uint8_t* base = out->flat<uint8_t>().data();
    const int64_t bytes = int64_t{kScreenPixels} * (rgb_ ? 3 : 1);
    AtariPool* pool = call.pool.get();
    ParallelForSlots(
        ctx, k, [&](int64_t i) { pool->env(call.slots[i]).WriteScreen(base + i * bytes, rgb_); },
        kCheapSlotNanos * (rgb_ ? 8 : 2));
  }

 private:
  bool rgb_ = false;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariScreen").Device(DEVICE_CPU), AtariScreenOp);

// ------------------------------------------------------------------- ram / frames / lives

REGISTER_OP("NeuroevoAtariRam")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("ram: uint8")
    .SetIsStateful()
    .SetShapeFn(PerSlotShape<kRamBytes>)
    .Doc("The 128 bytes of console RAM of each listed slot, [k, 128].");

REGISTER_OP("NeuroevoAtariFrames")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("frames: int64")
    .SetIsStateful()
    .SetShapeFn(PerSlotShape<>)
    .Doc("Emulator frames of each listed slot's current episode, no-op and FIRE frames included.");

REGISTER_OP("NeuroevoAtariLives")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("lives: int32")
    .SetIsStateful()
    .SetShapeFn(PerSlotShape<>)
    .Doc("Lives left in each listed slot's game (as ALE reports them).");

// Reads one small per-slot value; `Read(env, out_row)` fills one row of the output.
template <typename T, int64_t kWidth, typename Read>
class AtariReadOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    AtariCall call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const int64_t k = call.size();
    TensorShape shape({k});
    if (kWidth > 0) shape.AddDim(kWidth);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    T* base = out->flat<T>().data();
    const int64_t row = kWidth > 0 ? kWidth : 1;
    for (int64_t i = 0; i < k; ++i) Read()(call.pool->env(call.slots[i]), base + i * row);
  }
};

struct ReadRam {
  void operator()(const AtariEnv& env, uint8_t* out) const { env.WriteRam(out); }
};
struct ReadFrames {
  void operator()(const AtariEnv& env, int64_t* out) const { *out = env.frames(); }
};
struct ReadLives {
  void operator()(const AtariEnv& env, int32_t* out) const { *out = env.lives(); }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariRam").Device(DEVICE_CPU),
                        AtariReadOp<uint8_t, kRamBytes, ReadRam>);
REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariFrames").Device(DEVICE_CPU),
                        AtariReadOp<int64_t, 0, ReadFrames>);
REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariLives").Device(DEVICE_CPU),
                        AtariReadOp<int32_t, 0, ReadLives>);

// ----------------------------------------------------------------------------------- resize

REGISTER_OP("NeuroevoAtariResize")
    .Input("images: uint8")
    .Output("resized: uint8")
    .Attr("size: int >= 1 = 84")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle images;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &images));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->WithValue(c->Dim(images, 1), kScreenHeight, &unused));
      TF_RETURN_IF_ERROR(c->WithValue(c->Dim(images, 2), kScreenWidth, &unused));
      int64_t size = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("size", &size));
      c->set_output(0, c->MakeShape({c->Dim(images, 0), size, size}));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The observation resizer on its own: [n, 210, 160] uint8 -> [n, size, size], bit-identical to
cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA). For tests and tools.
)doc");

class AtariResizeOp : public OpKernel {
 public:
  explicit AtariResizeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int32_t size = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("size", &size));
    OP_REQUIRES(ctx, size <= kScreenWidth,
                absl::InvalidArgumentError(
                    absl::StrCat("size must be in [1, ", kScreenWidth, "], got ", size)));
    resizer_ = std::make_unique<AreaResizer>(size);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& images = ctx->input(0);
    OP_REQUIRES(ctx,
                images.dims() == 3 && images.dim_size(1) == kScreenHeight &&
                    images.dim_size(2) == kScreenWidth,
                absl::InvalidArgumentError(absl::StrCat("images must have shape [n, ",
                                                        kScreenHeight, ", ", kScreenWidth,
                                                        "], got ", images.shape().DebugString())));
    const int64_t n = images.dim_size(0);
    const int64_t size = resizer_->size();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, size, size}), &out));
    const uint8_t* src = images.flat<uint8_t>().data();
    uint8_t* dst = out->flat<uint8_t>().data();
    std::vector<float> scratch(resizer_->scratch_floats());
    for (int64_t i = 0; i < n; ++i) {
      resizer_->Resize(src + i * kScreenPixels, dst + i * size * size, scratch.data());
    }
  }

 private:
  std::unique_ptr<AreaResizer> resizer_;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariResize").Device(DEVICE_CPU), AtariResizeOp);

// --------------------------------------------------------------------------------- raw loop

REGISTER_OP("NeuroevoAtariRawLoop")
    .Output("seconds: float64")
    .Attr("game: string")
    .Attr("rom_path: string")
    .Attr("frames: int >= 1")
    .Attr("seed: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Benchmark ceiling: runs one bare ALEInterface for `frames` frames in the calling thread (a
uniformly random minimal-set action every 4 frames, reset_game on game over, no screen reads)
and returns the elapsed seconds, ROM loading excluded.
)doc");

class AtariRawLoopOp : public OpKernel {
 public:
  explicit AtariRawLoopOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("game", &game_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rom_path", &rom_path_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("frames", &frames_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
  }

  void Compute(OpKernelContext* ctx) override {
    QuietAle();
    OP_REQUIRES_OK(ctx, CheckRom(game_, rom_path_));
    ale::ALEInterface ale;
    ale.setInt("random_seed", 0);
    ale.setFloat("repeat_action_probability", 0.0f);
    ale.loadROM(rom_path_);
    const ale::ActionVect actions = ale.getMinimalActionSet();
    std::mt19937 rng(static_cast<uint32_t>(seed_));
    std::uniform_int_distribution<size_t> pick(0, actions.size() - 1);
    ale::Action action = actions[0];
    const auto start = std::chrono::steady_clock::now();
    for (int64_t f = 0; f < frames_; ++f) {
      if (f % 4 == 0) action = actions[pick(rng)];
      ale.act(action);
      if (ale.game_over(false)) ale.reset_game();
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<double>()() = elapsed.count();
  }

 private:
  std::string game_;
  std::string rom_path_;
  int64_t frames_ = 0;
  int64_t seed_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariRawLoop").Device(DEVICE_CPU), AtariRawLoopOp);

}  // namespace
}  // namespace atari
}  // namespace neuroevo
