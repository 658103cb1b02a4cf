// RunSettings: what the trainer itself reads from a run config (train, output, checkpoint, the
// loader's data keys, reducer bucket sizes), checked and with every default applied; a pure
// function of the config and the world, unit-tested without MPI. Models, data sets,
// optimizers, schedules, reducers and syncs read their own sections.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "comm/bucketer.h"
#include "core/precision.h"
#include "core/tensor.h"
#include "optim/loss_scale.h"

namespace ada::trainer {

// train.stop_at: end the run at the first evaluation whose figure `metric` (val_* or eval_*, as
// in metrics.jsonl) is at or below (`below`) or at or above the bound `value`; with
// `give_up_after` N > 0, also once N evaluations in a row have not bettered the best figure so far
// (the bound is then not reached: a run that stalls or diverges ends instead of using the budget);
// with `give_up_at_step` S > 0, also at the first evaluation at or after step S that has not
// reached it (a deadline: a study cuts off a sweep point that can no longer be the fastest).
struct StopAt {
  std::string metric;
  double value = 0;
  bool below = true;
  int64_t give_up_after = 0;     // evaluations without a new best; 0: never give up
  int64_t give_up_at_step = 0;   // the deadline step; 0: none
  std::string where;             // "config x.yaml: train.stop_at (line 9, column 3)", for messages
  std::string describe() const;  // "val_mlm_loss <= 6.5"
  // Whether figure v betters `best` (NaN: no best yet) in the bound's direction.
  bool better(double v, double best) const;
};

struct RunSettings {
  // train: exactly one of epochs or steps is positive.
  int64_t epochs = 0, steps = 0;
  int64_t batch = 32, micro = 1;  // batch_per_rank, micro_batches
  // train.examples_per_step as given (0: not given); when given, micro is derived from it.
  int64_t examples_per_step = 0;
  int64_t eval_every = 0;        // 0: at each epoch's end
  int64_t max_eval_batches = 0;  // 0: all
  int64_t log_every = 50, checksum_every = 100;
  uint64_t seed = 1;
  int threads = 0;              // 0: the node's cores shared among its ranks
  bool flush_denormals = true;  // train.flush_denormals (core/parallel.h)
  double clip = 0;              // clip_grad_norm; 0: off
  bool skip_nonfinite = false;  // on_nonfinite: skip
  std::string timeline, init_from;
  std::vector<std::string> freeze;  // train.freeze: parameter names or prefixes kept fixed
  std::string tensorboard;          // train.tensorboard: a folder for event files; empty: none
  Device device;                    // train.device
  Precision precision = Precision::fp32;              // train.precision (core/precision.h)
  DType activations = DType::f32;                     // train.activations
  std::optional<optim::LossScaleOptions> loss_scale;  // train.loss_scale; absent: off
  bool cuda_graphs = false;                           // train.cuda_graphs (step_graph.h)
  std::string comm = "auto";                          // train.comm
  double comm_timeout = 600;                          // train.comm_timeout_s; 0: no limit
  std::optional<StopAt> stop_at;                      // train.stop_at; absent: the whole budget
  // data: the loader's keys.
  int workers = 1, prefetch = 0;
  // output and checkpoint.
  std::string out_dir, ckpt_dir;
  int64_t ckpt_every = 0;  // 0: at each epoch's end
  int ckpt_keep = 3;
  bool ckpt_overwrite = false;
  // reducer.bucket_mb and first_bucket_mb.
  comm::BucketOptions buckets;
};

// Reads `root` (a run config loaded from `config_path`, whose stem names the default output
// folder) for `world` ranks; `local_rank` picks the GPU of train.device: cuda. ConfigError naming
// the key as written, the value and the fix for anything out of range.
RunSettings read_run_settings(const Config& root, const std::string& config_path, int world,
                              int local_rank);

// train.device of the `train` section (default cpu): "cuda" is this rank's node-local index
// modulo the visible GPUs. ConfigError naming the key for an unknown or unusable device.
Device read_device(const Config& train, int local_rank);

}  // namespace ada::trainer
