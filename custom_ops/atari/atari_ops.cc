// TensorFlow ops that run batches of Atari 2600 emulators (ALE) with DQN preprocessing.
//
// Python wrapper and user documentation: neuroevo/envs/atari.py. Semantics of one slot:
// atari_env.h. Slot bookkeeping, index validation, the worker-pool loop and the kernels every
// env op shares (reset, step, per-slot reads): common/env_pool.h.
//
// NeuroevoAtariMake creates `num_slots` emulators (in parallel) and returns a ref-counting
// resource handle: the emulators are freed when the last tensor holding the handle is gone.
// Every other op takes that handle plus an int32 index vector and touches only those slots.
// Static settings are attrs, per-call data are inputs; every output has a static shape
// (k, the number of indices, is whatever the index vector has; the action set is [?]).
//
// This library links ALE (GPL-2.0) and is built apart from neuroevo's other ops. The benchmark
// ceiling (a bare ALE loop) is in atari_bench_ops.cc, library atari_bench.

#include <cstdint>
#include <memory>
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

using AtariCall = SlotCall<AtariEnv>;

// ------------------------------------------------------------------------------------ make

NEUROEVO_REGISTER_MAKE_OP("NeuroevoAtariMake")
    .Attr("game: string")
    .Attr("rom_path: string")
    .Attr("num_slots: int >= 1")
    .Attr("frame_skip: int >= 1")
    .Attr("noop_max: int >= 0")
    .Attr("sticky_action_prob: float")
    .Attr("fire_reset: bool")
    .Attr("terminal_on_life_loss: bool")
    .Attr("full_action_space: bool")
    .Attr("max_episode_steps: int >= 0")
    .Attr("screen_size: int >= 1")
    .Attr("stack: int >= 1")
    .Attr("preprocessing: {'gymnasium', 'uber'}")
    .Doc(R"doc(
Creates num_slots Atari emulators of one game (in parallel) and returns their handle.

Every setting is required: their defaults live in one place, neuroevo.envs.atari.AtariOptions.
The handle holds the only reference: the emulators are freed with the last tensor holding it.
max_episode_steps counts agent steps (frames = steps * frame_skip); 0 disables the cutoff.
preprocessing "uber" gives float32 observations in Uber's pipeline (atari/atari_env.h) and
takes over the FIRE start, so it needs fire_reset false.
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
    std::string preprocessing;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("preprocessing", &preprocessing));
    s.uber = preprocessing == "uber";
    OP_REQUIRES(ctx, !(s.uber && s.fire_reset),
                absl::InvalidArgumentError(
                    "preprocessing 'uber' presses FIRE itself after the no-ops (as Uber's "
                    "reset does); set fire_reset false"));
    OP_REQUIRES(ctx, s.num_slots <= kMaxSlots,
                absl::InvalidArgumentError(absl::StrCat("num_slots must be in [1, ", kMaxSlots,
                                                        "], got ", s.num_slots)));
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
    // Each emulator takes tens of milliseconds to load: build them on the worker pool.
    auto envs = CreateEnvs<AtariEnv>(
        ctx, spec_.num_slots, [&] { return AtariEnv::Create(config); }, kExpensiveSlotNanos);
    OP_REQUIRES_OK(ctx, envs.status());
    OP_REQUIRES_OK(ctx, OutputNewPool(ctx,
                                      absl::StrCat("NeuroevoAtari(", spec_.game, ", ",
                                                   spec_.num_slots, " slots)"),
                                      std::move(envs).value()));
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

class AtariActionSetOp : public EnvSharedOp<AtariEnv> {
 public:
  using EnvSharedOp::EnvSharedOp;

 protected:
  // The action set is fixed at load time and read-only: no claim needed.
  void Compute(OpKernelContext* ctx, const AtariEnv& first) override {
    const ale::ActionVect& set = first.action_set();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(set.size())}),
                                             &out));
    auto flat = out->flat<int32_t>();
    for (size_t i = 0; i < set.size(); ++i) flat(i) = static_cast<int32_t>(set[i]);
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariActionSet").Device(DEVICE_CPU), AtariActionSetOp);

// ------------------------------------------------------------------------------------ reset

NEUROEVO_REGISTER_SLOT_OP("NeuroevoAtariReset")
    .Input("seeds: int64")
    .SetShapeFn(ResetShape)
    .Doc(R"doc(
Starts a new episode in each listed slot; seeds[i] alone decides slot indices[i]'s episode
(no-op count, sticky-action draws), whichever slot or thread runs it.
)doc");

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariReset").Device(DEVICE_CPU), EnvResetOp<AtariEnv>);

// ------------------------------------------------------------------------------------- step

NEUROEVO_REGISTER_STEP_OP("NeuroevoAtariStep", "int32")
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

