// Observation, reward and health rules of gymnasium's v5 MuJoCo locomotion tasks.
//
// A Task only reads an mjData; stepping the physics and the episode bookkeeping live in
// MujocoEnv (mujoco_env.h). The rules follow gymnasium 1.x (envs/mujoco/{hopper,walker2d,
// half_cheetah,ant,humanoid}_v5.py) with their default arguments, written from the formulas in
// those files; tests/test_mujoco_op.py checks observations, rewards and terminations against
// gymnasium side by side. One deliberate difference: the control cost is taken on the clipped
// action (what MuJoCo applies), where gymnasium charges the raw action; the two agree for every
// action inside the control range.
#ifndef NEUROEVO_CUSTOM_OPS_MUJOCO_MUJOCO_TASK_H_
#define NEUROEVO_CUSTOM_OPS_MUJOCO_MUJOCO_TASK_H_

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace neuroevo {
namespace mujoco {

// How gymnasium draws the reset noise of qvel (qpos noise is always uniform).
enum class VelocityNoise { kUniform, kNormal };

// Settings of a task that gymnasium exposes as constructor arguments; their defaults.
struct TaskDefaults {
  int frame_skip;
  double reset_noise_scale;
  VelocityNoise velocity_noise;
};

// One locomotion task: which observation it shows, what it rewards, when the robot is healthy.
class Task {
 public:
  virtual ~Task() = default;

  virtual const TaskDefaults& defaults() const = 0;
  // What the task needs of a model (a custom MJCF file) and this one lacks, naming the joint,
  // body or actuator; empty when the model fits.
  virtual std::string ModelProblem(const mjModel& m) const = 0;
  // Whether observations or rewards read the contact forces (cfrc_ext) that only
  // mj_rnePostConstraint computes; the others skip that call (~2% of a Hopper step).
  virtual bool ReadsContactForces() const = 0;
  virtual int ObservationSize(const mjModel& m) const = 0;
  virtual void Observe(const mjModel& m, const mjData& d, float* out) const = 0;
  // Position along x whose rate of change (over one agent step) is the forward velocity.
  virtual double ForwardPosition(const mjModel& m, const mjData& d) const = 0;
  virtual bool IsHealthy(const mjModel& m, const mjData& d) const = 0;
  // Reward of a step that ended in `d`, moved forward at `x_velocity` and applied `d.ctrl`.
  virtual double Reward(const mjModel& m, const mjData& d, double x_velocity,
                        bool healthy) const = 0;
};

namespace internal {

inline double SquaredNorm(const mjtNum* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

inline float* CopyOut(const mjtNum* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i]);
  return out + n;
}

inline float* CopyOutClipped(const mjtNum* x, int64_t n, double lo, double hi, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::clamp(x[i], lo, hi));
  return out + n;
}

// The name of joint j, or "(unnamed)".
inline std::string JointName(const mjModel& m, int j) {
  const char* name = mj_id2name(&m, mjOBJ_JOINT, j);
  return name != nullptr && *name != 0 ? std::string("'") + name + "'" : "(unnamed)";
}

inline const char* JointTypeName(int type) {
  switch (type) {
    case mjJNT_FREE: return "free";
    case mjJNT_BALL: return "ball";
    case mjJNT_SLIDE: return "slide";
    default: return "hinge";
  }
}

inline std::string Describe(const mjModel& m, int j) {
  return "joint " + std::to_string(j) + " " + JointName(m, j) + " is a " +
         JointTypeName(m.jnt_type[j]) + " joint";
}

inline bool AxisIs(const mjModel& m, int j, int axis) {
  const mjtNum* a = m.jnt_axis + 3 * j;
  return a[axis] > 0 && a[(axis + 1) % 3] == 0 && a[(axis + 2) % 3] == 0;
}

// The planar walkers read qpos[0] (x), qpos[1] (height) and qpos[2] (pitch): the first three
// joints must be gymnasium's rootx, rootz and rooty on the torso.
inline std::string PlanarRootProblem(const mjModel& m) {
  const std::string want =
      "needs the planar root joints rootx (slide along x), rootz (slide along z) and rooty "
      "(hinge) as its first three joints, on the torso (body 1)";
  if (m.njnt < 3) return want + ", but the model has " + std::to_string(m.njnt) + " joints";
  const int types[] = {mjJNT_SLIDE, mjJNT_SLIDE, mjJNT_HINGE};
  for (int j = 0; j < 3; ++j) {
    if (m.jnt_type[j] != types[j] || m.jnt_bodyid[j] != 1) {
      return want + ", but " + Describe(m, j) + " of body " + std::to_string(m.jnt_bodyid[j]);
    }
  }
  if (!AxisIs(m, 0, 0) || !AxisIs(m, 1, 2)) {
    return want + ", but the slide axes of joints 0 and 1 are not +x and +z";
  }
  return "";
}

// Ant and Humanoid read qpos[0..6] as the torso's free joint (gymnasium's "root").
inline std::string FreeRootProblem(const mjModel& m) {
  const std::string want = "needs a free root joint (gymnasium's 'root') on the torso (body 1)";
  if (m.njnt < 1) return want + ", but the model has no joints";
  if (m.jnt_type[0] != mjJNT_FREE || m.jnt_bodyid[0] != 1) {
    return want + ", but " + Describe(m, 0) + " of body " + std::to_string(m.jnt_bodyid[0]);
  }
  return "";
}

}  // namespace internal

