// The engine-independent half of every C++ env kind's ops (Atari, MuJoCo, the maze).
//
// An env op library owns `num_slots` single-threaded environment instances inside one TF
// resource, an `EnvPool<Env>`. Every op call names the slots it touches with an int32 index
// vector; this header validates those vectors, claims the slots for the duration of the call
// (so two calls that share a slot fail cleanly instead of racing), tracks whether each slot's
// episode is running, and runs per-slot work on TensorFlow's intra-op CPU worker pool.
//
// It also holds what every env op library's kernels share, templated on the env: making the
// pool and its handle, shape functions, and the reset, step and per-slot read kernels. An ops
// file registers its ops and keeps only what is specific to its engine.
//
// The engine supplies only the `Env` class (reset/step/observe on one instance). Nothing in
// here knows what an emulator or a physics model is. What the shared kernels need of it:
//   * `void Reset(int64_t seed)`;
//   * `Outcome Step(Action)`, where Outcome has `reward`, `terminated` and `truncated` and
//     Action is what the op's action reader hands out (see `EnvStepOp`);
//   * optionally `static constexpr int64_t kStepNanos`, the cost of one step (see StepCost);
//   * for continuous actions read by FloatActions, `int action_size() const`.

#ifndef NEUROEVO_CUSTOM_OPS_COMMON_ENV_POOL_H_
#define NEUROEVO_CUSTOM_OPS_COMMON_ENV_POOL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"
#include "common/resource_handle.h"
#include "common/tf_names.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace neuroevo {

// Where a slot's episode stands. Only the thread that has claimed the slot reads or writes it.
enum class SlotStatus : uint8_t {
  kNeverReset,  // made, but no episode started yet
  kRunning,     // reset, may be stepped
  kDone,        // the last step terminated or truncated the episode; must be reset
};

// Most slots one pool may hold (neuroevo.core.indices.MAX_SLOTS in Python): make ops refuse more
// before allocating anything, so a typo such as 10**9 is an error, not an out-of-memory crash.
constexpr int64_t kMaxSlots = int64_t{1} << 16;

// Per-slot cost hint for ParallelForSlots: emulator steps and resets cost far more than the
// few microseconds it takes to wake a worker; copying an observation out costs less.
constexpr int64_t kExpensiveSlotNanos = 100'000;
constexpr int64_t kCheapSlotNanos = 2'000;

// Work (hinted nanoseconds) below which a call runs inline. A helper pays a wake-up, and the
// caller a sleep and a wake-up when it waits for the helper's last slot: tens of us each on a
// shared VM. At 50 us, two rollout workers of 100 maze robots each (100 us of hinted work a
// step) were 7% slower with helpers than without (docs/PERFORMANCE.md).
constexpr int64_t kInlineWorkNanos = 200'000;

// Per-slot cost hint of an env's reset and step for ParallelForSlots: `Env::kStepNanos` when
// the env declares one (a cheap simulation that threads would only slow down), else
// kExpensiveSlotNanos.
template <typename Env, typename = void>
struct StepCost {
  static constexpr int64_t kNanos = kExpensiveSlotNanos;
};
template <typename Env>
struct StepCost<Env, std::void_t<decltype(Env::kStepNanos)>> {
  static constexpr int64_t kNanos = Env::kStepNanos;
};

// Runs `fn(i)` for every i in [0, count) on the CPU worker pool of `ctx`'s device.
//
// Slots are handed out one at a time (ParallelForChunks), so slots of uneven cost (an episode
// that ends early, a reset among steps) balance across threads, and a call is not held up
// behind other callers' work on the pool. With an intra-op pool of one thread, or less than
// kInlineWorkNanos of work in total (`nanos_per_slot` * count), everything runs inline. `fn`
// must not throw. `helpers_welcome`: see ParallelForChunks (SlotCall::Alone for an op on
// slots).
inline void ParallelForSlots(tensorflow::OpKernelContext* ctx, int64_t count,
                             const std::function<void(int64_t)>& fn,
                             int64_t nanos_per_slot = kExpensiveSlotNanos,
                             const std::function<bool()>& helpers_welcome = nullptr) {
  if (count <= 0) return;
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  if (count * nanos_per_slot < kInlineWorkNanos) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  ParallelForChunks(
      pool, count, 1,
      [&fn](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) fn(i);
      },
      helpers_welcome);
}

