// A self-deleting temporary folder unique to this process and call (mkdtemp), so that tests run
// in parallel by `ctest -j` (each GoogleTest case is its own process) never share a path.
// Every test that writes a file writes it under one of these.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "base/error.h"

namespace ada::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ada_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ADA_CHECK_ARG(::mkdtemp(buf.data()) != nullptr, IoError) << "mkdtemp(" << tmpl << ") failed";
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ada::testing
