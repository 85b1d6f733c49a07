// TensorFlow ops stepping gymnasium-v5 MuJoCo locomotion tasks in C++.
//
// `NeuroevoMujocoMake` loads the task's model once and makes `num_slots` environments behind a
// ref-counting resource handle. The other ops take that handle and an int32 vector of distinct
// slot ids; reset, set_state and step run the listed slots in parallel on TF's intra-op thread
// pool. Slot bookkeeping and the kernels every env op shares: common/env_pool.h.
// Python wrapper and documentation: neuroevo/envs/mujoco.py. The benchmark baseline (a plain C++
// loop, no pool) is in mujoco_bench_ops.cc, library mujoco_bench.
#include <mujoco/mujoco.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "common/env_pool.h"
#include "mujoco/mujoco_env.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace neuroevo {
namespace mujoco {
namespace {

using Call = SlotCall<MujocoEnv>;

// -------------------------------------------------------------------------------------- make

NEUROEVO_REGISTER_MAKE_OP("NeuroevoMujocoMake")
    .Attr("task: string")
    .Attr("xml_path: string")
    .Attr("num_slots: int >= 1")
    .Attr("frame_skip: int")
    .Attr("reset_noise_scale: float")
    .Attr("max_episode_steps: int")
    .Attr("terminate_when_unhealthy: bool")
    .Doc(R"doc(
Makes `num_slots` environments of a MuJoCo locomotion task (Ant, HalfCheetah, Hopper, Humanoid,
Walker2d) with gymnasium v5 semantics. frame_skip 0 and a negative reset_noise_scale take the
task's gymnasium default; max_episode_steps 0 disables the cutoff. num_slots is at most 65536.
Every setting is required: their defaults live in neuroevo.envs.mujoco.MujocoOptions.
)doc");

// Bytes of address space this process may still map under `ulimit -v`, or -1 if unlimited.
int64_t AddressSpaceLeft() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  int64_t pages = 0;
  std::ifstream statm("/proc/self/statm");
  if (!(statm >> pages)) return -1;
  const int64_t used = pages * sysconf(_SC_PAGESIZE);
  return std::max<int64_t>(0, static_cast<int64_t>(limit.rlim_cur) - used);
}

// Each slot's mjData maps its arena and buffer (narena + nbuffer bytes, mostly untouched until
// used). MuJoCo does not fail cleanly when they cannot be mapped (it logs and goes on with a
// broken mjData), so a pool that cannot fit under the address-space limit is refused first.
absl::Status CheckAddressSpace(const mjModel& m, const std::string& task, int64_t num_slots) {
  const int64_t per_slot = static_cast<int64_t>(sizeof(mjData)) + m.narena + m.nbuffer;
  const int64_t left = AddressSpaceLeft();
  if (left < 0 || per_slot * num_slots <= left) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      num_slots, " ", task, " slots need ", (per_slot * num_slots) >> 20,
      " MiB of address space (", per_slot >> 20, " MiB each: mjData arena and buffer) but the ",
      "address-space limit (ulimit -v) leaves ", left >> 20, " MiB; use fewer slots or raise ",
      "the limit"));
}

class MakeOp : public OpKernel {
 public:
  explicit MakeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    float noise = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("task", &config_.task));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("xml_path", &config_.xml_path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
    OP_REQUIRES(ctx, num_slots_ <= kMaxSlots,
                absl::InvalidArgumentError(absl::StrCat("num_slots must be in [1, ", kMaxSlots,
                                                        "], got ", num_slots_)));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("frame_skip", &config_.frame_skip));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reset_noise_scale", &noise));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_episode_steps", &config_.max_episode_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("terminate_when_unhealthy",
                                     &config_.terminate_when_unhealthy));
    config_.reset_noise_scale = noise;
  }

  void Compute(OpKernelContext* ctx) override {
    ConfigureMujocoOnce();
    auto spec = MujocoSpec::Create(config_);
    OP_REQUIRES_OK(ctx, spec.status());
    OP_REQUIRES_OK(ctx, CheckAddressSpace((*spec)->model(), config_.task, num_slots_));
    // An mjData is one allocation and a reset: cheap, so they are made in the calling thread.
    auto envs = CreateEnvs<MujocoEnv>(
        ctx, num_slots_, [&] { return MujocoEnv::Create(*spec); }, /*nanos_per_env=*/0);
    OP_REQUIRES_OK(ctx, envs.status());
    OP_REQUIRES_OK(ctx, OutputNewPool(ctx, absl::StrCat("MuJoCo ", config_.task, " x", num_slots_),
                                      std::move(envs).value()));
  }

 private:
  MujocoConfig config_;
  int num_slots_ = 0;
};

// ---------------------------------------------------------------------------------- describe

REGISTER_OP("NeuroevoMujocoDescribe")
    .Input("handle: resource")
    .Output("observation_size: int32")
    .Output("nq: int32")
    .Output("nv: int32")
    .Output("action_low: float32")
    .Output("action_high: float32")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->Scalar());
      c->set_output(3, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(4, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Sizes of the pool's task: observation length, qpos and qvel lengths, and the control range
(actions are clipped to it; +-inf for an unlimited actuator).
)doc");

class DescribeOp : public EnvSharedOp<MujocoEnv> {
 public:
  using EnvSharedOp::EnvSharedOp;

 protected:
  void Compute(OpKernelContext* ctx, const MujocoEnv& first) override {
    const MujocoSpec& spec = first.spec();
    const int32_t sizes[] = {spec.observation_size(), static_cast<int32_t>(spec.model().nq),
                             static_cast<int32_t>(spec.model().nv)};
    for (int i = 0; i < 3; ++i) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, TensorShape({}), &out));
      out->scalar<int32_t>()() = sizes[i];
    }
    Tensor* low = nullptr;
    Tensor* high = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({spec.action_size()}), &low));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({spec.action_size()}), &high));
    for (int i = 0; i < spec.action_size(); ++i) {
      low->flat<float>()(i) = static_cast<float>(spec.action_low(i));
      high->flat<float>()(i) = static_cast<float>(spec.action_high(i));
    }
  }
};

