// Global-norm gradient clipping on the op surface (norm2_sq in double, scale_ in place).
#include "optim/clip.h"

#include <cmath>

#include "core/ops.h"

namespace ada::optim {

double grad_norm(const std::vector<Param>& params) {
  double sq = 0.0;
  for (const Param& p : params) {
    const Tensor& g = p.var.grad();
    if (g.defined()) sq += ops::norm2_sq(g);
  }
  return std::sqrt(sq);
}

double clip_grad_norm(const std::vector<Param>& params, double max_norm) {
  ADA_CHECK_ARG(max_norm > 0, ConfigError)
      << "clip_grad_norm: max_norm must be > 0, got " << max_norm;
  const double norm = grad_norm(params);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float coef = static_cast<float>(max_norm / (norm + 1e-6));
  for (const Param& p : params) {
    Tensor g = p.var.grad();
    if (g.defined()) ops::scale_(g, coef);
  }
  return norm;
}

}  // namespace ada::optim
