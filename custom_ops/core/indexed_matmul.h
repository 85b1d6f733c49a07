// The op glue of the indexed matmul shared by the production op (NeuroevoResourceIndexedMatmul,
// indexed_matmul.cc) and the test-only NeuroevoIndexedMatmul on a plain tensor
// (indexed_matmul_testing.cc, library core_testing): geometry and index checks, the work split
// over TF's pool, per-thread scratch, the fused bias/activation epilogue and the shape function.
// The inner loops are in kernels.h. See indexed_matmul.cc for the ops' semantics.
#ifndef NEUROEVO_CUSTOM_OPS_CORE_INDEXED_MATMUL_H_
#define NEUROEVO_CUSTOM_OPS_CORE_INDEXED_MATMUL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"
#include "core/kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace neuroevo {
namespace indexed {

namespace tf = ::tensorflow;
namespace si = ::tensorflow::shape_inference;

using simd::bfloat16;
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Inputs per slot from which a GEMM (weights reused across inputs) beats dot products.
constexpr int64_t kGemmMinRows = 8;
// Input rows per matmul GEMM work unit: many units balance the pool.
constexpr int64_t kRowBlock = 64;
// Weight elements per dot-product work unit (~256 KB of float32): fits L2, so the m passes
// over one block re-read it from cache.
constexpr int64_t kGemvBlockElements = 64 * 1024;
// Policy-step matmuls reading fewer weight bytes than this run on the calling thread: handing
// work to a pool thread costs more than one core streaming them (e.g. the 256 x 18 output
// layer of a few dozen networks).
constexpr int64_t kInlineWeightBytes = 1 << 20;
// Work units (by their cost hint, ~bytes streamed) a helper thread claims at a time: enough to
// amortise the claim; at most kChunksPerThread chunks per thread keep the threads balanced.
constexpr int64_t kMinChunkCost = 1 << 15;
constexpr int64_t kChunksPerThread = 8;
// Above this many weight bytes a call streams for milliseconds (the Atari nets' dense layers);
// TF's cost-model sharding measured ~5% faster there on an idle machine, so it keeps it.
constexpr int64_t kClaimedWeightBytes = 1 << 25;

// Buffers a pool thread reuses from call to call. Allocating them per call made the kernel map
// and zero fresh pages on every policy step; TF's pool threads live as long as the process.
struct Scratch {
  std::vector<float> padded;    // a zero-padded image (direct convolutions)
  std::vector<float> patches;   // packed patches (other convolutions)
  std::vector<float> weights;   // one slot's bfloat16 weights widened (GEMMs)
  std::vector<bfloat16> split;  // inputs split into bfloat16 halves (vdpbf16ps dot products)
};

inline Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Views one slot's weights as float32: in place for float, widened into `scratch` for bfloat16.
inline const float* AsFloat(const float* w, int64_t, std::vector<float>*) { return w; }
inline const float* AsFloat(const bfloat16* w, int64_t size, std::vector<float>* scratch) {
  scratch->resize(size);
  simd::WidenInto(w, size, scratch->data());
  return scratch->data();
}

// Runs fn(0, units) on the calling thread for a call reading few weight bytes, else over the
// pool, which helps as far as it has idle threads (ParallelForChunks): in a rollout the other
// workers' env steps often hold every pool thread, and a policy step must not wait for them.
template <typename Pool>
void RunUnits(Pool* pool, int64_t weight_bytes, int64_t units, int64_t cost,
              const std::function<void(int64_t, int64_t)>& fn) {
  if (weight_bytes < kInlineWeightBytes) {
    fn(0, units);
    return;
  }
  if (weight_bytes >= kClaimedWeightBytes) {
    pool->ParallelFor(units, cost, fn);
    return;
  }
  const int64_t per_thread = kChunksPerThread * std::max(pool->NumThreads(), 1);
  const int64_t chunk = std::max((kMinChunkCost + cost - 1) / std::max<int64_t>(cost, 1),
                                 (units + per_thread - 1) / per_thread);
  ParallelForChunks(pool, units, chunk, fn);
}

// What follows the linear map inside the op: a per-slot bias (float32 [num_slots, out], read in
// place; null for none) and the activation, so they cost no extra pass over the outputs.
struct Epilogue {
  const float* bias = nullptr;
  kernels::Activation activation = kernels::Activation::kLinear;

