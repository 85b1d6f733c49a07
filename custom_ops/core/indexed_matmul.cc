// Indexed batched matmul and convolution: row r of x uses the weights of slot indices[r],
// read where they lie.
//
// A population model stores each weight tensor of `num_slots` networks as one [S, ...] tensor.
// Running only some slots through a gather of their weights would copy the large dense weights
// on every step (docs/PERFORMANCE.md); these ops read each listed slot's weights in place.
//
//   NeuroevoIndexedMatmul(x, w, indices)            w a float/bfloat16 tensor
//   NeuroevoResourceIndexedMatmul(x, w, indices, bias)    w a resource variable
//     x: float32 [k, in] or [k, m, in] (m inputs per slot); w: [S, out, in] when transpose_w
//     (the default: y = x w[i]^T) or [S, in, out] (y = x w[i]); y: float32 [k, (m,) out].
//   NeuroevoResourceIndexedConv2D(x, w, indices, bias)    w a resource variable
//     x: float32 or uint8 [k, H, W, C] or [k, m, H, W, C], times `input_scale`;
//     w: [S, KH, KW, C, F]; y: [k, (m,) OH, OW, F], strides and SAME/VALID padding as
//     tf.nn.conv2d. Patches are built per slot in a cache-sized buffer (im2col never touches
//     memory; uint8 pixels are widened there) and multiplied by the slot's kernel.
//
// indices: int32 [k], distinct, each in [0, S). bias: zero or one float32 [S, out] variables,
// added with the optional relu (`activation`) while the outputs are in cache. bfloat16 weights
// are widened to float32 in registers as the dot products read them (or, on CPUs with
// AVX512_BF16, multiplied by x split into two bfloat16 halves) and once per work unit for a
// convolution's or a GEMM's reused kernel; products accumulate in float32.
//
// This file is the op glue (registration, shapes, validation, work split, scratch); the inner
// loops are in kernels.h, written once for every vector width (simd.h).
// The resource forms lock the variables (shared) and read their buffers: a ReadVariableOp would
// copy the whole variable once any sparse op (a scatter on load, a gather) has touched it. No
// gradients: neuroevolution never differentiates.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/kernels.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace neuroevo {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

using kernels::ConvGeometry;
using kernels::kChunk;
using kernels::kTileRows;
using simd::bfloat16;
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Inputs per slot from which a GEMM (weights reused across inputs) beats dot products.
constexpr int64_t kGemmMinRows = 8;
// Input rows per matmul GEMM work unit: many units balance the pool.
constexpr int64_t kRowBlock = 64;
// Output positions per conv work unit: three groups of packed patches (kTileRows each), ~75 KB
// for a 256-element patch, in L2 next to the slot's kernel.
constexpr int64_t kConvBlock = 72;
// Weight elements per dot-product work unit (~256 KB of float32): fits L2, so the m passes
// over one block re-read it from cache.
constexpr int64_t kGemvBlockElements = 64 * 1024;
// Policy-step matmuls reading fewer weight bytes than this run on the calling thread: handing
// work to a pool thread costs more than one core streaming them (e.g. the 256 x 18 output
// layer of a few dozen networks).
constexpr int64_t kInlineWeightBytes = 1 << 20;

// Buffers a pool thread reuses from call to call. Allocating them per call made the kernel map
// and zero fresh pages on every policy step; TF's pool threads live as long as the process.
struct Scratch {
  std::vector<float> padded;    // a zero-padded image (direct convolutions)
  std::vector<float> patches;   // packed patches (other convolutions)
  std::vector<float> weights;   // one slot's bfloat16 weights widened (GEMMs)
  std::vector<bfloat16> split;  // inputs split into bfloat16 halves (vdpbf16ps dot products)
};

