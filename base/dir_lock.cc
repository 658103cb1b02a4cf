#include "base/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>

#include "base/error.h"

namespace ada {

DirLock::DirLock(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ADA_CHECK_ARG(!ec, IoError) << what << ": cannot create the folder " << dir << " ("
                              << ec.message() << "); choose a writable folder";
  const std::string path = dir + "/.lock";
  fd_ = std::make_unique<UniqueFd>(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ADA_CHECK_ARG(fd_->fd >= 0, IoError)
      << what << ": cannot open " << path << " (" << errno_text(errno) << ")";
  if (::flock(fd_->fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ADA_CHECK_ARG(err == EWOULDBLOCK, IoError)
        << what << ": cannot lock " << path << " (" << errno_text(err) << ")";
    char holder[256] = {};
    const ssize_t n = ::pread(fd_->fd, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    ADA_THROW(ConfigError) << what << ": " << dir << " is in use by another run ("
                           << (who.empty() ? "a process" : who) << ", which holds " << path
                           << "); wait for it to end, or choose another folder";
  }
  char host[128] = "?";
  ::gethostname(host, sizeof host - 1);
  char when[64] = "?";
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string who =
      "process " + std::to_string(::getpid()) + " on " + host + " since " + when + "\n";
  // The holder's description, for the message above; a failure to write it loses only that.
  if (::ftruncate(fd_->fd, 0) == 0) {
    const ssize_t written = ::pwrite(fd_->fd, who.data(), who.size(), 0);
    (void)written;
  }
}

}  // namespace ada
