#include "nn/model.h"

namespace ada::nn {

const Metric& ModelOutput::metric(const std::string& name) const {
  for (const auto& [n, m] : metrics)
    if (n == name) return m;
  std::string have;
  for (const auto& [n, m] : metrics) have += (have.empty() ? "" : ", ") + n;
  ADA_THROW(InternalError) << "the model reports no figure '" << name
                           << "' (it reports: " << (have.empty() ? "none" : have) << ")";
}

const Tensor& Model::field(const TensorMap& batch, const std::string& name) const {
  auto it = batch.find(name);
  if (it != batch.end()) return it->second;
  std::string have;
  for (const auto& [k, v] : batch) have += (have.empty() ? "" : ", ") + k;
  ADA_THROW(ShapeError) << type_name() << ": the batch has no field '" << name
                        << "' (it has: " << (have.empty() ? "nothing" : have)
                        << "); is the dataset right for this model?";
  return it->second;
}

}  // namespace ada::nn
