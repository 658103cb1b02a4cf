#include "base/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "base/registry.h"

namespace ada {

namespace detail {
// Shared by a root Config and every section derived from it. Paths are dotted, relative to the
// document root ("" is the root).
struct ConfigState {
  std::string source;
  YAML::Node root;
  std::set<std::string> consumed;  // values read whole (scalars, lists), and nulls looked at
  std::set<std::string> visited;   // sections entered, directly or by reading below them
  std::set<std::string> known;     // every key the program asked about, present or not
  std::map<std::string, std::string> overrides;  // path -> "--set a.b=v" that set it
};
}  // namespace detail

namespace {

using detail::ConfigState;

constexpr int kMaxDepth = 64;

std::string join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

std::string parent_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

std::string last_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string prefix(const ConfigState& s) {
  return "config " + s.source + ": ";
}

std::vector<std::string> split_path(const ConfigState& s, const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const size_t len = dot == std::string::npos ? std::string::npos : dot - start;
    std::string seg = path.substr(start, len);
    ADA_CHECK_ARG(!seg.empty(), ConfigError)
        << prefix(s) << "key '" << path << "' has an empty part; write dotted keys like a.b.c";
    out.push_back(std::move(seg));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

bool has_mark(const YAML::Node& n) {
  return n.IsDefined() && !n.Mark().is_null();
}

std::string mark_str(const YAML::Mark& m) {
  return "line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1);
}

// "(line 5, column 9)", "(set by --set a.b=1)", "(<origin of a derived value>)" or "" when nothing
// is known.
std::string location(const ConfigState& s, const std::string& path, const YAML::Node& key,
                     const YAML::Node& value) {
  // The longest overridden prefix of `path` (the path itself included) wins.
  for (std::string p = path;; p = parent_of(p)) {
    auto it = s.overrides.find(p);
    if (it != s.overrides.end()) return "(" + it->second + ")";
    if (p.empty()) break;
  }
  // Scalars point at the value; sections, lists and nulls at their key.
  if (value.IsDefined() && value.IsScalar() && has_mark(value))
    return "(" + mark_str(value.Mark()) + ")";
  if (has_mark(key)) return "(" + mark_str(key.Mark()) + ")";
  if (has_mark(value)) return "(" + mark_str(value.Mark()) + ")";
  // A section that --set created for the keys it set below (--set newsection.key=5): those
  // assignments, in key order, each once.
  std::vector<std::string> below;
  for (auto it = s.overrides.lower_bound(path + "."); it != s.overrides.end(); ++it) {
    if (it->first.compare(0, path.size() + 1, path + ".") != 0) break;
    if (std::find(below.begin(), below.end(), it->second) == below.end())
      below.push_back(it->second);
  }
  std::string out;
  for (const auto& b : below) out += (out.empty() ? "(" : "; ") + b;
  return out.empty() ? out : out + ")";
}

// "a.b (line 3, column 4)": a path with its location, when one is known.
std::string path_at(const ConfigState& s, const std::string& path, const YAML::Node& key,
                    const YAML::Node& value) {
  std::string loc = location(s, path, key, value);
  return path + (loc.empty() ? "" : " " + loc);
}

// "config x.yaml: a.b (line 3, column 4)".
std::string located(const ConfigState& s, const std::string& path, const YAML::Node& key,
                    const YAML::Node& value) {
  return prefix(s) + path_at(s, path, key, value);
}

// What a node holds, for "got ..." in messages.
std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "an empty value (null)";
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  std::string text = n.Scalar();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return "'" + text + "'";
}

struct Lookup {
  bool found = false;  // the full path exists (its value may be null)
  YAML::Node key;      // key and value nodes of the last part, when found
  YAML::Node value;
  std::string deepest;  // deepest existing section on the way ("" = root)
  YAML::Node deepest_key;
  YAML::Node deepest_value;
  std::string missing;   // first part that is absent, when !found and !blocked
  bool blocked = false;  // an existing part on the way is not a mapping
  std::string blocked_path;
  YAML::Node blocked_key;
  YAML::Node blocked_value;
};

// Finds `key` in a mapping; sets key/value nodes (rebinding with reset, never operator=, which
// would overwrite the referenced node in yaml-cpp).
bool find_in(const YAML::Node& map, const std::string& key, YAML::Node& k, YAML::Node& v) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) {
      k.reset(it->first);
      v.reset(it->second);
      return true;
    }
  }
  return false;
}