// Hopper, Walker2d and HalfCheetah: planar robots on the root joints rootx, rootz and rooty,
// moving along qpos[0]. Observation: qpos without the x coordinate, then qvel clipped to
// [-qvel_bound, qvel_bound] (infinite: unclipped).
class PlanarTask : public Task {
 public:
  PlanarTask(const TaskDefaults& defaults, double qvel_bound)
      : defaults_(defaults), qvel_bound_(qvel_bound) {}

  const TaskDefaults& defaults() const override { return defaults_; }
  std::string ModelProblem(const mjModel& m) const override {
    return internal::PlanarRootProblem(m);
  }
  bool ReadsContactForces() const override { return false; }
  int ObservationSize(const mjModel& m) const override {
    return static_cast<int>(m.nq - 1 + m.nv);
  }
  void Observe(const mjModel& m, const mjData& d, float* out) const override {
    out = internal::CopyOut(d.qpos + 1, m.nq - 1, out);
    internal::CopyOutClipped(d.qvel, m.nv, -qvel_bound_, qvel_bound_, out);
  }
  double ForwardPosition(const mjModel&, const mjData& d) const override { return d.qpos[0]; }

 private:
  TaskDefaults defaults_;
  double qvel_bound_;
};

// Hopper and Walker2d: planar bipeds rewarded for x velocity while upright; qvel clipped to
// [-10, 10] in the observation.
class PlanarWalkerTask : public PlanarTask {
 public:
  struct Params {
    TaskDefaults defaults;
    double ctrl_cost_weight;
    double healthy_reward;
    double min_z, max_z;          // torso height qpos[1], open interval
    double min_angle, max_angle;  // torso angle qpos[2], open interval
    double state_bound;           // |qpos[2:], qvel| < bound (Hopper); 0 disables the check
  };
  explicit PlanarWalkerTask(const Params& p) : PlanarTask(p.defaults, 10.0), p_(p) {}

  bool IsHealthy(const mjModel& m, const mjData& d) const override {
    const double z = d.qpos[1], angle = d.qpos[2];
    if (!(p_.min_z < z && z < p_.max_z && p_.min_angle < angle && angle < p_.max_angle)) {
      return false;
    }
    if (p_.state_bound <= 0) return true;
    auto inside = [&](double x) { return -p_.state_bound < x && x < p_.state_bound; };
    return std::all_of(d.qpos + 2, d.qpos + m.nq, inside) &&
           std::all_of(d.qvel, d.qvel + m.nv, inside);
  }
  double Reward(const mjModel& m, const mjData& d, double x_velocity,
                bool healthy) const override {
    return x_velocity + (healthy ? p_.healthy_reward : 0.0) -
           p_.ctrl_cost_weight * internal::SquaredNorm(d.ctrl, m.nu);
  }

 private:
  Params p_;
};

// HalfCheetah: never terminates; qvel unclipped in the observation.
class HalfCheetahTask : public PlanarTask {
 public:
  HalfCheetahTask() : PlanarTask({5, 0.1, VelocityNoise::kNormal}, INFINITY) {}

  bool IsHealthy(const mjModel&, const mjData&) const override { return true; }
  double Reward(const mjModel& m, const mjData& d, double x_velocity, bool) const override {
    return x_velocity - 0.1 * internal::SquaredNorm(d.ctrl, m.nu);
  }
};

// Ant and Humanoid: 3-d robots on a free root joint (the torso's), whose observation starts
// with qpos without x and y, then qvel, and whose rewards read the contact forces; each task
// appends its own body quantities (`ObserveBodies`).
class FreeRootTask : public Task {
 public:
  explicit FreeRootTask(const TaskDefaults& defaults) : defaults_(defaults) {}

  const TaskDefaults& defaults() const override { return defaults_; }
  std::string ModelProblem(const mjModel& m) const override {
    return internal::FreeRootProblem(m);
  }
  bool ReadsContactForces() const override { return true; }
  int ObservationSize(const mjModel& m) const override {
    return static_cast<int>(m.nq - 2 + m.nv) + BodiesSize(m);
  }
  void Observe(const mjModel& m, const mjData& d, float* out) const override {
    out = internal::CopyOut(d.qpos + 2, m.nq - 2, out);
    out = internal::CopyOut(d.qvel, m.nv, out);
    ObserveBodies(m, d, out);
  }

 protected:
  virtual int BodiesSize(const mjModel& m) const = 0;
  virtual void ObserveBodies(const mjModel& m, const mjData& d, float* out) const = 0;

