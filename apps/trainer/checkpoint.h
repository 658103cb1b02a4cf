// Checkpoints of a run: `DIR/ckpt-<step>.safetensors` (model state, optimizer and schedule
// state, prefixed) plus `DIR/ckpt-<step>.json` (step, epoch, sampler position, world size,
// config hash, generator states of every rank). When optimizer state is local to each rank
// (model-delta mode), every rank also writes `DIR/ckpt-<step>.optim-rank<r>.safetensors`.
// All files are written atomically (temporary file, fsync, rename); the JSON goes last, so a
// checkpoint counts only once everything is complete. The newest `keep` are kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/serialize.h"

namespace ada::trainer {

struct CheckpointMeta {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // loader epoch to continue
  int64_t position = 0;        // examples of that epoch already consumed on each rank
  int world_size = 1;
  uint64_t config_hash = 0;
  std::vector<uint64_t> rng_seed, rng_offset;  // per rank: the model's dropout generator
  double wall_seconds = 0;     // training time so far
};

class Checkpointer {
 public:
  Checkpointer(std::string dir, int keep);
  // Writes checkpoint `meta.step` and prunes old ones. Call on rank 0 only.
  void save(const std::vector<std::pair<std::string, Tensor>>& tensors,
            const std::map<std::string, std::string>& metadata, const CheckpointMeta& meta) const;
  // The per-rank optimizer-state file of checkpoint `step` (written by that rank).
  std::string rank_file(int64_t step, int rank) const;
  static std::string rank_file_of(const std::string& path, int rank);
  // Newest complete checkpoint in dir (its .json path), or nullopt. Incomplete or unreadable
  // ones are skipped with a warning.
  std::optional<std::string> latest() const;
  // Reads a checkpoint given its .json or .safetensors path (or the path stem).
  static CheckpointMeta read_meta(const std::string& path);
  static NamedTensors read_tensors(const std::string& path);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_;
};

}  // namespace ada::trainer
