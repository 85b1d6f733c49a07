// The TensorFlow names neuroevo's op files use, brought into namespace neuroevo once.
#ifndef NEUROEVO_CUSTOM_OPS_COMMON_TF_NAMES_H_
#define NEUROEVO_CUSTOM_OPS_COMMON_TF_NAMES_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace neuroevo {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

}  // namespace neuroevo

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_TF_NAMES_H_
