// The trainer: a YAML config in; a trained model, checkpoints and comparable curves out.
//   trainer --config FILE [--set key.path=value ...] [--resume auto|PATH] [--describe]
// Runs under mpirun/srun or alone. The Trainer is wiring plus the step loop: every concern lives
// in a file of its own (run_settings, run_log, evaluation, checkpoint, run_timeline; the model,
// data, optimizer, schedule, reducer and sync each build themselves from their config section
// through a registry). The step: docs/architecture.md.
#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/trainer/checkpoint.h"
#include "apps/trainer/run_log.h"
#include "apps/trainer/run_settings.h"
#include "apps/trainer/step_graph.h"
#include "apps/trainer/straggler.h"
#include "base/config.h"
#include "base/dir_lock.h"
#include "comm/mpi_communicator.h"
#include "comm/reducer.h"
#include "core/backend/cuda_runtime.h"
#include "data/data_loader.h"
#include "data/registry.h"
#include "nn/model.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "sync/registry.h"
#include "sync/strategy.h"

namespace ada::trainer {

// The command line.
struct Args {
  std::string config;
  std::vector<std::string> sets;  // --set key.path=value, in order
  std::string resume;             // auto, a checkpoint path, or "" (a fresh run)
  bool describe = false;          // print the model and exit
};

class Trainer {
 public:
  explicit Trainer(Args args);
  // Builds everything, trains to the last step, evaluates, checkpoints and writes the summary.
  // Throws ada::Error on bad input; every rank stops.
  int run();

 private:
  void build();        // from the config, in the order each part needs the others
  void build_alone();  // build's part with no communication: config, model, data, optimizer
  void build_model(const Config& cfg);
  void build_data(const Config& cfg);
  void build_optimization(Config& cfg);  // optimizer, schedule and the sync's settings
  void build_step();  // rank 0's weights everywhere, the device, the strategy, the loader
  void train_step();
  void flush_due(double lr);
  // Evaluates the model at this step (once); false when a stop signal abandoned the evaluation,
  // which is then due again when the run resumes from this step's checkpoint.
  bool evaluate_now();
  // Whether train.stop_at ends the run after the evaluation just made: its bound met, or
  // give_up_after evaluations without a new best (the same answer on every rank).
  bool stop_at_ends_run();
  // The signal (base/stop_signal.h) every rank has agreed to stop for at this step, 0 if none.
  int agreed_stop_signal();
  // Ends a signalled run at this step: its last metrics line and a checkpoint; no summary.
  void stop_for_signal(int signo);
  void save_checkpoint();
  // Restores this rank's metrics window from a checkpoint (CheckpointMeta::log_window).
  void resume_log_window(const LogWindow& window);
  // with the counters a resume continues (stop_at_)
  void write_summary();
  double wall_seconds() const { return resumed_.wall_seconds + clock_.seconds(); }

  Args args_;
  std::unique_ptr<comm::MpiCommunicator> world_;
  std::unique_ptr<comm::Communicator> device_comm_;  // NCCL over world_'s ranks (train.comm)
  std::optional<Config> cfg_;
  RunSettings s_;
  std::unique_ptr<comm::Reducer> reducer_;
  std::unique_ptr<nn::Model> model_;
  std::vector<Param> params_;
  data::DataSets data_;
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<cuda::BatchUploader> uploader_;  // train.device cuda: batches via pinned memory
  std::unique_ptr<StepGraph> graph_;               // train.cuda_graphs
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::string lr_description_;         // the base LR and the keys that made it, for the log
  sync::StrategyMaker make_strategy_;  // the sync's settings, read before anything is built
  std::unique_ptr<sync::Strategy> strategy_;
  std::optional<Straggler> straggler_;           // train.straggler: injected delays
  std::optional<optim::LossScaler> loss_scale_;  // train.loss_scale
  std::unique_ptr<RunCheckpoints> checkpoints_;
  std::list<DirLock> folder_locks_;  // rank 0: output.dir (and checkpoint.dir outside it)
  std::unique_ptr<RunLog> log_;
  StepMeter meter_;
  Stopwatch clock_;  // since this process started training
  ResumePoint resumed_;
  int64_t step_ = 0, epoch_ = 0, total_steps_ = 0, steps_per_epoch_ = 0, skipped_ = 0;
  // Steps skipped in a row (train.on_nonfinite: skip, loss-scale overflows); the run ends at
  // kMostSkippedInARow (dynamic loss scaling skips at most log2 of its initial scale in a row).
  int64_t skipped_in_a_row_ = 0;
  static constexpr int64_t kMostSkippedInARow = 50;
  std::vector<Tensor> micro_losses_;  // one step's losses, read after its backward passes
  int64_t last_eval_step_ = -1;
  nn::Metrics last_eval_;    // the test set's figures (eval_*)
  nn::Metrics last_val_;     // the validation set's (val_*)
  int64_t stopped_at_ = -1;  // the step train.stop_at's bound ended the run at; -1: it did not
  // train.stop_at's best figure so far, its step, the evaluations since it, and the step
  // give_up_after ended the run at (-1: it did not). Kept in checkpoints: a resumed run gives up
  // where an unbroken one would.
  double stop_best_ = std::numeric_limits<double>::quiet_NaN();
  int64_t stop_best_step_ = -1, stop_since_best_ = 0, gave_up_at_ = -1;
  double last_mean_loss_ = 0;
  // The LR the last step of this process ran at (NaN before one): a metrics line written after
  // the loop (a decentralised sync's last average, a signal stop) is that step's, not the next's.
  double last_lr_ = std::numeric_limits<double>::quiet_NaN();
  double lr_of_last_step() const;
  bool log_due_ = false, checksum_due_ = false;  // waiting for a step where replicas agree
  bool eval_due_ = false;  // this step's evaluation, abandoned for a stop signal
};

}  // namespace ada::trainer
