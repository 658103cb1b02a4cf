#include "apps/trainer/step_graph.h"

#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ada::trainer {

StepGraph::StepGraph(nn::Model& model, int device)
    : model_(model), device_(device), params_(model.parameters()) {}

Tensor StepGraph::eager(const nn::TensorMap& batch, double seed) {
  ++eager_;
  // Warm-up counts eager steps in a row with one batch shape: the capture's batch has the
  // shape those steps made the model's caches for (BERT's position ids: made on the host).
  const std::vector<std::string> sig = signature(batch);
  since_warm_ = sig == warm_sig_ ? since_warm_ + 1 : 1;
  warm_sig_ = sig;
  model_.zero_grad();
  const Variable loss = model_.forward(batch).loss;
  if (seed == 1.0)
    backward(loss);
  else
    backward(loss, Tensor::full(loss.value().shape(), seed, DType::f32, loss.value().device()));
  return loss.value();
}

std::vector<std::string> StepGraph::signature(const nn::TensorMap& batch) {
  std::vector<std::string> sig;
  for (const auto& [name, t] : batch) sig.push_back(name + t.str());  // its dtype and shape
  return sig;
}

std::vector<const void*> StepGraph::addresses() const {
  std::vector<const void*> out;
  for (const auto& p : params_) {
    out.push_back(p.var.value().raw_data());
    const Tensor& g = p.var.grad();  // (no zero-fill here: no zero_grad since the last backward)
    out.push_back(g.defined() ? g.raw_data() : nullptr);
  }
  for (const auto& [name, t] : model_.buffers()) out.push_back(t.raw_data());
  return out;
}

void StepGraph::capture(const nn::TensorMap& batch, double seed) {
  loss_ = Tensor();  // a dropped graph's, freed before the capture rather than during it
  inputs_.clear();
  for (const auto& [name, t] : batch) inputs_[name] = t.clone();
  seed_ = Tensor::full({}, seed, DType::f32, Device::cuda(device_));
  // The eager steps' cached blocks go back to the driver: the graph's pool holds a working set
  // of its own, and two would not fit where one nearly does.
  cuda::empty_cache(device_);
  auto graph = std::make_unique<cuda::Graph>();
  try {
    graph->capture(
        device_,
        [&] {
          model_.zero_grad();
          const Variable loss = model_.forward(inputs_).loss;
          ADA_CHECK_ARG(loss.value().shape() == seed_.shape(), ShapeError)
              << "train.cuda_graphs: the loss " << loss.value().str() << " is not a scalar";
          backward(loss, seed_);
          loss_ = loss.value();
        },
        &model_.rng());
  } catch (const Error& e) {  // a refusal (DeviceError) or a CUDA call failing (ExternalError)
    if (!dynamic_cast<const DeviceError*>(&e) && !dynamic_cast<const ExternalError*>(&e)) throw;
    ADA_THROW(DeviceError) << "train.cuda_graphs: the step cannot be captured as a CUDA graph: "
                           << e.what() << "; set train.cuda_graphs: false";
  }
  graph_ = std::move(graph);
  graph_sig_ = signature(inputs_);
  captured_at_ = addresses();
  ++captures_;
  log_info(
      "CUDA graph: forward and backward captured ({} nodes, {:.0f} MB of its own memory); "
      "steps with a batch like this one replay it",
      graph_->nodes(), static_cast<double>(graph_->pool_bytes()) / (1024.0 * 1024.0));
}

Tensor StepGraph::run(const nn::TensorMap& batch, double seed) {
  if (graph_ && addresses() != captured_at_) {  // a tensor the graph uses was replaced
    log_warn(
        "CUDA graph: the model's tensors moved since the capture; capturing again after {} "
        "eager steps",
        kWarmup);
    graph_.reset();
    since_warm_ = 0;
  }
  if (!graph_) {
    if (since_warm_ < kWarmup || signature(batch) != warm_sig_) return eager(batch, seed);
    capture(batch, seed);
  } else if (signature(batch) != graph_sig_) {
    ++unlike_;
    return eager(batch, seed);
  }
  for (auto& [name, t] : inputs_) t.copy_from(batch.at(name));
  ops::fill_(seed_, static_cast<float>(seed));
  graph_->replay();
  ++replays_;
  return loss_;
}

std::string StepGraph::describe() const {
  std::ostringstream os;
  os << "captured " << captures_ << (captures_ == 1 ? " time, " : " times, ") << replays_
     << " replays, " << eager_ << " eager steps (" << unlike_
     << " with a batch unlike the captured one)";
  return os.str();
}

}  // namespace ada::trainer
