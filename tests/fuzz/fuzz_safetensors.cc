// Fuzz target: the safetensors reader (core/serialize.h).
// Input: one .safetensors file. Every tensor it accepts is read end to end (a checksum over its
// bytes), so a header that promises more data than was allocated cannot go unnoticed.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/serialize.h"
#include "fuzz_util.h"

using ada::fuzz::expect_clean;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ada::fuzz::write_scratch("input.safetensors", data, size);
  expect_clean([&] {
    const ada::NamedTensors nt = ada::load_safetensors(path);
    uint64_t data_bytes = 0, sum = 0;
    for (const auto& [name, t] : nt.tensors) {
      // The reader's promise: numel x dtype size bytes, no wrap-around, all inside the file.
      uint64_t numel = 1;
      for (int64_t d : t.shape())
        if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) std::abort();
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(ada::dtype_size(t.dtype())),
                                 &bytes) ||
          bytes != static_cast<uint64_t>(t.nbytes()))
        std::abort();
      data_bytes += bytes;
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
      if (!nt.contains(name)) std::abort();
      (void)nt.at(name);
    }
    if (data_bytes > size) std::abort();
    expect_clean([&] { (void)nt.at("no such tensor"); });
    (void)sum;
  });
  return 0;
}