  // Applies them to `rows` rows of outputs [o0, o0 + cols) of `slot`, rows `stride` apart.
  void Apply(float* y, int64_t rows, int64_t cols, int64_t stride, int64_t slot, int64_t out,
             int64_t o0) const {
    kernels::BiasActivation(y, rows, cols, stride, bias ? bias + slot * out + o0 : nullptr,
                            activation);
  }
};

// ------------------------------------------------------------------------------------ matmul

// One call's geometry: x is [rows, m, in], w holds slots of [out, in] or [in, out].
struct MatmulGeometry {
  int64_t rows = 0;
  int64_t m = 0;
  int64_t in = 0;
  int64_t out = 0;
  bool transpose_w = true;
};

// Checks that indices is a vector of distinct slots in [0, num_slots) with `rows` entries.
inline absl::Status CheckIndices(const tf::Tensor& indices, int64_t rows,
                                 int64_t num_slots) {
  if (indices.dims() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("indices must be a vector, got shape ", indices.shape().DebugString()));
  }
  if (indices.dim_size(0) != rows) {
    return absl::InvalidArgumentError(absl::StrCat("x has ", rows, " rows but indices has ",
                                                   indices.dim_size(0),
                                                   " entries; pass one index per row"));
  }
  const auto idx = indices.flat<int32_t>();
  std::vector<int64_t> seen_at(num_slots, -1);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t slot = idx(r);
    if (slot < 0 || slot >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "indices[", r, "] = ", slot, " is out of range [0, ", num_slots, ")"));
    }
    if (seen_at[slot] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("indices[", r, "] = ", slot,
                                                     " repeats indices[", seen_at[slot],
                                                     "]; each slot may appear once per call"));
    }
    seen_at[slot] = r;
  }
  return absl::OkStatus();
}

inline absl::Status PrepareMatmul(tf::OpKernelContext* ctx, const tf::Tensor& x,
                                  const tf::Tensor& w, const tf::Tensor& indices,
                                  bool transpose_w, MatmulGeometry* g, tf::Tensor** y) {
  if (x.dims() != 2 && x.dims() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must be [k, in] or [k, m, in], got shape ", x.shape().DebugString()));
  }
  if (w.dims() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("w must be [num_slots, ",
                                                   transpose_w ? "out, in" : "in, out",
                                                   "], got shape ", w.shape().DebugString()));
  }
  g->rows = x.dim_size(0);
  g->m = x.dims() == 3 ? x.dim_size(1) : 1;
  g->in = x.dim_size(x.dims() - 1);
  g->out = transpose_w ? w.dim_size(1) : w.dim_size(2);
  g->transpose_w = transpose_w;
  const int64_t w_in = transpose_w ? w.dim_size(2) : w.dim_size(1);
  if (w_in != g->in) {
    return absl::InvalidArgumentError(absl::StrCat("x has ", g->in,
                                                   " input features but w (shape ",
                                                   w.shape().DebugString(), ") expects ", w_in));
  }
  TF_RETURN_IF_ERROR(CheckIndices(indices, g->rows, w.dim_size(0)));
  tf::TensorShape y_shape = x.shape();
  y_shape.set_dim(x.dims() - 1, g->out);
  return ctx->allocate_output(0, y_shape, y);
}

template <typename T>
void ComputeMatmul(tf::OpKernelContext* ctx, const MatmulGeometry& g, const float* x, const T* w,
                   const int32_t* indices, const Epilogue& epilogue, float* y) {
  const int64_t slot_size = g.in * g.out;
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  if (g.m >= kGemmMinRows) {
    // Reference batches and several inputs per slot: one small GEMM per row block.
    const int64_t blocks = (g.m + kRowBlock - 1) / kRowBlock;
    pool->ParallelFor(g.rows * blocks, kRowBlock * slot_size, [&](int64_t begin, int64_t end) {
      std::vector<float>& scratch = ThreadScratch().weights;
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t r = unit / blocks;
        const int64_t m0 = (unit % blocks) * kRowBlock;
        const int64_t mb = std::min(kRowBlock, g.m - m0);
        const float* ws = AsFloat(w + indices[r] * slot_size, slot_size, &scratch);
        Eigen::Map<const RowMajor> xs(x + (r * g.m + m0) * g.in, mb, g.in);
        Eigen::Map<RowMajor> ys(y + (r * g.m + m0) * g.out, mb, g.out);
        if (g.transpose_w) {
          ys.noalias() = xs * Eigen::Map<const RowMajor>(ws, g.out, g.in).transpose();
        } else {
          ys.noalias() = xs * Eigen::Map<const RowMajor>(ws, g.in, g.out);
        }
        epilogue.Apply(ys.data(), mb, g.out, g.out, indices[r], g.out, 0);
      }
    });
    return;
  }
  // Policy steps: memory-bound matrix-vector products that stream each weight once.
  const int64_t block = std::max<int64_t>(16, kGemvBlockElements / std::max<int64_t>(g.in, 1));
  const int64_t blocks = (g.out + block - 1) / block;
  const int64_t cost = block * g.in * (g.m + static_cast<int64_t>(sizeof(T)));
  const int64_t weight_bytes = g.rows * slot_size * static_cast<int64_t>(sizeof(T));
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (g.transpose_w) {
      // Every input vector split once into bfloat16 hi and lo halves, [rows * m][2][in], in
      // the calling thread's scratch (the pool threads only read it).
      const int64_t vectors = g.rows * g.m;
      std::vector<bfloat16>& split = ThreadScratch().split;
      split.resize(vectors * 2 * g.in);
      RunUnits(pool, weight_bytes, vectors, 3 * g.in, [&](int64_t begin, int64_t end) {
        for (int64_t v = begin; v < end; ++v) {
          kernels::SplitBf16(x + v * g.in, g.in, &split[2 * v * g.in],
                             &split[(2 * v + 1) * g.in]);
        }
      });
      RunUnits(pool, weight_bytes, g.rows * blocks, cost, [&](int64_t begin, int64_t end) {
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t r = unit / blocks;
          const int64_t o0 = (unit % blocks) * block;
          const int64_t ob = std::min(block, g.out - o0);
          const bfloat16* ws = w + indices[r] * slot_size + o0 * g.in;
          for (int64_t i = 0; i < g.m; ++i) {
            const int64_t v = r * g.m + i;
            kernels::DotRowsSplit(ws, g.in, &split[2 * v * g.in], &split[(2 * v + 1) * g.in],
                                  x + v * g.in, ob, y + v * g.out + o0);
            epilogue.Apply(y + v * g.out + o0, 1, ob, ob, indices[r], g.out, o0);
          }
        }
      });
      return;
    }
  }