Scratch& ThreadScratch() {
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

// Runs fn(0, units) on the calling thread when `inline_run`, else over the pool.
template <typename Pool, typename Fn>
void RunUnits(Pool* pool, bool inline_run, int64_t units, int64_t cost, const Fn& fn) {
  if (inline_run) {
    fn(0, units);
  } else {
    pool->ParallelFor(units, cost, fn);
  }
}

// What follows the linear map inside the op: a per-slot bias (float32 [num_slots, out], read in
// place; null for none) and relu, so they cost no extra pass over the activations.
struct Epilogue {
  const float* bias = nullptr;
  bool relu = false;

  // Applies them to `rows` rows of outputs [o0, o0 + cols) of `slot`, rows `stride` apart.
  void Apply(float* y, int64_t rows, int64_t cols, int64_t stride, int64_t slot, int64_t out,
             int64_t o0) const {
    kernels::BiasActivation(y, rows, cols, stride, bias ? bias + slot * out + o0 : nullptr, relu);
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
absl::Status CheckIndices(const Tensor& indices, int64_t rows, int64_t num_slots) {
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

absl::Status PrepareMatmul(OpKernelContext* ctx, const Tensor& x, const Tensor& w,
                           const Tensor& indices, bool transpose_w, MatmulGeometry* g,
                           Tensor** y) {
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
  TensorShape y_shape = x.shape();
  y_shape.set_dim(x.dims() - 1, g->out);
  return ctx->allocate_output(0, y_shape, y);
}

template <typename T>
void ComputeMatmul(OpKernelContext* ctx, const MatmulGeometry& g, const float* x, const T* w,
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
  const bool inline_run =
      g.rows * slot_size * static_cast<int64_t>(sizeof(T)) < kInlineWeightBytes;
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (g.transpose_w) {
      // Every input vector split once into bfloat16 hi and lo halves, [rows * m][2][in], in
      // the calling thread's scratch (the pool threads only read it).
      const int64_t vectors = g.rows * g.m;
      std::vector<bfloat16>& split = ThreadScratch().split;
      split.resize(vectors * 2 * g.in);
      RunUnits(pool, inline_run, vectors, 3 * g.in, [&](int64_t begin, int64_t end) {
        for (int64_t v = begin; v < end; ++v) {
          kernels::SplitBf16(x + v * g.in, g.in, &split[2 * v * g.in],
                             &split[(2 * v + 1) * g.in]);
        }
      });
      RunUnits(pool, inline_run, g.rows * blocks, cost, [&](int64_t begin, int64_t end) {
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
  RunUnits(pool, inline_run, g.rows * blocks, cost, [&](int64_t begin, int64_t end) {
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
void RunMatmul(OpKernelContext* ctx, const Tensor& x, const Tensor& w, const Tensor& indices,
               bool transpose_w, const Epilogue& epilogue) {
  MatmulGeometry g;
  Tensor* y = nullptr;
  OP_REQUIRES_OK(ctx, PrepareMatmul(ctx, x, w, indices, transpose_w, &g, &y));
  if (g.rows == 0 || g.m == 0 || g.out == 0) return;
  ComputeMatmul<T>(ctx, g, x.flat<float>().data(), w.flat<T>().data(),
                   indices.flat<int32_t>().data(), epilogue, y->flat<float>().data());
}

// -------------------------------------------------------------------------------------- conv

// Output size and leading padding of one spatial axis, as tf.nn.conv2d computes them.
void ConvAxis(int64_t in, int64_t kernel, int64_t stride, bool same, int64_t* out,
              int64_t* pad_before) {
  if (same) {
    *out = (in + stride - 1) / stride;
    const int64_t pad = std::max<int64_t>((*out - 1) * stride + kernel - in, 0);
    *pad_before = pad / 2;
  } else {
    *out = in >= kernel ? (in - kernel) / stride + 1 : 0;
    *pad_before = 0;
  }
}

template <typename T, typename X>
void ComputeConv(OpKernelContext* ctx, const ConvGeometry& g, const X* x, float scale, const T* w,
                 const int32_t* indices, const Epilogue& epilogue, float* y) {
  const int64_t slot_size = g.patch_size() * g.f;
  const int64_t image_size = g.h * g.w * g.c;
  const int64_t out_size = g.positions() * g.f;
  const int64_t chunks = (g.patch_size() + kChunk - 1) / kChunk;
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  std::vector<int64_t> offsets(chunks);
  if (kernels::DirectConv(g)) {
    // One unit per image: pad it (the border stays zero from the shard's start), then each
    // output row is one GemmRows call on the padded image.
    const int64_t hp = std::max(g.pad_top + g.h, (g.oh - 1) * g.stride + g.kh);
    const int64_t wp = std::max(g.pad_left + g.w, (g.ow - 1) * g.stride + g.kw);
    // Tiles read up to kTileRows - 1 rows past the last position of the last output row.
    const int64_t step = g.stride * g.c;
    const int64_t padded_size = hp * wp * g.c + kTileRows * step + g.kw * g.c;
    const int64_t per_row = g.kw * g.c / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      offsets[c] = (c / per_row) * wp * g.c + (c % per_row) * kChunk;
    }
    pool->ParallelFor(g.rows * g.m, g.positions() * slot_size, [&](int64_t begin, int64_t end) {
      Scratch& scratch = ThreadScratch();
      std::vector<float>& padded = scratch.padded;
      padded.assign(padded_size, 0.0f);
      for (int64_t image = begin; image < end; ++image) {
        const int64_t slot = indices[image / g.m];
        const float* kernel = AsFloat(w + slot * slot_size, slot_size, &scratch.weights);
        kernels::PadImage(x + image * image_size, g, scale, wp, padded.data());
        float* yi = y + image * out_size;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          kernels::GemmRows(padded.data() + oy * g.stride * wp * g.c, step, offsets.data(),
                            g.ow, g.patch_size(), kernel, g.f, yi + oy * g.ow * g.f);
        }
        epilogue.Apply(yi, g.positions(), g.f, g.f, slot, g.f, 0);
      }
    });
    return;
  }
  for (int64_t c = 0; c < chunks; ++c) offsets[c] = c * kChunk * kTileRows;
  const int64_t group_size = kernels::PackedGroupSize(g.patch_size());
  const int64_t blocks = (g.positions() + kConvBlock - 1) / kConvBlock;
  pool->ParallelFor(
      g.rows * g.m * blocks, kConvBlock * slot_size, [&](int64_t begin, int64_t end) {
        // Rows past a block's last position are read by the last tile but never stored, so
        // the buffer needs no clearing.
        Scratch& scratch = ThreadScratch();
        std::vector<float>& patches = scratch.patches;
        patches.resize(kConvBlock / kTileRows * group_size);
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t image = unit / blocks;  // (row, input) pair, row-major
          const int64_t slot = indices[image / g.m];
          const int64_t p0 = (unit % blocks) * kConvBlock;
          const int64_t count = std::min(kConvBlock, g.positions() - p0);
          const float* kernel = AsFloat(w + slot * slot_size, slot_size, &scratch.weights);
          float* yb = y + image * out_size + p0 * g.f;
          kernels::Im2Col(x + image * image_size, g, scale, p0, count, patches.data());
          for (int64_t r0 = 0; r0 < count; r0 += kTileRows) {
            kernels::GemmRows(patches.data() + r0 / kTileRows * group_size, kChunk,
                              offsets.data(), std::min(kTileRows, count - r0), g.patch_size(),
                              kernel, g.f, yb + r0 * g.f);
          }
          epilogue.Apply(yb, count, g.f, g.f, slot, g.f, 0);
        }
      });
}

absl::Status PrepareConv(OpKernelContext* ctx, const Tensor& x, const Tensor& w,
                         const Tensor& indices, int64_t stride, bool same, ConvGeometry* g,
                         Tensor** y) {
  if (x.dims() != 4 && x.dims() != 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "x must be [k, h, w, c] or [k, m, h, w, c], got shape ", x.shape().DebugString()));
  }
  if (w.dims() != 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "w must be [num_slots, kh, kw, c, f], got shape ", w.shape().DebugString()));
  }
  const int64_t lead = x.dims() - 3;
  g->rows = x.dim_size(0);
  g->m = x.dims() == 5 ? x.dim_size(1) : 1;
  g->h = x.dim_size(lead);
  g->w = x.dim_size(lead + 1);
  g->c = x.dim_size(lead + 2);
  g->kh = w.dim_size(1);
  g->kw = w.dim_size(2);
  g->f = w.dim_size(4);
  g->stride = stride;
  if (w.dim_size(3) != g->c) {
    return absl::InvalidArgumentError(absl::StrCat("x has ", g->c, " channels but w (shape ",
                                                   w.shape().DebugString(), ") expects ",
                                                   w.dim_size(3)));
  }
  TF_RETURN_IF_ERROR(CheckIndices(indices, g->rows, w.dim_size(0)));
  ConvAxis(g->h, g->kh, stride, same, &g->oh, &g->pad_top);
  ConvAxis(g->w, g->kw, stride, same, &g->ow, &g->pad_left);
  TensorShape y_shape = x.shape();
  y_shape.set_dim(lead, g->oh);
  y_shape.set_dim(lead + 1, g->ow);
  y_shape.set_dim(lead + 2, g->f);
  return ctx->allocate_output(0, y_shape, y);
}

// ----------------------------------------------------------------------------------- kernels

// Checks that the variable is initialised and holds the dtype the kernel was built for.
absl::Status CheckVariable(const Tensor& value, tensorflow::DataType dtype,
                           absl::string_view what) {
  if (!value.IsInitialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", what, " variable is not initialised"));
  }
  if (value.dtype() != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, " variable holds ", tensorflow::DataTypeString(value.dtype()),
        " but the op was built for ", tensorflow::DataTypeString(dtype)));
  }
  return absl::OkStatus();
}

// Reads the fused-epilogue attrs: `num_bias` (0 or 1 bias variables) and `activation`.
absl::Status ReadEpilogueAttrs(OpKernelConstruction* ctx, int* num_bias, bool* relu) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("num_bias", num_bias));
  if (*num_bias > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most one bias variable may be passed, got ", *num_bias));
  }
  std::string activation;
  TF_RETURN_IF_ERROR(ctx->GetAttr("activation", &activation));
  *relu = activation == "relu";
  return absl::OkStatus();
}