Lookup lookup(const ConfigState& s, const std::string& path) {
  Lookup l;
  l.deepest_value.reset(s.root);
  const auto segs = split_path(s, path);
  YAML::Node cur(s.root);
  std::string cur_path;
  for (size_t i = 0; i < segs.size(); ++i) {
    YAML::Node k, v;
    if (!find_in(cur, segs[i], k, v)) {
      l.missing = segs[i];
      return l;
    }
    const std::string p = join(cur_path, segs[i]);
    if (i + 1 == segs.size()) {
      l.found = true;
      l.key.reset(k);
      l.value.reset(v);
      return l;
    }
    if (!v.IsMap()) {
      l.blocked = true;
      l.blocked_path = p;
      l.blocked_key.reset(k);
      l.blocked_value.reset(v);
      return l;
    }
    l.deepest = p;
    l.deepest_key.reset(k);
    l.deepest_value.reset(v);
    cur.reset(v);
    cur_path = p;
  }
  // Empty path: the root itself.
  l.found = true;
  l.value.reset(s.root);
  return l;
}

// Records that the program asked about `path`: it is a known key (for suggestions), and every
// section above it has been entered.
void note(ConfigState& s, const std::string& path) {
  s.known.insert(path);
  for (std::string p = parent_of(path); !p.empty(); p = parent_of(p)) s.visited.insert(p);
}

[[noreturn]] void throw_not_found(const ConfigState& s, const std::string& path, const Lookup& l,
                                  const char* what) {
  std::ostringstream os;
  if (l.blocked) {
    os << located(s, l.blocked_path, l.blocked_key, l.blocked_value) << ": cannot read " << path
       << ": " << l.blocked_path << " is " << describe(l.blocked_value)
       << ", not a section of keys";
    ADA_THROW(ConfigError) << os.str();
  }
  os << prefix(s) << "missing required " << what << " " << path;
  if (l.deepest.empty()) {
    os << " (at top level)";
  } else {
    os << " (in section " << l.deepest;
    if (has_mark(l.deepest_key)) os << " at line " << l.deepest_key.Mark().line + 1;
    os << ")";
  }
  // A similar key that is present is probably the intended one, misspelt.
  if (l.deepest_value.IsMap()) {
    std::vector<std::string> siblings;
    for (auto it = l.deepest_value.begin(); it != l.deepest_value.end(); ++it)
      if (it->first.IsScalar()) siblings.push_back(it->first.Scalar());
    const std::string close = closest_name(l.missing, siblings);
    if (!close.empty()) {
      YAML::Node k, v;
      find_in(l.deepest_value, close, k, v);
      os << "; found '" << join(l.deepest, close) << "'";
      if (has_mark(k)) os << " at line " << k.Mark().line + 1;
      os << " instead: is it misspelt?";
    }
  }
  ADA_THROW(ConfigError) << os.str();
}

// ---- scalar conversion -------------------------------------------------------------------------

enum class Parse { ok, bad, range };

Parse parse_double(const std::string& text, double& out) {
  std::string t = text;
  if (!t.empty() && t[0] == '+') t = t.substr(1);
  std::string lower = t;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == ".inf" || lower == "-.inf") {
    out = lower[0] == '-' ? -std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::infinity();
    return Parse::ok;
  }
  if (lower == ".nan") {
    out = std::numeric_limits<double>::quiet_NaN();
    return Parse::ok;
  }
  if (t.empty() || t[0] == '+') return Parse::bad;
  const char* b = t.data();
  const char* e = b + t.size();
  auto [ptr, ec] = std::from_chars(b, e, out);
  if (ec == std::errc::result_out_of_range) return Parse::range;
  if (ec != std::errc() || ptr != e) return Parse::bad;
  return Parse::ok;
}

Parse parse_int64(const std::string& text, int64_t& out) {
  std::string t = text;
  if (!t.empty() && t[0] == '+') t = t.substr(1);
  if (t.empty() || t[0] == '+') return Parse::bad;
  const char* b = t.data();
  const char* e = b + t.size();
  auto [ptr, ec] = std::from_chars(b, e, out);
  if (ec == std::errc() && ptr == e) return Parse::ok;
  if (ec == std::errc::result_out_of_range && ptr == e) return Parse::range;
  // Integral values written as numbers, e.g. 1e6 or 2.0; exact only up to 2^53.
  double d = 0;
  const Parse p = parse_double(text, d);
  if (p != Parse::ok || !std::isfinite(d) || d != std::trunc(d)) return Parse::bad;
  if (std::fabs(d) > 9007199254740992.0) return Parse::range;
  out = static_cast<int64_t>(d);
  return Parse::ok;
}

