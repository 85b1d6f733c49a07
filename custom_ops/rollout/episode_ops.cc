// The per-step episode bookkeeping of the in-graph rollout (neuroevo/evaluation/rollout.py) as
// two ops, so that one loop iteration runs two kernels instead of some forty small TF ops
// (gathers, scatters, masks, sums), each of which costs the executor more than its arithmetic.
//
// A worker's slots are described by two tensors carried from one loop iteration to the next:
//   counts int64 [S, 3]: per slot (item, agent steps taken, frames), item -1 when the slot is
//                        free;
//   sums float64 [S, 2]: per slot (return, sign return).
// and a per-chunk tally int64 [2]: (agent steps taken, frames used).
//
// * `NeuroevoEpisodeAdvance` books one env step of the running slots `active` (rewards summed
//   in float64 in step order, as the per-step path does), ends the episodes that terminated,
//   were truncated or reached `max_steps`, hands out their records and lists the free slots
//   the worker may refill (at most `max_running` running at once: its fair share of a queue
//   shorter than the slots, so that one worker does not take every item).
// * `NeuroevoEpisodeStart` books the episodes just started in free slots by a refill and lists
//   the running slots, in slot order: the slots the next forward pass and env step act on.
// Both are pure functions of their inputs (CPU kernels; the state is small host-side data next
// to the env ops). Python reference: tests/test_episode_ops.py.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

#include "common/tf_names.h"

namespace neuroevo {
namespace rollout {
namespace {

constexpr int64_t kCountColumns = 3;  // item, length, frames
constexpr int64_t kSumColumns = 2;    // return, sign return

// tf.sign of a float64: -1, 0 (for both zeros) or 1; NaN stays NaN.
double Sign(double r) {
  if (r > 0) return 1.0;
  if (r < 0) return -1.0;
  return r == r ? 0.0 : r;
}

// Shape checks shared by both ops: counts [S, 3], sums [S, 2], tally [2].
absl::Status CheckSlotState(const Tensor& counts, const Tensor& sums, const Tensor& tally) {
  if (counts.dims() != 2 || counts.dim_size(1) != kCountColumns) {
    return absl::InvalidArgumentError(absl::StrCat(
        "counts must be int64 [slots, 3] (item, length, frames), got shape ",
        counts.shape().DebugString()));
  }
  if (sums.dims() != 2 || sums.dim_size(1) != kSumColumns ||
      sums.dim_size(0) != counts.dim_size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sums must be float64 [slots, 2] (return, sign return) with the ", counts.dim_size(0),
        " slots of counts, got shape ", sums.shape().DebugString()));
  }
  if (tally.dims() != 1 || tally.dim_size(0) != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tally must be int64 [2] (steps, frames), got shape ", tally.shape().DebugString()));
  }
  return absl::OkStatus();
}

// Checks that `t` is a vector of `k` entries (k < 0: any length).
absl::Status CheckVector(const Tensor& t, const char* name, int64_t k) {
  if (t.dims() != 1 || (k >= 0 && t.dim_size(0) != k)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be a vector", k >= 0 ? absl::StrCat(" of ", k, " entries (one per slot)") : "",
        ", got shape ", t.shape().DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckScalar(const Tensor& t, const char* name) {
  if (t.dims() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a scalar, got shape ", t.shape().DebugString()));
  }
  return absl::OkStatus();
}

// Copies the slot state into new outputs 0 .. 2 (the kernels then update the copies).
absl::Status CopyState(OpKernelContext* ctx, Tensor** counts, Tensor** sums, Tensor** tally) {
  const Tensor* in[3] = {&ctx->input(0), &ctx->input(1), &ctx->input(2)};
  Tensor** out[3] = {counts, sums, tally};
  for (int i = 0; i < 3; ++i) {
    absl::Status s = ctx->allocate_output(i, in[i]->shape(), out[i]);
    if (!s.ok()) return s;
    std::memcpy((*out[i])->data(), in[i]->data(), in[i]->TotalBytes());
  }
  return absl::OkStatus();
}

// Checks that `slot` indexes the state (position `j` of input `name`) and appears once.
absl::Status CheckSlot(int64_t slot, int64_t num_slots, const char* name, int64_t j,
                       std::vector<char>* seen) {
  if (slot < 0 || slot >= num_slots) {
    return absl::InvalidArgumentError(absl::StrCat(name, "[", j, "] = ", slot,
                                                   " is outside the worker's slots [0, ",
                                                   num_slots, ")"));
  }
  if ((*seen)[slot]) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "[", j, "] = ", slot, " is listed twice: each slot may appear once"));
  }
  (*seen)[slot] = 1;
  return absl::OkStatus();
}

