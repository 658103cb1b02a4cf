// Per-op wall-clock profile of the CPU backend (bench_step --profile on the CPU): every op that
// core/ops.cc sends to the CPU backend runs under an OpTimer (ADA_DISPATCH declares it), so an
// op that calls another op is counted in both. Off by default: an OpTimer then costs one
// relaxed atomic load. Ops on every thread are counted (the communication thread's too).
#pragma once

#include <chrono>
#include <string>

namespace ada::cpu {

void set_profiling(bool on);
bool profiling();
// Calls and milliseconds per op since profiling was switched on, largest first, per `steps`
// steps; clears the records.
std::string profile_report(int64_t steps);

class OpTimer {
 public:
  explicit OpTimer(const char* op) : op_(profiling() ? op : nullptr) {
    if (op_) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (op_) record(op_, std::chrono::steady_clock::now() - start_);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  static void record(const char* op, std::chrono::steady_clock::duration d);
  const char* op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ada::cpu
