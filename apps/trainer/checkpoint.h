// Checkpoints of a run, made so that none is ever lost or mixed up with another run's: the files
// (Checkpointer) and the run's policy (RunCheckpoints: fresh start, resume, save, init_from).
// One checkpoint, in a folder all ranks share (a shared filesystem across nodes):
//   ckpt-<step>.safetensors               the model, the optimizer state (when replicated), the
//                                         schedule, the strategy's and loss scaler's state
//   ckpt-<step>.optim-rank<r>.safetensors rank r's optimizer and strategy state, when each rank
//                                         has its own (model-delta and decentralised syncs)
//   ckpt-<step>.json                      written last: step, epoch, sampler position, world size,
//                                         config hash, generator states, the run's id, and the
//                                         size and CRC-32 of every file above
// Every file is written atomically (base/atomic_file.h). A checkpoint is valid only when its JSON
// parses, it belongs to the expected run, and every file it lists exists with its size and CRC;
// choosing one for a resume validates all of that. Pruning touches only this run's checkpoints
// and keeps its `keep` newest VALID ones (a damaged newer one never pushes a good one out); it
// reads each checkpoint whole once per process (those it wrote were read back as they were
// written), then checks only the files' sizes: at BERT-Large on 64 ranks a checkpoint is ~170 GB,
// and re-reading `keep` of them at every save kept the other ranks waiting past the watchdog.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/serialize.h"
#include "data/data_loader.h"
#include "nn/model.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "sync/strategy.h"

namespace ada::trainer {

struct FileRecord {
  std::string name;  // file name inside the checkpoint folder
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// A rank's metrics window still open at a checkpoint (what the next metrics line averages, see
// Trainer::save_checkpoint): `values` the step count, the loss sum and the reducer's (sum, count)
// pairs; `seconds` the step, communication and exposed-communication seconds (timings).
struct LogWindow {
  std::vector<double> values, seconds;
};

struct CheckpointMeta {
  int64_t step = 0;      // optimizer steps done
  int64_t epoch = 0;     // loader epoch to continue
  int64_t position = 0;  // examples of that epoch already consumed on each rank
  int world_size = 1;
  // world_size x train.batch_per_rank x train.micro_batches; 0 in checkpoints written before it
  // was recorded (those resume only on world_size ranks).
  int64_t examples_per_step = 0;
  double base_lr = 0;  // the schedule's base LR (after schedule.lr_scaling); 0: not recorded
  uint64_t config_hash = 0;
  std::string config;  // the writing run's resolved config (YAML); empty before it was kept
  std::vector<uint64_t> rng_seed, rng_offset;  // per rank: the model's dropout generator
  double wall_seconds = 0;                     // training time so far
  std::string run_id;                          // the run that wrote it
  uint64_t vocab_hash = 0;  // the data's vocabulary (data::DataSets::vocab_hash); 0: none/unknown
  bool local_optimizer_state = false;  // one optim-rank<r> file per rank
  std::vector<FileRecord> files;       // every file of the checkpoint but the JSON
  // The trainer's counters a resume continues (train.stop_at's best figure); finite numbers the
  // same on every rank. Empty in checkpoints written before it existed.
  std::map<std::string, double> progress;
  // Per rank, the metrics window open at this step (LogWindow's values and seconds), so that a
  // resumed run's lines equal an unbroken run's. Empty in checkpoints written before it existed.
  std::vector<std::vector<double>> log_window, log_window_seconds;
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

  // What validate() reads of the files a checkpoint's JSON lists: every file's CRC-32 (kAll:
  // what a resume needs), the shared .safetensors' CRC-32 and the rank files' sizes (kShared:
  // what a reader of the weights alone needs, train.init_from and export_hf_bert), or only the
  // sizes (kSizes: a checkpoint read whole before).
  enum class Read { kAll, kShared, kSizes };
  // Checks the JSON, the files listed (as `read` says) and the tensors' header; IoError with the
  // reason otherwise. `run_id` empty: any run.
  static CheckpointMeta validate(const std::string& path, const std::string& run_id = "",
                                 Read read = Read::kAll);
  // The newest valid checkpoint in the folder (of `run_id` if not empty), and every newer one
  // that was rejected, with its reason. No checkpoint files at all: nullopt and no rejections.
  struct Choice {
    std::optional<std::string> path;
    std::vector<Rejected> rejected;
  };
  Choice choose(const std::string& run_id = "", Read read = Read::kAll) const;
  // IoError unless the file `f` that checkpoint `json_path` lists exists with its size (and,
  // `whole`, its CRC-32).
  static void check_file(const std::string& json_path, const FileRecord& f, bool whole);
  // Checkpoint `json_path` was read whole (by this process or by the ranks together): pruning
  // checks its sizes only from now on.
  void read_whole(const std::string& json_path) const;
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
  // File names of the JSONs of checkpoints this object wrote or read whole (validate kAll).
  mutable std::set<std::string> read_whole_;
};

// A fresh random run id (hex).
std::string new_run_id();

// Rank 0's model state (or only its buffers: batch-norm running statistics) to every rank.
void broadcast_model_state(comm::Communicator& world, nn::Model& model, bool buffers_only = false);

// What a checkpoint holds, by reference: the model and all that a step carries to the next.
struct TrainingState {
  nn::Model& model;
  std::vector<Param>& params;
  optim::Optimizer& optimizer;
  sync::Strategy& strategy;
  optim::Schedule& schedule;
  optim::LossScaler* loss_scale;  // null: no loss scaling
  data::DataLoader& loader;
  int64_t batch_per_rank = 1, micro_batches = 1;  // train.batch_per_rank, train.micro_batches
  bool by_examples_per_step = false;  // micro_batches derived from train.examples_per_step
  std::string reducer;                // reducer.name
  uint64_t vocab_hash = 0;            // the data's vocabulary (0: none), kept in each checkpoint
};

// Where a run goes on from: step 0 for a fresh run.
struct ResumePoint {
  int64_t step = 0, epoch = 0;
  double wall_seconds = 0;                 // training time before this process
  std::map<std::string, double> progress;  // CheckpointMeta::progress
  LogWindow log_window;                    // this rank's (resumed on as many ranks), or empty
};

// A run's checkpoint policy. Every method is collective: rank 0 decides and writes the shared
// files, and a failure stops every rank together.
class RunCheckpoints {
 public:
  // `config_yaml`: the run's resolved config (Config::dump), kept in each checkpoint so that a
  // resume with another config can say which keys changed.
  RunCheckpoints(std::string dir, int keep, bool overwrite, comm::Communicator& world,
                 TrainingState state, uint64_t config_hash, std::string config_yaml = "");

