#include "base/stop_signal.h"

#include <atomic>
#include <csignal>
#include <cstring>

namespace ada {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
constexpr size_t kKinds = sizeof(kSignals) / sizeof(kSignals[0]);
constexpr int kAgreed = -1;  // g_received once the ranks agreed to stop
std::atomic<int> g_received{0};
std::atomic<int> g_count[kKinds];  // signals of each kind received while a StopSignals lives
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");
struct sigaction g_old[kKinds];

size_t kind(int signo) {
  size_t i = 0;
  while (i + 1 < kKinds && kSignals[i] != signo) ++i;
  return i;
}

// Only async-signal-safe calls here (sigaction, raise).
void on_signal(int signo) {
  if (g_count[kind(signo)].fetch_add(1) > 0) {  // the second of its kind: its default effect
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signo, &dfl, nullptr);
    raise(signo);  // pending until this handler returns (the signal is blocked while it runs)
    return;
  }
  int none = 0;
  g_received.compare_exchange_strong(none, signo);  // the first one counts, unless agreed
}

}  // namespace

StopSignals::StopSignals() {
  g_received.store(0);
  for (auto& c : g_count) c.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write that the signal interrupts goes on
  for (size_t i = 0; i < kKinds; ++i) sigaction(kSignals[i], &sa, &g_old[i]);
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < kKinds; ++i) sigaction(kSignals[i], &g_old[i], nullptr);
  g_received.store(0);
}

int StopSignals::received() {
  const int signo = g_received.load();
  return signo == kAgreed ? 0 : signo;
}

void StopSignals::stop_agreed() {
  g_received.store(kAgreed);
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
