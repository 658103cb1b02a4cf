// IDX files (LeCun's MNIST format): a big-endian header (0, 0, type byte, rank byte, then one
// u32 per dimension) followed by the payload. Read raw or gzip-compressed (detected from the
// content, not the name); only the u8 element type (0x08), which every MNIST-like set uses.
// Every malformed input is an IoError naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ada::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// IoError if the file is missing or unreadable, not valid gzip (when gzip), shorter than its
// header, has a wrong magic (first two bytes not zero), an element type other than u8, rank 0
// or above 8, a payload shorter than the header promises (truncated) or trailing bytes.
// `expected_rank` (0: any) is checked first of these, against the magic: MNIST images are rank
// 3, labels rank 1, so a labels file given for images is named as such, whatever its size.
IdxArray read_idx(const std::string& path, int expected_rank = 0);

// Writes a u8 IDX file, gzip-compressed when `gzip`. For tests and tools.
void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip = false);

}  // namespace ada::data
