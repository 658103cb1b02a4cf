// The registry of built-in models: one line per model.
#include "nn/models/models.h"

namespace ada::nn {

void register_builtin_models(ModelRegistry& r) {
  r.add("lenet5", make_lenet5);
  r.add("resnet20_mnist",
        [](const Config& c, uint64_t s) { return make_resnet("resnet20_mnist", c, s); });
  r.add("resnet18", [](const Config& c, uint64_t s) { return make_resnet("resnet18", c, s); });
  r.add("resnet34", [](const Config& c, uint64_t s) { return make_resnet("resnet34", c, s); });
  r.add("resnet50", [](const Config& c, uint64_t s) { return make_resnet("resnet50", c, s); });
  r.add("bert", make_bert);
}

const ModelRegistry& builtin_models() {
  return builtin_registry<ModelRegistry>("model", register_builtin_models);
}

}  // namespace ada::nn