  // A fresh run: refuses a folder holding another run's checkpoints (unless `overwrite`),
  // removes a crash's leftover temporaries, gives the run its id.
  void start_fresh();
  // --resume auto (the newest valid checkpoint; none yet: a fresh start) or --resume PATH:
  // restores the model, the step's state, the generators and the loader's position. A
  // checkpoint written on another number of ranks resumes when its steps go on unchanged: one
  // shared optimizer state, the same examples per step and base LR, a reducer whose step does
  // not scale with the ranks (loader_position); else a ConfigError says what to change.
  ResumePoint resume(const std::string& which);
  // Writes the checkpoint of `step` unless it was written already (`wall_seconds`: training
  // time so far; `progress`: CheckpointMeta::progress; `log_window`: this rank's, as long on
  // every rank). The world-average model for a decentralised sync between synchronisations.
  void save(int64_t step, double wall_seconds, const std::map<std::string, double>& progress = {},
            const LogWindow& log_window = {});
  // The model changed after the last save at this step (a final synchronisation).
  void model_changed() { last_saved_ = -1; }

 private:
  void add_step_state(NamedTensors& st) const;
  void load_step_state(const NamedTensors& st);
  int64_t examples_per_step() const;
  // The first of `candidates` (rank 0's, newest first) whose JSON, shared file and file sizes
  // pass on rank 0 (Read::kShared) and whose optimizer-state files pass their CRC-32 each on its
  // own rank, read in parallel (64 ranks' files of BERT-Large are ~170 GB: read by rank 0 alone,
  // minutes, the others waiting in a collective); rank 0's rejections with it.
  Checkpointer::Choice choose_together(const std::vector<std::string>& candidates);
  // This rank's loader position that continues `m` (its checkpoint file `path`) on this world.
  int64_t loader_position(const CheckpointMeta& m, const std::string& path) const;

  Checkpointer files_;
  bool overwrite_;
  comm::Communicator& world_;
  TrainingState state_;
  uint64_t config_hash_;
  std::string config_yaml_;
  int64_t last_saved_ = -1;
};

// The checkpoint `from` names (its .json, validated for a reader of its weights: the JSON and the
// shared file, the ranks' files by size): itself, or a folder's newest valid one (an
// IoError naming `where` and every damaged one when there is none; newer damaged ones than the
// one taken are said in the log).
std::string checkpoint_of(const std::string& from, const std::string& where);
// The files of the checkpoint whose .json is `json` (ckpt-N.json, .safetensors, per-rank files).
std::vector<std::string> checkpoint_files(const std::string& json);

// train.init_from: model weights from a checkpoint, the newest valid one in a folder, or a
// safetensors file of weights alone (ours, or a Hugging Face BERT's: nn/models/bert_hf.h), with a
// fresh optimizer (e.g. BERT phase 2 from phase 1, fine-tuning from pre-training). Tensors the
// source lacks (a new head) keep their initial values, tensors the model lacks (a pre-training
// head) are left out; both are named in the returned text, which starts with the file used. Read on
// rank 0 only: broadcast rank 0's model after it. IoError naming `where` (the key's location) when
// there is no checkpoint, and when the source holds none of the model's tensors (a checkpoint of
// another model: training it would start from scratch unannounced). With `every_tensor` (inference:
// nothing will train a new head), a tensor of the model the source lacks is an error too.
// `vocab_hash`: this run's vocabulary (0: none); a checkpoint that records another is refused
// (its embeddings index other words). Collective.
std::string init_weights_from(comm::Communicator& world, nn::Model& model, const std::string& path,
                              const std::string& where, uint64_t vocab_hash,
                              bool every_tensor = false);

}  // namespace ada::trainer
