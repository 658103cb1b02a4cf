// safetensors: round trips, a hand-written file, files from and for Python, atomic writes, and a
// clear IoError for every kind of corrupt, truncated or mis-sized file.
#include "core/serialize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "util/error_of.h"
#include "util/temp_dir.h"

namespace ada {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using ada::testing::error_of;

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

template <class T>
Tensor filled16(DType dtype, const std::vector<uint16_t>& bits, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dtype);
  std::memcpy(t.raw_data(), bits.data(), bits.size() * 2);
  return t;
}

std::vector<uint16_t> bits16(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.raw_data(), t.nbytes());
  return out;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<ada::testing::TempDir>("ada_serialize");
    dir_ = tmp_->path();
  }
  void TearDown() override { tmp_.reset(); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file made of an 8-byte length, `header` as given, and `data_bytes` bytes of data.
  std::string craft(const std::string& name, const std::string& header, size_t data_bytes,
                    int64_t length_override = -1) {
    std::vector<unsigned char> bytes(8);
    const uint64_t n =
        length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(n >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + data_bytes, 0xAB);
    const std::string p = path(name);
    write_bytes(p, bytes);
    return p;
  }

  std::string load_error(const std::string& p) {
    return error_of<IoError>([&] { load_safetensors(p); });
  }

  std::unique_ptr<ada::testing::TempDir> tmp_;
  fs::path dir_;
};

TEST_F(Safetensors, RoundTripsEveryDtypeAndShape) {
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w", Tensor::from_vector<float>({1.5f, -2.f, 3.25f, 0.f, 4.f, -0.5f}, {2, 3})},
      {"half", filled16<Half>(DType::f16, {0x3C00, 0xC000, 0x7BFF}, {3})},
      {"brain", filled16<BFloat16>(DType::bf16, {0x3F80, 0xC000}, {1, 2})},
      {"i", Tensor::from_vector<int32_t>({1, -2, 3}, {3})},
      {"l", Tensor::from_vector<int64_t>({int64_t{1} << 40, -5}, {2})},
      {"scalar", Tensor::from_vector<float>({7.f}, {})},  // 0-d
      {"empty", Tensor::empty({2, 0}, DType::f32)},
      {"empty_i64", Tensor::empty({0}, DType::i64)},
      {"layer1.0.conv.weight", Tensor::from_vector<float>({9.f}, {1, 1, 1, 1})},
  };
  const std::map<std::string, std::string> meta = {
      {"step", "12"}, {"note", "quote \" backslash \\ newline \n tab \t unicode é"}, {"", ""}};
  const std::string p = path("all.safetensors");
  save_safetensors(p, tensors, meta);

  NamedTensors back = load_safetensors(p);
  EXPECT_EQ(back.source, p);
  EXPECT_EQ(back.metadata, meta);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first) << "file order is kept";
    const Tensor& a = tensors[i].second;
    const Tensor& b = back.tensors[i].second;
    EXPECT_EQ(b.dtype(), a.dtype()) << tensors[i].first;
    EXPECT_EQ(b.shape(), a.shape()) << tensors[i].first;
    ASSERT_EQ(b.nbytes(), a.nbytes());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << tensors[i].first;
  }
  EXPECT_EQ(back.at("w").to_vector<float>(),
            (std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 4.f, -0.5f}));
  EXPECT_EQ(bits16(back.at("half")), (std::vector<uint16_t>{0x3C00, 0xC000, 0x7BFF}));
  EXPECT_EQ(bits16(back.at("brain")), (std::vector<uint16_t>{0x3F80, 0xC000}));
  EXPECT_EQ(back.at("l").to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -5}));
  EXPECT_EQ(back.at("scalar").dim(), 0);
  EXPECT_EQ(back.at("scalar").item(), 7.f);
  EXPECT_EQ(back.at("empty").shape(), (Shape{2, 0}));
  EXPECT_TRUE(back.contains("empty_i64"));
  EXPECT_FALSE(back.contains("nope"));

  // Layout: the data section starts 8-byte aligned, after a space-padded header.
  const auto bytes = read_bytes(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  uint64_t data = 0;
  for (const auto& [name, t] : tensors) data += t.nbytes();
  EXPECT_EQ(bytes.size(), 8 + n + data);
}

TEST_F(Safetensors, EmptyFileOfTensorsAndNoMetadata) {
  const std::string p = path("none.safetensors");
  save_safetensors(p, {});
  NamedTensors back = load_safetensors(p);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());
  EXPECT_EQ(read_bytes(p).size(), 16u);  // length + "{}" padded to 8
}

