// Named tensors on disk in the safetensors layout, so files open in Python too:
// 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {string: string}}, then the raw little-endian data. Loading validates the
// header, dtypes, shapes and offsets against the file size and names the file in every error.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ada {

struct NamedTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // file order
  std::map<std::string, std::string> metadata;
  // The tensor called `name`; IoError naming `source` and the known names if absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::string source;  // file it was read from (for messages)
};

// Writes atomically: a temporary file in the same folder, fsync, rename over `path`.
// Tensors must be CPU tensors (copy CUDA tensors with .to(Device::cpu()) first).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
NamedTensors load_safetensors(const std::string& path);

}  // namespace ada
