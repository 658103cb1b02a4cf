#include "core/serialize.h"

#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/registry.h"
#include "base/unique_fd.h"

namespace ada {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as in the reference implementation
constexpr int kMaxJsonDepth = 32;
const char* const kSupported = "F32, F16, BF16, I32, I64";

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
  }
  return "?";
}

bool st_dtype_from_name(const std::string& name, DType& out) {
  static constexpr DType all[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
  for (DType t : all) {
    if (name == st_dtype_name(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

// ---- a small strict JSON reader for the header --------------------------------------------------
// Hand-written on purpose: it refuses what the format forbids and a general parser lets through
// or reports vaguely (duplicate keys, trailing text, deep nesting), naming the byte. The writer
// below uses nlohmann-json.

struct Json {
  enum Kind { null, boolean, number, string, array, object } kind = null;
  std::string text;  // string value, or the number as written
  bool flag = false;
  std::vector<Json> items;
  struct Member;  // not std::pair: clang cannot instantiate pair<string, Json> inside Json
  std::vector<Member> members;  // in file order

  const Json* find(const std::string& key) const;
};

struct Json::Member {
  std::string key;
  Json value;
};

const Json* Json::find(const std::string& key) const {
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

const char* kind_name(Json::Kind k) {
  switch (k) {
    case Json::null:
      return "null";
    case Json::boolean:
      return "a boolean";
    case Json::number:
      return "a number";
    case Json::string:
      return "a string";
    case Json::array:
      return "an array";
    case Json::object:
      return "an object";
  }
  return "?";
}

class JsonReader {
 public:
  JsonReader(const std::string& text, const std::string& file) : s_(text), file_(file) {}

  Json parse_document() {
    Json v = value(0);
    skip_ws();
    // The writer may pad the header with spaces (JSON whitespace); NULs are tolerated too.
    while (i_ < s_.size() && s_[i_] == '\0') ++i_;
    if (i_ != s_.size()) fail("unexpected text after the JSON object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    ADA_THROW(IoError) << file_ << ": corrupt header: " << what << " at byte " << i_
                       << " of the JSON header; this is not a valid safetensors file";
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    if (i_ >= s_.size()) fail("unexpected end of the JSON");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }

  Json value(int depth) {
    if (depth > kMaxJsonDepth) fail("nesting too deep");
    skip_ws();
    const char c = peek();
    Json v;
    if (c == '{') {
      v.kind = Json::object;
      ++i_;
      skip_ws();
      if (peek() == '}') {
        ++i_;
        return v;
      }
      std::set<std::string> seen;
      while (true) {
        skip_ws();
        const size_t at = i_;
        std::string key = string_literal();
        if (!seen.insert(key).second) {
          i_ = at;
          fail("duplicate key \"" + key + "\"");
        }
        skip_ws();
        expect(':');
        Json member = value(depth + 1);
        v.members.push_back({std::move(key), std::move(member)});
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::array;
      ++i_;
      skip_ws();
      if (peek() == ']') {
        ++i_;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::string;
      v.text = string_literal();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::number;
      v.text = number();
      return v;
    }
    for (const char* lit : {"true", "false", "null"}) {
      const size_t n = std::strlen(lit);
      if (s_.compare(i_, n, lit) == 0) {
        i_ += n;
        v.kind = lit[0] == 'n' ? Json::null : Json::boolean;
        v.flag = lit[0] == 't';
        return v;
      }
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  std::string number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t b = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - b;
    };
    if (s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (digits() == 0) {
      fail("malformed number");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) fail("malformed number");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) fail("malformed number");
    }
    return s_.substr(start, i_ - start);
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        fail("bad \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string_literal() {
    expect('"');
    std::string out;
    while (true) {
      const char c = peek();
      ++i_;
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --i_;
        fail("control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = peek();
      ++i_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (s_.compare(i_, 2, "\\u") != 0) fail("unpaired surrogate in \\u escape");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --i_;
          fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  const std::string& s_;
  const std::string& file_;
  size_t i_ = 0;
};

// nlohmann-json writes valid UTF-8 only (dump() throws on anything else), as JSON requires.
bool is_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// ---- file helpers -------------------------------------------------------------------------------

// Reads exactly n bytes at `offset`; false if the file ends first.
bool read_at(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ADA_THROW(IoError) << path << ": read failed: " << errno_text(err);
    }
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// ---- header validation --------------------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
  size_t header_index = 0;
};

uint64_t as_u64(const Json& v, const std::string& file, const std::string& what) {
  uint64_t out = 0;
  if (v.kind == Json::number) {
    const char* b = v.text.data();
    const char* e = b + v.text.size();
    auto [ptr, ec] = std::from_chars(b, e, out);
    if (ec == std::errc() && ptr == e) return out;
  }
  ADA_THROW(IoError) << file << ": corrupt header: " << what
                     << " must be a non-negative integer, got "
                     << (v.kind == Json::number ? v.text : kind_name(v.kind));
}

std::string list_names(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::ostringstream os;
  const size_t shown = std::min<size_t>(tensors.size(), 20);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << tensors[i].first;
  if (tensors.size() > shown) os << ", ... (" << tensors.size() - shown << " more)";
  if (tensors.empty()) os << "(none)";
  return os.str();
}

Entry parse_entry(const std::string& name, const Json& v, size_t index, const std::string& file) {
  const std::string where = file + ": tensor '" + name + "'";
  ADA_CHECK_ARG(v.kind == Json::object, IoError)
      << where << ": header entry must be an object, got " << kind_name(v.kind);
  Entry e;
  e.name = name;
  e.header_index = index;
  const Json* dtype = v.find("dtype");
  const Json* shape = v.find("shape");
  const Json* offsets = v.find("data_offsets");
  ADA_CHECK_ARG(dtype && shape && offsets, IoError)
      << where << ": header entry lacks "
      << (!dtype   ? "'dtype'"
          : !shape ? "'shape'"
                   : "'data_offsets'")
      << " (each entry needs dtype, shape and data_offsets)";
  ADA_CHECK_ARG(dtype->kind == Json::string, IoError)
      << where << ": dtype must be a string, got " << kind_name(dtype->kind);
  ADA_CHECK_ARG(st_dtype_from_name(dtype->text, e.dtype), IoError)
      << where << ": dtype '" << dtype->text << "' is not supported (supported: " << kSupported
      << "); convert the tensor before saving";
  ADA_CHECK_ARG(shape->kind == Json::array, IoError)
      << where << ": shape must be an array, got " << kind_name(shape->kind);
  uint64_t numel = 1;
  for (const Json& d : shape->items) {
    const uint64_t n = as_u64(d, file, "tensor '" + name + "': a shape entry");
    ADA_CHECK_ARG(n <= static_cast<uint64_t>(INT64_MAX), IoError)
        << where << ": dimension " << n << " is too large";
    ADA_CHECK_ARG(!__builtin_mul_overflow(numel, n, &numel) && numel <= (1ull << 62), IoError)
        << where << ": the shape's element count overflows";
    e.shape.push_back(static_cast<int64_t>(n));
  }
  ADA_CHECK_ARG(offsets->kind == Json::array && offsets->items.size() == 2, IoError)
      << where << ": data_offsets must be [begin, end]";
  e.begin = as_u64(offsets->items[0], file, "tensor '" + name + "': data_offsets[0]");
  e.end = as_u64(offsets->items[1], file, "tensor '" + name + "': data_offsets[1]");
  ADA_CHECK_ARG(e.begin <= e.end, IoError)
      << where << ": data_offsets [" << e.begin << ", " << e.end << "] end before they begin";
  const uint64_t need = numel * dtype_size(e.dtype);
  ADA_CHECK_ARG(e.end - e.begin == need, IoError)
      << where << ": data_offsets [" << e.begin << ", " << e.end << "] hold " << e.end - e.begin
      << " bytes, but shape " << shape_str(e.shape) << " of " << dtype->text << " needs " << need;
  return e;
}

}  // namespace

const Tensor& NamedTensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors) names.push_back(n);
  const std::string close = closest_name(name, names, 3);
  ADA_THROW(IoError) << (source.empty() ? std::string("tensors") : source) << ": no tensor '"
                     << name << "'" << (close.empty() ? "" : "; did you mean '" + close + "'?")
                     << "; it has: " << list_names(tensors);
}

bool NamedTensors::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Header first: it validates the arguments before anything touches the disk. Compact JSON,
  // __metadata__ (if any) first, then the tensors in the order given.
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) {
    ADA_CHECK_ARG(is_utf8(k) && is_utf8(v), IoError)
        << "cannot save " << path << ": metadata " << (is_utf8(k) ? "value of '" : "key '") << k
        << "' is not valid UTF-8 (JSON text must be)";
    doc["__metadata__"][k] = v;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ADA_CHECK_ARG(!name.empty() && name != "__metadata__", IoError)
        << "cannot save " << path << ": invalid tensor name '" << name << "'";
    ADA_CHECK_ARG(is_utf8(name), IoError) << "cannot save " << path << ": tensor name '" << name
                                          << "' is not valid UTF-8 (JSON text must be)";
    ADA_CHECK_ARG(names.insert(name).second, IoError)
        << "cannot save " << path << ": tensor name '" << name << "' appears twice";
    ADA_CHECK_ARG(t.defined(), IoError)
        << "cannot save " << path << ": tensor '" << name << "' is undefined";
    const uint64_t begin = offset;
    offset += t.nbytes();
    doc[name] = {{"dtype", st_dtype_name(t.dtype())},
                 {"shape", t.shape()},
                 {"data_offsets", {begin, offset}}};
  }
  std::string header = doc.dump();
  // Pad so that the data section starts 8-byte aligned (8 + N is a multiple of 8).
  header.append((8 - header.size() % 8) % 8, ' ');
  ADA_CHECK_ARG(header.size() < kMaxHeaderBytes, IoError)
      << "cannot save " << path << ": header of " << header.size()
      << " bytes exceeds the safetensors limit of 100 MB (too many tensors or metadata)";

  uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  std::vector<ByteRange> parts = {{len, 8}, {header.data(), header.size()}};
  std::vector<Tensor> host;  // device tensors are written from host copies
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    host.push_back(t.device().is_cpu() ? t : t.to(Device::cpu()));
    parts.push_back({host.back().raw_data(), t.nbytes()});
  }
  write_file_atomically(path, parts);
}

NamedTensors load_safetensors(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) {
    const int err = errno;
    ADA_THROW(IoError) << "cannot open " << path << ": " << errno_text(err);
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    const int err = errno;
    ADA_THROW(IoError) << "cannot stat " << path << ": " << errno_text(err);
  }
  ADA_CHECK_ARG(S_ISREG(st.st_mode), IoError) << path << ": not a regular file";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  ADA_CHECK_ARG(size >= 8, IoError)
      << path << ": too short to be a safetensors file (" << size
      << " bytes; the 8-byte header length alone needs 8); the file is empty or incomplete";

  unsigned char len[8];
  ADA_CHECK_ARG(read_at(fd.fd, len, 8, 0, path), IoError)
      << path << ": the file shrank while being read";
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  ADA_CHECK_ARG(n >= 2, IoError) << path << ": header length is " << n
                                 << " bytes, too short for a JSON object; the file is corrupt";
  ADA_CHECK_ARG(n < kMaxHeaderBytes, IoError)
      << path << ": header length " << n
      << " bytes is implausible (limit 100 MB); this is not a safetensors file, or it is corrupt";
  ADA_CHECK_ARG(n <= size - 8, IoError)
      << path << ": truncated: header says its JSON is " << n << " bytes, file has " << size - 8
      << " after the length; the file is incomplete (was the write interrupted?)";

  std::string text(n, '\0');
  ADA_CHECK_ARG(read_at(fd.fd, text.data(), n, 8, path), IoError)
      << path << ": the file shrank while being read";
  ADA_CHECK_ARG(text[0] == '{', IoError)
      << path << ": corrupt header: it does not start with '{'; this is not a safetensors file";
  const Json doc = JsonReader(text, path).parse_document();
  ADA_CHECK_ARG(doc.kind == Json::object, IoError)
      << path << ": corrupt header: the JSON is not an object";

  NamedTensors out;
  out.source = path;
  std::vector<Entry> entries;
  for (const auto& [name, v] : doc.members) {
    if (name == "__metadata__") {
      ADA_CHECK_ARG(v.kind == Json::object, IoError)
          << path << ": __metadata__ must be an object of strings, got " << kind_name(v.kind);
      for (const auto& [k, mv] : v.members) {
        ADA_CHECK_ARG(mv.kind == Json::string, IoError)
            << path << ": __metadata__ value '" << k << "' must be a string, got "
            << kind_name(mv.kind);
        out.metadata[k] = mv.text;
      }
      continue;
    }
    entries.push_back(parse_entry(name, v, entries.size(), path));
  }

  // The data section must be covered exactly: no gaps, no overlaps, nothing missing or extra.
  const uint64_t data_size = size - 8 - n;
  uint64_t needed = 0;
  for (const Entry& e : entries) needed = std::max(needed, e.end);
  ADA_CHECK_ARG(needed <= data_size, IoError)
      << path << ": truncated: header says " << needed << " data bytes, file has " << data_size
      << "; the file is incomplete (was the write interrupted?)";
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos) {
      ADA_THROW(IoError) << path << ": corrupt header: tensors '" << prev->name << "' (bytes ["
                         << prev->begin << ", " << prev->end << ")) and '" << e.name << "' (bytes ["
                         << e.begin << ", " << e.end << ")) overlap";
    }
    ADA_CHECK_ARG(e.begin == pos, IoError)
        << path << ": corrupt header: data bytes [" << pos << ", " << e.begin
        << ") belong to no tensor (a gap before '" << e.name << "')";
    pos = e.end;
    prev = &e;
  }
  ADA_CHECK_ARG(pos == data_size, IoError)
      << path << ": " << data_size - pos << " data bytes after the last tensor belong to no tensor"
      << " (header says " << pos << " data bytes, file has " << data_size
      << "); the file is corrupt or was appended to";

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    ADA_CHECK_ARG(read_at(fd.fd, t.raw_data(), t.nbytes(), 8 + n + e.begin, path), IoError)
        << path << ": the file shrank while reading tensor '" << e.name << "'";
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace ada
