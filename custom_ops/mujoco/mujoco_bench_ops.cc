// Benchmark-only op library mujoco_bench: NeuroevoMujocoRawLoop, the per-core baseline of
// benchmarks/envs_mujoco.py (one environment stepped in a plain C++ loop, no pool and no
// TensorFlow between steps), and NeuroevoMujocoReplayLoop, the same loop replaying recorded
// episodes (the physics floor of exactly the episodes an evaluation ran), one after another or
// in a batched evaluator's lockstep order. It loads its own model from the task's XML and
// touches no env resource, so it loads beside or without the production `mujoco` library. Like
// it, this library links libmujoco; the task rules and the environment are shared
// (mujoco_env.h).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mujoco/mujoco_env.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace neuroevo {
namespace mujoco {
namespace {

namespace tf = ::tensorflow;

REGISTER_OP("NeuroevoMujocoRawLoop")
    .Input("steps: int64")
    .Input("seed: int64")
    .Output("total_reward: float64")
    .Attr("task: string")
    .Attr("xml_path: string")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc(R"doc(
Benchmark baseline: `steps` agent steps of one environment of `task` (model loaded from
xml_path, the task's default frame_skip and reset noise, 1000-step episodes, terminated when
unhealthy) in a plain C++ loop on the calling thread: uniform random actions, observe every
step, reset when an episode ends, no TensorFlow between steps. Returns the summed reward.
)doc");

// A benchmark loop's kernel: loads the model of attrs `task` and `xml_path` once per kernel (TF
// caches kernels by attrs), so calls time only the loop.
class LoopKernel : public tf::OpKernel {
 public:
  explicit LoopKernel(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {
    MujocoConfig config;  // the rest at its defaults: the task's gymnasium defaults
    OP_REQUIRES_OK(ctx, ctx->GetAttr("task", &config.task));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("xml_path", &config.xml_path));
    ConfigureMujocoOnce();
    auto spec = MujocoSpec::Create(config);
    OP_REQUIRES_OK(ctx, spec.status());
    spec_ = *std::move(spec);
  }

 protected:
  std::shared_ptr<const MujocoSpec> spec_;  // read-only, like a pool's
};

class RawLoopOp : public LoopKernel {
 public:
  using LoopKernel::LoopKernel;

  void Compute(tf::OpKernelContext* ctx) override {
    for (int i = 0; i < 2; ++i) {
      OP_REQUIRES(ctx, tf::TensorShapeUtils::IsScalar(ctx->input(i).shape()),
                  absl::InvalidArgumentError(absl::StrCat(
                      i == 0 ? "steps" : "seed", " must be a scalar, got shape ",
                      ctx->input(i).shape().DebugString())));
    }
    const int64_t steps = ctx->input(0).scalar<int64_t>()();
    OP_REQUIRES(ctx, steps >= 0,
                absl::InvalidArgumentError(absl::StrCat("steps must be >= 0, got ", steps)));
    auto made = MujocoEnv::Create(spec_);
    OP_REQUIRES_OK(ctx, made.status());
    MujocoEnv& env = **made;
    const MujocoSpec& task = env.spec();
    EpisodeRng rng(static_cast<uint64_t>(ctx->input(1).scalar<int64_t>()()));
    std::vector<float> action(task.action_size());
    std::vector<float> obs(task.observation_size());
    double total = 0;
    env.Reset(static_cast<int64_t>(rng.Next()));
    for (int64_t t = 0; t < steps; ++t) {
      for (int i = 0; i < task.action_size(); ++i) {
        action[i] = static_cast<float>(rng.Uniform(task.action_low(i), task.action_high(i)));
      }
      const StepOutcome out = env.Step(action.data());
      env.Observe(obs.data());
      total += out.reward;
      if (out.terminated || out.truncated) env.Reset(static_cast<int64_t>(rng.Next()));
    }
    tf::Tensor* result = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({}), &result));
    result->scalar<double>()() = total;
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoRawLoop").Device(tf::DEVICE_CPU), RawLoopOp);

REGISTER_OP("NeuroevoMujocoReplayLoop")
    .Input("seeds: int64")
    .Input("actions: float")
    .Input("lengths: int32")
    .Output("returns: float64")
    .Attr("task: string")
    .Attr("xml_path: string")
    .Attr("lockstep: bool = false")
    .SetIsStateful()
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(c->Dim(c->input(0), 0)));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Benchmark floor: replays n recorded episodes of `task` on the calling thread in a plain C++
loop. Episode i resets from seeds[i] (as NeuroevoMujocoReset does) and steps with
actions[i, t] for t < lengths[i], observing every step. actions: float32
[n, max_steps, action_size]. Returns each episode's summed reward (float64 [n]), which equals
the recorded episode's return when the replay followed the same trajectory.

lockstep = false plays the episodes one after another on one environment (one state in cache).
lockstep = true plays them as a batched evaluator does: n environments, all reset first, then
step t of every episode still running before step t + 1 of any (the order of a rollout worker's
slots, without TensorFlow).
)doc");