TEST_F(Safetensors, SavesOnlyTheViewOfANarrowedTensor) {
  Tensor t = Tensor::arange(0, 12).reshape({4, 3});
  const std::string p = path("view.safetensors");
  save_safetensors(p, {{"rows", t.narrow(1, 2)}});
  EXPECT_EQ(load_safetensors(p).at("rows").to_vector<float>(),
            (std::vector<float>{3, 4, 5, 6, 7, 8}));
}

// Every byte written out by hand: proves the reader follows the format, not just our writer.
TEST_F(Safetensors, LoadsAHandWrittenFile) {
  // Header JSON (138 bytes, padded with 6 spaces to 144):
  // {"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"F32","shape":[],
  // "data_offsets":[0,4]},"__metadata__":{"k":"v\u00e9"}}   (plus padding spaces)
  const std::string header =
      "{\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
      "\"__metadata__\":{\"k\":\"v\\u00e9\"}}";
  ASSERT_EQ(header.size(), 138u);
  std::vector<unsigned char> bytes = {
      0x90, 0, 0, 0, 0, 0, 0, 0,  // header length 144, little-endian
  };
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), 6, ' ');
  const unsigned char data[] = {
      0x00, 0x00, 0x80, 0x3F,  // a = 1.0f
      0x07, 0x00, 0x00, 0x00,  // b[0] = 7
      0xFF, 0xFF, 0xFF, 0xFF,  // b[1] = -1
  };
  bytes.insert(bytes.end(), std::begin(data), std::end(data));
  const std::string p = path("hand.safetensors");
  write_bytes(p, bytes);

  NamedTensors t = load_safetensors(p);
  ASSERT_EQ(t.tensors.size(), 2u);
  // File order is data order, not header order.
  EXPECT_EQ(t.tensors[0].first, "a");
  EXPECT_EQ(t.tensors[1].first, "b");
  EXPECT_EQ(t.at("a").dtype(), DType::f32);
  EXPECT_EQ(t.at("a").dim(), 0);
  EXPECT_EQ(t.at("a").item(), 1.0f);
  EXPECT_EQ(t.at("b").to_vector<int32_t>(), (std::vector<int32_t>{7, -1}));
  EXPECT_EQ(t.metadata.at("k"), "v\xC3\xA9");  // \u00e9 decoded to UTF-8
}

TEST_F(Safetensors, AtListsTheKnownNames) {
  const std::string p = path("named.safetensors");
  save_safetensors(p, {{"fc.weight", Tensor::zeros({2})}, {"fc.bias", Tensor::zeros({1})}});
  NamedTensors t = load_safetensors(p);
  const std::string msg = error_of<IoError>([&] { t.at("fc.weigth"); });
  EXPECT_THAT(msg, HasSubstr(p + ": no tensor 'fc.weigth'; did you mean 'fc.weight'?; it has: "
                                 "fc.weight, fc.bias"));
}

TEST_F(Safetensors, WritesAtomicallyAndOverwrites) {
  const std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"x", Tensor::full({3}, 1.0)}});
  save_safetensors(p, {{"x", Tensor::full({5}, 2.0)}}, {{"step", "2"}});
  NamedTensors t = load_safetensors(p);
  EXPECT_EQ(t.at("x").to_vector<float>(), std::vector<float>(5, 2.f));
  EXPECT_EQ(t.metadata.at("step"), "2");
  // No temporary files are left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt.safetensors"}));
}

TEST_F(Safetensors, SaveErrorsNameTheFileAndLeaveNothingBehind) {
  const std::string nodir = path("missing/dir/c.safetensors");
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(nodir, {{"x", Tensor::zeros({1})}});
              }),
              HasSubstr("cannot save " + nodir + ": cannot create"));
  const std::string p = path("bad.safetensors");
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(p, {{"x", Tensor()}});
              }),
              HasSubstr("cannot save " + p + ": tensor 'x' is undefined"));
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(p, {{"x", Tensor::zeros({1})}, {"x", Tensor::zeros({1})}});
              }),
              HasSubstr("tensor name 'x' appears twice"));
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(p, {{"__metadata__", Tensor::zeros({1})}});
              }),
              HasSubstr("invalid tensor name '__metadata__'"));
  // JSON text is UTF-8: a name, key or value that is not is refused, by name.
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(p, {{"w\xFF", Tensor::zeros({1})}});
              }),
              HasSubstr("cannot save " + p + ": tensor name 'w\xFF' is not valid UTF-8"));
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(p, {{"x", Tensor::zeros({1})}}, {{"k\xC3", "v"}});
              }),
              HasSubstr("cannot save " + p + ": metadata key 'k\xC3' is not valid UTF-8"));
  EXPECT_THAT(error_of<IoError>([&] {
                save_safetensors(p, {{"x", Tensor::zeros({1})}}, {{"k", "\xC3("}});
              }),
              HasSubstr("cannot save " + p + ": metadata value of 'k' is not valid UTF-8"));
  EXPECT_TRUE(fs::is_empty(dir_));
}

