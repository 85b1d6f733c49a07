// TensorFlow ops stepping gymnasium-v5 MuJoCo locomotion tasks in C++.
//
// `NeuroevoMujocoMake` loads the task's model once and makes `num_slots` environments behind a
// ref-counting resource handle (common/env_pool.h). The other ops take that handle and an int32
// vector of distinct slot ids; reset, set_state and step run the listed slots in parallel on
// TF's intra-op thread pool.
// Python wrapper and documentation: neuroevo/envs/mujoco.py.
#include <mujoco/mujoco.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/env_pool.h"
#include "mujoco/mujoco_env.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/logging.h"

namespace neuroevo {
namespace mujoco {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

using Pool = EnvPool<MujocoEnv>;
using Call = SlotCall<MujocoEnv>;

// Process-wide MuJoCo settings, applied once when the first pool is made:
// * The default log handler prints and appends to MUJOCO_LOG.TXT in the working directory.
//   Messages go to TF's log instead, warnings at verbosity 1 only: the ops already count each
//   slot's warnings and report them as flags (the one routine warning, settotalmass being
//   deprecated, comes with loading half_cheetah.xml).
// * `import mujoco` (which the op build does, and gymnasium too) installs a clock callback,
//   mjcb_time, that MuJoCo calls around every pipeline stage to fill mjData::timer: about 20%
//   of a locomotion step. Nothing here reads those timers, so the callback is removed;
//   mjData::timer stays zero in this process from then on (documented in envs/mujoco.py).
void LogToTensorflow(const mjLogMessage* msg) {
  if (msg->level >= mjLOG_ERROR) {
    LOG(ERROR) << "MuJoCo: " << msg->subject;
  } else if (msg->level == mjLOG_WARNING) {
    VLOG(1) << "MuJoCo: " << msg->subject;
  } else {
    VLOG(2) << "MuJoCo: " << msg->subject;
  }
}

void ConfigureMujocoOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    mju_setLogHandler(&LogToTensorflow);
    mjcb_time = nullptr;
  });
}

// -------------------------------------------------------------------------------- shape fns

absl::Status VectorOfK(InferenceContext* c, ShapeHandle* indices) {
  return c->WithRank(c->input(1), 1, indices);
}

absl::Status PerSlotVector(InferenceContext* c) {
  ShapeHandle indices;
  TF_RETURN_IF_ERROR(VectorOfK(c, &indices));
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, indices);
  return absl::OkStatus();
}

// -------------------------------------------------------------------------------------- make

REGISTER_OP("NeuroevoMujocoMake")
    .Output("handle: resource")
    .Attr("task: string")
    .Attr("xml_path: string")
    .Attr("num_slots: int >= 1")
    .Attr("frame_skip: int = 0")
    .Attr("reset_noise_scale: float = -1.0")
    .Attr("max_episode_steps: int = 1000")
    .Attr("terminate_when_unhealthy: bool = true")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Makes `num_slots` environments of a MuJoCo locomotion task (Ant, HalfCheetah, Hopper, Humanoid,
Walker2d) with gymnasium v5 semantics. frame_skip 0 and a negative reset_noise_scale take the
task's gymnasium default; max_episode_steps 0 disables the cutoff.
)doc");

class MakeOp : public OpKernel {
 public:
  explicit MakeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    float noise = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("task", &config_.task));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("xml_path", &config_.xml_path));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
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
    std::vector<std::unique_ptr<MujocoEnv>> envs;
    envs.reserve(num_slots_);
    for (int i = 0; i < num_slots_; ++i) {
      auto env = MujocoEnv::Create(*spec);
      OP_REQUIRES_OK(ctx, env.status());
      envs.push_back(std::move(env).value());
    }
    auto* pool = new Pool(absl::StrCat("MuJoCo ", config_.task, " x", num_slots_),
                          std::move(envs));
    Tensor* handle = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &handle));
    handle->scalar<tensorflow::ResourceHandle>()() =
        tensorflow::ResourceHandle::MakeRefCountingHandle(pool, ctx->device()->name());
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

class DescribeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<Pool> pool;
    OP_REQUIRES_OK(ctx, LookupPool<MujocoEnv>(ctx, &pool));
    const MujocoSpec& spec = pool->env(0).spec();
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

