// Stopwatch: seconds on the steady clock since it started (or restarted).
#pragma once

#include <chrono>

namespace ada {

class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;
  Stopwatch() : start_(Clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void restart() { start_ = Clock::now(); }
  Clock::time_point started() const { return start_; }

 private:
  Clock::time_point start_;
};

}  // namespace ada
