// Several components (model, optimizer, schedule) in one safetensors checkpoint: each
// component's named tensors and metadata go in under a prefix ("optim.", "sched.") and come back
// out with the prefix removed, ready for that component's load_state().
#pragma once

#include <string>

#include "core/serialize.h"

namespace ada::optim {

// Appends `part`'s tensors and metadata to `into` with `prefix` in front of every name and key.
// InternalError if a prefixed name is already in `into`.
void add_prefixed(NamedTensors& into, const NamedTensors& part, const std::string& prefix);
// The entries of `from` whose names (and metadata keys) start with `prefix`, prefix removed;
// `source` is kept for messages.
NamedTensors take_prefixed(const NamedTensors& from, const std::string& prefix);

}  // namespace ada::optim
