// One robot in Lehman & Stanley's maze navigation task (single-threaded), and the map its slots
// share.
//
// The robot follows the original novelty-search code (Lehman & Stanley 2011, "Abandoning
// objectives: evolution through the search for novelty alone"): a disc of radius 8 with six
// rangefinders of range 100 (at -90, -45, 0, 45, 90 and -180 degrees from its heading) and four
// 90-degree goal radar sectors (front, left, back, right). Each step the two outputs in [0, 1]
// change the angular velocity and the speed by (output - 0.5), both clamped to [-3, 3]; the
// robot moves along its old heading, then turns; a move that would bring its centre closer
// than its radius to a wall is cancelled (the robot stays put, keeping its speed). Angles are
// in degrees, as in the original. neuroevo/envs/maze.py documents the task and holds the maps.
#ifndef NEUROEVO_CUSTOM_OPS_MAZE_MAZE_ENV_H_
#define NEUROEVO_CUSTOM_OPS_MAZE_MAZE_ENV_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace neuroevo {
namespace maze {

constexpr double kRobotRadius = 8.0;
constexpr double kRangefinderRange = 100.0;
constexpr double kMaxSpeed = 3.0;  // bound of both |speed| and |angular velocity| (deg/step)
constexpr std::array<double, 6> kRangefinderAngles = {-90.0, -45.0, 0.0, 45.0, 90.0, -180.0};
// Radar sector i covers relative goal angles [start, start + 90) degrees, wrapping at 360.
constexpr std::array<double, 4> kRadarStarts = {315.0, 45.0, 135.0, 225.0};
// Observation: a bias (1), the rangefinders as fractions of their range, the radar sectors.
constexpr int kObservationSize = 1 + kRangefinderAngles.size() + kRadarStarts.size();
constexpr int kActionSize = 2;   // turn (angular acceleration), speed change; each in [0, 1]
constexpr int kStateSize = 5;    // x, y, heading, speed, angular velocity
constexpr int32_t kNanAction = 2;  // episode flag, the same bit as MuJoCo's NAN_ACTION

struct Point {
  double x = 0, y = 0;
};

inline double Distance(Point a, Point b) { return std::hypot(a.x - b.x, a.y - b.y); }

struct Segment {
  Point a, b;

  // Distance from `p` to the closest point of the segment.
  double DistanceTo(Point p) const {
    const double dx = b.x - a.x, dy = b.y - a.y;
    const double length2 = dx * dx + dy * dy;
    if (length2 == 0) return Distance(a, p);
    const double u = ((p.x - a.x) * dx + (p.y - a.y) * dy) / length2;
    if (u < 0 || u > 1) return std::min(Distance(a, p), Distance(b, p));
    return Distance({a.x + u * dx, a.y + u * dy}, p);
  }

  // Parameter t in (0, 1) along `ray` where it crosses this segment strictly inside both, or
  // a negative value when it does not (parallel segments never cross, as in the original).
  double Crossing(const Segment& ray) const {
    const double rx = ray.b.x - ray.a.x, ry = ray.b.y - ray.a.y;
    const double sx = b.x - a.x, sy = b.y - a.y;
    const double denominator = rx * sy - ry * sx;
    if (denominator == 0) return -1;
    const double qx = a.x - ray.a.x, qy = a.y - ray.a.y;
    const double t = (qx * sy - qy * sx) / denominator;  // along the ray
    const double u = (qx * ry - qy * rx) / denominator;  // along this segment
    return (t > 0 && t < 1 && u > 0 && u < 1) ? t : -1;
  }
};

// Settings fixed for the life of a pool (the make op's attrs).
struct MazeConfig {
  std::vector<Segment> walls;
  Point start;
  double start_heading = 0;  // degrees, counter-clockwise from +x
  Point goal;
  double goal_radius = 5;    // an episode ends (terminated) closer than this to the goal
  int64_t max_episode_steps = 400;  // 0: no cutoff
};

// The map every slot of a pool shares (immutable once made).
class MazeSpec {
 public:
  // `walls` holds 4 numbers (x0, y0, x1, y1) per wall; `start` is (x, y, heading).
  static absl::StatusOr<std::shared_ptr<const MazeSpec>> Create(
      const std::vector<float>& walls, const std::vector<float>& start,
      const std::vector<float>& goal, float goal_radius, int64_t max_episode_steps) {
    if (walls.empty() || walls.size() % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "walls must hold 4 numbers (x0, y0, x1, y1) per wall, got ", walls.size()));
    }
    if (start.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("start must be (x, y, heading), got ", start.size(), " numbers"));
    }
    if (goal.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("goal must be (x, y), got ", goal.size(), " numbers"));
    }
    auto finite = [](float v) { return std::isfinite(v); };
    if (!std::all_of(walls.begin(), walls.end(), finite) ||
        !std::all_of(start.begin(), start.end(), finite) ||
        !std::all_of(goal.begin(), goal.end(), finite)) {
      return absl::InvalidArgumentError("walls, start and goal must be finite numbers");
    }
    if (!(goal_radius > 0) || !std::isfinite(goal_radius)) {
      return absl::InvalidArgumentError(
          absl::StrCat("goal_radius must be a positive number, got ", goal_radius));
    }
    if (max_episode_steps < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_episode_steps must be >= 0 (0: no cutoff), got ", max_episode_steps));
    }
    MazeConfig config;
    for (size_t i = 0; i < walls.size(); i += 4) {
      config.walls.push_back({{walls[i], walls[i + 1]}, {walls[i + 2], walls[i + 3]}});
    }
    config.start = {start[0], start[1]};
    config.start_heading = start[2];
    config.goal = {goal[0], goal[1]};
    config.goal_radius = goal_radius;
    config.max_episode_steps = max_episode_steps;
    return std::shared_ptr<const MazeSpec>(new MazeSpec(std::move(config)));
  }

  const MazeConfig& config() const { return config_; }

  // Whether a robot centred at `p` would touch a wall.
  bool Collides(Point p) const {
    return std::any_of(config_.walls.begin(), config_.walls.end(),
                       [&](const Segment& w) { return w.DistanceTo(p) < kRobotRadius; });
  }

  // Distance from `from` to the nearest wall along the ray of length kRangefinderRange at
  // `degrees`, or the range when the ray crosses none.
  double Range(Point from, double degrees) const {
    const double radians = degrees / 180.0 * M_PI;
    const Segment ray{from, {from.x + std::cos(radians) * kRangefinderRange,
                             from.y + std::sin(radians) * kRangefinderRange}};
    double nearest = 1.0;
    for (const Segment& w : config_.walls) {
      const double t = w.Crossing(ray);
      if (t >= 0 && t < nearest) nearest = t;
    }
    return nearest * kRangefinderRange;
  }

 private:
  explicit MazeSpec(MazeConfig config) : config_(std::move(config)) {}

  MazeConfig config_;
};

