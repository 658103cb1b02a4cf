// Evaluation of the model on a held-out set (the test set, or the validation part of the
// training set), sharded over the ranks: each rank takes every
// world-th example (the sampler pads the shards to equal length; the padding is not counted),
// the model reports its named figures as (sum, count) pairs, and one allreduce adds them up.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "apps/trainer/run_log.h"
#include "comm/communicator.h"
#include "data/dataset.h"
#include "nn/model.h"

namespace ada::trainer {

struct EvalOptions {
  int64_t batch = 32;
  int workers = 1;
  int64_t max_batches = 0;  // per rank; 0: the whole shard
  Device device;            // where the model runs
  // A stop signal (base/stop_signal.h) on any rank abandons the evaluation at its next batch
  // (a long one would outlast the launcher's grace period before its SIGKILL).
  bool stop_on_signal = false;
};

// The model's figures over the whole set (every rank gets the same); nullopt, on every rank, when
// a stop signal abandoned it (options.stop_on_signal). Collective.
std::optional<nn::Metrics> evaluate(nn::Model& model,
                                    const std::shared_ptr<const data::Dataset>& set,
                                    comm::Communicator& world, const EvalOptions& options);

// Adds <prefix><name> = sum / count to `record` for each figure with a count: eval_ for the
// test set, val_ for the validation set.
void add_figures(Json& record, const nn::Metrics& figures, const std::string& prefix = "eval_");
// "loss 0.0812, top1 0.9843 (n = 10000)" for logs, n being the first figure's count.
std::string describe_figures(const nn::Metrics& figures);

}  // namespace ada::trainer