// The optional bias variable, float32 [num_slots, out], held (lock shared) while in scope.
class BiasVariable {
 public:
  // Looks up input `input` when `count` is 1 and checks it against the weights' geometry.
  absl::Status Acquire(OpKernelContext* ctx, int input, int count, int64_t num_slots,
                       int64_t out) {
    if (count == 0) return absl::OkStatus();
    TF_RETURN_IF_ERROR(LookupResource(ctx, tensorflow::HandleFromInput(ctx, input), &var_));
    lock_.emplace(*var_->mu());
    const Tensor& bias = *var_->tensor();
    TF_RETURN_IF_ERROR(CheckVariable(bias, tensorflow::DT_FLOAT, "bias"));
    if (bias.dims() != 2 || bias.dim_size(0) != num_slots || bias.dim_size(1) != out) {
      return absl::InvalidArgumentError(absl::StrCat("bias must be [", num_slots, ", ", out,
                                                     "] like the weights, got shape ",
                                                     bias.shape().DebugString()));
    }
    data_ = bias.flat<float>().data();
    return absl::OkStatus();
  }

  const float* data() const { return data_; }

 private:
  tensorflow::core::RefCountPtr<tensorflow::Var> var_;
  std::optional<tensorflow::tf_shared_lock> lock_;
  const float* data_ = nullptr;
};

