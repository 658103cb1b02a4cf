#include "base/error.h"

#include <atomic>

namespace ada {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_world{0};
}  // namespace

int process_rank() {
  return g_rank.load();
}
int process_world() {
  return g_world.load();
}
void set_process_rank(int rank, int world) {
  g_rank.store(rank);
  g_world.store(world);
}

namespace detail {
std::string status_message(const char* lib, const char* call, long code, const std::string& decoded,
                           const char* file, int line) {
  std::ostringstream os;
  os << lib << " call " << call << " failed: " << decoded << " (code " << code << ") at " << file
     << ":" << line;
  if (process_rank() >= 0) os << " on rank " << process_rank() << "/" << process_world();
  return os.str();
}
}  // namespace detail
}  // namespace ada