// Writes the slots whose item satisfies `keep`, in slot order, at most `cap` of them, to output
// `index`.
template <typename Keep>
absl::Status ListSlots(OpKernelContext* ctx, int index, const int64_t* counts, int64_t num_slots,
                       int64_t cap, const Keep& keep) {
  std::vector<int32_t> slots;
  for (int64_t s = 0; s < num_slots && static_cast<int64_t>(slots.size()) < cap; ++s) {
    if (keep(counts[s * kCountColumns])) slots.push_back(static_cast<int32_t>(s));
  }
  Tensor* out = nullptr;
  absl::Status st =
      ctx->allocate_output(index, TensorShape({static_cast<int64_t>(slots.size())}), &out);
  if (!st.ok()) return st;
  if (!slots.empty()) std::memcpy(out->data(), slots.data(), slots.size() * sizeof(int32_t));
  return absl::OkStatus();
}

absl::Status StateShapes(InferenceContext* c) {
  ShapeHandle counts, sums, tally;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &counts));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &sums));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &tally));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(counts, 1), kCountColumns, &unused));
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(sums, 1), kSumColumns, &unused));
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(tally, 0), 2, &unused));
  DimensionHandle slots;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(counts, 0), c->Dim(sums, 0), &slots));
  c->set_output(0, c->Matrix(slots, kCountColumns));
  c->set_output(1, c->Matrix(slots, kSumColumns));
  c->set_output(2, c->Vector(2));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------- advance

REGISTER_OP("NeuroevoEpisodeAdvance")
    .Input("counts: int64")
    .Input("sums: double")
    .Input("tally: int64")
    .Input("active: int32")
    .Input("reward: float")
    .Input("terminated: bool")
    .Input("truncated: bool")
    .Input("frames: int64")
    .Input("max_steps: int64")
    .Input("refill_cap: int64")
    .Input("max_running: int64")
    .Output("counts_out: int64")
    .Output("sums_out: double")
    .Output("tally_out: int64")
    .Output("ended: int32")
    .Output("ended_counts: int64")
    .Output("ended_sums: double")
    .Output("ended_flags: bool")
    .Output("free: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(StateShapes(c));
      ShapeHandle active, vector;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &active));
      for (int i = 4; i < 8; ++i) {
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 1, &vector));
        TF_RETURN_IF_ERROR(c->Merge(active, vector, &active));
      }
      ShapeHandle scalar;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(8), 0, &scalar));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(9), 0, &scalar));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(10), 0, &scalar));
      const DimensionHandle ended = c->UnknownDim();
      c->set_output(3, c->Vector(ended));
      c->set_output(4, c->Matrix(ended, kCountColumns));
      c->set_output(5, c->Matrix(ended, kSumColumns));
      c->set_output(6, c->Matrix(ended, 2));
      c->set_output(7, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Books one env step of the running slots `active` (int32 [k], distinct, item >= 0), whose step
gave reward, terminated, truncated and the slot's frames after it ([k] each): per slot, return
+= float64(reward), sign return += sign(float64(reward)), length += 1, frames = the new frames;
tally += (k, frames used by the step). The episode of active[j] ends when it terminated, was
truncated or has taken max_steps steps; its slot is freed (item -1).

Outputs the updated state; ended int32 [e], the ended slots in `active` order; their records
ended_counts [e, 3] (item, length, frames), ended_sums [e, 2] (return, sign return) and
ended_flags bool [e, 2] (terminated, truncated: cut off by the env or by max_steps without
terminating); free int32, the free slots in slot order, at most refill_cap of them and at most
max_running minus the slots still running (none when that is <= 0).
)doc");

class EpisodeAdvanceOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& active_t = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckSlotState(ctx->input(0), ctx->input(1), ctx->input(2)));
    OP_REQUIRES_OK(ctx, CheckVector(active_t, "active", -1));
    const int64_t k = active_t.dim_size(0);
    OP_REQUIRES_OK(ctx, CheckVector(ctx->input(4), "reward", k));
    OP_REQUIRES_OK(ctx, CheckVector(ctx->input(5), "terminated", k));
    OP_REQUIRES_OK(ctx, CheckVector(ctx->input(6), "truncated", k));
    OP_REQUIRES_OK(ctx, CheckVector(ctx->input(7), "frames", k));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx->input(8), "max_steps"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx->input(9), "refill_cap"));
    OP_REQUIRES_OK(ctx, CheckScalar(ctx->input(10), "max_running"));
    const int64_t max_steps = ctx->input(8).scalar<int64_t>()();
    const int64_t refill_cap = ctx->input(9).scalar<int64_t>()();
    const int64_t max_running = ctx->input(10).scalar<int64_t>()();
    OP_REQUIRES(ctx, max_steps >= 1,
                absl::InvalidArgumentError(absl::StrCat("max_steps must be >= 1, got ", max_steps)));
    OP_REQUIRES(ctx, refill_cap >= 0,
                absl::InvalidArgumentError(
                    absl::StrCat("refill_cap must be >= 0, got ", refill_cap)));
    OP_REQUIRES(ctx, max_running >= 1,
                absl::InvalidArgumentError(
                    absl::StrCat("max_running must be >= 1, got ", max_running)));
    Tensor *counts_t = nullptr, *sums_t = nullptr, *tally_t = nullptr;
    OP_REQUIRES_OK(ctx, CopyState(ctx, &counts_t, &sums_t, &tally_t));
    const int64_t num_slots = counts_t->dim_size(0);
    int64_t* counts = counts_t->flat<int64_t>().data();
    double* sums = sums_t->flat<double>().data();
    int64_t* tally = tally_t->flat<int64_t>().data();
    const auto active = active_t.flat<int32_t>();
    const auto reward = ctx->input(4).flat<float>();
    const auto terminated = ctx->input(5).flat<bool>();
    const auto truncated = ctx->input(6).flat<bool>();
    const auto frames = ctx->input(7).flat<int64_t>();

    std::vector<char> seen(num_slots, 0);
    std::vector<int64_t> ended;  // positions j in active
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = active(j);
      OP_REQUIRES_OK(ctx, CheckSlot(s, num_slots, "active", j, &seen));
      int64_t* row = counts + s * kCountColumns;
      OP_REQUIRES(ctx, row[0] >= 0,
                  absl::InvalidArgumentError(absl::StrCat(
                      "active[", j, "] = ", s, " is a free slot (item -1): only running slots "
                      "can be stepped")));
      const double r = static_cast<double>(reward(j));
      sums[s * kSumColumns] += r;
      sums[s * kSumColumns + 1] += Sign(r);
      tally[1] += frames(j) - row[2];
      row[1] += 1;
      row[2] = frames(j);
      if (!(row[1] < max_steps && !terminated(j) && !truncated(j))) ended.push_back(j);
    }
    tally[0] += k;

    const int64_t e = static_cast<int64_t>(ended.size());
    Tensor *ended_t = nullptr, *ended_counts_t = nullptr, *ended_sums_t = nullptr,
           *ended_flags_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({e}), &ended_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({e, kCountColumns}), &ended_counts_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, TensorShape({e, kSumColumns}), &ended_sums_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(6, TensorShape({e, 2}), &ended_flags_t));
    int32_t* ended_slots = ended_t->flat<int32_t>().data();
    int64_t* ended_counts = ended_counts_t->flat<int64_t>().data();
    double* ended_sums = ended_sums_t->flat<double>().data();
    bool* ended_flags = ended_flags_t->flat<bool>().data();
    for (int64_t n = 0; n < e; ++n) {
      const int64_t j = ended[n];
      const int64_t s = active(j);
      ended_slots[n] = static_cast<int32_t>(s);
      std::memcpy(ended_counts + n * kCountColumns, counts + s * kCountColumns,
                  kCountColumns * sizeof(int64_t));
      std::memcpy(ended_sums + n * kSumColumns, sums + s * kSumColumns,
                  kSumColumns * sizeof(double));
      ended_flags[2 * n] = terminated(j);
      ended_flags[2 * n + 1] = truncated(j) || !terminated(j);
      counts[s * kCountColumns] = -1;
    }
    int64_t running = 0;
    for (int64_t s = 0; s < num_slots; ++s) running += counts[s * kCountColumns] >= 0;
    const int64_t room = std::max<int64_t>(0, std::min(refill_cap, max_running - running));
    OP_REQUIRES_OK(ctx, ListSlots(ctx, 7, counts, num_slots, room,
                                  [](int64_t item) { return item < 0; }));
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoEpisodeAdvance").Device(DEVICE_CPU), EpisodeAdvanceOp);

