// One run at a time in a folder: an exclusive flock(2) on <dir>/.lock, held while the DirLock
// lives. The kernel drops it when the process ends, however it ends (kill -9 included), so a
// crashed run never leaves its folder locked; the holder's PID, host and start time are written
// into the file for the message a second process gets.
#pragma once

#include <memory>
#include <string>

#include "base/unique_fd.h"

namespace ada {

class DirLock {
 public:
  // Takes the lock on `dir` (created if absent). ConfigError when another process holds it:
  // "<what>: <dir> is in use by another run (process PID on HOST since TIME, which holds
  // <dir>/.lock); wait for it to end, or choose another folder"; IoError when the folder or the
  // lock file cannot be made. `what` names the setting the folder comes from (e.g. the config's
  // location of output.dir).
  DirLock(const std::string& dir, const std::string& what);

 private:
  std::unique_ptr<UniqueFd> fd_;
};

}  // namespace ada
