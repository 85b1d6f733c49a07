// Indexed batched matmul and convolution: row r of x uses the weights of slot indices[r],
// read where they lie.
//
// A population model stores each weight tensor of `num_slots` networks as one [S, ...] tensor.
// Running only some slots through a gather of their weights would copy the large dense weights
// on every step (docs/PERFORMANCE.md); these ops read each listed slot's weights in place.
//
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
// added with the optional relu or tanh (`activation`; tanh with tf.math.tanh's x86 bits) while
// the outputs are in cache. bfloat16 weights are widened to float32 in registers as the dot
// products read them (or, on CPUs with AVX512_BF16, multiplied by x split into two bfloat16
// halves) and once per work unit for a convolution's or a GEMM's reused kernel; products
// accumulate in float32.
//
// This file is the op glue (registration, shapes, validation, work split, scratch; the matmul's
// part, shared with the test-only NeuroevoIndexedMatmul of indexed_matmul_testing.cc, is in
// indexed_matmul.h); the inner loops are in kernels.h, written once for every vector width
// (simd.h).
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
#include "common/tf_names.h"
#include "core/indexed_matmul.h"
#include "core/kernels.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace neuroevo {
namespace {

using kernels::ConvGeometry;
using kernels::kChunk;
using kernels::kTileRows;
using simd::bfloat16;
using indexed::AsFloat;
using indexed::CheckIndices;
using indexed::Epilogue;
using indexed::MatmulShape;
using indexed::MergeRows;
using indexed::RunMatmul;
using indexed::Scratch;
using indexed::ThreadScratch;

// Output positions per conv work unit: three groups of packed patches (kTileRows each), ~75 KB
// for a 256-element patch, in L2 next to the slot's kernel.
constexpr int64_t kConvBlock = 72;


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

// Reads the fused-epilogue attrs: `num_bias` (0 or 1 bias variables) and `activation`.
absl::Status ReadEpilogueAttrs(OpKernelConstruction* ctx, int* num_bias,
                               kernels::Activation* activation) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("num_bias", num_bias));
  if (*num_bias > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most one bias variable may be passed, got ", *num_bias));
  }
  std::string name;
  TF_RETURN_IF_ERROR(ctx->GetAttr("activation", &name));
  *activation = name == "relu"   ? kernels::Activation::kRelu
                : name == "tanh" ? kernels::Activation::kTanh
                                 : kernels::Activation::kLinear;
  return absl::OkStatus();
}

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

// A resource variable's value, read under the variable's lock (shared: a load, a scatter
// update, holds it exclusively, so no write races the read) for as long as this is in scope.
class LockedVariable {
 public:
  // Looks up the variable of input `input` and checks that it holds `dtype` (`what` names it).
  absl::Status Acquire(OpKernelContext* ctx, int input, tensorflow::DataType dtype,
                       absl::string_view what) {
    TF_RETURN_IF_ERROR(LookupResource(ctx, tensorflow::HandleFromInput(ctx, input), &var_));
    lock_.emplace(*var_->mu());
    return CheckVariable(*var_->tensor(), dtype, what);
  }

  const Tensor& value() const { return *var_->tensor(); }

 private:
  tensorflow::core::RefCountPtr<tensorflow::Var> var_;
  std::optional<tensorflow::tf_shared_lock> lock_;
};

// The optional bias variable, float32 [num_slots, out], held (lock shared) while in scope.
class BiasVariable {
 public:
  // Looks up input `input` when `count` is 1 and checks it against the weights' geometry.
  absl::Status Acquire(OpKernelContext* ctx, int input, int count, int64_t num_slots,
                       int64_t out) {
    if (count == 0) return absl::OkStatus();
    TF_RETURN_IF_ERROR(var_.Acquire(ctx, input, tensorflow::DT_FLOAT, "bias"));
    const Tensor& bias = var_.value();
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
  LockedVariable var_;
  const float* data_ = nullptr;
};

template <typename T>
class ResourceIndexedMatmulOp : public OpKernel {
 public:
  explicit ResourceIndexedMatmulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_w", &transpose_w_));
    OP_REQUIRES_OK(ctx, ReadEpilogueAttrs(ctx, &num_bias_, &activation_));
  }

