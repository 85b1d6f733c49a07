// The ref-counting resource handles of neuroevo's ops: a make op hands out a handle that owns
// its resource (freed with the last tensor holding it, no resource-manager bookkeeping), and the
// ops on the resource look it up from one of their inputs.
#ifndef NEUROEVO_CUSTOM_OPS_COMMON_RESOURCE_HANDLE_H_
#define NEUROEVO_CUSTOM_OPS_COMMON_RESOURCE_HANDLE_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace neuroevo {

// Writes a ref-counting handle owning `resource` (typed, for LookupHandle) to output 0; when
// that fails the resource is released.
template <typename T>
absl::Status OutputHandle(tensorflow::OpKernelContext* ctx, T* resource) {
  tensorflow::Tensor* handle = nullptr;
  absl::Status s = ctx->allocate_output(0, tensorflow::TensorShape({}), &handle);
  if (!s.ok()) {
    resource->Unref();
    return s;
  }
  handle->scalar<tensorflow::ResourceHandle>()() =
      tensorflow::ResourceHandle::MakeRefCountingHandle(resource, ctx->device()->name());
  return absl::OkStatus();
}

// Looks up the resource behind the scalar handle of input `input`.
template <typename T>
absl::Status LookupHandle(tensorflow::OpKernelContext* ctx, int input,
                          tensorflow::core::RefCountPtr<T>* out) {
  const tensorflow::Tensor& handle = ctx->input(input);
  if (handle.dtype() != tensorflow::DT_RESOURCE || handle.dims() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", input, " must be a scalar resource handle, got ",
        tensorflow::DataTypeString(handle.dtype()), " ", handle.shape().DebugString()));
  }
  return tensorflow::LookupResource(ctx, handle.scalar<tensorflow::ResourceHandle>()(), out);
}

// Registers an op that makes a resource: stateful, its only output the scalar handle (see
// OutputHandle). Chain the rest (inputs, attrs, doc).
#define NEUROEVO_REGISTER_MAKE_OP(name)                                 \
  REGISTER_OP(name)                                                     \
      .Output("handle: resource")                                       \
      .SetIsStateful()                                                  \
      .SetShapeFn(::tensorflow::shape_inference::ScalarShape)

// Base of kernels on one resource of type T, whose handle is input 0.
template <typename T>
class ResourceOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(tensorflow::OpKernelContext* ctx) final {
    tensorflow::core::RefCountPtr<T> resource;
    OP_REQUIRES_OK(ctx, LookupHandle(ctx, 0, &resource));
    Compute(ctx, *resource);
  }

 protected:
  virtual void Compute(tensorflow::OpKernelContext* ctx, T& resource) = 0;
};

}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_RESOURCE_HANDLE_H_
