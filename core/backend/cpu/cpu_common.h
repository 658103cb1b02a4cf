// Helpers shared by the CPU kernels: argument checks that name the op, and device dispatch.
// Every op of core/ops.h starts with ADA_ON_CUDA(cuda::op(args...), tensors...): when any of
// its input tensors (pure outputs such as saved statistics or masks are not consulted) lives on
// a CUDA device the call goes to the CUDA backend (core/backend/cuda),
// which checks that all of them are on that one device. In builds without CUDA no CUDA tensor
// can exist (allocation throws), so only the CPU part remains: an OpTimer over the rest of the
// op's body (op_profile.h; one atomic load unless profiling). It is a declaration, so the macro
// must open the op's body, as a statement of its own.
#pragma once

#include <initializer_list>

#include "core/backend/cpu/op_profile.h"
#include "core/parallel.h"
#include "core/tensor.h"

#ifdef ADA_WITH_CUDA
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda_runtime.h"
#define ADA_ON_CUDA(call, ...)                    \
  if (::ada::cpu::any_cuda(__VA_ARGS__)) {        \
    ::ada::cuda::OpTimer ada_op_timer_(__func__); \
    return call;                                  \
  }                                               \
  ::ada::cpu::OpTimer ada_cpu_op_timer_(__func__)
#else
#define ADA_ON_CUDA(call, ...) ::ada::cpu::OpTimer ada_cpu_op_timer_(__func__)
#endif

namespace ada::cpu {

template <class... Ts>
bool any_cuda(const Ts&... ts) {
  return ((ts.defined() && !ts.device().is_cpu()) || ...);
}

// Every tensor defined, f32, on the CPU.
inline void require_cpu_f32(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    ADA_CHECK_ARG(t->defined(), ShapeError) << op << ": an argument is undefined";
    ADA_CHECK_ARG(t->device().is_cpu(), DeviceError)
        << op << ": tensor " << t->str() << " is on a CUDA device while another argument is on "
        << "the CPU; move them to one device";
    ADA_CHECK_ARG(t->dtype() == DType::f32, DTypeError) << op << ": expected f32, got " << t->str();
  }
}

inline void require_cpu(const char* op, const Tensor& t) {
  ADA_CHECK_ARG(t.defined(), ShapeError) << op << ": an argument is undefined";
  ADA_CHECK_ARG(t.device().is_cpu(), DeviceError)
      << op << ": tensor " << t.str() << " is on a CUDA device while another argument is on the "
      << "CPU; move them to one device";
}

// Index tensors (labels, ids) as i64 values regardless of stored i32/i64.
inline int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::i64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}
inline void require_index(const char* op, const Tensor& t, const char* arg) {
  require_cpu(op, t);
  ADA_CHECK_ARG(t.dtype() == DType::i64 || t.dtype() == DType::i32, DTypeError)
      << op << ": '" << arg << "' must be i64 or i32, got " << t.str();
}

// Elementwise kernels parallelise in chunks of this many elements.
constexpr int64_t kGrain = 1 << 15;

}  // namespace ada::cpu
