// Registry<Factory>: a named table of factories of one kind ("reducer", "optimizer", "model").
// Entries are added by explicit calls (no static-initialiser registration). An unknown name is a
// ConfigError that lists the known names, sorted, and suggests the closest one. Also holds the
// edit-distance helpers that config.cc uses for "did you mean" suggestions.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"

namespace ada {

// Optimal-string-alignment distance: insertions, deletions, substitutions and transpositions of
// adjacent characters each cost 1 ("adsaum" is 1 from "adasum").
inline size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

// Whether one of `a`, `b` starts with the other, the shorter at least 3 characters ("warmup" and
// "warmup_steps"): such names count as 1 edit apart in suggestions.
inline bool prefix_relatives(const std::string& a, const std::string& b) {
  const size_t shorter = std::min(a.size(), b.size());
  return shorter >= 3 && a.compare(0, shorter, b, 0, shorter) == 0;
}

// The candidate closest to `name` within `max_distance` edits, or "" if none is that close.
// A candidate that starts with `name` (or that `name` starts with), both at least 3 characters,
// counts as 1 edit away: "warmup" suggests "warmup_steps". Ties go to such a prefix relative
// ("adamm" suggests "adam", not "adamw"), then to the one nearest in length ("warmup" suggests
// "warmup_steps", not "warmup_start_factor"), then to the alphabetically first.
// `name` itself is never suggested.
inline std::string closest_name(const std::string& name, const std::vector<std::string>& candidates,
                                size_t max_distance = 2) {
  // Smaller is closer: (edits, not a prefix relative, length gap, the candidate itself).
  using Rank = std::tuple<size_t, bool, size_t, std::string>;
  auto rank = [&](const std::string& c) {
    const bool prefix = prefix_relatives(name, c);
    const size_t d = prefix ? std::min<size_t>(edit_distance(name, c), 1) : edit_distance(name, c);
    const size_t gap = c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    return Rank{d, !prefix, gap, c};
  };
  std::optional<Rank> best;
  for (const auto& c : candidates) {
    if (c == name) continue;
    Rank r = rank(c);
    if (!best || r < *best) best = std::move(r);
  }
  return best && std::get<0>(*best) <= max_distance ? std::get<3>(*best) : std::string();
}

template <class Factory>
class Registry {
 public:
  // `kind` names what the entries are, for messages: "reducer" gives "unknown reducer 'x'".
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  // Adds `name`; a second entry with the same name is a bug in the registration code.
  void add(const std::string& name, Factory factory) {
    ADA_CHECK_ARG(!name.empty(), InternalError) << "registry of " << kind_ << "s: empty name";
    ADA_CHECK_ARG(!entries_.count(name), InternalError)
        << "registry of " << kind_ << "s: '" << name << "' is registered twice";
    entries_.emplace(name, std::move(factory));
  }

  bool contains(const std::string& name) const { return entries_.count(name) != 0; }

  // The factory called `name`. `where` says where the name came from (e.g. Config::where()):
  // "<where>: unknown reducer 'adasumm'; known: adasum, average, sum (did you mean 'adasum'?)".
  const Factory& get(const std::string& name, const std::string& where = "") const {
    auto it = entries_.find(name);
    if (it != entries_.end()) return it->second;
    std::ostringstream os;
    if (!where.empty()) os << where << ": ";
    os << "unknown " << kind_ << " '" << name << "'; known: ";
    const auto known = names();
    if (known.empty()) os << "(none registered)";
    for (size_t i = 0; i < known.size(); ++i) os << (i ? ", " : "") << known[i];
    const std::string close = closest_name(name, known);
    if (!close.empty()) os << " (did you mean '" << close << "'?)";
    throw ConfigError(os.str());
  }

  // Registered names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [n, f] : entries_) out.push_back(n);
    return out;
  }

  const std::string& kind() const { return kind_; }
  size_t size() const { return entries_.size(); }

 private:
  std::string kind_;
  std::map<std::string, Factory> entries_;  // sorted by name
};

// The registry of `kind` that `fill` makes (the built-in entries), made once and kept: each
// kind's builtin_*() (e.g. comm::builtin_reducers()) is one call of this.
template <class R>
const R& builtin_registry(const char* kind, void (*fill)(R&)) {
  static const R registry = [&] {
    R r(kind);
    fill(r);
    return r;
  }();
  ADA_CHECK(registry.kind() == kind)
      << "builtin_registry: '" << kind << "' shares the registry type "
      << "of '" << registry.kind() << "'";
  return registry;
}

}  // namespace ada