bool parse_bool(const std::string& text, bool& out) {
  std::string t = text;
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "true" || t == "yes" || t == "on") {
    out = true;
    return true;
  }
  if (t == "false" || t == "no" || t == "off") {
    out = false;
    return true;
  }
  return false;
}

// Converts one scalar node. `path`/`key` locate it in messages.
template <class T>
T convert_scalar(const ConfigState& s, const std::string& path, const YAML::Node& key,
                 const YAML::Node& v) {
  auto fail = [&](const std::string& expected) {
    ADA_THROW(ConfigError) << located(s, path, key, v) << ": expected " << expected << ", got "
                           << describe(v);
  };
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.IsScalar()) fail("a string");
    return v.Scalar();
  } else if constexpr (std::is_same_v<T, bool>) {
    bool b = false;
    if (!v.IsScalar() || !parse_bool(v.Scalar(), b)) fail("true or false");
    return b;
  } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    double d = 0;
    const Parse p = v.IsScalar() ? parse_double(v.Scalar(), d) : Parse::bad;
    if (p == Parse::bad) fail("a number");
    if (p == Parse::range) fail("a number in the range of a double");
    if constexpr (std::is_same_v<T, float>) {
      if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max())
        fail("a number in the range of a float (|x| <= 3.4e38)");
      return static_cast<float>(d);
    } else {
      return d;
    }
  } else {
    static_assert(std::is_same_v<T, int> || std::is_same_v<T, int64_t>);
    int64_t i = 0;
    const Parse p = v.IsScalar() ? parse_int64(v.Scalar(), i) : Parse::bad;
    if (p == Parse::bad) fail("an integer");
    if constexpr (std::is_same_v<T, int>) {
      if (p == Parse::range || i < std::numeric_limits<int>::min() ||
          i > std::numeric_limits<int>::max())
        fail("an integer in [-2147483648, 2147483647]");
      return static_cast<int>(i);
    } else {
      if (p == Parse::range) fail("an integer in the range of int64");
      return i;
    }
  }
}

template <class T>
struct VectorOf {
  static constexpr bool value = false;
};
template <class E>
struct VectorOf<std::vector<E>> {
  static constexpr bool value = true;
  using element = E;
};

template <class E>
const char* list_name() {  // what the key takes, with an example in YAML's flow form
  if constexpr (std::is_same_v<E, std::string>) return "a list of strings such as [a, b]";
  if constexpr (std::is_same_v<E, double>) return "a list of numbers such as [0.5, 2]";
  return "a list of integers such as [1, 2]";
}

template <class T>
T convert(const ConfigState& s, const std::string& path, const YAML::Node& key,
          const YAML::Node& v) {
  if constexpr (VectorOf<T>::value) {
    using E = typename VectorOf<T>::element;
    if (!v.IsSequence()) {
      ADA_THROW(ConfigError) << located(s, path, key, v) << ": expected " << list_name<E>()
                             << ", got " << describe(v);
    }
    T out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      out.push_back(convert_scalar<E>(s, p, YAML::Node(), v[i]));
    }
    return out;
  } else {
    return convert_scalar<T>(s, path, key, v);
  }
}

// ---- loading ------------------------------------------------------------------------------------

// Records where each document starts; builds nothing.
struct DocumentStarts : YAML::EventHandler {
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The first document of `text` (a null node if there is none) and, in *count, how many there
// are. Not YAML::LoadAll: in yaml-cpp 0.7 it loops forever, allocating, when a document starts
// with ',' outside brackets (e.g. "[a], b" or a stray "," line; jbeder/yaml-cpp#1040, found by
// fuzz_config), because the parser then reports an empty document again and again without
// moving on. Two documents starting at the same place are that case: a syntax error here.
// Throws YAML::ParserException (with its mark) on syntax errors.
YAML::Node load_first_document(const std::string& text, size_t* count) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts docs;
  while (parser.HandleNextDocument(docs)) {
    const size_t n = docs.starts.size();
    if (n >= 2 && docs.starts[n - 1].pos == docs.starts[n - 2].pos)
      throw YAML::ParserException(docs.starts[n - 1],
                                  "unexpected ',' outside [ ] or { } (write lists as [a, b] "
                                  "or as '- item' lines)");
  }
  *count = docs.starts.size();
  return *count == 0 ? YAML::Node() : YAML::Load(text);
}

// ---- document checks ---------------------------------------------------------------------------

