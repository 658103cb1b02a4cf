// Model: a Module that turns a batch of named tensors into a loss and metric sums.
// Image classifiers read "image" [N,C,H,W] f32 and "label" [N] i64; BERT reads "input_ids",
// "segment_ids", optional "attention_mask" [B,S], "labels" [B,S] (-100 = not masked) and
// optional "nsp_label" [B]. Metrics are sums over the batch (e.g. "correct", "count") so they
// can be added across micro-batches and ranks before dividing.
// To add a model: one file with a class deriving from Model and a factory, plus one line in
// register_builtin_models() (models/registry.cc).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/config.h"
#include "base/registry.h"
#include "core/random.h"
#include "nn/module.h"

namespace ada::nn {

using TensorMap = std::map<std::string, Tensor>;

struct ModelOutput {
  Variable loss;                          // mean over the batch
  std::map<std::string, double> metrics;  // sums over the batch
};

class Model : public Module {
 public:
  virtual ModelOutput forward(const TensorMap& batch) = 0;
  // The generator behind dropout (checkpointed with the model); models without one return
  // their unused default.
  Generator& rng() { return rng_; }

 protected:
  // The named field of a batch, checked: message names the model and what it needs.
  const Tensor& field(const TensorMap& batch, const std::string& name) const;
  Generator rng_{0};
};

// Builds a model from its config section ("model"); `seed` fixes every initial weight.
using ModelFactory = std::function<std::unique_ptr<Model>(const Config& cfg, uint64_t seed)>;
using ModelRegistry = Registry<ModelFactory>;
void register_builtin_models(ModelRegistry& registry);

}  // namespace ada::nn
