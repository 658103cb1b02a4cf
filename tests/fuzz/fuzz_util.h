// Shared by the fuzz targets (tests/fuzz/fuzz_*.cc): the exception policy and a scratch file.
// A target calls the code under test on one input; an ada::Error other than InternalError is
// the expected answer to a bad input, anything else (InternalError, std::exception, a signal,
// a sanitizer report) is a bug and must crash so that libFuzzer or the replay harness reports it.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/error.h"

namespace ada::fuzz {

// Runs fn(); swallows the deliberate errors (bad input named by an ada::Error), lets every
// other exception escape (libFuzzer reports it as a crash) and turns InternalError into abort().
template <class Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "fuzz: InternalError (a bug): %s\n", e.what());
    std::abort();
  } catch (const Error&) {
  }
}

// A per-process scratch folder (on /dev/shm when it exists), removed at exit. The readers under
// test take paths, so each input is written to a file first.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/ada_fuzz_XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Writes `n` bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const void* data, size_t n) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
  return path;
}

}  // namespace ada::fuzz