 private:
  TaskDefaults defaults_;
};

// Ant: quadruped; forward velocity of the torso body (body 1). Observation: then the external
// contact forces of every body but the world, clipped to [-1, 1]. Healthy: a finite state
// with the torso height in the closed interval [0.2, 1].
class AntTask : public FreeRootTask {
 public:
  AntTask() : FreeRootTask({5, 0.1, VelocityNoise::kNormal}) {}

  double ForwardPosition(const mjModel&, const mjData& d) const override {
    return d.xpos[3 * kTorso];
  }
  bool IsHealthy(const mjModel& m, const mjData& d) const override {
    auto finite = [](double x) { return std::isfinite(x); };
    const double z = d.qpos[2];
    return std::all_of(d.qpos, d.qpos + m.nq, finite) &&
           std::all_of(d.qvel, d.qvel + m.nv, finite) && 0.2 <= z && z <= 1.0;
  }
  double Reward(const mjModel& m, const mjData& d, double x_velocity,
                bool healthy) const override {
    double contact = 0;
    for (int i = 0; i < 6 * m.nbody; ++i) {
      const double f = std::clamp(d.cfrc_ext[i], -1.0, 1.0);
      contact += f * f;
    }
    return x_velocity + (healthy ? 1.0 : 0.0) - 0.5 * internal::SquaredNorm(d.ctrl, m.nu) -
           5e-4 * contact;
  }

 protected:
  int BodiesSize(const mjModel& m) const override { return 6 * (m.nbody - 1); }
  void ObserveBodies(const mjModel& m, const mjData& d, float* out) const override {
    internal::CopyOutClipped(d.cfrc_ext + 6, 6 * (m.nbody - 1), -1.0, 1.0, out);
  }

 private:
  static constexpr int kTorso = 1;
};

// Humanoid: forward velocity of the whole-body centre of mass. Observation: then per body but
// the world: inertia (10), velocity (6), then actuator forces on the non-free joints, then
// external contact forces (6 per body). Healthy: torso height in the open interval (1, 2).
class HumanoidTask : public FreeRootTask {
 public:
  HumanoidTask() : FreeRootTask({5, 1e-2, VelocityNoise::kUniform}) {}

  double ForwardPosition(const mjModel& m, const mjData& d) const override {
    double weighted = 0, mass = 0;
    for (int b = 0; b < m.nbody; ++b) {
      weighted += m.body_mass[b] * d.xipos[3 * b];
      mass += m.body_mass[b];
    }
    return weighted / mass;
  }
  bool IsHealthy(const mjModel&, const mjData& d) const override {
    return 1.0 < d.qpos[2] && d.qpos[2] < 2.0;
  }
  double Reward(const mjModel& m, const mjData& d, double x_velocity,
                bool healthy) const override {
    const double contact =
        std::min(5e-7 * internal::SquaredNorm(d.cfrc_ext, 6 * m.nbody), 10.0);
    return 1.25 * x_velocity + (healthy ? 5.0 : 0.0) -
           0.1 * internal::SquaredNorm(d.ctrl, m.nu) - contact;
  }

 protected:
  int BodiesSize(const mjModel& m) const override {
    return (10 + 6 + 6) * (m.nbody - 1) + (m.nv - 6);
  }
  void ObserveBodies(const mjModel& m, const mjData& d, float* out) const override {
    out = internal::CopyOut(d.cinert + 10, 10 * (m.nbody - 1), out);
    out = internal::CopyOut(d.cvel + 6, 6 * (m.nbody - 1), out);
    out = internal::CopyOut(d.qfrc_actuator + 6, m.nv - 6, out);
    internal::CopyOut(d.cfrc_ext + 6, 6 * (m.nbody - 1), out);
  }
};

inline constexpr std::string_view kTaskNames = "Ant, HalfCheetah, Hopper, Humanoid, Walker2d";

// The task called `name`, or nullptr when there is none (callers list kTaskNames).
inline std::unique_ptr<Task> MakeTask(std::string_view name) {
  if (name == "Hopper") {
    return std::make_unique<PlanarWalkerTask>(PlanarWalkerTask::Params{
        {4, 5e-3, VelocityNoise::kUniform}, 1e-3, 1.0, 0.7, INFINITY, -0.2, 0.2, 100.0});
  }
  if (name == "Walker2d") {
    return std::make_unique<PlanarWalkerTask>(PlanarWalkerTask::Params{
        {4, 5e-3, VelocityNoise::kUniform}, 1e-3, 1.0, 0.8, 2.0, -1.0, 1.0, 0.0});
  }
  if (name == "HalfCheetah") return std::make_unique<HalfCheetahTask>();
  if (name == "Ant") return std::make_unique<AntTask>();
  if (name == "Humanoid") return std::make_unique<HumanoidTask>();
  return nullptr;
}

}  // namespace mujoco
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_MUJOCO_MUJOCO_TASK_H_
