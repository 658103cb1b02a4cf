// DistributedSampler: which dataset indices this rank reads in an epoch, and in what order.
// Every rank computes the same epoch-seeded permutation of [0, N), made the same length on all
// ranks (drop_last: cut to a multiple of the world size; else pad by repeating from the start),
// and takes positions rank, rank + world, ... of it. Resumable from a position within an epoch;
// its state is two plain integers (epoch, position).
#pragma once

#include <cstdint>
#include <vector>

namespace ada::data {

struct SamplerOptions {
  int rank = 0;
  int world = 1;
  uint64_t seed = 0;
  bool shuffle = true;     // false: identity order (eval)
  bool drop_last = false;  // true: drop the tail so N divides; false: pad by repeating indices
};

// Where a sampler (or a loader) stands: `position` examples of `epoch` already handed out on
// this rank. Save both integers in a checkpoint; restore() continues exactly there.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;
};

class DistributedSampler {
 public:
  // ConfigError if world < 1, rank outside [0, world), or dataset_size < 0.
  DistributedSampler(int64_t dataset_size, SamplerOptions options = {});

  // Starts `epoch` from position 0 (recomputes the permutation).
  void set_epoch(int64_t epoch);
  // Continues `state.epoch` at `state.position`; ConfigError if position > samples_per_rank().
  void restore(const SamplerState& state);
  SamplerState state() const { return {epoch_, position_}; }
  int64_t epoch() const { return epoch_; }

  // Examples this rank gets per epoch (equal on every rank).
  int64_t samples_per_rank() const { return per_rank_; }
  int64_t dataset_size() const { return size_; }
  const SamplerOptions& options() const { return opt_; }

  // This rank's whole index list for the current epoch (independent of the position).
  const std::vector<int64_t>& epoch_indices() const { return indices_; }
  // The next up to n indices from the current position (advancing it); empty at the epoch's end.
  std::vector<int64_t> next(int64_t n);
  int64_t remaining() const { return per_rank_ - position_; }

  // The full (all ranks) permutation of [0, n) for (seed, epoch): a Fisher-Yates shuffle driven
  // by Philox counters, identical on every machine.
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

 private:
  void build();
  int64_t size_;
  SamplerOptions opt_;
  int64_t per_rank_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace ada::data