template <typename T>
class IndexedMatmulOp : public OpKernel {
 public:
  explicit IndexedMatmulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_w", &transpose_w_));
  }

  void Compute(OpKernelContext* ctx) override {
    RunMatmul<T>(ctx, ctx->input(0), ctx->input(1), ctx->input(2), transpose_w_, Epilogue());
  }

 private:
  bool transpose_w_ = true;
};

template <typename T>
class ResourceIndexedMatmulOp : public OpKernel {
 public:
  explicit ResourceIndexedMatmulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_w", &transpose_w_));
    OP_REQUIRES_OK(ctx, ReadEpilogueAttrs(ctx, &num_bias_, &relu_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &var));
    // Shared: a load (scatter update) holds the lock exclusively, so no write races this read.
    tensorflow::tf_shared_lock lock(*var->mu());
    const Tensor& w = *var->tensor();
    OP_REQUIRES_OK(ctx, CheckVariable(w, tensorflow::DataTypeToEnum<T>::v(), "weights"));
    OP_REQUIRES(ctx, w.dims() == 3,
                absl::InvalidArgumentError(absl::StrCat(
                    "w must be [num_slots, out, in] or [num_slots, in, out], got shape ",
                    w.shape().DebugString())));
    BiasVariable bias;
    OP_REQUIRES_OK(ctx, bias.Acquire(ctx, 3, num_bias_, w.dim_size(0),
                                     transpose_w_ ? w.dim_size(1) : w.dim_size(2)));
    RunMatmul<T>(ctx, ctx->input(0), w, ctx->input(2), transpose_w_,
                 Epilogue{bias.data(), relu_});
  }

 private:
  bool transpose_w_ = true;
  int num_bias_ = 0;
  bool relu_ = false;
};

