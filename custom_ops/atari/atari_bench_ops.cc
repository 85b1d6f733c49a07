// Benchmark-only op library atari_bench: NeuroevoAtariRawLoop, the per-core ceiling of
// benchmarks/envs.py (a bare ALE loop with no preprocessing, no pool and no TensorFlow between
// frames). It makes its own ALEInterface and touches no env resource, so it loads beside or
// without the production `atari` library. Like it, this library links ALE (GPL-2.0).
//
// ALE quieting and the ROM check are shared with the env ops (atari_env.h).

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "atari/atari_env.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace neuroevo {
namespace atari {
namespace {

namespace tf = ::tensorflow;

REGISTER_OP("NeuroevoAtariRawLoop")
    .Output("seconds: float64")
    .Attr("game: string")
    .Attr("rom_path: string")
    .Attr("frames: int >= 1")
    .Attr("seed: int = 0")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc(R"doc(
Benchmark ceiling: runs one bare ALEInterface for `frames` frames in the calling thread (a
uniformly random minimal-set action every 4 frames, reset_game on game over, no screen reads)
and returns the elapsed seconds, ROM loading excluded.
)doc");

class AtariRawLoopOp : public tf::OpKernel {
 public:
  explicit AtariRawLoopOp(tf::OpKernelConstruction* ctx) : tf::OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("game", &game_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rom_path", &rom_path_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("frames", &frames_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed_));
  }

  void Compute(tf::OpKernelContext* ctx) override {
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
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<double>()() = elapsed.count();
  }

 private:
  std::string game_;
  std::string rom_path_;
  int64_t frames_ = 0;
  int64_t seed_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoAtariRawLoop").Device(tf::DEVICE_CPU), AtariRawLoopOp);

}  // namespace
}  // namespace atari
}  // namespace neuroevo
