// Fuzz target: the IDX reader (data/idx.h, raw or gzip) and MnistDataset on what it accepts.
// Input: one IDX file. A rank-3 result is used as an images file (with generated labels), a
// rank-1 result as a labels file (with generated images); the dataset's first and last
// examples are then read, so a header that lies about the payload cannot go unnoticed.
#include <cstdint>
#include <string>
#include <vector>

#include "data/idx.h"
#include "data/mnist_dataset.h"
#include "fuzz_util.h"

using ada::fuzz::expect_clean;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ada::fuzz::write_scratch("input-idx", data, size);
  expect_clean([&] {
    const ada::data::IdxArray a = ada::data::read_idx(path);
    // The reader's promise: data holds exactly product(dims) bytes (no wrap-around).
    uint64_t numel = 1;
    for (int64_t d : a.dims)
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) std::abort();
    if (numel != a.data.size()) std::abort();
    const int64_t n = a.dims.empty() ? 0 : a.dims[0];
    if (n > (1 << 16)) return;  // keep the companion file small
    std::string images = path, labels = path;
    if (a.dims.size() == 3) {
      labels = ada::fuzz::scratch_dir() + "/labels-idx";
      ada::data::write_idx(labels, {n}, std::vector<uint8_t>(static_cast<size_t>(n), 1));
    } else if (a.dims.size() == 1) {
      images = ada::fuzz::scratch_dir() + "/images-idx";
      ada::data::write_idx(images, {n, 2, 2}, std::vector<uint8_t>(static_cast<size_t>(n) * 4, 7));
    }
    ada::data::MnistOptions opt;
    opt.num_classes = 10;  // the labels are checked at open
    const ada::data::MnistDataset ds(images, labels, opt);
    if (ds.size() > 0) {
      (void)ds.get(0, 0);
      (void)ds.get(ds.size() - 1, 0);
    }
  });
  return 0;
}