// The header as written, byte for byte: compact JSON, __metadata__ first (keys sorted), then the
// tensors in the order given with offsets in that order, padded with spaces.
TEST_F(Safetensors, WritesACompactHeaderInTheGivenOrder) {
  const std::string p = path("header.safetensors");
  save_safetensors(p,
                   {{"b", Tensor::from_vector<int32_t>({7, -1}, {2})},
                    {"a", Tensor::from_vector<float>({1.f}, {})}},
                   {{"k", "v\xC3\xA9"}, {"a\"b", "x\ny\\"}});
  const auto bytes = read_bytes(p);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  ASSERT_LE(8 + n, bytes.size());
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  const std::string want =
      "{\"__metadata__\":{\"a\\\"b\":\"x\\ny\\\\\",\"k\":\"v\xC3\xA9\"},"
      "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}";
  ASSERT_GE(header.size(), want.size());
  EXPECT_EQ(header.substr(0, want.size()), want);
  EXPECT_EQ(header.substr(want.size()), std::string(header.size() - want.size(), ' '));
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12);
}

// ---- bad files ---------------------------------------------------------------------------------

TEST_F(Safetensors, MissingTooShortAndNotAFile) {
  const std::string missing = path("nope.safetensors");
  EXPECT_THAT(load_error(missing), HasSubstr("cannot open " + missing + ": No such file"));
  const std::string tiny = path("tiny.safetensors");
  write_bytes(tiny, {1, 2, 3});
  EXPECT_THAT(load_error(tiny), HasSubstr(tiny + ": too short to be a safetensors file (3 bytes"));
  const std::string empty = path("empty.safetensors");
  write_bytes(empty, {});
  EXPECT_THAT(load_error(empty), HasSubstr("too short to be a safetensors file (0 bytes"));
  EXPECT_THAT(load_error(dir_.string()), HasSubstr("not a regular file"));
}

TEST_F(Safetensors, ImplausibleOrTruncatedHeaderLength) {
  EXPECT_THAT(load_error(craft("huge.safetensors", "{}", 0, int64_t{1} << 40)),
              HasSubstr("header length 1099511627776 bytes is implausible (limit 100 MB)"));
  EXPECT_THAT(load_error(craft("long.safetensors", "{}", 0, 5000)),
              HasSubstr("truncated: header says its JSON is 5000 bytes, file has 2 after the "
                        "length; the file is incomplete (was the write interrupted?)"));
  EXPECT_THAT(load_error(craft("zero.safetensors", "", 0)),
              HasSubstr("header length is 0 bytes, too short for a JSON object"));
}

TEST_F(Safetensors, TruncatedDataSaysHowMuchIsMissing) {
  const std::string p = path("checkpoint.safetensors");
  save_safetensors(p, {{"w", Tensor::zeros({300})}});  // 1200 data bytes
  const auto size = fs::file_size(p);
  fs::resize_file(p, size - 400);
  EXPECT_THAT(load_error(p), HasSubstr(p + ": truncated: header says 1200 data bytes, file has "
                                           "800; the file is incomplete (was the write "
                                           "interrupted?)"));
}

