#include "data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "base/error.h"

namespace ada::data {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const {
    if (f) gzclose(f);
  }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads everything; gzread passes non-gzip files through unchanged.
std::vector<uint8_t> read_all(const std::string& path, bool* was_gzip) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe)
      ADA_THROW(IoError) << "IDX file '" << path << "': cannot open (" << std::strerror(errno)
                         << "); fetch it with tools/fetch_data.sh or check the path";
    unsigned char m[2] = {0, 0};
    probe.read(reinterpret_cast<char*>(m), 2);
    *was_gzip = probe.gcount() == 2 && m[0] == 0x1f && m[1] == 0x8b;
  }
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (!f)
    ADA_THROW(IoError) << "IDX file '" << path << "': cannot open (" << std::strerror(errno) << ")";
  gzbuffer(f.get(), 1 << 17);
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    int n = gzread(f.get(), buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f.get(), &code);
      ADA_THROW(IoError) << "IDX file '" << path
                         << "': " << (*was_gzip ? "corrupt gzip data" : "read error") << " (" << msg
                         << "); delete it and fetch it again";
    }
    if (n == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  int code = 0;
  const char* msg = gzerror(f.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END)
    ADA_THROW(IoError) << "IDX file '" << path
                       << "': " << (*was_gzip ? "truncated or corrupt gzip data" : "read error")
                       << " (" << msg << "); delete it and fetch it again";
  return out;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  bool gz = false;
  std::vector<uint8_t> bytes = read_all(path, &gz);
  const char* what = gz ? " (after gunzip)" : "";
  if (bytes.size() < 4)
    ADA_THROW(IoError) << "IDX file '" << path << "': " << bytes.size() << " bytes" << what
                       << ", shorter than the 4-byte magic; the file is truncated or not IDX";
  if (bytes[0] != 0 || bytes[1] != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", bytes[0], bytes[1], bytes[2], bytes[3]);
    ADA_THROW(IoError) << "IDX file '" << path << "': wrong magic 0x" << hex << what
                       << " (an IDX file starts with two zero bytes, e.g. 0x00000803 for images, "
                          "0x00000801 for labels); is it an IDX file?";
  }
  if (bytes[2] != 0x08)
    ADA_THROW(IoError) << "IDX file '" << path << "': element type 0x" << std::hex << int(bytes[2])
                       << std::dec << " is not supported (only 0x08, unsigned byte)";
  const int rank = bytes[3];
  const auto kind = [](int r) {  // MNIST's
    return r == 3   ? "an images file (rank 3: count, height, width)"
           : r == 1 ? "a labels file (rank 1: count)"
                    : "";
  };
  if (expected_rank != 0 && rank != expected_rank)
    ADA_THROW(IoError) << "IDX file '" << path << "': rank " << rank << " in the magic, expected "
                       << expected_rank
                       << (*kind(rank) ? std::string("; is it ") + kind(rank) + " instead of " +
                                             kind(expected_rank) + "?"
                                       : std::string());
  if (rank < 1 || rank > 8)
    ADA_THROW(IoError) << "IDX file '" << path << "': rank " << rank
                       << " in the magic; expected 1 to 8";
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header)
    ADA_THROW(IoError) << "IDX file '" << path << "': truncated header" << what << ": "
                       << bytes.size() << " bytes, the header of a rank-" << rank << " file needs "
                       << header;
  IdxArray a;
  uint64_t numel = 1;
  for (int d = 0; d < rank; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    uint32_t v = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
    a.dims.push_back(v);
    // Checked before it can wrap: 2^40 x a u32 overflows 64 bits (tests/fuzz/README.md).
    if (__builtin_mul_overflow(numel, uint64_t{v}, &numel) || numel > (uint64_t(1) << 40))
      ADA_THROW(IoError) << "IDX file '" << path << "': implausible dimensions in the header ("
                         << "more than 2^40 elements); the file is corrupt or not IDX";
  }
  const uint64_t have = bytes.size() - header;
  if (have < numel)
    ADA_THROW(IoError) << "IDX file '" << path << "': truncated" << what << ": the header promises "
                       << numel << " data bytes, the file has " << have
                       << "; delete it and fetch it again";
  if (have > numel)
    ADA_THROW(IoError) << "IDX file '" << path << "': " << (have - numel)
                       << " unexpected bytes after the " << numel << " data bytes" << what
                       << "; the file is corrupt";
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip) {
  ADA_CHECK_ARG(!dims.empty() && dims.size() <= 8, ShapeError)
      << "write_idx '" << path << "': rank " << dims.size() << " outside 1..8";
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  int64_t numel = 1;
  for (int64_t d : dims) {
    ADA_CHECK_ARG(d >= 0 && d <= 0xFFFFFFFFll, ShapeError)
        << "write_idx '" << path << "': bad dimension " << d;
    numel *= d;
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(uint64_t(d) >> s));
  }
  ADA_CHECK_ARG(numel == static_cast<int64_t>(data.size()), ShapeError)
      << "write_idx '" << path << "': " << data.size() << " bytes for dims of " << numel
      << " elements";
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (gzip) {
    GzPtr f(gzopen(path.c_str(), "wb6"));
    if (!f)
      ADA_THROW(IoError) << "write_idx: cannot create '" << path << "' (" << std::strerror(errno)
                         << ")";
    if (gzwrite(f.get(), bytes.data(), static_cast<unsigned>(bytes.size())) !=
        static_cast<int>(bytes.size()))
      ADA_THROW(IoError) << "write_idx: cannot write '" << path << "'";
    if (gzclose(f.release()) != Z_OK)
      ADA_THROW(IoError) << "write_idx: cannot finish '" << path << "'";
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out)
      ADA_THROW(IoError) << "write_idx: cannot write '" << path << "' (" << std::strerror(errno)
                         << ")";
  }
}

}  // namespace ada::data
