// Test-only op library core_testing: NeuroevoIndexedMatmul, the indexed matmul on a plain
// float/bfloat16 tensor (no resource variable, no bias or activation), so tests can feed
// weights directly and compare with NeuroevoResourceIndexedMatmul. Models never use it; it
// is built apart from the production `core` library (neuroevo/ops/build.py).
//
//   NeuroevoIndexedMatmul(x, w, indices): x float32 [k, in] or [k, m, in]; w [S, out, in] when
//   transpose_w (y = x w[i]^T) or [S, in, out] (y = x w[i]); y float32 [k, (m,) out].
//
// The op glue is shared with the production op (indexed_matmul.h); kernels in kernels.h.

#include "core/indexed_matmul.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace neuroevo {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::shape_inference::InferenceContext;
using simd::bfloat16;

template <typename T>
class IndexedMatmulOp : public OpKernel {
 public:
  explicit IndexedMatmulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_w", &transpose_w_));
  }

  void Compute(OpKernelContext* ctx) override {
    indexed::RunMatmul<T>(ctx, ctx->input(0), ctx->input(1), ctx->input(2), transpose_w_,
                          indexed::Epilogue());
  }

 private:
  bool transpose_w_ = true;
};

}  // namespace

REGISTER_OP("NeuroevoIndexedMatmul")
    .Input("x: float")
    .Input("w: T")
    .Input("indices: int32")
    .Output("y: float")
    .Attr("T: {float, bfloat16}")
    .Attr("transpose_w: bool = true")
    .SetShapeFn([](InferenceContext* c) { return indexed::MatmulShape(c, c->input(1)); })
    .Doc(R"doc(
Test-only: y[r] = x[r] w[indices[r]]^T (or x[r] w[indices[r]]), reading w in place.
)doc");

REGISTER_KERNEL_BUILDER(
    Name("NeuroevoIndexedMatmul").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
    IndexedMatmulOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("NeuroevoIndexedMatmul").Device(tensorflow::DEVICE_CPU).TypeConstraint<bfloat16>("T"),
    IndexedMatmulOp<bfloat16>);

}  // namespace neuroevo