REGISTER_OP("NeuroevoMujocoReset")
    .Input("handle: resource")
    .Input("indices: int32")
    .Input("seeds: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle indices, seeds;
      TF_RETURN_IF_ERROR(VectorOfK(c, &indices));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &seeds));
      return c->Merge(indices, seeds, &seeds);
    })
    .Doc(R"doc(
Starts an episode in each listed slot: the model's initial pose plus the task's reset noise,
drawn from a generator seeded with that slot's seed alone (same seed, same episode, any slot).
)doc");

class ResetOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    Call call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const Tensor& seeds = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckBatchInput(seeds, "seeds", tensorflow::DT_INT64, call.size()));
    const auto seed = seeds.flat<int64_t>();
    ParallelForSlots(ctx, call.size(), [&](int64_t i) {
      const int32_t slot = call.slots[i];
      call.pool->env(slot).Reset(seed(i));
      call.pool->set_status(slot, SlotStatus::kRunning);
    });
  }
};

// -------------------------------------------------------------------------------------- step

REGISTER_OP("NeuroevoMujocoStep")
    .Input("handle: resource")
    .Input("indices: int32")
    .Input("actions: float32")
    .Output("reward: float32")
    .Output("terminated: bool")
    .Output("truncated: bool")
    .SetIsStateful()
    .SetShapeFn(PerSlotVector)
    .Doc(R"doc(
Applies one action per listed slot for frame_skip physics steps. Actions [k, action_size] are
clipped to the control range (+-inf included); a NaN action, a MuJoCo warning or a non-finite
state ends that slot's episode with reward 0 and a flag (NeuroevoMujocoFlags), and never
touches another slot. Stepping a slot whose episode is over is an InvalidArgument error.
)doc");

class StepOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    Call call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const int action_size = call.pool->env(0).spec().action_size();
    const Tensor& actions = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckBatchInput(actions, "actions", tensorflow::DT_FLOAT, call.size(),
                                        {action_size}));
    OP_REQUIRES_OK(ctx, call.pool->CheckSteppable(call.slots));
    Tensor *reward = nullptr, *terminated = nullptr, *truncated = nullptr;
    const TensorShape k({call.size()});
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, k, &reward));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, k, &terminated));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, k, &truncated));
    const float* action = actions.flat<float>().data();
    auto reward_k = reward->flat<float>();
    auto terminated_k = terminated->flat<bool>();
    auto truncated_k = truncated->flat<bool>();
    ParallelForSlots(ctx, call.size(), [&](int64_t i) {
      const int32_t slot = call.slots[i];
      const StepOutcome out = call.pool->env(slot).Step(action + i * action_size);
      reward_k(i) = out.reward;
      terminated_k(i) = out.terminated;
      truncated_k(i) = out.truncated;
      if (out.terminated || out.truncated) call.pool->set_status(slot, SlotStatus::kDone);
    });
  }
};

// ------------------------------------------------------------------------------- observation

REGISTER_OP("NeuroevoMujocoObservation")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("observation: float32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle indices;
      TF_RETURN_IF_ERROR(VectorOfK(c, &indices));
      c->set_output(0, c->Matrix(c->Dim(indices, 0), InferenceContext::kUnknownDim));
      return absl::OkStatus();
    })
    .Doc("Current observation [k, observation_size] of each listed slot (gymnasium v5 layout).");

class ObservationOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    Call call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const int size = call.pool->env(0).spec().observation_size();
    Tensor* obs = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({call.size(), size}), &obs));
    // Copying a few hundred numbers per slot costs less than waking another thread.
    float* out = obs->flat<float>().data();
    for (int64_t i = 0; i < call.size(); ++i) call.pool->env(call.slots[i]).Observe(out + i * size);
  }
};

// --------------------------------------------------------------------------- frames and flags

REGISTER_OP("NeuroevoMujocoFrames")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("steps: int64")
    .SetIsStateful()
    .SetShapeFn(PerSlotVector)
    .Doc("Agent steps taken in each listed slot's current (or last) episode.");

REGISTER_OP("NeuroevoMujocoFlags")
    .Input("handle: resource")
    .Input("indices: int32")
    .Output("flags: int32")
    .SetIsStateful()
    .SetShapeFn(PerSlotVector)
    .Doc(R"doc(
Bit flags of each listed slot's current (or last) episode: 1 = ended by a MuJoCo warning or a
non-finite state, 2 = ended by a NaN action. Cleared by reset.
)doc");

