// Keeps a function's float arithmetic unfused where its bits must match another library's
// (OpenCV's resize, TensorFlow's tanh): a fused multiply-add rounds once where they round
// twice. GCC contracts across statements and through vector intrinsics unless told otherwise,
// so such functions carry NEUROEVO_NO_FMA before and NEUROEVO_NO_FMA_BODY at the top of their
// body. A function with GCC's optimize attribute is not inlined into callers without it.
#ifndef NEUROEVO_CUSTOM_OPS_COMMON_NO_FMA_H_
#define NEUROEVO_CUSTOM_OPS_COMMON_NO_FMA_H_

#if defined(__clang__)
#define NEUROEVO_NO_FMA
#define NEUROEVO_NO_FMA_BODY _Pragma("STDC FP_CONTRACT OFF")
#elif defined(__GNUC__)
#define NEUROEVO_NO_FMA __attribute__((optimize("fp-contract=off")))
#define NEUROEVO_NO_FMA_BODY
#else
#define NEUROEVO_NO_FMA
#define NEUROEVO_NO_FMA_BODY
#endif

#endif  // NEUROEVO_CUSTOM_OPS_COMMON_NO_FMA_H_
