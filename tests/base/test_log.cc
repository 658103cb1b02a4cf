// Logging: rank prefix, per-rank levels, fmt formatting, the state before init_logging, and
// drain_output on an error exit.
#include "base/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "base/error.h"

namespace ada {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Runs fn with stderr captured and returns what it printed.
template <class F>
std::string captured(F&& fn) {
  ::testing::internal::CaptureStderr();
  fn();
  flush_log();
  return ::testing::internal::GetCapturedStderr();
}

class Log : public ::testing::Test {
 protected:
  void SetUp() override { reset_logging(); }
  void TearDown() override { reset_logging(); }
};

TEST_F(Log, WorksBeforeInitWithoutRankPrefix) {
  const std::string out = captured([] {
    log_info("hello {} {:.2f}", "world", 1.5);
    log_debug("hidden at the default level");
  });
  EXPECT_THAT(out, HasSubstr("info: hello world 1.50\n"));
  EXPECT_THAT(out, Not(HasSubstr("[rank")));
  EXPECT_THAT(out, Not(HasSubstr("hidden")));
  EXPECT_EQ(process_rank(), -1);
}

TEST_F(Log, RankZeroPrintsInfoWithPrefix) {
  init_logging(0, 4);
  EXPECT_EQ(process_rank(), 0);
  EXPECT_EQ(process_world(), 4);
  const std::string out = captured([] {
    log_info("step {}", 10);
    log_warn("careful");
    log_error("broken");
    log_debug("not shown");
  });
  EXPECT_THAT(out, StartsWith("[rank 0/4] "));
  EXPECT_THAT(out, HasSubstr("info: step 10\n"));
  EXPECT_THAT(out, HasSubstr("warning: careful\n"));
  EXPECT_THAT(out, HasSubstr("error: broken\n"));
  EXPECT_THAT(out, Not(HasSubstr("not shown")));
  // Every line carries the prefix.
  size_t lines = 0, prefixed = 0;
  for (size_t pos = 0; pos < out.size();) {
    const size_t nl = out.find('\n', pos);
    ++lines;
    if (out.compare(pos, 11, "[rank 0/4] ") == 0) ++prefixed;
    pos = nl == std::string::npos ? out.size() : nl + 1;
  }
  EXPECT_EQ(lines, 3u);
  EXPECT_EQ(prefixed, 3u);
}

TEST_F(Log, OtherRanksPrintOnlyWarningsUnlessAllRanks) {
  init_logging(2, 4);
  EXPECT_FALSE(log_enabled(LogLevel::info));
  EXPECT_TRUE(log_enabled(LogLevel::warn));
  std::string out = captured([] {
    log_info("quiet");
    log_warn("loud");
  });
  EXPECT_THAT(out, Not(HasSubstr("quiet")));
  EXPECT_THAT(out, HasSubstr("[rank 2/4] "));
  EXPECT_THAT(out, HasSubstr("warning: loud"));

  init_logging(2, 4, LogLevel::info, /*all_ranks=*/true);
  out = captured([] { log_info("now visible"); });
  EXPECT_THAT(out, HasSubstr("[rank 2/4] "));
  EXPECT_THAT(out, HasSubstr("info: now visible"));
}

TEST_F(Log, LevelsAndNames) {
  init_logging(0, 1, LogLevel::debug);
  EXPECT_EQ(log_level(), LogLevel::debug);
  EXPECT_THAT(captured([] { log_debug("x={}", 3); }), HasSubstr("debug: x=3"));
  init_logging(0, 1, LogLevel::error);
  EXPECT_EQ(captured([] { log_warn("dropped"); }), "");
  init_logging(0, 1, LogLevel::off);
  EXPECT_EQ(captured([] { log_error("dropped"); }), "");
  EXPECT_FALSE(log_enabled(LogLevel::off));

  EXPECT_EQ(log_level_from_name("DEBUG"), LogLevel::debug);
  EXPECT_EQ(log_level_from_name("warning"), LogLevel::warn);
  EXPECT_EQ(log_level_from_name("off"), LogLevel::off);
  EXPECT_STREQ(log_level_name(LogLevel::warn), "warn");
  try {
    log_level_from_name("verbose");
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                HasSubstr("unknown log level 'verbose'; known: debug, info, warn, error, off"));
  }
}

TEST_F(Log, PlainStringsAreNotFormatted) {
  const std::string text = "literal {} and {:x}";
  const std::string out = captured([&] {
    log_info(text);
    log_info("braces {}");  // a literal with no arguments is printed as is
  });
  EXPECT_THAT(out, HasSubstr("info: literal {} and {:x}\n"));
  EXPECT_THAT(out, HasSubstr("info: braces {}\n"));
}

TEST_F(Log, ResetRestoresTheInitialState) {
  init_logging(1, 2);
  reset_logging();
  EXPECT_EQ(process_rank(), -1);
  EXPECT_EQ(log_level(), LogLevel::info);
  const std::string out = captured([] { log_info("back"); });
  EXPECT_THAT(out, Not(HasSubstr("[rank")));
  EXPECT_THAT(out, HasSubstr("info: back"));
}

TEST_F(Log, BadRankIsABug) {
  EXPECT_THROW(init_logging(4, 4), InternalError);
  EXPECT_THROW(init_logging(-1, 4), InternalError);
}

// An error exit waits for the reader of its stderr pipe (mpirun) to read the message: a child
// writes to a pipe nobody reads yet and calls drain_output; it must still be there until the
// parent reads (it has 30 s). Under load the child may not have written yet when the parent
// looks: then the check is vacuous, never wrong.
TEST(LogDrain, WaitsUntilThePipesReaderHasReadIt) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(p[0]);
    dup2(p[1], 2);
    std::fputs("the last words\n", stderr);
    drain_output(std::chrono::seconds(30));
    _exit(0);
  }
  close(p[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, WNOHANG), 0)
      << "drain_output returned before its pipe was read";
  std::string got;
  char buf[64];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(p[0]);
  EXPECT_EQ(got, "the last words\n");
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace ada