// Offset of the first byte that does not belong to valid UTF-8 YAML text (overlong forms,
// surrogates, code points above U+10FFFF and C0 controls other than tab/LF/CR are invalid), or
// npos. yaml-cpp would read such bytes as U+FFFD on one pass and write them back raw, so a dumped
// config would not load to the same keys.
size_t invalid_utf8_at(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      // YAML text has no C0 controls but tab and line ends; a NUL would also make yaml-cpp
      // guess UTF-16/32 and decode the rest as such. A CR must end a line with its LF: yaml-cpp
      // keeps a lone one inside a plain scalar ("null\r"), which dump() writes unquoted, so the
      // dumped config would read back differently (both found by fuzz_config).
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return i;
      if (c == '\r' && (i + 1 == n || s[i + 1] != '\n')) return i;
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07, min = 0x10000;
    else
      return i;
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

// "line 3, column 7: byte 0xd8 is not valid UTF-8" (or names the control character) for the
// first bad byte of `text`, or "".
std::string utf8_problem(const std::string& text) {
  const size_t bad = invalid_utf8_at(text);
  if (bad == std::string::npos) return "";
  const size_t line_start = text.rfind('\n', bad == 0 ? 0 : bad - 1);
  const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + bad, '\n'));
  const size_t column =
      bad - (line_start == std::string::npos || bad == 0 ? 0 : line_start + 1) + 1;
  const auto c = static_cast<unsigned char>(text[bad]);
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", c);
  const std::string what = c == '\r'  ? "a carriage return without a line feed (old Mac or stray "
                                        "Windows line ends?)"
                           : c < 0x20 ? std::string("control character ") + hex
                                      : std::string("byte ") + hex + " is not valid UTF-8";
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what;
}

// Rejects what yaml-cpp accepts silently but we would misread: duplicate keys, non-scalar keys,
// merge keys, nesting deeper than kMaxDepth (which also stops recursive aliases), and keys or
// values that are not valid UTF-8 (a "\U00110000" escape: dump() could not write it back).
void check_document(const ConfigState& s, const YAML::Node& n, const std::string& path, int depth) {
  ADA_CHECK_ARG(depth <= kMaxDepth, ConfigError)
      << prefix(s) << "nesting deeper than " << kMaxDepth << " levels at "
      << (path.empty() ? std::string("top level") : path)
      << " (a recursive alias?); flatten the configuration";
  if (n.IsMap()) {
    std::map<std::string, YAML::Node> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;  // a copy: it-> yields a temporary proxy
      ADA_CHECK_ARG(k.IsScalar(), ConfigError)
          << prefix(s) << "a key in " << (path.empty() ? std::string("the top level") : path)
          << (has_mark(k) ? " (" + mark_str(k.Mark()) + ")" : std::string())
          << " is not a plain name; keys must be strings";
      const std::string name = k.Scalar();
      const std::string p = join(path, name);
      ADA_CHECK_ARG(name != "<<", ConfigError)
          << prefix(s) << p << " (" << mark_str(k.Mark())
          << "): YAML merge keys (<<) are not supported; write the keys out";
      auto [prev, inserted] = seen.emplace(name, k);
      ADA_CHECK_ARG(inserted, ConfigError)
          << prefix(s) << "key " << p << " appears twice (line " << prev->second.Mark().line + 1
          << " and line " << k.Mark().line + 1 << "); keep one";
      check_document(s, it->second, p, depth + 1);
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      check_document(s, n[i], path + "[" + std::to_string(i) + "]", depth + 1);
  }
}

// How many times `target` is reachable from `n` (more than once when shared through an alias).
int count_refs(const YAML::Node& n, const YAML::Node& target) {
  int c = n.is(target) ? 1 : 0;
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) c += count_refs(it->second, target);
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) c += count_refs(n[i], target);
  }
  return c;
}

// ---- canonical text for hashing -----------------------------------------------------------------

void quote(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void canonical(std::string& out, const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) {
    out += "null";
  } else if (n.IsScalar()) {
    quote(out, n.Scalar());
  } else if (n.IsSequence()) {
    out += '[';
    for (size_t i = 0; i < n.size(); ++i) {
      if (i) out += ',';
      canonical(out, n[i]);
    }
    out += ']';
  } else {
    // Sort an index, never the nodes: assigning a YAML::Node overwrites the node it refers to.
    std::vector<std::pair<std::string, YAML::Node>> items;
    for (auto it = n.begin(); it != n.end(); ++it)
      items.emplace_back(it->first.Scalar(), YAML::Node(it->second));
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return items[a].first < items[b].first; });
    out += '{';
    for (size_t i = 0; i < order.size(); ++i) {
      if (i) out += ',';
      quote(out, items[order[i]].first);
      out += ':';
      canonical(out, items[order[i]].second);
    }
    out += '}';
  }
}

}  // namespace

