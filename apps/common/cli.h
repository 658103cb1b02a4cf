// Command lines of the trainer and the tools, over CLI11: one way to parse, one shape of error.
// parse_command_line() returns false after printing --help or --version (exit 0); a bad command
// line is a ConfigError "command line: <what is wrong>; usage: <usage>".
#pragma once

#include <CLI/CLI.hpp>

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
    ADA_THROW(ConfigError) << "command line: " << e.what() << "; usage: " << usage
                           << " (--help lists the options)";
  }
  return false;
}

}  // namespace ada::cli
