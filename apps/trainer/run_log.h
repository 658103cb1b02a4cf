// What a run writes as it goes, on rank 0: metrics.jsonl (one JSON line per log_every steps and
// per evaluation; on resume the lines after the resumed step are dropped, so curves have no
// duplicates), the same numbers as TensorBoard scalars when asked (train.tensorboard), the
// progress line (redrawn on a terminal, every log_every steps in a log file) and summary.json at
// the end. StepMeter keeps the step timings those lines report.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/trainer/tensorboard.h"
#include "base/stopwatch.h"

namespace ada::trainer {

using Json = nlohmann::ordered_json;

// Step timings and losses, over the whole run and over the window since the last metrics line.
class StepMeter {
 public:
  struct Totals {
    int64_t steps = 0;
    double loss = 0, seconds = 0, comm = 0, exposed = 0;  // sums over the steps
  };
  // A step that was applied (skipped steps are not counted).
  void add(double loss, double seconds, double comm_seconds, double exposed_seconds);
  const Totals& run() const { return run_; }
  const Totals& window() const { return window_; }
  void reset_window() { window_ = {}; }
  void set_window(const Totals& w) { window_ = w; }

 private:
  Totals run_, window_;
};

// The metrics line of a window: step, epoch, lr, the loss averaged over ranks and steps
// (`mean_loss`), samples/s over the window (`examples_per_step` on all ranks per step) and the
// per-step compute, communication and exposed communication seconds, then `wall`.
Json window_record(int64_t step, int64_t epoch, double lr, double mean_loss,
                   const StepMeter::Totals& window, int64_t examples_per_step, double wall);

// A fresh run whose output folder holds an earlier run's record (a non-empty metrics.jsonl, with
// its config.yaml and summary.json) moves that record into OUT/earlier-run-K (the first free K)
// and returns that folder; "" when there was none. So reusing an output folder (a rerun after a
// failure before the first checkpoint, another checkpoint.dir) loses no earlier curves.
std::string set_aside_earlier_run(const std::string& out_dir);

class RunLog {
 public:
  // Writes nothing unless `writer` (rank 0). `log_every` paces the progress line in log files.
  // `tensorboard`: a folder whose subfolder named as the output folder gets the event files;
  // empty: none.
  RunLog(std::string out_dir, bool writer, int64_t log_every, std::string tensorboard = "");

  // Opens OUT/metrics.jsonl: keeps the lines up to `resumed_step` (0: a fresh run; a line cut
  // short by a crash is dropped) and appends after them; the event files likewise.
  // `evaluates_again`: the run evaluates at `resumed_step` again (resumed at its end), so that
  // step's evaluation line (the one without an "lr") is not kept.
  void open(int64_t resumed_step, bool evaluates_again = false);
  // A metrics line; to TensorBoard every number in it but step, epoch and wall_s, at its step.
  void write(const Json& record);
  // One progress line; `force` draws it whatever the pacing (and ends it on a terminal).
  void progress(int64_t step, int64_t total_steps, int64_t epoch, double loss, double lr,
                double samples_per_s, bool force);
  // Starts a new progress line on a terminal, so log lines do not overwrite it.
  void break_line();
  // Starts the clock of the ETA: `step` is where this process started.
  void start(int64_t step);
  void write_summary(const Json& summary);

  bool writer() const { return writer_; }

 private:
  std::string dir_, tensorboard_;
  bool writer_, tty_;
  int64_t log_every_, start_step_ = 0;
  Stopwatch clock_, since_drawn_;
  bool drawn_ = false;
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> events_;
};

// "H:MM:SS", or "?" for a negative or infinite duration.
std::string format_duration(double seconds);

}  // namespace ada::trainer