// Checks that `t` is an int32 vector of distinct slot ids in [0, num_slots) and copies it.
// The messages name the offending position and value, e.g. "indices[2] = 9 is out of range".
inline absl::Status ReadIndices(const tensorflow::Tensor& t, int32_t num_slots,
                                std::vector<int32_t>* out) {
  if (t.dtype() != tensorflow::DT_INT32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "indices must be int32, got ", tensorflow::DataTypeString(t.dtype())));
  }
  if (t.dims() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "indices must be a vector [k], got shape ", t.shape().DebugString()));
  }
  const auto flat = t.flat<int32_t>();
  const int64_t k = flat.size();
  out->assign(flat.data(), flat.data() + k);
  // first_seen[s] = 1 + position of slot s in indices, 0 if absent.
  std::vector<int32_t> first_seen(k > 1 ? num_slots : 0, 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t slot = (*out)[i];
    if (slot < 0 || slot >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("indices[", i, "] = ", slot,
                                                     " is out of range: the env has ",
                                                     num_slots, " slots [0, ", num_slots, ")"));
    }
    if (k > 1) {
      if (first_seen[slot] != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("indices[", i, "] = ", slot, " duplicates indices[",
                         first_seen[slot] - 1, "]: each slot may appear once per call"));
      }
      first_seen[slot] = static_cast<int32_t>(i) + 1;
    }
  }
  return absl::OkStatus();
}

// Checks that a per-slot input has dtype `dtype` and shape [k, trailing...].
inline absl::Status CheckBatchInput(const tensorflow::Tensor& t, const char* name,
                                    tensorflow::DataType dtype, int64_t k,
                                    const std::vector<int64_t>& trailing = {}) {
  if (t.dtype() != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be ",
                                                   tensorflow::DataTypeString(dtype), ", got ",
                                                   tensorflow::DataTypeString(t.dtype())));
  }
  tensorflow::TensorShape want({k});
  for (int64_t d : trailing) want.AddDim(d);
  if (t.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must have shape ", want.DebugString(),
                                                   " (one per index), got ",
                                                   t.shape().DebugString()));
  }
  return absl::OkStatus();
}

// `num_slots` environments of one kind behind a TF resource handle.
//
// The pool is made once per `make` op call and handed out as a ref-counting handle, so it is
// freed when the last tensor holding the handle goes away (no resource-manager bookkeeping).
// Concurrency contract: any number of op calls may run at once as long as their index sets are
// disjoint; each call claims its slots with `Claim` and a call that finds one of its slots
// already claimed fails with InvalidArgument instead of touching it. The pool counts the calls
// at work (`active_calls`), so that a call shares its slots with pool threads only while no
// other call, i.e. no other rollout worker, keeps the cores busy (SlotCall::Alone).
template <typename Env>
class EnvPool : public tensorflow::ResourceBase {
 public:
  // Marks a set of slots busy for one op call, which counts as active; releases them when
  // destroyed.
  class Claim {
   public:
    Claim() = default;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    Claim(Claim&& other) noexcept : pool_(other.pool_), slots_(std::move(other.slots_)) {
      other.pool_ = nullptr;
    }
    ~Claim() {
      if (pool_ == nullptr) return;
      for (int32_t slot : slots_) pool_->busy_[slot].store(false, std::memory_order_release);
      pool_->active_calls_.fetch_sub(1, std::memory_order_relaxed);
    }

   private:
    friend class EnvPool;
    EnvPool* pool_ = nullptr;
    std::vector<int32_t> slots_;
  };

  EnvPool(std::string description, std::vector<std::unique_ptr<Env>> envs)
      : description_(std::move(description)),
        envs_(std::move(envs)),
        status_(envs_.size(), SlotStatus::kNeverReset),
        busy_(new std::atomic<bool>[envs_.size()]) {
    for (size_t i = 0; i < envs_.size(); ++i) busy_[i].store(false);
  }

  int32_t num_slots() const { return static_cast<int32_t>(envs_.size()); }
  Env& env(int32_t slot) { return *envs_[slot]; }
  SlotStatus status(int32_t slot) const { return status_[slot]; }
  void set_status(int32_t slot, SlotStatus s) { status_[slot] = s; }

