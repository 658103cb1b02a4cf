// GEMM on our packed SGEMM (core/backend/cpu/sgemm.h), on the shared OpenMP pool.
// Batched GEMM parallelises over the batch when it has at least as many entries as threads
// (each product then runs single-threaded), otherwise each product uses all threads.
#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/cpu/sgemm.h"
#include "core/backend/op_shapes.h"
#include "core/ops.h"

namespace ada::cpu {
namespace {

using backend::GemmDims;

// c[m,n] = alpha * op(a) op(b) + beta * c on raw, densely packed row-major pointers.
void gemm_raw(const float* a, const float* b, float* c, const GemmDims& d, bool ta, bool tb,
              float alpha, float beta, const float* bias = nullptr, float* row_sums = nullptr) {
  gemm(ta, tb, d.m, d.n, d.k, alpha, a, ta ? d.m : d.k, b, tb ? d.k : d.n, beta, c, d.n, bias,
       row_sums);
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, float alpha, float beta) {
  require_cpu_f32("gemm", {&a, &b, &c});
  const GemmDims d = backend::checked_gemm("gemm", a, b, &c, ta, tb);
  gemm_raw(a.data<float>(), b.data<float>(), c.data<float>(), d, ta, tb, alpha, beta);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  require_cpu_f32("matmul", {&a, &b});
  const GemmDims d = backend::checked_gemm("matmul", a, b, nullptr, ta, tb);
  Tensor c = Tensor::empty({d.m, d.n});
  gemm_raw(a.data<float>(), b.data<float>(), c.data<float>(), d, ta, tb, 1.f, 0.f);
  return c;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  require_cpu_f32("linear", {&x, &w, &b});
  const GemmDims d = backend::checked_gemm("linear", x, w, nullptr, false, true);
  ADA_CHECK_ARG(b.dim() == 1 && b.size(0) == d.n, ShapeError)
      << "linear: bias " << b.str() << " does not match the " << d.n << " outputs of weight "
      << w.str();
  Tensor y = Tensor::empty({d.m, d.n});
  gemm_raw(x.data<float>(), w.data<float>(), y.data<float>(), d, false, true, 1.f, 0.f,
           b.data<float>());
  return y;
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  require_cpu_f32("linear_weight_grad", {&dy, &x});
  const GemmDims d = backend::checked_gemm("linear_weight_grad", dy, x, nullptr, true, false);
  dw = Tensor::empty({d.m, d.n});
  db = Tensor::empty({d.m});
  gemm_raw(dy.data<float>(), x.data<float>(), dw.data<float>(), d, true, false, 1.f, 0.f, nullptr,
           db.data<float>());
}

void gemm_batched(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, float alpha,
                  float beta) {
  require_cpu_f32("gemm_batched", {&a, &b, &c});
  const GemmDims d = backend::checked_gemm_batched("gemm_batched", a, b, c, ta, tb);
  const int64_t batch = a.size(0);
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* cp = c.data<float>();
  const int64_t sa = d.m * d.k, sb = d.k * d.n, sc = d.m * d.n;
  auto one = [&](int64_t i) {
    gemm_raw(ap + i * sa, bp + i * sb, cp + i * sc, d, ta, tb, alpha, beta);
  };
  if (batch >= num_threads()) {
    parallel_for(0, batch, 1, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

Tensor bmm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  require_cpu_f32("bmm", {&a, &b});
  Tensor c = Tensor::empty(backend::bmm_shape("bmm", a, b, ta, tb));
  ops::gemm_batched(a, b, c, ta, tb, 1.f, 0.f);
  return c;
}

}  // namespace ada::cpu
