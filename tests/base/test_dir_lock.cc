// DirLock (one run at a time in a folder) and remove_stale_temporaries (a crash's leftovers
// only, never a running writer's).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/atomic_file.h"
#include "base/dir_lock.h"
#include "base/error.h"
#include "util/temp_dir.h"

namespace ada {
namespace {

namespace fs = std::filesystem;

TEST(DirLock, ASecondHolderIsRefusedNamingTheFirstUntilItEnds) {
  testing::TempDir dir;
  const std::string run = (dir.path() / "run" / "sub").string();  // created by the lock
  {
    DirLock first(run, "config x.yaml: output.dir (line 3, column 8)");
    EXPECT_TRUE(fs::is_regular_file(run + "/.lock"));
    try {
      DirLock second(run, "config y.yaml: output.dir (line 4, column 8)");
      ADD_FAILURE() << "a second lock on " << run << " was taken";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      for (const std::string& want :
           {std::string("config y.yaml: output.dir (line 4, column 8): ") + run +
                " is in use by another run (process " + std::to_string(getpid()) + " on ",
            std::string("which holds ") + run + "/.lock); wait for it to end, or choose another"})
        EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  }
  DirLock again(run, "output.dir");  // released with the first
  std::ofstream(dir.path() / "file") << "x";
  EXPECT_THROW(DirLock((dir.path() / "file" / "sub").string(), "output.dir"), IoError);
}

TEST(AtomicFile, StaleTemporariesOfLiveWritersAreKept) {
  testing::TempDir dir;
  const fs::path d = dir.path();
  // No process has PID 2147483646 (above any pid_max); the parent of this test is running.
  const std::string dead = ".ckpt.json.tmp.2147483646.0";
  const std::string live = ".ckpt.json.tmp." + std::to_string(getppid()) + ".3";
  for (const auto& name : {dead, live}) std::ofstream(d / name) << "partial";
  std::ofstream(d / "ckpt.json") << "{}";
  const auto removed = remove_stale_temporaries(d.string());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(fs::path(removed[0]).filename().string(), dead);
  EXPECT_TRUE(fs::exists(d / live));
  EXPECT_TRUE(fs::exists(d / "ckpt.json"));
}

}  // namespace
}  // namespace ada