  void Compute(OpKernelContext* ctx) override {
    LockedVariable kernel;
    OP_REQUIRES_OK(ctx, kernel.Acquire(ctx, 1, tensorflow::DataTypeToEnum<T>::v(), "weights"));
    const Tensor& w = kernel.value();
    OP_REQUIRES(ctx, w.dims() == 3,
                absl::InvalidArgumentError(absl::StrCat(
                    "w must be [num_slots, out, in] or [num_slots, in, out], got shape ",
                    w.shape().DebugString())));
    BiasVariable bias;
    OP_REQUIRES_OK(ctx, bias.Acquire(ctx, 3, num_bias_, w.dim_size(0),
                                     transpose_w_ ? w.dim_size(1) : w.dim_size(2)));
    RunMatmul<T>(ctx, ctx->input(0), w, ctx->input(2), transpose_w_,
                 Epilogue{bias.data(), activation_});
  }

 private:
  bool transpose_w_ = true;
  int num_bias_ = 0;
  kernels::Activation activation_ = kernels::Activation::kLinear;
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
    OP_REQUIRES_OK(ctx, ReadEpilogueAttrs(ctx, &num_bias_, &activation_));
  }

  void Compute(OpKernelContext* ctx) override {
    LockedVariable kernel;
    OP_REQUIRES_OK(ctx, kernel.Acquire(ctx, 1, tensorflow::DataTypeToEnum<T>::v(), "weights"));
    const Tensor& x = ctx->input(0);
    const Tensor& w = kernel.value();
    ConvGeometry g;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, PrepareConv(ctx, x, w, ctx->input(2), stride_, same_, &g, &y));
    BiasVariable bias;
    OP_REQUIRES_OK(ctx, bias.Acquire(ctx, 3, num_bias_, w.dim_size(0), g.f));
    if (g.rows == 0 || g.m == 0 || g.positions() == 0 || g.f == 0) return;
    const Epilogue epilogue{bias.data(), activation_};
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
  kernels::Activation activation_ = kernels::Activation::kLinear;
};

// -------------------------------------------------------------------------------- shape fns

// The weights' shape behind a resource input, or unknown.
ShapeHandle ResourceShape(InferenceContext* c, int input) {
  const auto* handle = c->input_handle_shapes_and_types(input);
  if (handle == nullptr || handle->empty()) return c->UnknownShape();
  return (*handle)[0].shape;
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

REGISTER_OP("NeuroevoResourceIndexedMatmul")
    .Input("x: float")
    .Input("w: resource")
    .Input("indices: int32")
    .Input("bias: num_bias * resource")
    .Output("y: float")
    .Attr("dtype: {float, bfloat16}")
    .Attr("transpose_w: bool = true")
    .Attr("num_bias: int >= 0 = 0")
    .Attr("activation: {'linear', 'relu', 'tanh'} = 'linear'")
    .SetShapeFn([](InferenceContext* c) { return MatmulShape(c, ResourceShape(c, 1)); })
    .Doc(R"doc(
y[r] = x[r] w[indices[r]]^T (or x[r] w[indices[r]]) on a resource variable, read under its
lock without a copy, then y[r] = activation(y[r] + bias[indices[r]]) with the optional float32
[num_slots, out] bias variable (bias: a list of zero or one handles).
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
    .Attr("activation: {'linear', 'relu', 'tanh'} = 'linear'")
    .SetShapeFn(ConvShape)
    .Doc(R"doc(
y[r] = activation(conv2d(input_scale * x[r], w[indices[r]]) + bias[indices[r]]) with the
slot's kernel read in place; x float32 or uint8 (raw observations, widened as patches are
built); bias: a list of zero or one float32 [num_slots, filters] variables.
)doc");

#define NEUROEVO_REGISTER(T)                                                                  \
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
