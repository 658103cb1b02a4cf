// Timeline: Chrome-trace events (the Horovod timeline idea), readable in Perfetto or
// chrome://tracing. Off unless open() is called; then every thread may record complete spans
// ("ph": "X") that go to this rank's file as they end, one JSON object per line inside a JSON
// array. A file cut short by a crash still loads (the trace format allows a missing "]").
// Rank r is process r ("pid"); threads are named by set_thread_name(). merge() joins the
// per-rank files into one trace.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace ada {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static Timeline& instance();

  // Starts recording into `path` as process `rank`. Timestamps are microseconds since `epoch`
  // (give every rank the same epoch — e.g. rank 0's, broadcast — so spans line up). IoError if
  // the file cannot be written.
  void open(const std::string& path, int rank, Clock::time_point epoch);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Writes what is buffered and closes the file (recording stops).
  void close();

  // Names the calling thread in the trace (e.g. "main", "comm"); call on that thread.
  void set_thread_name(const std::string& name);
  // A span [t0, t1] on the calling thread. `args` holds "key": value JSON members, optional.
  void span(const std::string& name, const char* category, Clock::time_point t0,
            Clock::time_point t1, const std::string& args_json = "");

  // Joins the per-rank trace files into one Chrome-trace JSON object at `out`.
  static void merge(const std::vector<std::string>& rank_files, const std::string& out);

 private:
  Timeline() = default;
  int thread_id();
  double micros(Clock::time_point t) const;

  std::mutex mu_;
  std::ofstream out_;
  std::atomic<bool> enabled_{false};
  int rank_ = 0;
  Clock::time_point epoch_{};
};

// Records the span from construction to destruction when the timeline is enabled.
class TraceSpan {
 public:
  TraceSpan(const char* name, const char* category)
      : name_(name), category_(category), on_(Timeline::instance().enabled()) {
    if (on_) t0_ = Timeline::Clock::now();
  }
  ~TraceSpan() {
    if (on_) Timeline::instance().span(name_, category_, t0_, Timeline::Clock::now());
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const char* name_;
  const char* category_;
  bool on_;
  Timeline::Clock::time_point t0_{};
};

}  // namespace ada
