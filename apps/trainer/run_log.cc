#include "apps/trainer/run_log.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/log.h"
#include "base/unique_fd.h"

namespace ada::trainer {

void StepMeter::add(double loss, double seconds, double comm_seconds, double exposed_seconds) {
  for (Totals* t : {&run_, &window_}) {
    t->steps += 1;
    t->loss += loss;
    t->seconds += seconds;
    t->comm += comm_seconds;
    t->exposed += exposed_seconds;
  }
}

Json window_record(int64_t step, int64_t epoch, double lr, double mean_loss,
                   const StepMeter::Totals& w, int64_t examples_per_step, double wall) {
  const double n = static_cast<double>(w.steps);
  const double per_step = w.seconds / n, comm_per_step = w.comm / n;
  return {{"step", step},
          {"epoch", epoch},
          {"lr", lr},
          {"loss", mean_loss},
          {"samples_per_s", static_cast<double>(examples_per_step) * n / w.seconds},
          {"compute_s", per_step - comm_per_step},
          {"comm_s", comm_per_step},
          {"exposed_comm_s", w.exposed / n},
          {"wall_s", wall}};
}

std::string format_duration(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = static_cast<long>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

RunLog::RunLog(std::string out_dir, bool writer, int64_t log_every, std::string tensorboard)
    : dir_(std::move(out_dir)),
      tensorboard_(std::move(tensorboard)),
      writer_(writer),
      tty_(writer && isatty(STDERR_FILENO)),
      log_every_(log_every) {}

namespace {
// The folder under `root` (train.tensorboard) that the run of `out_dir` writes its events to: the
// output folder's last name, unless a run of another output folder writes there (each folder's
// .output_dir names its run's), then its last two names joined by '_', then that with _2, _3, ...
// So runs whose folders share a last name (sweeps of a/seed1, b/seed1) sit side by side, and a
// resumed run finds its own folder again.
std::string tensorboard_run_folder(const std::string& root, const std::string& out_dir) {
  namespace fs = std::filesystem;
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "runs/x/"
  const std::string mine = fs::weakly_canonical(out).string();
  const std::string last = out.filename().empty() ? "run" : out.filename().string();
  const fs::path parent = fs::weakly_canonical(out).parent_path();
  const std::string two =
      parent.filename().empty() ? last : parent.filename().string() + "_" + last;
  for (int i = 0;; ++i) {
    const std::string name = i == 0 ? last : i == 1 ? two : two + "_" + std::to_string(i);
    const fs::path folder = fs::path(root) / name, marker = folder / ".output_dir";
    std::ifstream in(marker);
    std::string owner;
    if (in && std::getline(in, owner) && owner != mine) continue;  // another run's
    std::error_code ec;
    fs::create_directories(folder, ec);
    ADA_CHECK_ARG(!ec, IoError) << "train.tensorboard: cannot create " << folder.string() << " ("
                                << ec.message() << ")";
    if (owner.empty()) write_file_atomically(marker.string(), mine + "\n");
    if (i > 0)
      log_info("train.tensorboard: {}/{} holds another run's curves; this run's go to {}", root,
               last, folder.string());
    return folder.string();
  }
}
}  // namespace

std::string set_aside_earlier_run(const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(out_dir), metrics = dir / "metrics.jsonl";
  if (!fs::is_regular_file(metrics, ec) || fs::file_size(metrics, ec) == 0 || ec) return "";
  fs::path aside;
  for (int k = 1; aside.empty() || fs::exists(aside, ec); ++k)
    aside = dir / ("earlier-run-" + std::to_string(k));
  fs::create_directory(aside, ec);
  ADA_CHECK_ARG(!ec, IoError) << "output.dir " << out_dir << " holds an earlier run's "
                              << "metrics.jsonl, and " << aside.string() << " to keep it in "
                              << "cannot be made (" << ec.message()
                              << "); write this run elsewhere (output.dir)";
  for (const char* name : {"metrics.jsonl", "config.yaml", "summary.json"}) {
    if (!fs::exists(dir / name, ec)) continue;
    fs::rename(dir / name, aside / name, ec);
    ADA_CHECK_ARG(!ec, IoError) << "output.dir: cannot move the earlier run's " << name << " into "
                                << aside.string() << " (" << ec.message()
                                << "); write this run elsewhere (output.dir)";
  }
  return aside.string();
}

void RunLog::open(int64_t resumed_step, bool evaluates_again) {
  if (!writer_) return;
  const std::string path = dir_ + "/metrics.jsonl";
  std::vector<std::string> kept;
  if (resumed_step > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto rec = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer()) continue;
      const int64_t step = rec["step"].get<int64_t>();
      if (kept_on_resume(step, !rec.contains("lr"), resumed_step, evaluates_again))
        kept.push_back(line);
    }
  }
  // summary.json is a finished run's: an earlier run's would make this one, should it fail, look
  // finished (a resumed run that ends writes it again).
  std::error_code ec;
  std::filesystem::remove(dir_ + "/summary.json", ec);
  metrics_.open(path, std::ios::trunc);
  for (const auto& l : kept) metrics_ << l << "\n";
  metrics_.flush();
  ADA_CHECK_ARG(metrics_.good(), IoError)
      << "cannot write " << path << " (" << errno_text(errno) << "); the run's metrics go there";
  if (!tensorboard_.empty())
    events_ = std::make_unique<TensorBoardWriter>(tensorboard_run_folder(tensorboard_, dir_),
                                                  resumed_step, evaluates_again);
}

void RunLog::write(const Json& record) {
  if (!writer_) return;
  metrics_ << record.dump() << "\n";
  metrics_.flush();
  // A metrics line that cannot be written (a full disk) stops the run, as a checkpoint does:
  // training on without its record would end in a run whose curves are missing.
  ADA_CHECK_ARG(metrics_.good(), IoError)
      << "cannot write " << dir_ << "/metrics.jsonl (" << errno_text(errno)
      << "); the run stops here: free space (or fix the folder) and resume with --resume auto";
  if (!events_) return;
  ScalarEvent e{
      record.value("step", int64_t{0}),
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      {}};
  for (const auto& [key, value] : record.items())
    if (value.is_number() && key != "step" && key != "epoch" && key != "wall_s")
      e.values.push_back({key, value.get<float>()});
  events_->write(e);
}

void RunLog::start(int64_t step) {
  start_step_ = step;
  clock_.restart();
}

void RunLog::progress(int64_t step, int64_t total_steps, int64_t epoch, double loss, double lr,
                      double sps, bool force) {
  if (!writer_) return;
  const int64_t done = step - start_step_;
  const double eta = done > 0 ? clock_.seconds() / static_cast<double>(done) *
                                    static_cast<double>(total_steps - step)
                              : -1;
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.1f samples/s  ETA %s",
                static_cast<long long>(step), static_cast<long long>(total_steps),
                static_cast<long long>(epoch), loss, lr, sps, format_duration(eta).c_str());
  if (tty_) {
    if (!force && drawn_ && since_drawn_.seconds() < 0.25) return;
    drawn_ = true;
    since_drawn_.restart();
    std::fprintf(stderr, "\r%-100s%s", line, force ? "\n" : "");
    std::fflush(stderr);
  } else if (force || step % log_every_ == 0) {
    log_info("{}", line);  // one line per log_every steps: logs stay readable
  }
}

void RunLog::break_line() {
  if (tty_) std::fprintf(stderr, "\n");
}

void RunLog::write_summary(const Json& summary) {
  if (writer_) write_file_atomically(dir_ + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace ada::trainer
