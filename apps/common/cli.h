// Command lines of the trainer and the tools, over CLI11: one way to parse, one shape of error.
// parse_command_line() returns false after printing --help or --version (exit 0); a bad command
// line is a ConfigError "command line: <what is wrong>; usage: <usage>".
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <sstream>
#include <string>

#include "base/error.h"

namespace ada::cli {

inline bool parse_command_line(CLI::App& app, int argc, char** argv, const std::string& usage) {
  try {
    app.parse(argc, argv);
    return true;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::CallForVersion&) {
    std::cout << app.version() << "\n";
    return false;
  } catch (const CLI::ParseError& e) {
    // CLI11 checks required options before unknown ones: "--config is required" would hide the
    // misspelt flag that caused it ("--cnofig x.yaml"), so the arguments not understood come first.
    std::string unknown;
    if (dynamic_cast<const CLI::RequiredError*>(&e))
      for (const std::string& arg : app.remaining()) unknown += (unknown.empty() ? "" : " ") + arg;
    ADA_THROW(ConfigError) << "command line: "
                           << (unknown.empty() ? "" : "not understood: " + unknown + "; and ")
                           << e.what() << "; usage: " << usage << " (--help lists the options)";
  }
  return false;
}

// A number given on a command line, parsed whole ("1x", "", "abc" and values past the type are
// refused) and checked against [lo, hi]: what is wrong with it ("needs a whole number, got
// 'abc'", "must be in [1, 1048576], got 0"), or empty when it is good.
inline std::string integer_error(const std::string& text, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    return "needs a whole number, got '" + text + "'";
  if (v < lo || v > hi)
    return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + text;
  return "";
}
inline std::string number_error(const std::string& text, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    return "needs a finite number, got '" + text + "'";
  if (v < lo || v > hi) {
    std::ostringstream os;
    os << "must be in [" << lo << ", " << hi << "], got " << text;
    return os.str();
  }
  return "";
}

// CLI11 checks from them: app.add_option("--batch", batch)->check(cli::integer_in(1, 1 << 20)).
// (CLI11's PositiveNumber says "not in range 0.000000 to 1797693134862315708145...".)
inline CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator([lo, hi](std::string& v) { return integer_error(v, lo, hi); },
                        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator([lo, hi](std::string& v) { return number_error(v, lo, hi); }, "NUMBER");
}

// For hand-written parsers: the value of `flag`, or a ConfigError "command line: FLAG: ...".
inline int64_t integer_arg(const std::string& flag, const std::string& text, int64_t lo,
                           int64_t hi) {
  const std::string e = integer_error(text, lo, hi);
  if (!e.empty()) ADA_THROW(ConfigError) << "command line: " << flag << " " << e;
  return std::strtoll(text.c_str(), nullptr, 10);
}
inline double number_arg(const std::string& flag, const std::string& text, double lo, double hi) {
  const std::string e = number_error(text, lo, hi);
  if (!e.empty()) ADA_THROW(ConfigError) << "command line: " << flag << " " << e;
  return std::strtod(text.c_str(), nullptr);
}

// Refuses (ConfigError) an output that is one of the inputs, the same file or folder by another
// path too: the tool would write over what it reads. `what` names the output ("--out").
inline void refuse_overwriting(const std::string& what, const std::string& out,
                               std::initializer_list<std::string> inputs) {
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!in.empty() && std::filesystem::equivalent(out, in, ec))
      ADA_THROW(ConfigError) << "command line: " << what << " " << out << " is the input " << in
                             << "; writing it would replace what is read: give another path";
  }
}

}  // namespace ada::cli