// ---- Config -------------------------------------------------------------------------------------

Config::Config(std::shared_ptr<detail::ConfigState> state, std::string path)
    : state_(std::move(state)), path_(std::move(path)) {}

const std::string& Config::source() const {
  return state_->source;
}

namespace {

// For a config path that does not exist: the YAML files beside it whose names are close to its
// name ("configs/mnist_lenet.yaml" lists mnist_lenet_adasum.yaml, mnist_lenet_average.yaml, ...),
// or "" when its folder is missing or holds none that close.
std::string similar_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string stem = p.stem().string();
  std::vector<std::string> close;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path f = it->path();
    if (f.extension() != ".yaml" && f.extension() != ".yml") continue;
    const std::string s = f.stem().string();
    if (prefix_relatives(s, stem) || edit_distance(s, stem) <= 2)
      close.push_back(f.filename().string());
  }
  if (close.empty()) return "";
  std::sort(close.begin(), close.end());
  const size_t shown = std::min<size_t>(close.size(), 8);
  std::string out =
      "; close names in " + (p.has_parent_path() ? dir.string() + "/" : "this folder") + ": ";
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + close[i];
  if (close.size() > shown) out += " and " + std::to_string(close.size() - shown) + " more";
  return out;
}

// Throws, before anything changes, when merging the mapping `value` into the section `dest`
// (at `path`) would rewrite a section shared through a YAML alias (and so every alias of it).
void check_mergeable(const ConfigState& s, const std::string& what, const std::string& path,
                     const YAML::Node& key, const YAML::Node& dest, const YAML::Node& value) {
  ADA_CHECK_ARG(count_refs(s.root, dest) <= 1, ConfigError)
      << prefix(s) << what << ": " << path_at(s, path, key, dest)
      << " is shared through a YAML alias (*anchor); edit the file instead";
  for (auto it = value.begin(); it != value.end(); ++it) {
    YAML::Node k, v;
    const YAML::Node sub(it->second);
    if (sub.IsMap() && find_in(dest, it->first.Scalar(), k, v) && v.IsMap())
      check_mergeable(s, what, join(path, it->first.Scalar()), k, v, sub);
  }
}

// Sets `name` in the section `parent` to `value` and records that `path` (its dotted path) was
// set by `set_by`, dropping records of keys below it.
void assign(ConfigState& s, YAML::Node& parent, const std::string& name, const std::string& path,
            const YAML::Node& value, const std::string& set_by) {
  YAML::Node k, v;
  if (find_in(parent, name, k, v) && count_refs(s.root, v) > 1) {
    // The value is shared through an alias: detach this key instead of rewriting the shared
    // node (which would change every alias too). The key moves to the end of its section.
    parent.remove(name);
  }
  parent[name] = value;
  for (auto it = s.overrides.lower_bound(path + "."); it != s.overrides.end();) {
    if (it->first.compare(0, path.size() + 1, path + ".") != 0) break;
    it = s.overrides.erase(it);
  }
  s.overrides[path] = set_by;
}

// Merges the mapping `value` into the section `name` of `parent` (at `path`): a mapping onto a
// section merges recursively, anything else (scalars, lists, nulls, a mapping onto a scalar)
// replaces the key. Only the keys set are recorded as set by `set_by`; the others keep their
// place in the file. check_mergeable() has passed.
void merge_into(ConfigState& s, YAML::Node& parent, const std::string& name,
                const std::string& path, const YAML::Node& value, const std::string& set_by) {
  YAML::Node dest = parent[name];
  for (auto it = value.begin(); it != value.end(); ++it) {
    const std::string sub_name = it->first.Scalar();
    const std::string sub_path = join(path, sub_name);
    const YAML::Node sub(it->second);
    YAML::Node k, v;
    if (sub.IsMap() && find_in(dest, sub_name, k, v) && v.IsMap())
      merge_into(s, dest, sub_name, sub_path, sub, set_by);
    else
      assign(s, dest, sub_name, sub_path, sub, set_by);
  }
}

}  // namespace

