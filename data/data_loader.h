// DataLoader: turns a Dataset and this rank's DistributedSampler into batches of stacked tensors.
// num_workers threads build whole batches ahead of the consumer, at most `prefetch` batches in
// flight; batches come out in sampler order whatever the worker count (0 = on the caller's
// thread). A worker's error is re-thrown by next() on the caller's thread, with its type kept and
// the batch/example context added. Workers are plain std::threads that never enter the OpenMP
// pool (their OpenMP team size is 1), so they share the cores with training only as threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/distributed_sampler.h"

namespace ada::data {

struct LoaderOptions {
  int64_t batch_size = 32;
  int num_workers = 0;           // 0: batches are built synchronously inside next()
  int prefetch = 0;              // batches built ahead of the consumer; 0 means 2 * num_workers
  bool drop_last_batch = false;  // drop this rank's final partial batch
};

class DataLoader {
 public:
  // Prepares the sampler's current epoch and position (workers start prefetching at once).
  // ConfigError on batch_size < 1, num_workers < 0, prefetch < 0, or a sampler built for
  // another dataset size.
  DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler,
             LoaderOptions options);
  ~DataLoader();  // stops and joins the workers; never blocks on a consumer that went away
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins `epoch` from its first batch (abandoning any batches of the previous one).
  void start_epoch(int64_t epoch);
  // Continues `state.epoch` at `state.position` (a value from state(), e.g. from a checkpoint).
  void restore(const SamplerState& state);
  // The next batch of the current epoch, or nullopt at its end (then call start_epoch). Errors of
  // the dataset are re-thrown here in batch order; after one, the epoch is over.
  std::optional<Batch> next();

  // Epoch and number of examples of this rank already returned by next(): save it to resume.
  SamplerState state() const { return {epoch_, consumed_position_}; }
  int64_t batches_per_epoch() const;
  const LoaderOptions& options() const { return opt_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
    std::string context;
  };
  void stop_workers();
  void worker_loop(int worker_id);
  // Builds batch k of the current plan; on failure fills `error` and `context`.
  void build(int64_t k, Slot& slot, int worker_id) const;
  void begin(int64_t epoch, int64_t position);

  std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  LoaderOptions opt_;
  int64_t epoch_ = 0;
  int64_t consumed_position_ = 0;

  // The current epoch's plan: batch k holds plan_[k] (dataset indices).
  std::vector<std::vector<int64_t>> plan_;
  std::vector<int64_t> plan_end_position_;  // sampler position after batch k
  int64_t next_out_ = 0;                    // next batch index next() returns
  bool failed_ = false;

  // Worker state (guarded by mu_).
  std::mutex mu_;
  std::condition_variable work_cv_;   // workers wait for room in the window or stop
  std::condition_variable ready_cv_;  // consumer waits for slot next_out_
  int64_t next_claim_ = 0;            // next batch index a worker takes
  bool stop_ = false;
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace ada::data
