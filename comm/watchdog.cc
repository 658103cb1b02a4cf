// The watchdog thread and the marks of the call in progress (watchdog.h).
#include "comm/watchdog.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/log.h"

namespace ada::comm {
namespace {

std::atomic<double> g_timeout{0.0};
// The call in progress: its start (steady clock, ns; 0: none), text and place.
std::atomic<int64_t> g_since_ns{0};
std::atomic<const char*> g_call{nullptr};
std::atomic<const char*> g_file{nullptr};
std::atomic<int> g_line{0};

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
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double limit = g_timeout.load();
    const int64_t since = g_since_ns.load();
    if (limit <= 0 || since == 0) continue;
    const double waited = static_cast<double>(now_ns() - since) * 1e-9;
    if (waited > limit && g_since_ns.load() == since) expire(waited, limit);
  }
}

}  // namespace

void set_comm_timeout(double seconds) {
  ADA_CHECK_ARG(seconds >= 0, ConfigError)
      << "communication timeout must be >= 0 seconds (0: none), got " << seconds;
  g_timeout.store(seconds);
  if (seconds > 0) {
    static std::once_flag started;
    std::call_once(started, [] { std::thread(watch).detach(); });
  }
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