Config Config::load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::string cwd_hint;
    if (!path.empty() && path[0] != '/') {
      std::error_code ec;
      cwd_hint = " (relative to " + std::filesystem::current_path(ec).string() + ")";
    }
    ADA_THROW(IoError) << "cannot open config file '" << path << "'" << cwd_hint << ": "
                       << std::strerror(err) << "; check the path given to --config"
                       << (err == ENOENT ? similar_files(path) : "");
  }
  std::error_code ec;
  ADA_CHECK_ARG(!std::filesystem::is_directory(path, ec), IoError)
      << "config file '" << path << "' is a folder; pass a .yaml file to --config";
  std::ostringstream text;
  text << in.rdbuf();
  ADA_CHECK_ARG(!in.bad(), IoError)
      << "cannot read config file '" << path << "': " << std::strerror(errno);
  return parse(text.str(), path);
}

Config Config::parse(const std::string& text, const std::string& source_name) {
  auto s = std::make_shared<detail::ConfigState>();
  s->source = source_name;
  const std::string bad_utf8 = utf8_problem(text);
  ADA_CHECK_ARG(bad_utf8.empty(), ConfigError)
      << prefix(*s) << bad_utf8
      << "; save the config as UTF-8 text without control characters (tabs and line ends aside)";
  YAML::Node doc;
  size_t count = 0;
  try {
    doc.reset(load_first_document(text, &count));
  } catch (const YAML::ParserException& e) {
    std::ostringstream os;
    os << prefix(*s) << "YAML syntax error";
    if (!e.mark.is_null()) os << " at " << mark_str(e.mark);
    os << ": " << e.msg
       << "; check the indentation, the ': ' after each key, and quotes and brackets there";
    ADA_THROW(ConfigError) << os.str();
  } catch (const YAML::Exception& e) {
    ADA_THROW(ConfigError) << prefix(*s) << "cannot parse YAML: " << e.what();
  }
  ADA_CHECK_ARG(count <= 1, ConfigError)
      << prefix(*s) << "holds " << count
      << " YAML documents (separated by ---); a configuration is one document";
  if (!doc.IsDefined() || doc.IsNull()) {
    s->root.reset(YAML::Node(YAML::NodeType::Map));
  } else {
    s->root.reset(doc);
  }
  ADA_CHECK_ARG(s->root.IsMap(), ConfigError)
      << prefix(*s) << "the top level must be a mapping of keys (key: value lines), got "
      << describe(s->root);
  check_document(*s, s->root, "", 0);
  return Config(std::move(s), "");
}

Config Config::child(const std::string& key) const {
  ConfigState& s = *state_;
  const std::string full = join(path_, key);
  note(s, full);
  const Lookup l = lookup(s, full);
  if (!l.found) throw_not_found(s, full, l, "section");
  if (!l.value.IsMap()) {
    ADA_THROW(ConfigError) << located(s, full, l.key, l.value)
                           << ": expected a section (indented key: value lines), got "
                           << describe(l.value);
  }
  s.visited.insert(full);
  return Config(state_, full);
}

bool Config::has(const std::string& key) const {
  ConfigState& s = *state_;
  const std::string full = join(path_, key);
  note(s, full);
  const Lookup l = lookup(s, full);
  if (!l.found) return false;
  if (l.value.IsNull()) {
    s.consumed.insert(full);  // an explicit null was looked at: it means "not set"
    return false;
  }
  return true;
}

template <class T>
T Config::read(const std::string& key) const {
  ConfigState& s = *state_;
  const std::string full = join(path_, key);
  note(s, full);
  const Lookup l = lookup(s, full);
  if (!l.found) throw_not_found(s, full, l, "key");
  T v = convert<T>(s, full, l.key, l.value);
  s.consumed.insert(full);
  return v;
}

template bool Config::read<bool>(const std::string&) const;
template int Config::read<int>(const std::string&) const;
template int64_t Config::read<int64_t>(const std::string&) const;
template double Config::read<double>(const std::string&) const;
template float Config::read<float>(const std::string&) const;
template std::string Config::read<std::string>(const std::string&) const;
template std::vector<int> Config::read<std::vector<int>>(const std::string&) const;
template std::vector<int64_t> Config::read<std::vector<int64_t>>(const std::string&) const;
template std::vector<double> Config::read<std::vector<double>>(const std::string&) const;
template std::vector<std::string> Config::read<std::vector<std::string>>(const std::string&) const;

