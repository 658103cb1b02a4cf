// Global-norm gradient clipping on the op surface (ops::clip_grad_norm_ over every gradient).
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

void clip_grad_norm(const std::vector<Param>& params, double max_norm) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Param& p : params)
    if (p.var.grad().defined()) grads.push_back(p.var.grad());
  ops::clip_grad_norm_(grads, max_norm);
}

}  // namespace ada::optim