// ------------------------------------------------------------------------------------ start

REGISTER_OP("NeuroevoEpisodeStart")
    .Input("counts: int64")
    .Input("sums: double")
    .Input("tally: int64")
    .Input("slots: int32")
    .Input("items: int64")
    .Input("frames: int64")
    .Output("counts_out: int64")
    .Output("sums_out: double")
    .Output("tally_out: int64")
    .Output("running: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(StateShapes(c));
      ShapeHandle slots, vector;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &slots));
      for (int i = 4; i < 6; ++i) {
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 1, &vector));
        TF_RETURN_IF_ERROR(c->Merge(slots, vector, &slots));
      }
      c->set_output(3, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Books the episodes just started in the free slots `slots` (int32 [c], distinct, item -1): item
items[c] (>= 0), length 0, frames as after the reset, return and sign return 0; tally frames +=
the reset frames. Outputs the updated state and running int32, every slot with an item, in
slot order.
)doc");

class EpisodeStartOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& slots_t = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckSlotState(ctx->input(0), ctx->input(1), ctx->input(2)));
    OP_REQUIRES_OK(ctx, CheckVector(slots_t, "slots", -1));
    const int64_t c = slots_t.dim_size(0);
    OP_REQUIRES_OK(ctx, CheckVector(ctx->input(4), "items", c));
    OP_REQUIRES_OK(ctx, CheckVector(ctx->input(5), "frames", c));
    Tensor *counts_t = nullptr, *sums_t = nullptr, *tally_t = nullptr;
    OP_REQUIRES_OK(ctx, CopyState(ctx, &counts_t, &sums_t, &tally_t));
    const int64_t num_slots = counts_t->dim_size(0);
    int64_t* counts = counts_t->flat<int64_t>().data();
    double* sums = sums_t->flat<double>().data();
    int64_t* tally = tally_t->flat<int64_t>().data();
    const auto slots = slots_t.flat<int32_t>();
    const auto items = ctx->input(4).flat<int64_t>();
    const auto frames = ctx->input(5).flat<int64_t>();
    std::vector<char> seen(num_slots, 0);
    for (int64_t j = 0; j < c; ++j) {
      const int64_t s = slots(j);
      OP_REQUIRES_OK(ctx, CheckSlot(s, num_slots, "slots", j, &seen));
      int64_t* row = counts + s * kCountColumns;
      OP_REQUIRES(ctx, row[0] < 0,
                  absl::InvalidArgumentError(absl::StrCat(
                      "slots[", j, "] = ", s, " still runs item ", row[0],
                      ": episodes start only in free slots")));
      OP_REQUIRES(ctx, items(j) >= 0,
                  absl::InvalidArgumentError(
                      absl::StrCat("items[", j, "] = ", items(j), " must be >= 0")));
      row[0] = items(j);
      row[1] = 0;
      row[2] = frames(j);
      sums[s * kSumColumns] = 0.0;
      sums[s * kSumColumns + 1] = 0.0;
      tally[1] += frames(j);
    }
    OP_REQUIRES_OK(ctx, ListSlots(ctx, 3, counts, num_slots,
                                  std::numeric_limits<int64_t>::max(),
                                  [](int64_t item) { return item >= 0; }));
  }
};

REGISTER_KERNEL_BUILDER(Name("NeuroevoEpisodeStart").Device(DEVICE_CPU), EpisodeStartOp);

}  // namespace
}  // namespace rollout
}  // namespace neuroevo