void Config::finish() const {
  const ConfigState& s = *state_;
  std::vector<std::string> lines;
  std::function<void(const YAML::Node&, const std::string&)> walk =
      [&](const YAML::Node& map, const std::string& section) {
        for (auto it = map.begin(); it != map.end(); ++it) {
          const std::string name = it->first.Scalar();
          const std::string p = join(section, name);
          if (s.consumed.count(p)) continue;
          if (it->second.IsMap() && s.visited.count(p)) {
            walk(it->second, p);
            continue;
          }
          std::vector<std::string> candidates;
          for (const auto& k : s.known)
            if (parent_of(k) == section) candidates.push_back(last_of(k));
          const std::string loc = location(s, p, it->first, YAML::Node());
          std::string line = "  " + p + (loc.empty() ? "" : " " + loc);
          const std::string close = closest_name(name, candidates);
          if (!close.empty()) line += ": did you mean '" + close + "'?";
          lines.push_back(std::move(line));
        }
      };
  walk(s.root, "");
  if (lines.empty()) return;
  std::ostringstream os;
  os << prefix(s) << lines.size() << (lines.size() == 1 ? " key" : " keys")
     << " that nothing reads (misspelt, misplaced, or unused with these settings); fix or "
        "remove "
     << (lines.size() == 1 ? "it" : "them") << ":";
  for (const auto& l : lines) os << "\n" << l;
  ADA_THROW(ConfigError) << os.str();
}

void Config::set_override(const std::string& assignment, const std::string& origin) {
  ConfigState& s = *state_;
  const std::string bad_utf8 = utf8_problem(assignment);
  ADA_CHECK_ARG(bad_utf8.empty(), ConfigError)
      << "--set: " << bad_utf8 << " in the assignment; write it as UTF-8 text without control "
      << "characters";
  const std::string what = "--set '" + assignment + "'";  // messages lead with the assignment
  const size_t eq = assignment.find('=');
  ADA_CHECK_ARG(eq != std::string::npos && eq > 0, ConfigError)
      << what << ": expected KEY=VALUE with a dotted key, e.g. --set optimizer.lr=0.1";
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  for (char c : key) {
    ADA_CHECK_ARG(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.',
                  ConfigError)
        << what << ": key '" << key
        << "' may hold only letters, digits, '_', '-' and '.' (e.g. optimizer.lr)";
  }
  ADA_CHECK_ARG(key.front() != '.' && key.back() != '.' && key.find("..") == std::string::npos,
                ConfigError)
      << what << ": key '" << key << "' has an empty part; write dotted keys like optimizer.lr";
  ADA_CHECK_ARG(text.find_first_not_of(" \t") != std::string::npos, ConfigError)
      << what << ": the value is empty; write " << key << "='' for an empty string or " << key
      << "=null to unset it";
  YAML::Node value;
  try {
    size_t count = 0;
    value.reset(load_first_document(text, &count));
    if (count > 1)
      throw YAML::ParserException(YAML::Mark::null_mark(), "more than one YAML document");
  } catch (const YAML::Exception& e) {
    ADA_THROW(ConfigError) << what << ": the value '" << text << "' is not valid YAML (" << e.msg
                           << "); quote strings with YAML punctuation, e.g. " << key
                           << "=\"'a: b'\"";
  }
  const std::string full = join(path_, key);
  const auto segs = split_path(s, full);
  try {  // the rules of a loaded document hold for a value set from the command line too
    check_document(s, value, full, static_cast<int>(segs.size()));
  } catch (const ConfigError& e) {
    ADA_THROW(ConfigError) << what << ": " << e.what();
  }

  // Walk to the parent section, creating missing sections.
  YAML::Node cur(s.root);
  std::string cur_path;
  for (size_t i = 0; i + 1 < segs.size(); ++i) {
    YAML::Node k, v;
    const std::string p = join(cur_path, segs[i]);
    if (!find_in(cur, segs[i], k, v)) {
      cur[segs[i]] = YAML::Node(YAML::NodeType::Map);
    } else {
      ADA_CHECK_ARG(v.IsNull() || v.IsMap(), ConfigError)
          << prefix(s) << what << ": cannot set " << full << " because " << path_at(s, p, k, v)
          << " is " << describe(v) << ", not a section";
      ADA_CHECK_ARG(count_refs(s.root, v) <= 1, ConfigError)
          << prefix(s) << what << ": " << path_at(s, p, k, v)
          << " is shared through a YAML alias (*anchor); edit the file instead";
      if (v.IsNull()) cur[segs[i]] = YAML::Node(YAML::NodeType::Map);
    }
    YAML::Node next = cur[segs[i]];
    cur.reset(next);
    cur_path = p;
  }
  const std::string set_by = origin.empty() ? "set by --set " + assignment : origin;
  YAML::Node k, v;
  if (value.IsMap() && find_in(cur, segs.back(), k, v) && v.IsMap()) {
    // A mapping onto a section merges into it key by key, so --set train={steps: 10} is
    // --set train.steps=10 and leaves the section's other keys alone.
    check_mergeable(s, what, full, k, v, value);
    merge_into(s, cur, segs.back(), full, value, set_by);
    return;
  }
  assign(s, cur, segs.back(), full, value, set_by);
}

