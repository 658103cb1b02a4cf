// Prefixing and selecting components of a checkpoint.
#include "optim/checkpoint.h"

#include <unordered_set>

namespace ada::optim {

void add_prefixed(NamedTensors& into, const NamedTensors& part, const std::string& prefix) {
  std::unordered_set<std::string> names;
  for (const auto& [n, t] : into.tensors) names.insert(n);
  for (const auto& [n, t] : part.tensors) {
    const std::string key = prefix + n;
    ADA_CHECK_ARG(names.insert(key).second, InternalError)
        << "checkpoint: tensor '" << key << "' added twice; give each component its own prefix";
    into.tensors.emplace_back(key, t);
  }
  for (const auto& [k, v] : part.metadata) {
    ADA_CHECK_ARG(into.metadata.emplace(prefix + k, v).second, InternalError)
        << "checkpoint: metadata '" << prefix + k << "' added twice";
  }
}

NamedTensors take_prefixed(const NamedTensors& from, const std::string& prefix) {
  NamedTensors out;
  out.source = from.source;
  for (const auto& [n, t] : from.tensors)
    if (n.compare(0, prefix.size(), prefix) == 0)
      out.tensors.emplace_back(n.substr(prefix.size()), t);
  for (const auto& [k, v] : from.metadata)
    if (k.compare(0, prefix.size(), prefix) == 0) out.metadata.emplace(k.substr(prefix.size()), v);
  return out;
}

}  // namespace ada::optim