class ReplayLoopOp : public LoopKernel {
 public:
  explicit ReplayLoopOp(tf::OpKernelConstruction* ctx) : LoopKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("lockstep", &lockstep_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
    const tf::Tensor& seeds = ctx->input(0);
    const tf::Tensor& actions = ctx->input(1);
    const tf::Tensor& lengths = ctx->input(2);
    const int64_t n = seeds.NumElements();
    OP_REQUIRES(ctx,
                seeds.dims() == 1 && lengths.dims() == 1 && lengths.dim_size(0) == n &&
                    actions.dims() == 3 && actions.dim_size(0) == n &&
                    actions.dim_size(2) == spec_->action_size(),
                absl::InvalidArgumentError(absl::StrCat(
                    "expected seeds [n], actions [n, max_steps, ", spec_->action_size(),
                    "] and lengths [n]; got ", seeds.shape().DebugString(), ", ",
                    actions.shape().DebugString(), " and ", lengths.shape().DebugString())));
    const int64_t max_steps = actions.dim_size(1);
    const auto length = lengths.flat<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, length(i) >= 0 && length(i) <= max_steps,
                  absl::InvalidArgumentError(absl::StrCat("lengths[", i, "] = ", length(i),
                                                          " is outside [0, ", max_steps, "]")));
    }
    // One environment, or one per episode in lockstep.
    std::vector<std::unique_ptr<MujocoEnv>> envs(lockstep_ ? n : 1);
    for (auto& env : envs) {
      auto made = MujocoEnv::Create(spec_);
      OP_REQUIRES_OK(ctx, made.status());
      env = *std::move(made);
    }
    std::vector<float> obs(spec_->observation_size());
    tf::Tensor* returns = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({n}), &returns));
    auto total = returns->flat<double>();
    total.setZero();
    const float* action = actions.flat<float>().data();
    const int64_t stride = spec_->action_size();
    auto step = [&](MujocoEnv& env, int64_t i, int64_t t) {
      total(i) += env.Step(action + (i * max_steps + t) * stride).reward;
      env.Observe(obs.data());
    };
    if (!lockstep_) {
      for (int64_t i = 0; i < n; ++i) {
        envs[0]->Reset(seeds.flat<int64_t>()(i));
        for (int64_t t = 0; t < length(i); ++t) step(*envs[0], i, t);
      }
      return;
    }
    int64_t longest = 0;
    for (int64_t i = 0; i < n; ++i) {
      envs[i]->Reset(seeds.flat<int64_t>()(i));
      longest = std::max<int64_t>(longest, length(i));
    }
    for (int64_t t = 0; t < longest; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        if (t < length(i)) step(*envs[i], i, t);
      }
    }
  }

 private:
  bool lockstep_ = false;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoMujocoReplayLoop").Device(tf::DEVICE_CPU), ReplayLoopOp);

}  // namespace
}  // namespace mujoco
}  // namespace neuroevo
