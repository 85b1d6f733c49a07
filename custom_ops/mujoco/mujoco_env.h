// One MuJoCo locomotion environment (single-threaded) and the spec its slots share.
//
// MujocoSpec loads the task's MJCF model once; every slot's MujocoEnv owns only an mjData and
// reads the shared, never-modified mjModel, so slots can step on different threads. The episode
// logic follows gymnasium's MujocoEnv + TimeLimit: reset = mj_resetData, noise on qpos/qvel,
// mj_forward; step = set ctrl, mj_step frame_skip times, mj_rnePostConstraint (which fills the
// contact forces that Ant's and Humanoid's rewards and observations read; the other tasks read
// none of its outputs and skip it).
#ifndef NEUROEVO_CUSTOM_OPS_MUJOCO_MUJOCO_ENV_H_
#define NEUROEVO_CUSTOM_OPS_MUJOCO_MUJOCO_ENV_H_

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/episode_rng.h"
#include "mujoco/mujoco_task.h"
#include "tensorflow/core/platform/logging.h"

namespace neuroevo {
namespace mujoco {

// Episode flags, reported per slot until its next reset (NeuroevoMujocoFlags).
enum EpisodeFlag : int32_t {
  // MuJoCo raised a warning (bad qpos/qvel/qacc, contact or constraint overflow, singular
  // inertia) or the state became non-finite; the episode ended at that step with reward 0.
  kPhysicsWarning = 1,
  // An action held a NaN; the episode ended before stepping, with reward 0.
  kNanAction = 2,
};

// Process-wide MuJoCo settings, applied once by the first op that makes an environment (a pool,
// or the benchmark loop of mujoco_bench_ops.cc):
// * The default log handler prints and appends to MUJOCO_LOG.TXT in the working directory.
//   Messages go to TF's log instead, warnings at verbosity 1 only: the ops already count each
//   slot's warnings and report them as flags (the one routine warning, settotalmass being
//   deprecated, comes with loading half_cheetah.xml).
// * `import mujoco` (which the op build does, and gymnasium too) installs a clock callback,
//   mjcb_time, that MuJoCo calls around every pipeline stage to fill mjData::timer: about 20%
//   of a locomotion step. Nothing here reads those timers, so the callback is removed;
//   mjData::timer stays zero in this process from then on (documented in envs/mujoco.py).
// Both settings live in the one libmujoco of the process, so one once_flag for every op library
// (mujoco, mujoco_bench) is right.
inline void LogToTensorflow(const mjLogMessage* msg) {
  if (msg->level >= mjLOG_ERROR) {
    LOG(ERROR) << "MuJoCo: " << msg->subject;
  } else if (msg->level == mjLOG_WARNING) {
    VLOG(1) << "MuJoCo: " << msg->subject;
  } else {
    VLOG(2) << "MuJoCo: " << msg->subject;
  }
}

inline void ConfigureMujocoOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    mju_setLogHandler(&LogToTensorflow);
    mjcb_time = nullptr;
  });
}

struct ModelDeleter {
  void operator()(mjModel* m) const { mj_deleteModel(m); }
};
struct DataDeleter {
  void operator()(mjData* d) const { mj_deleteData(d); }
};

// Settings fixed for the life of a pool (the op's attrs).
struct MujocoConfig {
  std::string task;
  std::string xml_path;
  int frame_skip = 0;               // 0: the task's default
  double reset_noise_scale = -1.0;  // negative: the task's default
  int64_t max_episode_steps = 1000;  // 0: no cutoff
  bool terminate_when_unhealthy = true;
};

