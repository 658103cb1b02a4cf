#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>

#include "base/error.h"
#include "base/fault.h"
#include "base/unique_fd.h"

namespace ada {
namespace {

void write_all(int fd, const void* data, size_t n, const std::string& tmp,
               const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ADA_THROW(IoError) << "cannot save " << path << ": writing " << tmp
                         << " failed: " << errno_text(err)
                         << (err == ENOSPC || err == EDQUOT ? " (free some disk space)" : "");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<ByteRange>& parts) {
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string tmp = dir + "/." + target.filename().string() + ".tmp." +
                          std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int raw = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (raw < 0) {
    const int err = errno;
    ADA_THROW(IoError) << "cannot save " << path << ": cannot create " << tmp << ": "
                       << errno_text(err) << " (does the folder " << dir
                       << " exist and is it writable?)";
  }
  bool renamed = false;
  try {
    UniqueFd fd(raw);
    for (const auto& part : parts) {
      write_all(fd.fd, part.data, part.size, tmp, path);
      fault_point("atomic_write");
    }
    if (::fsync(fd.fd) != 0) {
      const int err = errno;
      ADA_THROW(IoError) << "cannot save " << path << ": fsync of " << tmp
                         << " failed: " << errno_text(err);
    }
    const int closing = fd.fd;
    fd.fd = -1;
    if (::close(closing) != 0) {
      const int err = errno;
      ADA_THROW(IoError) << "cannot save " << path << ": closing " << tmp
                         << " failed: " << errno_text(err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ADA_THROW(IoError) << "cannot save " << path << ": renaming " << tmp
                         << " over it failed: " << errno_text(err);
    }
    renamed = true;
    // Make the rename itself durable.
    UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const int dir_err = dfd.fd < 0 ? errno : ::fsync(dfd.fd) != 0 ? errno : 0;
    if (dir_err != 0 && dir_err != EINVAL && dir_err != EROFS)
      ADA_THROW(IoError) << "saved " << path << " but fsync of its folder " << dir
                         << " failed: " << errno_text(dir_err)
                         << "; the file may not survive a crash";
  } catch (...) {
    if (!renamed) ::unlink(tmp.c_str());
    throw;
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, std::vector<ByteRange>{{text.data(), text.size()}});
}

bool is_atomic_temporary(const std::string& name) {
  static const std::regex pattern(R"(\..+\.tmp\.[0-9]+\.[0-9]+)");
  return std::regex_match(name, pattern);
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return removed;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || !is_atomic_temporary(name)) continue;
    // ".<name>.tmp.<pid>.<n>": a writer still running (kill(pid, 0) succeeds, or is refused by
    // permission) keeps its temporary.
    const size_t last = name.rfind('.'), before = name.rfind('.', last - 1);
    const long pid = std::strtol(name.c_str() + before + 1, nullptr, 10);
    if (pid > 0 && pid != ::getpid() && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM))
      continue;
    if (std::filesystem::remove(e.path(), ec)) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace ada
