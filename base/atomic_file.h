// Crash-safe file writes: a file is either its old content or its complete new content, never a
// mix — a unique temporary in the same folder, every part written, fsync, rename over the target,
// fsync of the folder, each result checked (IoError naming the file and the cause otherwise; the
// temporary is removed). Temporaries are named ".<name>.tmp.<pid>.<n>", so a crash's leftovers
// can be recognised and removed later (remove_stale_temporaries).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ada {

struct ByteRange {
  const void* data;
  size_t size;
};

void write_file_atomically(const std::string& path, const std::vector<ByteRange>& parts);
void write_file_atomically(const std::string& path, const std::string& text);

// True for a name write_file_atomically uses for its temporaries.
bool is_atomic_temporary(const std::string& file_name);
// Removes such temporaries from `dir` (not recursive) whose writer (the PID in the name) is no
// longer running on this machine; returns their paths. A live writer's are left alone, but the
// PID says nothing about other machines: call only when no other process writes into `dir` (the
// trainer holds a DirLock on its folders first).
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace ada