TEST_F(Safetensors, CorruptJson) {
  EXPECT_THAT(load_error(craft("j1.safetensors", "{\"a\":{\"dtype\":\"F32\",", 0)),
              HasSubstr("j1.safetensors: corrupt header: unexpected end of the JSON"));
  EXPECT_THAT(load_error(craft("j2.safetensors", "[1, 2]  ", 0)),
              HasSubstr("corrupt header: it does not start with '{'"));
  EXPECT_THAT(load_error(craft("j3.safetensors", "{\"a\" 1}", 0)),
              HasSubstr("corrupt header: expected ':' at byte 5 of the JSON header"));
  EXPECT_THAT(load_error(craft("j4.safetensors", "{} junk", 0)),
              HasSubstr("unexpected text after the JSON object"));
  EXPECT_THAT(load_error(craft("j5.safetensors", "{\"a\":1,\"a\":2}", 0)),
              HasSubstr("duplicate key \"a\""));
  EXPECT_THAT(load_error(craft("j6.safetensors", "{\"a\":\"\\q\"}", 0)), HasSubstr("bad escape"));
  EXPECT_THAT(
      load_error(craft(
          "j7.safetensors",
          "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
          0)),
      HasSubstr("nesting too deep"));
}

TEST_F(Safetensors, BadEntries) {
  auto entry = [](const std::string& body) { return "{\"t\":{" + body + "}}"; };
  EXPECT_THAT(load_error(craft("e1.safetensors",
                               entry("\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]"), 8)),
              HasSubstr("e1.safetensors: tensor 't': dtype 'F64' is not supported (supported: "
                        "F32, F16, BF16, I32, I64)"));
  EXPECT_THAT(
      load_error(craft("e2.safetensors",
                       entry("\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]"), 20)),
      HasSubstr("tensor 't': data_offsets [0, 20] hold 20 bytes, but shape [2,3] of F32 "
                "needs 24"));
  EXPECT_THAT(load_error(craft("e3.safetensors", entry("\"dtype\":\"F32\",\"shape\":[1]"), 4)),
              HasSubstr("tensor 't': header entry lacks 'data_offsets'"));
  EXPECT_THAT(
      load_error(craft("e4.safetensors",
                       entry("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]"), 4)),
      HasSubstr("a shape entry must be a non-negative integer, got -1"));
  EXPECT_THAT(
      load_error(craft("e5.safetensors",
                       entry("\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]"), 4)),
      HasSubstr("must be a non-negative integer, got 1.5"));
  EXPECT_THAT(load_error(craft("e6.safetensors",
                               entry("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]"), 8)),
              HasSubstr("data_offsets [8, 4] end before they begin"));
  EXPECT_THAT(load_error(craft("e7.safetensors", "{\"t\":[1,2]}", 0)),
              HasSubstr("tensor 't': header entry must be an object, got an array"));
  EXPECT_THAT(load_error(craft("e8.safetensors", "{\"__metadata__\":{\"k\":1}}", 0)),
              HasSubstr("__metadata__ value 'k' must be a string, got a number"));
  EXPECT_THAT(load_error(craft("e9.safetensors",
                               entry("\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
                                     "\"data_offsets\":[0,4]"),
                               4)),
              HasSubstr("element count overflows"));
}

TEST_F(Safetensors, OffsetsMustTileTheDataSection) {
  const std::string a = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  const std::string overlap =
      "{" + a + ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
  EXPECT_THAT(load_error(craft("o.safetensors", overlap, 8)),
              HasSubstr("corrupt header: tensors 'a' (bytes [0, 8)) and 'b' (bytes [4, 8)) "
                        "overlap"));
  const std::string gap =
      "{" + a + ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}";
  EXPECT_THAT(load_error(craft("g.safetensors", gap, 16)),
              HasSubstr("corrupt header: data bytes [8, 12) belong to no tensor (a gap before "
                        "'b')"));
  EXPECT_THAT(load_error(craft("x.safetensors", "{" + a + "}", 12)),
              HasSubstr("x.safetensors: 4 data bytes after the last tensor belong to no tensor "
                        "(header says 8 data bytes, file has 12)"));
  EXPECT_THAT(load_error(craft("t.safetensors", "{" + a + "}", 5)),
              HasSubstr("truncated: header says 8 data bytes, file has 5"));
}

// ---- interoperability ---------------------------------------------------------------------------

TEST_F(Safetensors, LoadsTheGoldenFiles) {
  const fs::path golden = fs::path(ADA_TEST_DATA_DIR) / "golden";
  ASSERT_TRUE(fs::exists(golden)) << "no " << golden << ": the committed golden files are missing";
  int loaded = 0;
  for (const auto& e : fs::directory_iterator(golden)) {
    if (e.path().extension() != ".safetensors") continue;
    NamedTensors t = load_safetensors(e.path().string());
    EXPECT_FALSE(t.tensors.empty()) << e.path();
    ++loaded;
  }
  EXPECT_GT(loaded, 20) << "the committed golden files are missing from " << golden;
}