  // Claims every listed (already range-checked, distinct) slot or none of them.
  absl::Status TryClaim(const std::vector<int32_t>& slots, Claim* claim) {
    active_calls_.fetch_add(1, std::memory_order_relaxed);
    claim->pool_ = this;
    claim->slots_.clear();
    claim->slots_.reserve(slots.size());
    for (int32_t slot : slots) {
      if (busy_[slot].exchange(true, std::memory_order_acquire)) {
        // Claim's destructor releases what was taken so far.
        return absl::InvalidArgumentError(absl::StrCat(
            "slot ", slot, " is in use by another call running at the same time: concurrent "
            "calls must use disjoint index sets"));
      }
      claim->slots_.push_back(slot);
    }
    return absl::OkStatus();
  }

  // Checks that every listed slot may be stepped (it was reset and its episode is running).
  absl::Status CheckSteppable(const std::vector<int32_t>& slots) const {
    for (size_t i = 0; i < slots.size(); ++i) {
      const SlotStatus s = status_[slots[i]];
      if (s == SlotStatus::kRunning) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", slots[i], " (indices[", i, "]) cannot be stepped: ",
          s == SlotStatus::kDone ? "its episode is over (terminated or truncated)"
                                 : "it has never been reset",
          "; call reset on it first"));
    }
    return absl::OkStatus();
  }

  // Op calls holding a Claim on this pool right now, the asking one included.
  int active_calls() const { return active_calls_.load(std::memory_order_relaxed); }

  std::string DebugString() const override { return description_; }

 private:
  const std::string description_;
  const std::vector<std::unique_ptr<Env>> envs_;
  std::vector<SlotStatus> status_;  // each entry guarded by the matching busy_ flag
  std::unique_ptr<std::atomic<bool>[]> busy_;
  std::atomic<int> active_calls_{0};
};

// Everything an op on existing slots needs: the pool, the validated indices and their claim.
template <typename Env>
struct SlotCall {
  tensorflow::core::RefCountPtr<EnvPool<Env>> pool;
  std::vector<int32_t> slots;
  typename EnvPool<Env>::Claim claim;

  // Input 0 is the handle and input 1 the indices, by convention of all env ops.
  absl::Status Begin(tensorflow::OpKernelContext* ctx) {
    absl::Status s = LookupHandle(ctx, 0, &pool);
    if (!s.ok()) return s;
    s = ReadIndices(ctx->input(1), pool->num_slots(), &slots);
    if (!s.ok()) return s;
    return pool->TryClaim(slots, &claim);
  }

  int64_t size() const { return static_cast<int64_t>(slots.size()); }
  // ParallelForSlots' gate: pool threads help this call only while it is the pool's only
  // active call. Two rollout workers stepping at once already keep two cores busy; a helper
  // would preempt the other worker and hold this call up until it gets a core back.
  std::function<bool()> Alone() const {
    const EnvPool<Env>* p = pool.get();
    return [p] { return p->active_calls() <= 1; };
  }
  // The env of indices[i], for i in [0, size()): there is none when the call lists no slots.
  Env& env(int64_t i) const { return pool->env(slots[i]); }
  // What every slot shares (spec, sizes), read from slot 0 of the pool, which always exists:
  // valid for an empty index vector too, where env(0) would read past the end.
  const Env& shared() const { return pool->env(0); }
};

// ------------------------------------------------------------------------------ making a pool

// Makes `count` envs with `create()` (returning absl::StatusOr<std::unique_ptr<Env>>) on the
// worker pool, `nanos_per_env` being the cost hint of one (0 makes them all in the calling
// thread); the first failure, by slot, wins.
template <typename Env, typename Create>
absl::StatusOr<std::vector<std::unique_ptr<Env>>> CreateEnvs(tensorflow::OpKernelContext* ctx,
                                                            int32_t count, const Create& create,
                                                            int64_t nanos_per_env) {
  std::vector<std::unique_ptr<Env>> envs(count);
  std::vector<absl::Status> errors(count);
  ParallelForSlots(
      ctx, count,
      [&](int64_t i) {
        auto env = create();
        if (env.ok()) {
          envs[i] = std::move(*env);
        } else {
          errors[i] = env.status();
        }
      },
      nanos_per_env);
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  return envs;
}

