// Checkpoints of a run, made so that none is ever lost or mixed up with another run's.
//   DIR/ckpt-<step>.safetensors                model state, optimizer (when replicated) and
//   schedule DIR/ckpt-<step>.optim-rank<r>.safetensors  rank r's optimizer state, when it is local
//   to each
//                                              rank (model-delta and decentralised strategies)
//   DIR/ckpt-<step>.json                       written last: step, epoch, sampler position, world
//                                              size, config hash, generator states, the run's id,
//                                              and the size and CRC-32 of every file above
// Every file is written atomically (base/atomic_file.h). A checkpoint is valid only when its JSON
// parses, it belongs to the expected run, and every file it lists exists with its size and CRC;
// choosing one for a resume validates all of that. Pruning touches only this run's checkpoints
// and keeps its `keep` newest VALID ones (a damaged newer one never pushes a good one out).
// The folder is shared by all ranks (a shared filesystem across nodes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/serialize.h"

namespace ada::trainer {

struct FileRecord {
  std::string name;  // file name inside the checkpoint folder
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct CheckpointMeta {
  int64_t step = 0;      // optimizer steps done
  int64_t epoch = 0;     // loader epoch to continue
  int64_t position = 0;  // examples of that epoch already consumed on each rank
  int world_size = 1;
  uint64_t config_hash = 0;
  std::vector<uint64_t> rng_seed, rng_offset;  // per rank: the model's dropout generator
  double wall_seconds = 0;                     // training time so far
  std::string run_id;                          // the run that wrote it
  bool local_optimizer_state = false;          // one optim-rank<r> file per rank
  std::vector<FileRecord> files;               // every file of the checkpoint but the JSON
};

// A checkpoint that was looked at and not chosen, and why.
struct Rejected {
  std::string path, reason;
};

class Checkpointer {
 public:
  // `run_id` identifies this run's checkpoints (empty: not known yet — only reading).
  Checkpointer(std::string dir, int keep, std::string run_id = "");

  const std::string& dir() const { return dir_; }
  void set_run_id(std::string id) { run_id_ = std::move(id); }
  const std::string& run_id() const { return run_id_; }

  // This rank's optimizer-state file of checkpoint `step`; the record of what was written.
  std::string rank_file(int64_t step, int rank) const;
  static std::string rank_file_of(const std::string& path, int rank);
  // Size and CRC-32 of a written file (reads it back: a write that did not land is caught here).
  static FileRecord record_of(const std::string& path);

  // Rank 0, after every rank wrote its rank file: writes the tensors and then the JSON (whose
  // `files` must already list the rank files), then prunes. meta.run_id is set to this run's.
  void save(const std::vector<std::pair<std::string, Tensor>>& tensors,
            const std::map<std::string, std::string>& metadata, CheckpointMeta meta) const;

  // Checks everything a resume needs; IoError with the reason otherwise. `run_id` empty: any run.
  static CheckpointMeta validate(const std::string& path, const std::string& run_id = "");
  // The newest valid checkpoint in the folder (of `run_id` if not empty), and every newer one
  // that was rejected, with its reason. No checkpoint files at all: nullopt and no rejections.
  struct Choice {
    std::optional<std::string> path;
    std::vector<Rejected> rejected;
  };
  Choice choose(const std::string& run_id = "") const;
  // JSON paths of the checkpoints in the folder (complete or not), newest step first.
  std::vector<std::string> list() const;
  // Run id written in a checkpoint's JSON ("" if unreadable).
  static std::string run_id_of(const std::string& json_path);

  static CheckpointMeta read_meta(const std::string& path);
  static NamedTensors read_tensors(const std::string& path);
  // Removes every file of checkpoint `json_path` (the JSON first).
  static void remove(const std::string& json_path);

 private:
  void prune() const;

  std::string dir_;
  int keep_;
  std::string run_id_;
};

// A fresh random run id (hex).
std::string new_run_id();

}  // namespace ada::trainer
