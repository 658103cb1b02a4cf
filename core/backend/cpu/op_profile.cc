#include "core/backend/cpu/op_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

namespace ada::cpu {
namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, std::pair<int64_t, double>> g_ops;  // op -> calls, seconds
}  // namespace

void set_profiling(bool on) {
  g_on.store(on, std::memory_order_relaxed);
}
bool profiling() {
  return g_on.load(std::memory_order_relaxed);
}

void OpTimer::record(const char* op, std::chrono::steady_clock::duration d) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& e = g_ops[op];
  e.first += 1;
  e.second += std::chrono::duration<double>(d).count();
}

std::string profile_report(int64_t steps) {
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    rows.assign(g_ops.begin(), g_ops.end());
    g_ops.clear();
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  const double per = steps > 0 ? 1.0 / double(steps) : 1.0;
  std::string out = "  op                              calls/step   ms/step\n";
  char line[160];
  for (const auto& [op, v] : rows) {
    std::snprintf(line, sizeof(line), "  %-32s %10.1f %9.2f\n", op.c_str(), double(v.first) * per,
                  1e3 * v.second * per);
    out += line;
  }
  return out;
}

}  // namespace ada::cpu