#endif
  RunUnits(pool, weight_bytes, g.rows * blocks, cost, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t r = unit / blocks;
      const int64_t o0 = (unit % blocks) * block;
      const int64_t ob = std::min(block, g.out - o0);
      const T* ws = w + indices[r] * slot_size;
      for (int64_t i = 0; i < g.m; ++i) {
        const float* xi = x + (r * g.m + i) * g.in;
        float* yi = y + (r * g.m + i) * g.out + o0;
        if (g.transpose_w) {
          kernels::DotRows(ws + o0 * g.in, g.in, xi, ob, yi);
        } else {
          kernels::AxpyCols(ws + o0, g.in, g.out, xi, ob, yi);
        }
        epilogue.Apply(yi, 1, ob, ob, indices[r], g.out, o0);
      }
    }
  });
}

template <typename T>
void RunMatmul(tf::OpKernelContext* ctx, const tf::Tensor& x, const tf::Tensor& w,
               const tf::Tensor& indices, bool transpose_w, const Epilogue& epilogue) {
  MatmulGeometry g;
  tf::Tensor* y = nullptr;
  OP_REQUIRES_OK(ctx, PrepareMatmul(ctx, x, w, indices, transpose_w, &g, &y));
  if (g.rows == 0 || g.m == 0 || g.out == 0) return;
  ComputeMatmul<T>(ctx, g, x.flat<float>().data(), w.flat<T>().data(),
                   indices.flat<int32_t>().data(), epilogue, y->flat<float>().data());
}

// ------------------------------------------------------------------------------- shape fns

// k = x's first dimension = the length of indices.
inline absl::Status MergeRows(si::InferenceContext* c, si::ShapeHandle x, si::ShapeHandle* merged) {
  si::ShapeHandle indices;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &indices));
  si::DimensionHandle rows;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(indices, 0), &rows));
  return c->ReplaceDim(x, 0, rows, merged);
}

inline absl::Status MatmulShape(si::InferenceContext* c, si::ShapeHandle w) {
  si::ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 2, &x));
  TF_RETURN_IF_ERROR(c->WithRankAtMost(x, 3, &x));
  TF_RETURN_IF_ERROR(MergeRows(c, x, &x));
  bool transpose_w;
  TF_RETURN_IF_ERROR(c->GetAttr("transpose_w", &transpose_w));
  si::DimensionHandle out = c->UnknownDim();
  if (c->RankKnown(w)) {
    TF_RETURN_IF_ERROR(c->WithRank(w, 3, &w));
    si::DimensionHandle in;
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, -1), c->Dim(w, transpose_w ? 2 : 1), &in));
    out = c->Dim(w, transpose_w ? 1 : 2);
  }
  si::ShapeHandle y;
  TF_RETURN_IF_ERROR(c->ReplaceDim(x, -1, out, &y));
  c->set_output(0, y);
  return absl::OkStatus();
}

}  // namespace indexed
}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_CORE_INDEXED_MATMUL_H_
