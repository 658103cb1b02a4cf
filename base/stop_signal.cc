#include "base/stop_signal.h"

#include <atomic>
#include <csignal>
#include <cstring>

namespace ada {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");
struct sigaction g_old[sizeof(kSignals) / sizeof(kSignals[0])];

void on_signal(int signo) {
  int none = 0;
  g_received.compare_exchange_strong(none, signo);  // the first one counts
}

}  // namespace

StopSignals::StopSignals() {
  g_received.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a read or write that the signal interrupts goes on; SA_RESETHAND: a second
  // signal of the same kind has its default effect (ends the process).
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &g_old[i]);
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_old[i], nullptr);
  g_received.store(0);
}

int StopSignals::received() {
  return g_received.load();
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace ada