// The model, task and resolved settings every slot of a pool shares (immutable once made).
class MujocoSpec {
 public:
  static absl::StatusOr<std::shared_ptr<const MujocoSpec>> Create(const MujocoConfig& config) {
    std::unique_ptr<Task> task = MakeTask(config.task);
    if (task == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown MuJoCo task '", config.task, "'; valid tasks: ", kTaskNames));
    }
    if (config.frame_skip < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame_skip must be >= 1 (or 0 for the task default), got ",
                       config.frame_skip));
    }
    if (config.max_episode_steps < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_episode_steps must be >= 0 (0: no cutoff), got ", config.max_episode_steps));
    }
    char error[1024] = "";
    std::unique_ptr<mjModel, ModelDeleter> model(
        mj_loadXML(config.xml_path.c_str(), nullptr, error, sizeof(error)));
    if (model == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cannot load the MuJoCo model '",
                                                     config.xml_path, "': ", error));
    }
    // Every task reads qpos[0..2], six velocities and the torso body; refuse smaller models.
    if (model->nq < 3 || model->nv < 6 || model->nbody < 2 || model->nu < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", config.xml_path, "' (nq=", model->nq, ", nv=", model->nv, ", nbody=",
          model->nbody, ", nu=", model->nu, ") is too small for task ", config.task));
    }
    const std::string problem = task->ModelProblem(*model);
    if (!problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("MuJoCo model '", config.xml_path,
                                                     "' does not fit task ", config.task,
                                                     ": the task ", problem));
    }
    return std::shared_ptr<const MujocoSpec>(
        new MujocoSpec(config, std::move(task), std::move(model)));
  }

  const mjModel& model() const { return *model_; }
  const Task& task() const { return *task_; }
  const MujocoConfig& config() const { return config_; }
  int frame_skip() const { return frame_skip_; }
  double reset_noise_scale() const { return reset_noise_scale_; }
  double dt() const { return model_->opt.timestep * frame_skip_; }
  int observation_size() const { return task_->ObservationSize(*model_); }
  int action_size() const { return static_cast<int>(model_->nu); }
  // Writes the world (x, y) of the root body's origin (the body of joint 0, a child of the
  // world) for the joint positions `qpos`: the free joint's position, or the body's position
  // plus its slide joints' displacements (its hinges turn about its origin in every task).
  // Read from qpos, so it is current after a step (mjData's xpos lags one physics step).
  void RootPosition(const mjtNum* qpos, float* out) const {
    if (root_free_qpos_ >= 0) {
      out[0] = static_cast<float>(qpos[root_free_qpos_]);
      out[1] = static_cast<float>(qpos[root_free_qpos_ + 1]);
      return;
    }
    double x = root_origin_[0], y = root_origin_[1];
    for (const RootSlide& slide : root_slides_) {
      x += qpos[slide.qpos] * slide.axis_x;
      y += qpos[slide.qpos] * slide.axis_y;
    }
    out[0] = static_cast<float>(x);
    out[1] = static_cast<float>(y);
  }

  // Control range of actuator i; +-inf when the actuator is not limited.
  double action_low(int i) const {
    return model_->actuator_ctrllimited[i] ? model_->actuator_ctrlrange[2 * i] : -INFINITY;
  }
  double action_high(int i) const {
    return model_->actuator_ctrllimited[i] ? model_->actuator_ctrlrange[2 * i + 1] : INFINITY;
  }

 private:
  MujocoSpec(const MujocoConfig& config, std::unique_ptr<Task> task,
             std::unique_ptr<mjModel, ModelDeleter> model)
      : config_(config), task_(std::move(task)), model_(std::move(model)) {
    frame_skip_ = config.frame_skip > 0 ? config.frame_skip : task_->defaults().frame_skip;
    reset_noise_scale_ = config.reset_noise_scale >= 0 ? config.reset_noise_scale
                                                       : task_->defaults().reset_noise_scale;
    const mjModel& m = *model_;
    const int body = m.jnt_bodyid[0];  // every task checked njnt >= 1 (ModelProblem)
    if (m.jnt_type[0] == mjJNT_FREE) {
      root_free_qpos_ = m.jnt_qposadr[0];
      return;
    }
    root_origin_[0] = m.body_pos[3 * body];
    root_origin_[1] = m.body_pos[3 * body + 1];
    for (int j = m.body_jntadr[body]; j < m.body_jntadr[body] + m.body_jntnum[body]; ++j) {
      if (m.jnt_type[j] != mjJNT_SLIDE) continue;
      mjtNum axis[3];
      mju_rotVecQuat(axis, m.jnt_axis + 3 * j, m.body_quat + 4 * body);
      root_slides_.push_back({m.jnt_qposadr[j], axis[0], axis[1]});
    }
  }

  // A slide joint of the root body: its qpos address and its axis in the world's x-y plane.
  struct RootSlide {
    int qpos;
    double axis_x, axis_y;
  };

  MujocoConfig config_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<mjModel, ModelDeleter> model_;
  int frame_skip_;
  double reset_noise_scale_;
  int root_free_qpos_ = -1;  // qpos address of the root's free joint, or -1
  double root_origin_[2] = {0, 0};
  std::vector<RootSlide> root_slides_;
};

struct StepOutcome {
  float reward = 0;
  bool terminated = false;
  bool truncated = false;
};

// One slot: an mjData plus the episode's step count and flags. Not thread-safe: the pool
// (common/env_pool.h) gives each slot to one caller at a time and tracks whether its episode
// is running. Slots share the spec, which lives as long as its last slot.
class MujocoEnv {
 public:
  static absl::StatusOr<std::unique_ptr<MujocoEnv>> Create(
      std::shared_ptr<const MujocoSpec> spec) {
    std::unique_ptr<mjData, DataDeleter> data(mj_makeData(&spec->model()));
    if (data == nullptr) {
      return absl::ResourceExhaustedError("mj_makeData failed: out of memory");
    }
    return std::unique_ptr<MujocoEnv>(new MujocoEnv(std::move(spec), std::move(data)));
  }

