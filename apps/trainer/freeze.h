// train.freeze: parameters kept as they are (loaded by train.init_from, or as initialised) while
// the rest train — e.g. a probe of a pre-trained BERT: [embeddings, encoder] frozen, the new
// pooler and classifier learning. A frozen parameter stops requiring grad, so backward neither
// computes nor reduces its gradient, and the optimizer, the reducer and the sync never see it; it
// stays in the model's state (checkpoints, the broadcast of rank 0's weights). Buffers are not
// parameters: batch norm's running statistics still follow the batches in training mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/parameter.h"

namespace ada::trainer {

struct Frozen {
  int64_t tensors = 0, elements = 0;
};

// Freezes every parameter whose dotted name is one of `prefixes` or lies under one (a prefix
// "encoder" takes "encoder.layer0.output.weight", not "encoder_x.weight"). ConfigError naming
// `where` (train.freeze as written) for a prefix that matches nothing (listing the top-level
// names), an empty prefix, or one that would leave nothing to train.
Frozen freeze_parameters(const std::vector<Param>& params, const std::vector<std::string>& prefixes,
                         const std::string& where);

// The parameters that still require grad, in order: what the optimizer and the sync get.
std::vector<Param> trainable(const std::vector<Param>& params);

}  // namespace ada::trainer
