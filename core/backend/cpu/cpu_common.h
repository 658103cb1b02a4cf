// Helpers shared by the CPU kernels (cpu_ops.h): argument checks that name the op, index reads,
// the elementwise grain. Device dispatch is core/ops.cc's; these checks still reject a CUDA
// tensor among a CPU op's arguments (a mix of devices) with DeviceError.
#pragma once

#include <initializer_list>

#include "core/parallel.h"
#include "core/tensor.h"

namespace ada::cpu {

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