  const MujocoSpec& spec() const { return *spec_; }
  const std::shared_ptr<const MujocoSpec>& shared_spec() const { return spec_; }
  int action_size() const { return spec_->action_size(); }

  // Starts an episode: the model's initial pose plus reset noise drawn from `seed`.
  void Reset(int64_t seed) {
    const mjModel& m = spec_->model();
    mjData* d = data_.get();
    mj_resetData(&m, d);
    EpisodeRng rng(static_cast<uint64_t>(seed));
    const double scale = spec_->reset_noise_scale();
    for (int i = 0; i < m.nq; ++i) d->qpos[i] += rng.Uniform(-scale, scale);
    const bool normal = spec_->task().defaults().velocity_noise == VelocityNoise::kNormal;
    for (int i = 0; i < m.nv; ++i) {
      d->qvel[i] += normal ? scale * rng.Normal() : rng.Uniform(-scale, scale);
    }
    StartEpisode();
  }

  // Starts an episode from the given joint state (no noise); for parity tests and replays.
  void SetState(const double* qpos, const double* qvel) {
    const mjModel& m = spec_->model();
    mj_resetData(&m, data_.get());
    std::copy(qpos, qpos + m.nq, data_->qpos);
    std::copy(qvel, qvel + m.nv, data_->qvel);
    StartEpisode();
  }

  // Applies `action` (action_size floats) for frame_skip physics steps. NaN actions and
  // MuJoCo warnings end the episode with reward 0 and a flag; +-inf is clipped like any value.
  StepOutcome Step(const float* action) {
    const mjModel& m = spec_->model();
    mjData* d = data_.get();
    StepOutcome out;
    ++steps_;
    out.truncated = spec_->config().max_episode_steps > 0 &&
                    steps_ >= spec_->config().max_episode_steps;
    if (std::any_of(action, action + m.nu, [](float a) { return std::isnan(a); })) {
      return EndEpisode(kNanAction, out);
    }
    for (int i = 0; i < m.nu; ++i) {
      d->ctrl[i] = std::clamp(static_cast<double>(action[i]), spec_->action_low(i),
                              spec_->action_high(i));
    }
    const Task& task = spec_->task();
    const double x_before = task.ForwardPosition(m, *d);
    for (int k = 0; k < spec_->frame_skip(); ++k) mj_step(&m, d);
    if (task.ReadsContactForces()) mj_rnePostConstraint(&m, d);
    if (PhysicsFailed()) return EndEpisode(kPhysicsWarning, out);
    const double x_velocity = (task.ForwardPosition(m, *d) - x_before) / spec_->dt();
    const bool healthy = task.IsHealthy(m, *d);
    out.reward = static_cast<float>(task.Reward(m, *d, x_velocity, healthy));
    out.terminated = !healthy && spec_->config().terminate_when_unhealthy;
    return out;
  }

  // Writes the observation of the current state (observation_size floats) to `out`.
  void Observe(float* out) const { spec_->task().Observe(spec_->model(), *data_, out); }

  // Writes the root body's world (x, y): the behaviour characterisation of novelty search.
  void Position(float* out) const { spec_->RootPosition(data_->qpos, out); }

  int64_t steps() const { return steps_; }
  int32_t flags() const { return flags_; }

 private:
  MujocoEnv(std::shared_ptr<const MujocoSpec> spec, std::unique_ptr<mjData, DataDeleter> data)
      : spec_(std::move(spec)), data_(std::move(data)) {}

  void StartEpisode() {
    mj_forward(&spec_->model(), data_.get());
    steps_ = 0;
    flags_ = 0;
  }

  // MuJoCo counts warnings per mjData (mj_resetData clears them; bad qacc even resets the
  // state silently), so any count means this episode's physics went wrong.
  bool PhysicsFailed() const {
    const mjModel& m = spec_->model();
    const mjData& d = *data_;
    auto finite = [](double x) { return std::isfinite(x); };
    return std::any_of(d.warning, d.warning + mjNWARNING,
                       [](const mjWarningStat& w) { return w.number > 0; }) ||
           !std::all_of(d.qpos, d.qpos + m.nq, finite) ||
           !std::all_of(d.qvel, d.qvel + m.nv, finite);
  }

  StepOutcome EndEpisode(EpisodeFlag flag, StepOutcome out) {
    flags_ |= flag;
    out.reward = 0;
    out.terminated = true;
    return out;
  }

  std::shared_ptr<const MujocoSpec> spec_;
  std::unique_ptr<mjData, DataDeleter> data_;
  int64_t steps_ = 0;
  int32_t flags_ = 0;
};

}  // namespace mujoco
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_MUJOCO_MUJOCO_ENV_H_