struct StepOutcome {
  float reward = 0;
  bool terminated = false;
  bool truncated = false;
};

// One slot: the robot's state and its episode's bookkeeping. Not thread-safe: the pool
// (common/env_pool.h) gives each slot to one caller at a time.
class MazeEnv {
 public:
  // A step is a few hundred flops: far cheaper than waking a worker thread (env_pool.h).
  static constexpr int64_t kStepNanos = 1'000;

  explicit MazeEnv(std::shared_ptr<const MazeSpec> spec) : spec_(std::move(spec)) { Reset(0); }

  // Starts an episode at the map's start, at rest. The task is deterministic: the seed is unused.
  void Reset(int64_t /*seed*/) {
    const MazeConfig& c = spec_->config();
    position_ = c.start;
    heading_ = c.start_heading;
    speed_ = 0;
    angular_velocity_ = 0;
    last_potential_ = 0;
    steps_ = 0;
    flags_ = 0;
  }

  // Applies one action (turn, speed change), each clipped to [0, 1]. The reward is the change
  // of -distance(robot, goal) since the previous step, and -distance after the first step, so
  // an episode's return is minus the robot's final distance to the goal.
  StepOutcome Step(const float* action) {
    const MazeConfig& c = spec_->config();
    StepOutcome out;
    ++steps_;
    out.truncated = c.max_episode_steps > 0 && steps_ >= c.max_episode_steps;
    if (std::isnan(action[0]) || std::isnan(action[1])) {
      flags_ |= kNanAction;
      out.terminated = true;
      return out;
    }
    const double turn = std::clamp(static_cast<double>(action[0]), 0.0, 1.0);
    const double accelerate = std::clamp(static_cast<double>(action[1]), 0.0, 1.0);
    angular_velocity_ = std::clamp(angular_velocity_ + turn - 0.5, -kMaxSpeed, kMaxSpeed);
    speed_ = std::clamp(speed_ + accelerate - 0.5, -kMaxSpeed, kMaxSpeed);
    const double radians = heading_ / 180.0 * M_PI;
    const Point next{position_.x + std::cos(radians) * speed_,
                     position_.y + std::sin(radians) * speed_};
    heading_ += angular_velocity_;
    if (heading_ > 360) heading_ -= 360;
    if (heading_ < 0) heading_ += 360;
    if (!spec_->Collides(next)) position_ = next;
    const double distance = Distance(position_, c.goal);
    out.reward = static_cast<float>(-distance - last_potential_);
    last_potential_ = -distance;
    out.terminated = distance < c.goal_radius;
    return out;
  }

  // Writes the kObservationSize sensor values of the current state to `out`.
  void Observe(float* out) const {
    *out++ = 1.0f;
    for (double angle : kRangefinderAngles) {
      *out++ = static_cast<float>(spec_->Range(position_, heading_ + angle) / kRangefinderRange);
    }
    const Point goal = spec_->config().goal;
    double bearing = std::atan2(goal.y - position_.y, goal.x - position_.x) / M_PI * 180.0 -
                     heading_;
    bearing = std::fmod(bearing, 360.0);
    if (bearing < 0) bearing += 360.0;
    for (double start : kRadarStarts) {
      const bool inside = (bearing >= start && bearing < start + 90) ||
                          (bearing + 360 >= start && bearing + 360 < start + 90);
      *out++ = inside ? 1.0f : 0.0f;
    }
  }

  // The robot's position (x, y): its behaviour characterisation.
  void Position(float* out) const {
    out[0] = static_cast<float>(position_.x);
    out[1] = static_cast<float>(position_.y);
  }

  void State(double* out) const {
    out[0] = position_.x;
    out[1] = position_.y;
    out[2] = heading_;
    out[3] = speed_;
    out[4] = angular_velocity_;
  }

  int action_size() const { return kActionSize; }
  int64_t steps() const { return steps_; }
  int32_t flags() const { return flags_; }

 private:
  std::shared_ptr<const MazeSpec> spec_;
  Point position_;
  double heading_ = 0;
  double speed_ = 0;
  double angular_velocity_ = 0;
  double last_potential_ = 0;  // -distance to the goal after the previous step; 0 at reset
  int64_t steps_ = 0;
  int32_t flags_ = 0;
};

}  // namespace maze
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_MAZE_MAZE_ENV_H_