// ------------------------------------------------------------------------------------- reset

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMujocoReset")
    .Input("seeds: int64")
    .SetShapeFn(ResetShape)
    .Doc(R"doc(
Starts an episode in each listed slot: the model's initial pose plus the task's reset noise,
drawn from a generator seeded with that slot's seed alone (same seed, same episode, any slot).
)doc");

// -------------------------------------------------------------------------------------- step

NEUROEVO_REGISTER_STEP_OP("NeuroevoMujocoStep", "float32")
    .SetShapeFn(PerSlotShape<>)
    .Doc(R"doc(
Applies one action per listed slot for frame_skip physics steps. Actions [k, action_size] are
clipped to the control range (+-inf included); a NaN action, a MuJoCo warning or a non-finite
state ends that slot's episode with reward 0 and a flag (NeuroevoMujocoFlags), and never
touches another slot. Stepping a slot whose episode is over is an InvalidArgument error.
)doc");

// ------------------------------------------------------------------------------- observation

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMujocoObservation")
    .Output("observation: float32")
    .SetShapeFn(PerSlotShape<InferenceContext::kUnknownDim>)
    .Doc("Current observation [k, observation_size] of each listed slot (gymnasium v5 layout).");

class ObservationOp : public EnvSlotsOp<MujocoEnv> {
 public:
  using EnvSlotsOp::EnvSlotsOp;

 protected:
  void Compute(OpKernelContext* ctx, const Call& call) override {
    const int size = call.shared().spec().observation_size();
    // Copying a few hundred numbers per slot costs less than waking another thread: inline.
    OP_REQUIRES_OK(ctx, WritePerSlot<float>(ctx, call, TensorShape({size}),
                                            [](const MujocoEnv& env, float* row) {
                                              env.Observe(row);
                                            }));
  }
};

// --------------------------------------------------------------------------- frames and flags

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMujocoFrames")
    .Output("steps: int64")
    .SetShapeFn(PerSlotShape<>)
    .Doc("Agent steps taken in each listed slot's current (or last) episode.");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMujocoFlags")
    .Output("flags: int32")
    .SetShapeFn(PerSlotShape<>)
    .Doc(R"doc(
Bit flags of each listed slot's current (or last) episode: 1 = ended by a MuJoCo warning or a
non-finite state, 2 = ended by a NaN action. Cleared by reset.
)doc");

// ---------------------------------------------------------------------------------- position

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMujocoPosition")
    .Output("position: float32")
    .SetShapeFn(PerSlotShape<2>)
    .Doc(R"doc(
World (x, y) [k, 2] of each listed slot's root body (the torso): the free root joint's
position, or the body's position plus its slide joints' displacements (planar tasks: y = 0).
)doc");

// --------------------------------------------------------------------------------- set state

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMujocoSetState")
    .Input("qpos: float64")
    .Input("qvel: float64")
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle k;
      ShapeHandle qpos, qvel;
      TF_RETURN_IF_ERROR(IndexCount(c, &k));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &qpos));
      return c->WithRank(c->input(3), 2, &qvel);
    })
    .Doc(R"doc(
Starts an episode in each listed slot from the given joint positions [k, nq] and velocities
[k, nv] (no reset noise), as gymnasium's MujocoEnv.set_state after a reset. For parity tests
and replays.
)doc");

class SetStateOp : public EnvSlotsOp<MujocoEnv> {
 public:
  using EnvSlotsOp::EnvSlotsOp;

 protected:
  void Compute(OpKernelContext* ctx, const Call& call) override {
    const mjModel& m = call.shared().spec().model();
    const Tensor& qpos = ctx->input(2);
    const Tensor& qvel = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckBatchInput(qpos, "qpos", tensorflow::DT_DOUBLE, call.size(), {m.nq}));
    OP_REQUIRES_OK(ctx, CheckBatchInput(qvel, "qvel", tensorflow::DT_DOUBLE, call.size(), {m.nv}));
    const double* qpos_k = qpos.flat<double>().data();
    const double* qvel_k = qvel.flat<double>().data();
    ParallelForSlots(ctx, call.size(), [&](int64_t i) {
      call.env(i).SetState(qpos_k + i * m.nq, qvel_k + i * m.nv);
      call.pool->set_status(call.slots[i], SlotStatus::kRunning);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoMake").Device(DEVICE_CPU), MakeOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoDescribe").Device(DEVICE_CPU), DescribeOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoReset").Device(DEVICE_CPU), EnvResetOp<MujocoEnv>);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoStep").Device(DEVICE_CPU),
                        (EnvStepOp<MujocoEnv, FloatActions<MujocoEnv>>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoObservation").Device(DEVICE_CPU), ObservationOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoFrames").Device(DEVICE_CPU),
                        (EnvReadOp<MujocoEnv, int64_t, &MujocoEnv::steps>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoFlags").Device(DEVICE_CPU),
                        (EnvReadOp<MujocoEnv, int32_t, &MujocoEnv::flags>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoPosition").Device(DEVICE_CPU),
                        (EnvReadOp<MujocoEnv, float, &MujocoEnv::Position, 2>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoSetState").Device(DEVICE_CPU), SetStateOp);

}  // namespace
}  // namespace mujoco
}  // namespace neuroevo