// Actions of a step call: int32 [k], each an index into the game's action set.
class AtariActions {
 public:
  absl::Status Read(const Tensor& actions, const AtariCall& call) {
    const int64_t k = call.size();
    absl::Status s = CheckBatchInput(actions, "actions", tensorflow::DT_INT32, k);
    if (!s.ok()) return s;
    action_ = actions.flat<int32_t>().data();
    for (int64_t i = 0; i < k; ++i) {
      const AtariEnv& env = call.env(i);
      if (action_[i] < 0 || action_[i] >= env.num_actions()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "actions[", i, "] = ", action_[i], " is out of range: ", env.spec().game, " has ",
            env.num_actions(), " actions [0, ", env.num_actions(), ")"));
      }
    }
    return absl::OkStatus();
  }

  int32_t operator[](int64_t i) const { return action_[i]; }

 private:
  const int32_t* action_ = nullptr;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariStep").Device(DEVICE_CPU),
                        (EnvStepOp<AtariEnv, AtariActions>));

// ------------------------------------------------------------------------------ observation

NEUROEVO_REGISTER_SLOT_OP("NeuroevoAtariObservation")
    .Output("observation: dtype")
    .Attr("screen_size: int >= 1 = 84")
    .Attr("stack: int >= 1 = 4")
    .Attr("dtype: {uint8, float} = DT_UINT8")
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
newest frame last. The attrs restate the make op's so the shape is static; they must match
(dtype float32 for preprocessing "uber", uint8 otherwise).
)doc");

class AtariObservationOp : public EnvSlotsOp<AtariEnv> {
 public:
  explicit AtariObservationOp(OpKernelConstruction* ctx) : EnvSlotsOp(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("screen_size", &size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stack", &stack_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtype", &dtype_));
  }

 protected:
  void Compute(OpKernelContext* ctx, const AtariCall& call) override {
    const AtariSpec& spec = call.shared().spec();
    OP_REQUIRES(ctx, spec.screen_size == size_ && spec.stack == stack_,
                absl::InvalidArgumentError(absl::StrCat(
                    "observation attrs screen_size=", size_, ", stack=", stack_,
                    " do not match the env's screen_size=", spec.screen_size,
                    ", stack=", spec.stack)));
    const bool want_float = dtype_ == tensorflow::DT_FLOAT;
    OP_REQUIRES(ctx, want_float == spec.uber,
                absl::InvalidArgumentError(absl::StrCat(
                    "observation dtype ", tensorflow::DataTypeString(dtype_),
                    " does not match the env's preprocessing '",
                    spec.uber ? "uber' (float32)" : "gymnasium' (uint8)")));
    const TensorShape row({size_, size_, stack_});
    if (want_float) {
      OP_REQUIRES_OK(
          ctx, WritePerSlot<float>(
                   ctx, call, row,
                   [](const AtariEnv& env, float* out) { env.WriteObservationFloat(out); },
                   4 * kCheapSlotNanos));
    } else {
      OP_REQUIRES_OK(
          ctx, WritePerSlot<uint8_t>(
                   ctx, call, row,
                   [](const AtariEnv& env, uint8_t* out) { env.WriteObservation(out); },
                   kCheapSlotNanos));
    }
  }

 private:
  int32_t size_ = 0;
  int32_t stack_ = 0;
  tensorflow::DataType dtype_ = tensorflow::DT_UINT8;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariObservation").Device(DEVICE_CPU), AtariObservationOp);

// ----------------------------------------------------------------------------------- screen

NEUROEVO_REGISTER_SLOT_OP("NeuroevoAtariScreen")
    .Output("screen: uint8")
    .Attr("rgb: bool = false")
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

class AtariScreenOp : public EnvSlotsOp<AtariEnv> {
 public:
  explicit AtariScreenOp(OpKernelConstruction* ctx) : EnvSlotsOp(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rgb", &rgb_));
  }

 protected:
  void Compute(OpKernelContext* ctx, const AtariCall& call) override {
    TensorShape row({kScreenHeight, kScreenWidth});
    if (rgb_) row.AddDim(3);
    const bool rgb = rgb_;
    OP_REQUIRES_OK(ctx, WritePerSlot<uint8_t>(
                            ctx, call, row,
                            [rgb](const AtariEnv& env, uint8_t* out) { env.WriteScreen(out, rgb); },
                            kCheapSlotNanos * (rgb ? 8 : 2)));
  }

 private:
  bool rgb_ = false;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariScreen").Device(DEVICE_CPU), AtariScreenOp);

// ------------------------------------------------------------------- ram / frames / lives

NEUROEVO_REGISTER_SLOT_OP("NeuroevoAtariRam")
    .Output("ram: uint8")
    .SetShapeFn(PerSlotShape<kRamBytes>)
    .Doc("The 128 bytes of console RAM of each listed slot, [k, 128].");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoAtariFrames")
    .Output("frames: int64")
    .SetShapeFn(PerSlotShape<>)
    .Doc("Emulator frames of each listed slot's current episode, no-op and FIRE frames included.");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoAtariLives")
    .Output("lives: int32")
    .SetShapeFn(PerSlotShape<>)
    .Doc("Lives left in each listed slot's game (as ALE reports them).");

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariRam").Device(DEVICE_CPU),
                        (EnvReadOp<AtariEnv, uint8_t, &AtariEnv::WriteRam, kRamBytes>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariFrames").Device(DEVICE_CPU),
                        (EnvReadOp<AtariEnv, int64_t, &AtariEnv::frames>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariLives").Device(DEVICE_CPU),
                        (EnvReadOp<AtariEnv, int32_t, &AtariEnv::lives>));

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

}  // namespace
}  // namespace atari
}  // namespace neuroevo