// Puts `envs` in a new pool and writes its ref-counting handle to output 0 of `ctx`.
template <typename Env>
absl::Status OutputNewPool(tensorflow::OpKernelContext* ctx, std::string description,
                           std::vector<std::unique_ptr<Env>> envs) {
  return OutputHandle(ctx, new EnvPool<Env>(std::move(description), std::move(envs)));
}

// ------------------------------------------------------------------------ op registration

// Registers an op on listed slots: inputs 0 and 1 are the env's handle and the int32 index
// vector; the op is stateful. Chain the rest (further inputs, outputs, shape fn, doc).
#define NEUROEVO_REGISTER_SLOT_OP(name) \
  REGISTER_OP(name).Input("handle: resource").Input("indices: int32").SetIsStateful()

// Registers an env's step op (EnvStepOp): a slot op taking actions of `action_type` (a string
// literal, e.g. "float32") and giving reward, terminated and truncated. Chain the shape fn
// and doc.
#define NEUROEVO_REGISTER_STEP_OP(name, action_type) \
  NEUROEVO_REGISTER_SLOT_OP(name)                    \
      .Input("actions: " action_type)                \
      .Output("reward: float32")                     \
      .Output("terminated: bool")                    \
      .Output("truncated: bool")

// ---------------------------------------------------------------------------- shape functions

// Input 0 is the scalar handle and input 1 the index vector [k]; sets `k`.
inline absl::Status IndexCount(InferenceContext* c, DimensionHandle* k) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
  ShapeHandle indices;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &indices));
  *k = c->Dim(indices, 0);
  return absl::OkStatus();
}

// Ops on listed slots whose every output is [k, kDims...].
template <int64_t... kDims>
absl::Status PerSlotShape(InferenceContext* c) {
  DimensionHandle k;
  TF_RETURN_IF_ERROR(IndexCount(c, &k));
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->MakeShape({k, kDims...}));
  return absl::OkStatus();
}

// Reset ops: (handle, indices [k], seeds [k]), no outputs.
inline absl::Status ResetShape(InferenceContext* c) {
  DimensionHandle k;
  TF_RETURN_IF_ERROR(IndexCount(c, &k));
  ShapeHandle seeds;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &seeds));
  DimensionHandle merged;
  return c->Merge(k, c->Dim(seeds, 0), &merged);
}

// ------------------------------------------------------------------------------------ kernels

// Base of kernels that read only what every slot shares (spec, action set), from slot 0,
// without claiming slots: input 0 is the handle.
template <typename Env>
class EnvSharedOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) final {
    tensorflow::core::RefCountPtr<EnvPool<Env>> pool;
    OP_REQUIRES_OK(ctx, LookupHandle(ctx, 0, &pool));
    Compute(ctx, pool->env(0));
  }

 protected:
  // `first` is slot 0; only its immutable, shared parts may be read.
  virtual void Compute(OpKernelContext* ctx, const Env& first) = 0;
};

// Base of kernels on the listed slots: claims them (inputs 0 and 1, see SlotCall) for the
// duration of the call and hands them to the engine's Compute.
template <typename Env>
class EnvSlotsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) final {
    SlotCall<Env> call;
    OP_REQUIRES_OK(ctx, call.Begin(ctx));
    Compute(ctx, call);
  }

 protected:
  virtual void Compute(OpKernelContext* ctx, const SlotCall<Env>& call) = 0;
};

// Starts an episode in each listed slot from seeds[i] (input 2, int64 [k]).
template <typename Env>
class EnvResetOp : public EnvSlotsOp<Env> {
 public:
  using EnvSlotsOp<Env>::EnvSlotsOp;

 protected:
  void Compute(OpKernelContext* ctx, const SlotCall<Env>& call) override {
    const Tensor& seeds = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckBatchInput(seeds, "seeds", tensorflow::DT_INT64, call.size()));
    const auto seed = seeds.flat<int64_t>();
    ParallelForSlots(
        ctx, call.size(),
        [&](int64_t i) {
          call.env(i).Reset(seed(i));
          call.pool->set_status(call.slots[i], SlotStatus::kRunning);
        },
        StepCost<Env>::kNanos, call.Alone());
  }
};

