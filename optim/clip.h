// Global-norm gradient clipping (as PyTorch's clip_grad_norm_): the L2 norm of all gradients
// taken together, accumulated in double; when it exceeds max_norm every gradient is scaled by
// max_norm / (norm + 1e-6). Call it after the reducer, before the optimizer step.
#pragma once

#include <vector>

#include "core/parameter.h"

namespace ada::optim {

// The global L2 norm of the defined gradients of `params` (0 if none). Waits for the device.
double grad_norm(const std::vector<Param>& params);

// Gradients change only when the norm is finite and above `max_norm` (> 0; ConfigError
// otherwise): a non-finite norm leaves them as they are, for the step guard to see. Undefined
// gradients are skipped. One multi-tensor op (ops::clip_grad_norm_): on a GPU the norm never
// leaves the device and nothing waits for it; grad_norm() reads it where a caller needs it.
void clip_grad_norm(const std::vector<Param>& params, double max_norm);

}  // namespace ada::optim
