// UniqueFd: a POSIX file descriptor closed when it goes out of scope; errno_text: strerror's text.
#pragma once

#include <unistd.h>

#include <cstring>
#include <string>

namespace ada {

struct UniqueFd {
  int fd = -1;
  explicit UniqueFd(int f) : fd(f) {}
  ~UniqueFd() {
    if (fd >= 0) ::close(fd);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
};

inline std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace ada