// Advances each listed slot by one step with the action of input 2, writing the outputs
// reward (float32 [k]), terminated and truncated (bool [k]); a slot whose episode ends is
// marked done. `Actions` reads and checks input 2 for the engine:
//   absl::Status Read(const tensorflow::Tensor& actions, const SlotCall<Env>& call);
//   <Env::Step's argument> operator[](int64_t i) const;  // the action of indices[i]
template <typename Env, typename Actions>
class EnvStepOp : public EnvSlotsOp<Env> {
 public:
  using EnvSlotsOp<Env>::EnvSlotsOp;

 protected:
  void Compute(OpKernelContext* ctx, const SlotCall<Env>& call) override {
    Actions actions;
    OP_REQUIRES_OK(ctx, actions.Read(ctx->input(2), call));
    OP_REQUIRES_OK(ctx, call.pool->CheckSteppable(call.slots));
    const TensorShape shape({call.size()});
    Tensor *reward = nullptr, *terminated = nullptr, *truncated = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &reward));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, shape, &terminated));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, shape, &truncated));
    auto reward_k = reward->flat<float>();
    auto terminated_k = terminated->flat<bool>();
    auto truncated_k = truncated->flat<bool>();
    ParallelForSlots(
        ctx, call.size(),
        [&](int64_t i) {
          const auto out = call.env(i).Step(actions[i]);
          reward_k(i) = static_cast<float>(out.reward);
          terminated_k(i) = out.terminated;
          truncated_k(i) = out.truncated;
          if (out.terminated || out.truncated) {
            call.pool->set_status(call.slots[i], SlotStatus::kDone);
          }
        },
        StepCost<Env>::kNanos, call.Alone());
  }
};

// Continuous actions of a step call for EnvStepOp: float32 [k, env.action_size()], one row per
// listed slot; the row of indices[i] is handed to Env::Step as a `const float*`.
template <typename Env>
class FloatActions {
 public:
  absl::Status Read(const tensorflow::Tensor& actions, const SlotCall<Env>& call) {
    size_ = call.shared().action_size();
    absl::Status s =
        CheckBatchInput(actions, "actions", tensorflow::DT_FLOAT, call.size(), {size_});
    if (s.ok()) data_ = actions.flat<float>().data();
    return s;
  }

  const float* operator[](int64_t i) const { return data_ + i * size_; }

 private:
  const float* data_ = nullptr;
  int64_t size_ = 0;
};

// Allocates output 0 as [k, row...] and fills row i from slot indices[i] with
// `write(env, row_pointer)`. `nanos_per_slot` is ParallelForSlots' cost hint; 0 runs inline.
template <typename T, typename Env, typename Write>
absl::Status WritePerSlot(OpKernelContext* ctx, const SlotCall<Env>& call,
                          const TensorShape& row, const Write& write,
                          int64_t nanos_per_slot = 0) {
  TensorShape shape({call.size()});
  shape.AppendShape(row);
  Tensor* out = nullptr;
  absl::Status s = ctx->allocate_output(0, shape, &out);
  if (!s.ok()) return s;
  T* base = out->flat<T>().data();
  const int64_t row_size = row.num_elements();
  ParallelForSlots(
      ctx, call.size(), [&](int64_t i) { write(call.env(i), base + i * row_size); },
      nanos_per_slot, call.Alone());
  return absl::OkStatus();
}

// Copies a small per-slot value into output 0, [k, kRow...] of T. `kRead` is a member of Env:
// a getter `T (Env::*)() const` (no kRow) or a writer `void (Env::*)(T*) const` of one row.
template <typename Env, typename T, auto kRead, int64_t... kRow>
class EnvReadOp : public EnvSlotsOp<Env> {
 public:
  using EnvSlotsOp<Env>::EnvSlotsOp;

 protected:
  void Compute(OpKernelContext* ctx, const SlotCall<Env>& call) override {
    OP_REQUIRES_OK(ctx, WritePerSlot<T>(ctx, call, TensorShape({kRow...}),
                                        [](const Env& env, T* row) {
                                          if constexpr (std::is_invocable_v<decltype(kRead),
                                                                            const Env&, T*>) {
                                            (env.*kRead)(row);
                                          } else {
                                            *row = (env.*kRead)();
                                          }
                                        }));
  }
};

}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_ENV_POOL_H_