// Copies one per-slot scalar (steps or flags) of each listed slot into a [k] output.
template <typename T, T (MujocoEnv::*kField)() const>
class SlotScalarOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    Call call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({call.size()}), &out));
    auto out_k = out->flat<T>();
    for (int64_t i = 0; i < call.size(); ++i) out_k(i) = (call.pool->env(call.slots[i]).*kField)();
  }
};

// --------------------------------------------------------------------------------- set state

REGISTER_OP("NeuroevoMujocoSetState")
    .Input("handle: resource")
    .Input("indices: int32")
    .Input("qpos: float64")
    .Input("qvel: float64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle indices, qpos, qvel;
      TF_RETURN_IF_ERROR(VectorOfK(c, &indices));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &qpos));
      return c->WithRank(c->input(3), 2, &qvel);
    })
    .Doc(R"doc(
Starts an episode in each listed slot from the given joint positions [k, nq] and velocities
[k, nv] (no reset noise), as gymnasium's MujocoEnv.set_state after a reset. For parity tests
and replays.
)doc");

class SetStateOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    Call call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    const mjModel& m = call.pool->env(0).spec().model();
    const Tensor& qpos = ctx->input(2);
    const Tensor& qvel = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckBatchInput(qpos, "qpos", tensorflow::DT_DOUBLE, call.size(), {m.nq}));
    OP_REQUIRES_OK(ctx, CheckBatchInput(qvel, "qvel", tensorflow::DT_DOUBLE, call.size(), {m.nv}));
    const double* qpos_k = qpos.flat<double>().data();
    const double* qvel_k = qvel.flat<double>().data();
    ParallelForSlots(ctx, call.size(), [&](int64_t i) {
      const int32_t slot = call.slots[i];
      call.pool->env(slot).SetState(qpos_k + i * m.nq, qvel_k + i * m.nv);
      call.pool->set_status(slot, SlotStatus::kRunning);
    });
  }
};

// ---------------------------------------------------------------------------------- raw loop

REGISTER_OP("NeuroevoMujocoRawLoop")
    .Input("handle: resource")
    .Input("steps: int64")
    .Input("seed: int64")
    .Output("total_reward: float64")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Benchmark baseline: `steps` agent steps of one private environment of the pool's task in a plain
C++ loop on the calling thread (uniform random actions, observe every step, reset when an episode
ends), with no TensorFlow between steps. The pool's slots are not touched.
)doc");

class RawLoopOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<Pool> pool;
    OP_REQUIRES_OK(ctx, LookupPool<MujocoEnv>(ctx, &pool));
    const int64_t steps = ctx->input(1).scalar<int64_t>()();
    OP_REQUIRES(ctx, steps >= 0,
                absl::InvalidArgumentError(absl::StrCat("steps must be >= 0, got ", steps)));
    auto made = MujocoEnv::Create(pool->env(0).shared_spec());
    OP_REQUIRES_OK(ctx, made.status());
    MujocoEnv& env = **made;
    const MujocoSpec& spec = env.spec();
    EpisodeRng rng(static_cast<uint64_t>(ctx->input(2).scalar<int64_t>()()));
    std::vector<float> action(spec.action_size());
    std::vector<float> obs(spec.observation_size());
    double total = 0;
    env.Reset(static_cast<int64_t>(rng.Next()));
    for (int64_t t = 0; t < steps; ++t) {
      for (int i = 0; i < spec.action_size(); ++i) {
        action[i] = static_cast<float>(rng.Uniform(spec.action_low(i), spec.action_high(i)));
      }
      const StepOutcome out = env.Step(action.data());
      env.Observe(obs.data());
      total += out.reward;
      if (out.terminated || out.truncated) env.Reset(static_cast<int64_t>(rng.Next()));
    }
    Tensor* result = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &result));
    result->scalar<double>()() = total;
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoMake").Device(DEVICE_CPU), MakeOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoDescribe").Device(DEVICE_CPU), DescribeOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoReset").Device(DEVICE_CPU), ResetOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoStep").Device(DEVICE_CPU), StepOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoObservation").Device(DEVICE_CPU), ObservationOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoFrames").Device(DEVICE_CPU),
                        (SlotScalarOp<int64_t, &MujocoEnv::steps>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoFlags").Device(DEVICE_CPU),
                        (SlotScalarOp<int32_t, &MujocoEnv::flags>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoSetState").Device(DEVICE_CPU), SetStateOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoRawLoop").Device(DEVICE_CPU), RawLoopOp);

}  // namespace
}  // namespace mujoco
}  // namespace neuroevo
