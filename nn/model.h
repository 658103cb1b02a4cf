// Model: a Module that turns a batch of named tensors into a loss and metric sums.
// Image classifiers read "image" [N,C,H,W] f32 and "label" [N] i64; BERT reads "input_ids",
// "segment_ids", optional "attention_mask" [B,S], "labels" [B,S] (-100 = not masked) and
// optional "nsp_label" [B], and "mlm_positions" / "mlm_labels": the masked tokens' flat positions
// and labels [m] that its prepare_batch adds (from MlmDataset's per-sequence [B, P], or from the
// labels). Each reports its evaluation figures as named (sum, count) pairs over the batch, added
// across batches and ranks before dividing. To add a model: one file with a class deriving from
// Model and a factory, plus one line in register_builtin_models() (models/registry.cc).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "base/registry.h"
#include "core/random.h"
#include "nn/module.h"

namespace ada::nn {

using TensorMap = std::map<std::string, Tensor>;

// One evaluation figure over a batch, as a sum and a count: the figure is sum / count once both
// are added over every batch and rank (e.g. top-1 accuracy: correct predictions, examples).
struct Metric {
  double sum = 0, count = 0;
};
// Named figures in the order a run reports them (as eval_<name> in metrics.jsonl).
using Metrics = std::vector<std::pair<std::string, Metric>>;

struct ModelOutput {
  Variable loss;    // mean over the batch
  Metrics metrics;  // sums over the batch (empty in training mode without training metrics)
  // Per-example results a consumer may read (e.g. BERT's start_logits [B, S] for SQuAD's
  // predictions, a classifier's logits [B, C]), f32 whatever the activation dtype; empty for
  // models that give none.
  TensorMap outputs;
  // The figure called `name`; InternalError when the model reports none of that name.
  const Metric& metric(const std::string& name) const;
};

class Model : public Module {
 public:
  virtual ModelOutput forward(const TensorMap& batch) = 0;
  // The classes of a classifier's output; 0 for models without classes.
  virtual int64_t num_classes() const { return 0; }
  // The names of the figures forward() reports in evaluation, in its order (evaluate() holds
  // every evaluation to them), so that a run can refuse a figure no evaluation will give before
  // its first step (train.stop_at.metric). Empty: not declared, nothing checked.
  virtual std::vector<std::string> figures() const { return {}; }
  // Adds to a batch still on the host the fields forward() would otherwise derive by reading
  // device tensors on the host (BERT: the masked tokens' positions and labels), so that a GPU
  // step reads nothing back before its loss (and can be captured as a CUDA graph). The same
  // bits with or without it. The trainer calls it on every batch before the copy to the device.
  virtual void prepare_batch(TensorMap& /*batch*/) const {}
  // Refuses (ConfigError) an example of a data set that cannot be this model's input, saying
  // what to change; `source` names the set (its Dataset::describe()). The trainer checks the
  // first example of each set before the first step, so that a mismatch names the data and the
  // model key instead of failing inside a layer at step 1. Default: nothing checked here.
  virtual void check_example(const TensorMap& /*example*/, const std::string& /*source*/) const {}
  // The generator behind dropout (checkpointed with the model); models without one return
  // their unused default.
  Generator& rng() { return rng_; }
  // Whether forward() fills ModelOutput::metrics in training mode (default: yes; in eval mode
  // always). Each figure is read from the device, so a GPU host waits there for the forward
  // pass before it can queue the backward one: the trainer turns them off for training steps,
  // which read only the loss, after backward.
  void set_training_metrics(bool on) { training_metrics_ = on; }
  bool metrics_wanted() const { return !training() || training_metrics_; }

 protected:
  // The named field of a batch, checked: message names the model and what it needs.
  const Tensor& field(const TensorMap& batch, const std::string& name) const;
  Generator rng_{0};

 private:
  bool training_metrics_ = true;
};

// Builds a model from its config section ("model"); `seed` fixes every initial weight.
using ModelFactory = std::function<std::unique_ptr<Model>(const Config& cfg, uint64_t seed)>;
using ModelRegistry = Registry<ModelFactory>;
void register_builtin_models(ModelRegistry& registry);
// The built-in models, registered once.
const ModelRegistry& builtin_models();

}  // namespace ada::nn
