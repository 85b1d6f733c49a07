// TensorFlow ops stepping Lehman & Stanley's maze navigation robot in C++.
//
// `NeuroevoMazeMake` takes the map (walls, start, goal) as attrs and makes `num_slots` robots
// behind a ref-counting resource handle; the other ops take that handle and an int32 vector of
// distinct slot ids. Slot bookkeeping and the kernels every env op shares: common/env_pool.h.
// The robot: maze/maze_env.h. Python wrapper, maps and documentation: neuroevo/envs/maze.py.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/env_pool.h"
#include "maze/maze_env.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace neuroevo {
namespace maze {
namespace {

// -------------------------------------------------------------------------------------- make

NEUROEVO_REGISTER_MAKE_OP("NeuroevoMazeMake")
    .Attr("walls: list(float)")
    .Attr("start: list(float)")
    .Attr("goal: list(float)")
    .Attr("goal_radius: float")
    .Attr("num_slots: int >= 1")
    .Attr("max_episode_steps: int")
    .Doc(R"doc(
Makes `num_slots` maze robots on one map: walls as (x0, y0, x1, y1) per wall, start as
(x, y, heading in degrees), goal as (x, y). An episode terminates when the robot's centre is
closer than goal_radius to the goal; max_episode_steps 0 disables the cutoff. num_slots is at
most 65536. The maps and defaults live in neuroevo.envs.maze.
)doc");

class MakeOp : public OpKernel {
 public:
  explicit MakeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<float> walls, start, goal;
    float goal_radius = 0;
    int64_t max_episode_steps = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("walls", &walls));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("start", &start));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("goal", &goal));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("goal_radius", &goal_radius));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_episode_steps", &max_episode_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slots", &num_slots_));
    OP_REQUIRES(ctx, num_slots_ <= kMaxSlots,
                absl::InvalidArgumentError(absl::StrCat("num_slots must be in [1, ", kMaxSlots,
                                                        "], got ", num_slots_)));
    auto spec = MazeSpec::Create(walls, start, goal, goal_radius, max_episode_steps);
    OP_REQUIRES_OK(ctx, spec.status());
    spec_ = *std::move(spec);
  }

  void Compute(OpKernelContext* ctx) override {
    auto envs = CreateEnvs<MazeEnv>(
        ctx, num_slots_,
        [&]() -> absl::StatusOr<std::unique_ptr<MazeEnv>> {
          return std::make_unique<MazeEnv>(spec_);
        },
        /*nanos_per_env=*/0);
    OP_REQUIRES_OK(ctx, envs.status());
    OP_REQUIRES_OK(ctx, OutputNewPool(ctx, absl::StrCat("maze x", num_slots_),
                                      std::move(envs).value()));
  }

 private:
  std::shared_ptr<const MazeSpec> spec_;
  int num_slots_ = 0;
};

// ------------------------------------------------------------------------------ reset, step

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMazeReset")
    .Input("seeds: int64")
    .SetShapeFn(ResetShape)
    .Doc("Puts each listed slot's robot at the start, at rest (the seed is unused).");

NEUROEVO_REGISTER_STEP_OP("NeuroevoMazeStep", "float32")
    .SetShapeFn(PerSlotShape<>)
    .Doc(R"doc(
Applies one action [k, 2] (turn, speed change; each clipped to [0, 1]) per listed slot. The
reward is the step's change of minus the distance to the goal (minus the distance on the first
step), so a return is minus the final distance. A NaN action ends that slot's episode with
reward 0 and flag 2. Stepping a slot whose episode is over is an InvalidArgument error.
)doc");

// ------------------------------------------------------------------------------------- reads

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMazeObservation")
    .Output("observation: float32")
    .SetShapeFn(PerSlotShape<kObservationSize>)
    .Doc(R"doc(
Sensors [k, 11] of each listed slot: 1 (bias), six rangefinder distances as fractions of their
range, four goal radar sectors (1 for the sector the goal lies in).
)doc");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMazePosition")
    .Output("position: float32")
    .SetShapeFn(PerSlotShape<2>)
    .Doc("The robot's (x, y) [k, 2] in each listed slot: its behaviour characterisation.");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMazeState")
    .Output("state: float64")
    .SetShapeFn(PerSlotShape<kStateSize>)
    .Doc("Each listed robot's (x, y, heading in degrees, speed, angular velocity) [k, 5].");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMazeFrames")
    .Output("steps: int64")
    .SetShapeFn(PerSlotShape<>)
    .Doc("Steps taken in each listed slot's current (or last) episode.");

NEUROEVO_REGISTER_SLOT_OP("NeuroevoMazeFlags")
    .Output("flags: int32")
    .SetShapeFn(PerSlotShape<>)
    .Doc("Bit flags of each listed slot's current (or last) episode: 2 = ended by a NaN action.");

REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeMake").Device(DEVICE_CPU), MakeOp);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeReset").Device(DEVICE_CPU), EnvResetOp<MazeEnv>);
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeStep").Device(DEVICE_CPU),
                        (EnvStepOp<MazeEnv, FloatActions<MazeEnv>>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeObservation").Device(DEVICE_CPU),
                        (EnvReadOp<MazeEnv, float, &MazeEnv::Observe, kObservationSize>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazePosition").Device(DEVICE_CPU),
                        (EnvReadOp<MazeEnv, float, &MazeEnv::Position, 2>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeState").Device(DEVICE_CPU),
                        (EnvReadOp<MazeEnv, double, &MazeEnv::State, kStateSize>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeFrames").Device(DEVICE_CPU),
                        (EnvReadOp<MazeEnv, int64_t, &MazeEnv::steps>));
REGISTER_KERNEL_BUILDER(Name("NeuroevoMazeFlags").Device(DEVICE_CPU),
                        (EnvReadOp<MazeEnv, int32_t, &MazeEnv::flags>));

}  // namespace
}  // namespace maze
}  // namespace neuroevo
