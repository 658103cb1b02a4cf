// Factories of the built-in models (one per model file); registered in registry.cc.
#pragma once

#include <memory>

#include "nn/model.h"

namespace ada::nn {

std::unique_ptr<Model> make_lenet5(const Config& cfg, uint64_t seed);
// depth 18/34/50 (ImageNet layout, v1.5) and the 28x28 variants (resnet20_mnist).
std::unique_ptr<Model> make_resnet(const std::string& variant, const Config& cfg, uint64_t seed);
std::unique_ptr<Model> make_bert(const Config& cfg, uint64_t seed);

}  // namespace ada::nn
