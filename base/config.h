// Config: typed, located read access to one YAML configuration plus command-line overrides.
// A root Config and every section derived from it share one record of which keys the program
// asked about and read; finish() turns keys that nothing read into a ConfigError (typos must not
// pass silently). Every error names the source, the dotted key path and the line:column.
// Not thread-safe: read the configuration on one thread, then hand plain values to others.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace ada {

// The values a number read from a config may take (Config::get_in): at_least(0) is [0, inf),
// above(0) is (0, inf), closed(0, 1) is [0, 1], half_open(0, 1) is [0, 1). Only finite numbers:
// NaN is in none, and +-inf (a config's `inf`, `.inf`) only in a range made with_infinity() for a
// key where infinity means something ("no limit"), when the bounds hold it.
struct Range {
  double lo = -std::numeric_limits<double>::infinity(),
         hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;  // open: the bound itself is excluded
  bool infinity_ok = false;               // +-inf (within the bounds) is a valid value

  static Range at_least(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), false, false};
  }
  static Range above(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), true, false};
  }
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }
  static Range half_open(double lo, double hi) { return {lo, hi, false, true}; }
  // The same range, also holding +-inf where the bounds do (e.g. at_least(0).with_infinity()).
  Range with_infinity() const {
    Range r = *this;
    r.infinity_ok = true;
    return r;
  }
  bool contains(double x) const {
    if (std::isinf(x) && !infinity_ok) return false;
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
  std::string str() const;  // ">= 0", "> 0", "in [0, 1)", "any number"
};

namespace detail {
struct ConfigState;
template <class T>
inline constexpr bool is_config_value =
    std::is_same_v<T, bool> || std::is_same_v<T, int> || std::is_same_v<T, int64_t> ||
    std::is_same_v<T, double> || std::is_same_v<T, float> || std::is_same_v<T, std::string> ||
    std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<int64_t>> ||
    std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<std::string>>;
}  // namespace detail

class Config {
 public:
  // IoError if the file cannot be read; ConfigError (with line:column) on YAML syntax errors,
  // duplicate keys, several documents, or a top level that is not a mapping.
  static Config load_file(const std::string& path);
  // `source_name` stands in for the file name in messages.
  static Config parse(const std::string& text, const std::string& source_name);

  // Keys are relative to this section and may be dotted ("optimizer.lr"). A key whose value is
  // null (`key:`, `key: ~`) counts as not set.

  // A required mapping section.
  Config child(const std::string& key) const;
  // Whether `key` is set (present and not null). Does not count as reading its value.
  bool has(const std::string& key) const;

  // A required value. T: bool, int, int64_t, double, float, std::string, std::vector<int>,
  // std::vector<int64_t>, std::vector<double>, std::vector<std::string>.
  template <class T>
  T get(const std::string& key) const {
    static_assert(detail::is_config_value<T>, "Config::get: unsupported value type");
    return read<T>(key);
  }
  // The value if set, else `fallback`.
  template <class T>
  T get_or(const std::string& key, const T& fallback) const {
    static_assert(detail::is_config_value<T>, "Config::get_or: unsupported value type");
    if (has(key)) return get<T>(key);
    return fallback;
  }
  std::string get_or(const std::string& key, const char* fallback) const {
    return get_or<std::string>(key, std::string(fallback));
  }

  // A key naming a file or folder (output.dir, data.path, ...): a string like get / get_or, but
  // a value that is `~` or starts with `~/` is a ConfigError naming the key and the absolute path
  // to write instead (no shell expands a tilde inside a YAML file or after --set key=, so it
  // would be a folder named ~). get_paths: one path or a list of them.
  std::string get_path(const std::string& key) const;
  std::string get_path_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? get_path(key) : fallback;
  }
  std::vector<std::string> get_paths(const std::string& key) const;

  // A required number (int, int64_t, float, double) in `range`, else a ConfigError
  // "<where>: must be <range>, got <value>; <hint>" ("must be a finite number <range>, got inf"
  // for NaN and +-inf): `hint` says what values mean or are typical ("0: off", "typical: 0.9").
  // get_in_or: the same for an optional one (`fallback`, unchecked, when unset).
  template <class T>
  T get_in(const std::string& key, const Range& range, const std::string& hint = "") const {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>,
                  "Config::get_in: a number type");
    const T v = get<T>(key);
    if (!range.contains(static_cast<double>(v)))
      fail_range(key, static_cast<double>(v), range, hint);
    return v;
  }
  template <class T>
  T get_in_or(const std::string& key, const T& fallback, const Range& range,
              const std::string& hint = "") const {
    return has(key) ? get_in<T>(key, range, hint) : fallback;
  }

  // Throws ConfigError listing every key of the whole document (not only this section) that
  // nothing read, with its path, line and a "did you mean" suggestion. Call once all components
  // have been built from the configuration.
  void finish() const;

  // Applies a command-line `--set a.b.c=value` (relative to this section). The value is parsed
  // as YAML (scalar or flow: 0.1, adasum, [1, 2], {lr: 0.1}); missing sections are created.
  // A mapping set onto a key that holds a mapping merges into it key by key, recursively
  // (`train={steps: 10}` is `train.steps=10`); anything else (scalars, lists, null, a mapping
  // onto a scalar) replaces the key's value whole.
  // `origin` says where a value the program derives itself comes from, for messages (e.g.
  // "derived from train.steps"); empty: "set by --set <assignment>".
  void set_override(const std::string& assignment, const std::string& origin = "");

  // This section as YAML text, overrides applied, keys in file order.
  std::string dump() const;
  // FNV-1a (64-bit) of a canonical form of this section (keys sorted, formatting and comments
  // ignored): equal on every rank for equal configurations.
  uint64_t hash() const;

  // "config x.yaml: reducer.name (line 5, column 9)" for building messages about a value; the
  // location reads "(set by --set ...)" for overridden keys and "(not set)" for absent ones.
  // An empty key names this section.
  std::string where(const std::string& key = "") const;

  // Keys of this section in file order (does not count as reading them).
  std::vector<std::string> keys() const;
  // Dotted path of this section ("" for the root) and the source name.
  const std::string& path() const { return path_; }
  const std::string& source() const;

 private:
  Config(std::shared_ptr<detail::ConfigState> state, std::string path);
  template <class T>
  T read(const std::string& key) const;  // defined and instantiated in config.cc
  [[noreturn]] void fail_range(const std::string& key, double value, const Range& range,
                               const std::string& hint) const;
  std::shared_ptr<detail::ConfigState> state_;
  std::string path_;
};

extern template bool Config::read<bool>(const std::string&) const;
extern template int Config::read<int>(const std::string&) const;
extern template int64_t Config::read<int64_t>(const std::string&) const;
extern template double Config::read<double>(const std::string&) const;
extern template float Config::read<float>(const std::string&) const;
extern template std::string Config::read<std::string>(const std::string&) const;
extern template std::vector<int> Config::read<std::vector<int>>(const std::string&) const;
extern template std::vector<int64_t> Config::read<std::vector<int64_t>>(const std::string&) const;
extern template std::vector<double> Config::read<std::vector<double>>(const std::string&) const;
extern template std::vector<std::string> Config::read<std::vector<std::string>>(
    const std::string&) const;

}  // namespace ada
