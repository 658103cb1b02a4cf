// Global-norm gradient clipping (as PyTorch's clip_grad_norm_): the L2 norm of all gradients
// taken together, accumulated in double; when it exceeds max_norm every gradient is scaled by
// max_norm / (norm + 1e-6). Call it after the reducer, before the optimizer step.
#pragma once

#include <vector>

#include "core/parameter.h"

namespace ada::optim {

// The global L2 norm of the defined gradients of `params` (0 if none).
double grad_norm(const std::vector<Param>& params);

// Returns the norm before clipping. Gradients change only when the norm is finite and above
// `max_norm` (> 0; ConfigError otherwise). A non-finite norm leaves them as they are, so the
// caller can see it and skip the step. Undefined gradients are skipped.
double clip_grad_norm(const std::vector<Param>& params, double max_norm);

}  // namespace ada::optim
