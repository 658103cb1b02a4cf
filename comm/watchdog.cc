// The watchdog thread and the marks of the call in progress (watchdog.h).
#include "comm/watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/stop_signal.h"

namespace ada::comm {
namespace {

std::atomic<double> g_timeout{0.0};
// The call in progress: its start (steady clock, ns; 0: none), text and place.
std::atomic<int64_t> g_since_ns{0};
std::atomic<const char*> g_call{nullptr};
std::atomic<const char*> g_file{nullptr};
std::atomic<int> g_line{0};
std::atomic<int> g_patient{0};  // PatientWaits alive

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void expire(double waited, double limit) {
  const char* call = g_call.load();
  const char* file = g_file.load();
  log_error(
      "rank {}: the communication call {} ({}:{}) has not completed after {:.0f} s (limit {:.0f} "
      "s): a peer rank is stuck, stopped, gone or far behind. Ending this process so that the "
      "job ends instead of hanging; train.comm_timeout_s sets the limit (0: none)",
      process_rank(), call ? call : "?", file ? detail::base_name(file) : "?", g_line.load(),
      waited, limit);
  flush_log();
  std::_Exit(1);
}

void watch() {
  int64_t signal_seen_ns = 0;  // when this thread first saw the stop signal pending
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double limit = g_timeout.load();
    const int64_t since = g_since_ns.load();
    const int signo = stop_rule_signal();
    if (signo == 0) signal_seen_ns = 0;
    if (since == 0) continue;
    const int64_t now = now_ns();
    if (signo != 0) {
      if (signal_seen_ns == 0) signal_seen_ns = now;
      const double after = static_cast<double>(now - std::max(since, signal_seen_ns)) * 1e-9;
      if (after > kStopWaitSeconds && g_since_ns.load() == since)
        end_after_stop_signal(signo, g_call.load(), g_file.load(), g_line.load(), after);
    }
    const double waited = static_cast<double>(now - since) * 1e-9;
    if (limit > 0 && waited > limit && g_since_ns.load() == since) expire(waited, limit);
  }
}

}  // namespace

int stop_rule_signal() {
  const int signo = StopSignals::received();
  return (signo == SIGTERM || signo == SIGINT) && g_patient.load() == 0 ? signo : 0;
}

PatientWait::PatientWait() noexcept {
  g_patient.fetch_add(1);
}

PatientWait::~PatientWait() {
  g_patient.fetch_sub(1);
}

// A stop signal came and the call in progress has waited kStopWaitSeconds since: the signal is
// the launcher's after a rank failed (srun -K, mpirun), or a peer is stuck; no stop can be agreed.
void end_after_stop_signal(int signo, const char* call, const char* file, int line, double waited) {
  log_error(
      "rank {}: {} received, and the communication call {} ({}:{}) has not completed {:.0f} s "
      "later: a peer rank is gone or stuck (launchers signal the other ranks when one fails), so "
      "the ranks cannot agree on a step to stop at. Ending this process without a stop "
      "checkpoint; the newest checkpoint written stays valid (--resume auto)",
      process_rank(), signal_name(signo), call ? call : "?", file ? detail::base_name(file) : "?",
      line, waited);
  flush_log();
  std::_Exit(128 + signo);
}

void set_comm_timeout(double seconds) {
  ADA_CHECK_ARG(seconds >= 0, ConfigError)
      << "communication timeout must be >= 0 seconds (0: none), got " << seconds;
  g_timeout.store(seconds);
  static std::once_flag started;  // also without a limit: for the stop-signal rule
  std::call_once(started, [] { std::thread(watch).detach(); });
}

double comm_timeout() {
  return g_timeout.load();
}

WatchedCall::WatchedCall(const char* call, const char* file, int line) noexcept {
  g_call.store(call);
  g_file.store(file);
  g_line.store(line);
  g_since_ns.store(now_ns());
}

WatchedCall::~WatchedCall() {
  g_since_ns.store(0);
}

}  // namespace ada::comm