std::string Config::dump() const {
  const Lookup l = lookup(*state_, path_);
  YAML::Emitter out;
  out << l.value;
  std::string text = out.c_str();
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

uint64_t Config::hash() const {
  const Lookup l = lookup(*state_, path_);
  std::string text;
  canonical(text, l.value);
  return fnv1a64(text);
}

namespace {
// A number as a message quotes it: a whole number in full (100000000, not 1e+08), any other in
// as few digits as read back the same (0.3, not 0.300000001; 1e-300).
std::string number_text(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  if (x == std::trunc(x) && std::fabs(x) < 1e15) {  // a whole number in full
    std::snprintf(buf, sizeof buf, "%.0f", x);
    return buf;
  }
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}
}  // namespace

std::string Range::str() const {
  std::ostringstream os;
  if (std::isinf(hi) && std::isinf(lo))
    os << "any number";
  else if (std::isinf(hi) && !std::isinf(lo))
    os << (lo_open ? "> " : ">= ") << number_text(lo);
  else
    os << "in " << (lo_open ? "(" : "[") << number_text(lo) << ", " << number_text(hi)
       << (hi_open ? ")" : "]");
  return os.str();
}

void Config::fail_range(const std::string& key, double value, const Range& range,
                        const std::string& hint) const {
  std::ostringstream os;
  os << where(key) << ": must be ";
  if (std::isinf(range.lo) && std::isinf(range.hi))  // only NaN (or +-inf) is outside
    os << (range.infinity_ok ? "a number" : "a finite number");
  else if (!std::isfinite(value))
    os << (range.infinity_ok ? "a number " : "a finite number ") << range.str();
  else
    os << range.str();
  os << ", got " << number_text(value);
  if (!hint.empty()) os << "; " << hint;
  throw ConfigError(os.str());
}

std::string Config::where(const std::string& key) const {
  const ConfigState& s = *state_;
  const std::string full = join(path_, key);
  if (full.empty()) return "config " + s.source;
  const Lookup l = lookup(s, full);
  if (!l.found) return prefix(s) + full + " (not set)";
  return located(s, full, l.key, l.value);
}

namespace {
// Refuses a path that starts with ~ (~, ~/x, ~user/x; see Config::get_path); `at` locates it.
void check_no_tilde(const std::string& path, const std::string& at) {
  if (path.empty() || path[0] != '~') return;
  const char* home = std::getenv("HOME");
  const bool mine = path == "~" || path.rfind("~/", 0) == 0;
  const std::string fix = mine && home && *home ? "write " + std::string(home) + path.substr(1)
                          : mine ? "write the absolute path of your home folder for ~"
                                 : "write the absolute path of that user's home folder for " +
                                       path.substr(0, path.find('/'));
  ADA_THROW(ConfigError) << at << ": '" << path
                         << "' starts with ~, which nothing expands here (a shell expands ~ only "
                            "at the start of a word, not inside a YAML file or after --set key=),"
                            " so it would name a folder called "
                         << path.substr(0, path.find('/')) << "; " << fix;
}
}  // namespace

std::string Config::get_path(const std::string& key) const {
  std::string path = get<std::string>(key);
  check_no_tilde(path, where(key));
  return path;
}

std::vector<std::string> Config::get_paths(const std::string& key) const {
  const Lookup l = lookup(*state_, join(path_, key));
  std::vector<std::string> paths = l.found && l.value.IsSequence()
                                       ? get<std::vector<std::string>>(key)
                                       : std::vector<std::string>{get<std::string>(key)};
  for (size_t i = 0; i < paths.size(); ++i)
    check_no_tilde(paths[i], l.found && l.value.IsSequence()
                                 ? where(key) + ", item " + std::to_string(i) + " of the list"
                                 : where(key));
  return paths;
}

std::vector<std::string> Config::keys() const {
  const Lookup l = lookup(*state_, path_);
  std::vector<std::string> out;
  if (!l.value.IsMap()) return out;
  for (auto it = l.value.begin(); it != l.value.end(); ++it) out.push_back(it->first.Scalar());
  return out;
}

}  // namespace ada