template <typename T>
class ResourceIndexedConv2DOp : public OpKernel {
 public:
  explicit ResourceIndexedConv2DOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stride", &stride_));
    std::string padding;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    same_ = padding == "SAME";
    OP_REQUIRES_OK(ctx, ctx->GetAttr("input_scale", &input_scale_));
    OP_REQUIRES_OK(ctx, ReadEpilogueAttrs(ctx, &num_bias_, &relu_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &var));
    tensorflow::tf_shared_lock lock(*var->mu());
    OP_REQUIRES_OK(ctx,
                   CheckVariable(*var->tensor(), tensorflow::DataTypeToEnum<T>::v(), "weights"));
    const Tensor& x = ctx->input(0);
    const Tensor& w = *var->tensor();
    ConvGeometry g;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, PrepareConv(ctx, x, w, ctx->input(2), stride_, same_, &g, &y));
    BiasVariable bias;
    OP_REQUIRES_OK(ctx, bias.Acquire(ctx, 3, num_bias_, w.dim_size(0), g.f));
    if (g.rows == 0 || g.m == 0 || g.positions() == 0 || g.f == 0) return;
    const Epilogue epilogue{bias.data(), relu_};
    const T* weights = w.flat<T>().data();
    const int32_t* indices = ctx->input(2).flat<int32_t>().data();
    float* out = y->flat<float>().data();
    if (x.dtype() == tensorflow::DT_UINT8) {
      ComputeConv(ctx, g, x.flat<uint8_t>().data(), input_scale_, weights, indices, epilogue,
                  out);
    } else {
      ComputeConv(ctx, g, x.flat<float>().data(), input_scale_, weights, indices, epilogue,
                  out);
    }
  }

 private:
  int64_t stride_ = 1;
  bool same_ = true;
  float input_scale_ = 1.0f;
  int num_bias_ = 0;
  bool relu_ = false;
};

// -------------------------------------------------------------------------------- shape fns

// The weights' shape behind a resource input, or unknown.
ShapeHandle ResourceShape(InferenceContext* c, int input) {
  const auto* handle = c->input_handle_shapes_and_types(input);
  if (handle == nullptr || handle->empty()) return c->UnknownShape();
  return (*handle)[0].shape;
}

// k = x's first dimension = the length of indices.
absl::Status MergeRows(InferenceContext* c, ShapeHandle x, ShapeHandle* merged) {
  ShapeHandle indices;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &indices));
  DimensionHandle rows;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(indices, 0), &rows));
  return c->ReplaceDim(x, 0, rows, merged);
}

absl::Status MatmulShape(InferenceContext* c, ShapeHandle w) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 2, &x));
  TF_RETURN_IF_ERROR(c->WithRankAtMost(x, 3, &x));
  TF_RETURN_IF_ERROR(MergeRows(c, x, &x));
  bool transpose_w;
  TF_RETURN_IF_ERROR(c->GetAttr("transpose_w", &transpose_w));
  DimensionHandle out = c->UnknownDim();
  if (c->RankKnown(w)) {
    TF_RETURN_IF_ERROR(c->WithRank(w, 3, &w));
    DimensionHandle in;
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, -1), c->Dim(w, transpose_w ? 2 : 1), &in));
    out = c->Dim(w, transpose_w ? 1 : 2);
  }
  ShapeHandle y;
  TF_RETURN_IF_ERROR(c->ReplaceDim(x, -1, out, &y));
  c->set_output(0, y);
  return absl::OkStatus();
}

