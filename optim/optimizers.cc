// The registry of built-in optimizers: one line per optimizer.
#include "optim/adam.h"
#include "optim/lamb.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"

namespace ada::optim {

void register_builtin_optimizers(OptimizerRegistry& r) {
  r.add("sgd", [](const Config& c) { return std::make_unique<Sgd>(SgdOptions::from_config(c)); });
  r.add("adam",
        [](const Config& c) { return std::make_unique<Adam>(AdamOptions::from_config(c, false)); });
  r.add("adamw",
        [](const Config& c) { return std::make_unique<Adam>(AdamOptions::from_config(c, true)); });
  r.add("lamb",
        [](const Config& c) { return std::make_unique<Lamb>(LambOptions::from_config(c)); });
}

const OptimizerRegistry& builtin_optimizers() {
  return builtin_registry<OptimizerRegistry>("optimizer", register_builtin_optimizers);
}

}  // namespace ada::optim
