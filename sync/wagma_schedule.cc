#include "sync/wagma_schedule.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "base/error.h"

namespace ada::sync {
namespace {
bool is_pow2(int64_t x) {
  return x >= 1 && (x & (x - 1)) == 0;
}
int log2i(int64_t x) {
  int k = 0;
  while ((int64_t{1} << k) < x) ++k;
  return k;
}
}  // namespace

WagmaSchedule::WagmaSchedule(int ranks, int group_size, int64_t global_every)
    : p_(ranks), s_(group_size), k_(log2i(ranks)), m_(log2i(group_size)), tau_(global_every) {
  ADA_CHECK_ARG(is_pow2(ranks), ConfigError)
      << "WAGMA needs a power-of-two number of ranks (its butterfly groups), got " << ranks
      << "; run on 2, 4, 8, 16, ... ranks or choose another sync";
  ADA_CHECK_ARG(is_pow2(group_size) && group_size <= ranks, ConfigError)
      << "WAGMA group size must be a power of two no larger than the " << ranks << " ranks, got "
      << group_size;
  ADA_CHECK_ARG(global_every >= 1, ConfigError)
      << "WAGMA global_every (tau) must be >= 1, got " << global_every;
}

std::vector<int> WagmaSchedule::bits(int64_t t) const {
  std::vector<int> b;
  for (int r = 0; r < m_; ++r) b.push_back(static_cast<int>((t * m_ + r) % k_));
  return b;
}

std::vector<int> WagmaSchedule::members(int rank, int64_t t) const {
  const auto b = bits(t);
  std::vector<int> out;
  for (int x = 0; x < s_; ++x) {
    int other = rank;
    for (int r = 0; r < m_; ++r)
      if ((x >> r) & 1) other ^= 1 << b[r];
    out.push_back(other);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> WagmaSchedule::groups(int64_t t) const {
  std::vector<std::vector<int>> g;
  std::vector<bool> seen(static_cast<size_t>(p_), false);
  for (int r = 0; r < p_; ++r) {
    if (seen[r]) continue;
    g.push_back(members(r, t));
    for (int q : g.back()) seen[q] = true;
  }
  return g;
}

int WagmaSchedule::set_count() const {
  return k_ == 0 || m_ == 0 ? 1 : k_ / std::gcd(k_, m_);
}

int WagmaSchedule::set_index(int64_t t) const {
  return static_cast<int>(t % set_count());
}

int WagmaSchedule::color(int rank, int set) const {
  int c = rank;
  for (int b : bits(set)) c &= ~(1 << b);
  return c;
}

std::string WagmaSchedule::describe(int64_t t) const {
  if (tau_ < (1 << 30) && is_global(t)) return "global";
  std::ostringstream os;
  bool first = true;
  for (const auto& g : groups(t)) {
    os << (first ? "" : " ") << "{";
    for (size_t i = 0; i < g.size(); ++i) os << (i ? "," : "") << g[i];
    os << "}";
    first = false;
  }
  return os.str();
}

}  // namespace ada::sync
