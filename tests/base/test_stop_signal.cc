// StopSignals: the first stop signal only sets a flag, a second of the same kind ends the process,
// a first one that comes after the ranks agreed to stop is let pass (a launcher signalling its
// ranks one at a time), and the dispositions found are restored.
#include "base/stop_signal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>

namespace ada {
namespace {

sighandler_t disposition(int signo) {
  struct sigaction now;
  sigaction(signo, nullptr, &now);
  return now.sa_handler;
}

TEST(StopSignals, TheFirstSignalSetsTheFlagAndTheDispositionsComeBack) {
  const sighandler_t before = std::signal(SIGUSR1, SIG_IGN);
  {
    const StopSignals signals;
    EXPECT_EQ(StopSignals::received(), 0);
    std::raise(SIGUSR1);
    EXPECT_EQ(StopSignals::received(), SIGUSR1);
    std::raise(SIGTERM);  // the first of its kind: the process goes on, the first signal counts
    EXPECT_EQ(StopSignals::received(), SIGUSR1);
  }
  EXPECT_EQ(StopSignals::received(), 0);
  EXPECT_EQ(disposition(SIGUSR1), SIG_IGN);
  EXPECT_EQ(disposition(SIGTERM), SIG_DFL);
  std::signal(SIGUSR1, before);
}

TEST(StopSignals, AgreedToStopTheFlagIsOffAndALateFirstSignalIsLetPass) {
  const StopSignals signals;
  std::raise(SIGTERM);
  StopSignals::stop_agreed();
  EXPECT_EQ(StopSignals::received(), 0);  // the watchdog's stop rule is off
  std::raise(SIGUSR1);                    // this process's first SIGUSR1, after the agreement
  EXPECT_EQ(StopSignals::received(), 0);
}

TEST(StopSignalsDeathTest, ASecondSignalOfTheSameKindEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const int signo : {SIGTERM, SIGINT, SIGUSR1}) {
    EXPECT_EXIT(
        {
          const StopSignals signals;
          std::raise(signo);
          std::raise(signo);
          _exit(0);
        },
        testing::KilledBySignal(signo), "")
        << signo;
    // Also when the first came after the ranks agreed to stop (for another signal).
    EXPECT_EXIT(
        {
          const StopSignals signals;
          std::raise(signo == SIGTERM ? SIGUSR1 : SIGTERM);
          StopSignals::stop_agreed();
          std::raise(signo);
          std::raise(signo);
          _exit(0);
        },
        testing::KilledBySignal(signo), "")
        << signo;
  }
}

}  // namespace
}  // namespace ada