// Our files open in Python (the safetensors layout read with json + numpy), and files Python
// writes open here. Needs /usr/bin/python3 with numpy (tools/setup.sh installs python3-numpy).
TEST_F(Safetensors, InteroperatesWithPython) {
  ASSERT_EQ(std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1"), 0)
      << "/usr/bin/python3 with numpy is not available: run tools/setup.sh";
  const std::string ours = path("from_cpp.safetensors");
  save_safetensors(ours,
                   {{"w", Tensor::from_vector<float>({1.5f, -2.f, 3.25f, 0.f, 4.f, -0.5f}, {2, 3})},
                    {"h", filled16<Half>(DType::f16, {0x3C00, 0xC000}, {2})},
                    {"bf", filled16<BFloat16>(DType::bf16, {0x3F80, 0xC000}, {2})},
                    {"i", Tensor::from_vector<int32_t>({1, -2, 3}, {3})},
                    {"l", Tensor::from_vector<int64_t>({int64_t{1} << 40, -5}, {2})},
                    {"s", Tensor::from_vector<float>({7.f}, {})},
                    {"e", Tensor::empty({2, 0})}},
                   {{"step", "12"}, {"note", "quote \" and \xC3\xA9"}});
  const std::string theirs = path("from_python.safetensors");
  const std::string script = path("check.py");
  std::ofstream(script) << R"PY(
import json, struct, sys
import numpy as np
ours, theirs = sys.argv[1], sys.argv[2]
b = open(ours, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
assert (8 + n) % 8 == 0, 'data not aligned'
h = json.loads(b[8:8 + n])
meta = h.pop('__metadata__')
assert meta == {'step': '12', 'note': 'quote " and \u00e9'}, meta
dt = {'F32': '<f4', 'F16': '<f2', 'BF16': '<u2', 'I32': '<i4', 'I64': '<i8'}
data = b[8 + n:]
a = {}
for k, v in h.items():
    s, e = v['data_offsets']
    a[k] = np.frombuffer(data[s:e], dtype=dt[v['dtype']]).reshape(v['shape'])
assert a['w'].tolist() == [[1.5, -2.0, 3.25], [0.0, 4.0, -0.5]], a['w']
assert a['h'].tolist() == [1.0, -2.0], a['h']
assert a['bf'].tolist() == [0x3F80, 0xC000], a['bf']
assert a['i'].tolist() == [1, -2, 3]
assert a['l'].tolist() == [2**40, -5]
assert a['s'].shape == () and float(a['s']) == 7.0
assert a['e'].shape == (2, 0)
assert sum(len(x.tobytes()) for x in a.values()) == len(data)
# Write one the way the reference writer does: sorted names, __metadata__ first, padded.
arrays = {'z': np.arange(6, dtype='<i8').reshape(2, 3), 'b': np.array([0.5, -1.0], dtype='<f4'),
          'half': np.array([1.0, 2.0], dtype='<f2')}
header, off, blobs = {'__metadata__': {'format': 'pt'}}, 0, []
for k in sorted(arrays):
    x = arrays[k]
    code = {'int64': 'I64', 'float32': 'F32', 'float16': 'F16'}[str(x.dtype)]
    header[k] = {'dtype': code, 'shape': list(x.shape), 'data_offsets': [off, off + x.nbytes]}
    off += x.nbytes
    blobs.append(x.tobytes())
hb = json.dumps(header, separators=(',', ':')).encode()
hb += b' ' * ((8 - len(hb) % 8) % 8)
open(theirs, 'wb').write(struct.pack('<Q', len(hb)) + hb + b''.join(blobs))
)PY";
  const std::string cmd = "/usr/bin/python3 " + script + " " + ours + " " + theirs;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the Python reader rejected " << ours;
  NamedTensors t = load_safetensors(theirs);
  ASSERT_EQ(t.tensors.size(), 3u);
  EXPECT_EQ(t.tensors[0].first, "b");
  EXPECT_EQ(t.metadata.at("format"), "pt");
  EXPECT_EQ(t.at("z").shape(), (Shape{2, 3}));
  EXPECT_EQ(t.at("z").to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t.at("b").to_vector<float>(), (std::vector<float>{0.5f, -1.f}));
  EXPECT_EQ(bits16(t.at("half")), (std::vector<uint16_t>{0x3C00, 0x4000}));
}

}  // namespace
}  // namespace ada
