#include "apps/trainer/evaluation.h"

#include <algorithm>
#include <vector>

#include "base/fault.h"
#include "base/stop_signal.h"
#include "core/autograd.h"
#include "data/data_loader.h"
#include "data/distributed_sampler.h"

namespace ada::trainer {

std::optional<nn::Metrics> evaluate(nn::Model& model,
                                    const std::shared_ptr<const data::Dataset>& set,
                                    comm::Communicator& world, const EvalOptions& options) {
  NoGradGuard ng;
  model.train(false);
  data::SamplerOptions so;
  so.rank = world.rank();
  so.world = world.size();
  so.shuffle = false;
  so.drop_last = false;
  data::LoaderOptions lo;
  lo.batch_size = options.batch;
  lo.num_workers = options.workers;
  data::DataLoader loader(set, data::DistributedSampler(set->size(), so), lo);
  loader.start_epoch(0);
  // This rank's real share: the padded tail repeats examples to even the shards.
  const int64_t n = set->size();
  const int64_t mine = (n - world.rank() + world.size() - 1) / world.size();
  nn::Metrics sums;
  int64_t batches = 0, seen = 0;
  double abandoned = 0;
  while (auto batch = loader.next()) {
    if (options.max_batches > 0 && batches >= options.max_batches) break;
    if (options.stop_on_signal && StopSignals::received() != 0) {
      abandoned = 1;
      break;
    }
    const int64_t keep = std::min<int64_t>(batch->size(), mine - seen);
    if (keep <= 0) break;
    nn::TensorMap fields;
    for (auto& [k, v] : batch->fields) fields[k] = keep < batch->size() ? v.narrow(0, keep) : v;
    model.prepare_batch(fields);  // on the host, before the copy to the device
    for (auto& [k, v] : fields) v = v.to(options.device);
    seen += keep;
    fault_point("eval");
    const nn::ModelOutput out = model.forward(fields);
    if (sums.empty())
      sums = out.metrics;
    else
      for (size_t i = 0; i < sums.size(); ++i) {
        ADA_CHECK(i < out.metrics.size() && out.metrics[i].first == sums[i].first)
            << "the model reported other figures for another batch";
        sums[i].second.sum += out.metrics[i].second.sum;
        sums[i].second.count += out.metrics[i].second.count;
      }
    ++batches;
  }
  model.train(true);
  // Every rank learns whether one abandoned it before the figures' collectives.
  world.allreduce(&abandoned, 1, comm::ReduceOp::max);
  if (abandoned != 0) return std::nullopt;
  if (const std::vector<std::string> declared = model.figures();
      !declared.empty() && !sums.empty()) {
    std::vector<std::string> got;
    for (const auto& [name, m] : sums) got.push_back(name);
    ADA_CHECK(got == declared) << model.type_name()
                               << "::figures() does not list the figures its forward() reports";
  }
  // Every rank adds the same figures: one with no example of its own (fewer examples than
  // ranks) adds zeros under rank 0's names (rank 0 always has one, unless the set is empty).
  std::string names;
  for (const auto& [name, m] : sums) names += name + "\n";
  names = comm::broadcast_string(world, names, 0);
  if (sums.empty())
    for (size_t b = 0, e; (e = names.find('\n', b)) != std::string::npos; b = e + 1)
      sums.push_back({names.substr(b, e - b), {}});
  std::vector<double> vals;
  for (const auto& [name, m] : sums) vals.insert(vals.end(), {m.sum, m.count});
  world.allreduce(vals.data(), static_cast<int64_t>(vals.size()));
  for (size_t i = 0; i < sums.size(); ++i) sums[i].second = {vals[2 * i], vals[2 * i + 1]};
  return sums;
}

void add_figures(Json& record, const nn::Metrics& figures, const std::string& prefix) {
  for (const auto& [name, m] : figures)
    if (m.count > 0) record[prefix + name] = m.sum / m.count;
}

std::string describe_figures(const nn::Metrics& figures) {
  std::string s;
  char buf[96];
  for (const auto& [name, m] : figures) {
    if (m.count <= 0) continue;
    std::snprintf(buf, sizeof buf, "%s %.4f", name.c_str(), m.sum / m.count);
    s += (s.empty() ? "" : ", ") + std::string(buf);
  }
  if (s.empty()) return "nothing evaluated";
  std::snprintf(buf, sizeof buf, " (n = %.0f)", figures.front().second.count);
  return s + buf;
}

}  // namespace ada::trainer
