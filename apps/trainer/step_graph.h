// train.cuda_graphs: a training step's forward and backward passes captured once as a CUDA graph
// (core/backend/cuda_runtime.h, cuda::Graph) and replayed on the later steps, so the host launches
// one graph instead of every kernel; the strategy (reduction, clipping, the optimizer at the
// step's LR) runs eagerly after it, as without graphs.
//   - The first `kWarmup` steps of the process run eagerly (plans, workspaces, gradients made);
//     the next with the same batch shape is captured and replayed at once. The model's dropout
//     draws from its rng(), which the graph shifts on the device so that replays draw the masks
//     eager steps would.
//   - A replay reads its batch from tensors of its own, into which each step's batch is copied; a
//     batch whose fields differ in names, shapes or dtypes from the captured one runs eagerly
//     (counted; masked-LM batches keep one shape: MlmDataset pads each sequence's masked
//     positions to one count, and synthetic sequences choose one count each).
//     Parameters, gradients or buffers that moved since the capture (a strategy that replaced a
//     tensor) drop the graph; it is captured again after kWarmup eager steps.
//   - Loss scaling: backward's seed is a tensor of the graph's, filled with the step's scale
//     before each replay.
//   - What a graph cannot hold (an op that reads the device on the host in forward or backward)
//     ends the run with the op named; train.cuda_graphs: false runs every step eagerly.
// The trainer allows it with one micro-batch a step and a strategy that does not hook into
// backward (run_settings.cc, trainer.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/cuda_runtime.h"
#include "core/parameter.h"
#include "nn/model.h"

namespace ada::trainer {

class StepGraph {
 public:
  static constexpr int kWarmup = 2;
  StepGraph(nn::Model& model, int device);
  // zero_grad, forward and backward of `batch` (on the device) from `seed` (the loss scale; 1:
  // none), replayed when it can be; returns the loss (a device tensor, read after the step).
  Tensor run(const nn::TensorMap& batch, double seed);
  int64_t replays() const { return replays_; }
  int64_t eager_steps() const { return eager_; }
  int64_t captures() const { return captures_; }
  // "captured N times, R replays, E eager steps (K with a batch unlike the captured one)".
  std::string describe() const;

 private:
  Tensor eager(const nn::TensorMap& batch, double seed);
  void capture(const nn::TensorMap& batch, double seed);
  // Each field's name, dtype, shape and device: batches of one signature replay one graph.
  static std::vector<std::string> signature(const nn::TensorMap& batch);
  std::vector<const void*> addresses() const;  // parameters, gradients and buffers

  nn::Model& model_;
  int device_;
  std::unique_ptr<cuda::Graph> graph_;
  std::vector<Param> params_;           // the model's (shared handles: they see a replaced tensor)
  nn::TensorMap inputs_;                // the captured step's batch, rewritten before each replay
  std::vector<std::string> graph_sig_;  // signature(inputs_)
  Tensor seed_, loss_;                  // backward's seed and the loss, the graph's
  std::vector<const void*> captured_at_;
  // Eager steps in a row with the batch signature warm_sig_, since the start or a dropped graph.
  int64_t since_warm_ = 0;
  std::vector<std::string> warm_sig_;
  int64_t replays_ = 0, eager_ = 0, captures_ = 0, unlike_ = 0;
};

}  // namespace ada::trainer