absl::Status ConvShape(InferenceContext* c) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 4, &x));
  TF_RETURN_IF_ERROR(c->WithRankAtMost(x, 5, &x));
  TF_RETURN_IF_ERROR(MergeRows(c, x, &x));
  ShapeHandle w = ResourceShape(c, 1);
  if (!c->RankKnown(x) || !c->RankKnown(w)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(c->WithRank(w, 5, &w));
  int64_t stride;
  TF_RETURN_IF_ERROR(c->GetAttr("stride", &stride));
  std::string padding;
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
  const int lead = c->Rank(x) - 3;
  DimensionHandle channels;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, lead + 2), c->Dim(w, 3), &channels));
  ShapeHandle y = x;
  for (int axis = 0; axis < 2; ++axis) {
    const DimensionHandle in = c->Dim(x, lead + axis);
    const DimensionHandle kernel = c->Dim(w, 1 + axis);
    DimensionHandle out = c->UnknownDim();
    if (c->ValueKnown(in) && c->ValueKnown(kernel)) {
      int64_t size, pad;
      ConvAxis(c->Value(in), c->Value(kernel), stride, padding == "SAME", &size, &pad);
      out = c->MakeDim(size);
    }
    TF_RETURN_IF_ERROR(c->ReplaceDim(y, lead + axis, out, &y));
  }
  TF_RETURN_IF_ERROR(c->ReplaceDim(y, lead + 2, c->Dim(w, 4), &y));
  c->set_output(0, y);
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("NeuroevoIndexedMatmul")
    .Input("x: float")
    .Input("w: T")
    .Input("indices: int32")
    .Output("y: float")
    .Attr("T: {float, bfloat16}")
    .Attr("transpose_w: bool = true")
    .SetShapeFn([](InferenceContext* c) { return MatmulShape(c, c->input(1)); })
    .Doc("y[r] = x[r] w[indices[r]]^T (or x[r] w[indices[r]]), reading w in place.");

REGISTER_OP("NeuroevoResourceIndexedMatmul")
    .Input("x: float")
    .Input("w: resource")
    .Input("indices: int32")
    .Input("bias: num_bias * resource")
    .Output("y: float")
    .Attr("dtype: {float, bfloat16}")
    .Attr("transpose_w: bool = true")
    .Attr("num_bias: int >= 0 = 0")
    .Attr("activation: {'linear', 'relu'} = 'linear'")
    .SetShapeFn([](InferenceContext* c) { return MatmulShape(c, ResourceShape(c, 1)); })
    .Doc(R"doc(
NeuroevoIndexedMatmul on a resource variable, read under its lock without a copy, then
y[r] = activation(y[r] + bias[indices[r]]) with the optional float32 [num_slots, out] bias
variable (bias: a list of zero or one handles).
)doc");

REGISTER_OP("NeuroevoResourceIndexedConv2D")
    .Input("x: Tx")
    .Input("w: resource")
    .Input("indices: int32")
    .Input("bias: num_bias * resource")
    .Output("y: float")
    .Attr("Tx: {float, uint8} = DT_FLOAT")
    .Attr("dtype: {float, bfloat16}")
    .Attr("stride: int >= 1 = 1")
    .Attr("padding: {'SAME', 'VALID'} = 'SAME'")
    .Attr("input_scale: float = 1.0")
    .Attr("num_bias: int >= 0 = 0")
    .Attr("activation: {'linear', 'relu'} = 'linear'")
    .SetShapeFn(ConvShape)
    .Doc(R"doc(
y[r] = activation(conv2d(input_scale * x[r], w[indices[r]]) + bias[indices[r]]) with the
slot's kernel read in place; x float32 or uint8 (raw observations, widened as patches are
built); bias: a list of zero or one float32 [num_slots, filters] variables.
)doc");

#define NEUROEVO_REGISTER(T)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                    \
      Name("NeuroevoIndexedMatmul").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),    \
      IndexedMatmulOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(Name("NeuroevoResourceIndexedMatmul")                               \
                              .Device(tensorflow::DEVICE_CPU)                                 \
                              .TypeConstraint<T>("dtype"),                                    \
                          ResourceIndexedMatmulOp<T>);                                        \
  REGISTER_KERNEL_BUILDER(Name("NeuroevoResourceIndexedConv2D")                               \
                              .Device(tensorflow::DEVICE_CPU)                                 \
                              .TypeConstraint<T>("dtype"),                                    \
                          ResourceIndexedConv2DOp<T>)

NEUROEVO_REGISTER(float);
NEUROEVO_REGISTER(bfloat16);

#undef NEUROEVO_REGISTER

}  // namespace neuroevo
