#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/ioctl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <memory>
#include <thread>

#include "base/error.h"

namespace ada {
namespace {

constexpr const char* kPattern = "%Y-%m-%d %H:%M:%S.%e %l: %v";

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// One logger for the process, created on first use (not a static initialiser) and reconfigured
// in place by init_logging, so concurrent log calls never see it replaced.
spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    auto l =
        std::make_shared<spdlog::logger>("ada", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern(kPattern);
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::warn);
    return l;
  }();
  return *instance;
}

std::atomic<LogLevel> g_level{LogLevel::info};

}  // namespace

LogLevel log_level_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "debug") return LogLevel::debug;
  if (n == "info") return LogLevel::info;
  if (n == "warn" || n == "warning") return LogLevel::warn;
  if (n == "error") return LogLevel::error;
  if (n == "off" || n == "none") return LogLevel::off;
  ADA_THROW(ConfigError) << "unknown log level '" << name
                         << "'; known: debug, info, warn, error, off";
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
    case LogLevel::off:
      return "off";
  }
  return "?";
}

void init_logging(int rank, int world, LogLevel level, bool all_ranks) {
  ADA_CHECK_ARG(rank >= 0 && world > 0 && rank < world, InternalError)
      << "init_logging(rank " << rank << ", world " << world << "): need 0 <= rank < world";
  set_process_rank(rank, world);
  const LogLevel effective = (rank == 0 || all_ranks) ? level : std::max(level, LogLevel::warn);
  auto& l = logger();
  l.set_pattern("[rank " + std::to_string(rank) + "/" + std::to_string(world) + "] " + kPattern);
  l.set_level(to_spdlog(effective));
  g_level.store(effective);
}

void reset_logging() {
  set_process_rank(-1, 0);
  auto& l = logger();
  l.set_pattern(kPattern);
  l.set_level(spdlog::level::info);
  g_level.store(LogLevel::info);
}

LogLevel log_level() {
  return g_level.load();
}

bool log_enabled(LogLevel level) {
  return level != LogLevel::off && level >= g_level.load();
}

void flush_log() {
  logger().flush();
}

void drain_output(std::chrono::milliseconds cap) {
  flush_log();
  std::fflush(stdout);
  std::fflush(stderr);
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + cap;
  bool piped = false;
  for (int fd : {1, 2}) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    piped = true;
    int unread = 0;  // FIONREAD on a pipe's write end: the bytes its reader has not read yet
    while (ioctl(fd, FIONREAD, &unread) == 0 && unread > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // mpirun writes out what it has read on a later turn of its event loop.
  if (piped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void log_debug(const std::string& msg) {
  logger().debug(msg);
}
void log_info(const std::string& msg) {
  logger().info(msg);
}
void log_warn(const std::string& msg) {
  logger().warn(msg);
}
void log_error(const std::string& msg) {
  logger().error(msg);
}

}  // namespace ada
