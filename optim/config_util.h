// Located, range-checked reads of optimizer and schedule settings from a Config section. Every
// error is a ConfigError that names the key with its file and line, the allowed range, the value
// and what to do. Internal to optim/.
#pragma once

#include <cmath>
#include <sstream>
#include <string>

#include "base/config.h"
#include "base/error.h"

namespace ada::optim::detail {

struct Range {
  double lo = -INFINITY, hi = INFINITY;
  bool lo_open = false, hi_open = false;  // open: the bound itself is excluded
  bool contains(double x) const {
    // Written so that NaN is never inside.
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
  std::string str() const {
    std::ostringstream os;
    if (std::isinf(hi)) {
      os << (lo_open ? "> " : ">= ") << lo;
    } else {
      os << "in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
    }
    return os.str();
  }
};

inline Range at_least(double lo) {
  return {lo, INFINITY, false, false};
}
inline Range above(double lo) {
  return {lo, INFINITY, true, false};
}
inline Range unit_interval_open_top() {
  return {0.0, 1.0, false, true};
}  // [0, 1)

// `value` read from `cfg` at `key` must lie in `range`; `hint` ends the message ("typical: 0.9").
inline void check_range(const Config& cfg, const std::string& key, double value, const Range& range,
                        const std::string& hint = "") {
  if (range.contains(value)) return;
  std::ostringstream os;
  os << cfg.where(key) << ": " << key << " must be " << range.str() << ", got " << value;
  if (!hint.empty()) os << "; " << hint;
  throw ConfigError(os.str());
}

// A required number in `range`.
inline double get_checked(const Config& cfg, const std::string& key, const Range& range,
                          const std::string& hint = "") {
  const double v = cfg.get<double>(key);
  check_range(cfg, key, v, range, hint);
  return v;
}

// An optional number in `range`, `fallback` when unset.
inline double get_checked_or(const Config& cfg, const std::string& key, double fallback,
                             const Range& range, const std::string& hint = "") {
  const double v = cfg.get_or<double>(key, fallback);
  if (cfg.has(key)) check_range(cfg, key, v, range, hint);
  return v;
}

}  // namespace ada::optim::detail
