// Logging for every rank, over spdlog, to stderr (stdout stays free for tool output).
// After init_logging(rank, world) each line reads "[rank r/N] 2024-05-01 12:34:56.789 info: ...";
// rank 0 prints at the chosen level, other ranks only warnings and errors unless all_ranks.
// Before init_logging, lines carry no rank prefix and the level is info. Thread-safe.
#pragma once

#include <fmt/format.h>

#include <chrono>

#include <string>
#include <utility>

namespace ada {

enum class LogLevel { debug, info, warn, error, off };

// Parses "debug", "info", "warn"/"warning", "error", "off"; ConfigError listing them otherwise.
LogLevel log_level_from_name(const std::string& name);
const char* log_level_name(LogLevel level);

// Sets the rank prefix and the level, and records the rank for error messages
// (ada::set_process_rank). Ranks other than 0 print warnings and errors only, unless all_ranks.
void init_logging(int rank, int world, LogLevel level = LogLevel::info, bool all_ranks = false);
// Back to the state before init_logging (no rank prefix, level info, process rank -1). For tests.
void reset_logging();
// The level of this rank's output, and whether a message at `level` would print.
LogLevel log_level();
bool log_enabled(LogLevel level);
void flush_log();
// For an error exit, after the message is logged: flushes, then waits (at most `cap`) until
// whoever reads this process's stdout and stderr pipes has read them, plus a moment for it to
// write them out. OpenMPI 4.1's mpirun may end a job as soon as it sees a rank exit with an
// error, before it has read that rank's last lines, and the error message was lost (seen under
// load: a bad config's message missing from mpirun's output, only its "exit code 1" notice).
// Returns at once on a terminal or a file.
void drain_output(std::chrono::milliseconds cap = std::chrono::milliseconds(2000));

void log_debug(const std::string& msg);
void log_info(const std::string& msg);
void log_warn(const std::string& msg);
void log_error(const std::string& msg);

// fmt-style: log_info("step {} loss {:.4f}", step, loss). Formats only if the level prints.
template <class... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::debug)) log_debug(fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::info)) log_info(fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::warn)) log_warn(fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::error)) log_error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ada
