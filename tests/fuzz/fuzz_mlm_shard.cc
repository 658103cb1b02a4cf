// Fuzz target: the MLM shard reader (data/mlm_shards.h) and MlmDataset on what it accepts.
// Input: one flags byte, then a shard file. Flags bit 0: recompute the header and payload
// checksums before writing the file, so that mutations get past them and reach the index and
// token checks; bit 1: NSP pairs; bits 2-3: seq_len 8, 12, 16 or 32. Every example of a small
// data set (the first and last 16 of a large one) is built, in two epochs.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/mlm_dataset.h"
#include "data/mlm_shards.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

using ada::fuzz::expect_clean;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  if ((flags & 1) && file.size() >= 128) {
    const uint64_t payload = ada::fnv1a64(file.data() + 128, file.size() - 128);
    std::memcpy(file.data() + 112, &payload, 8);
    const uint64_t header = ada::fnv1a64(file.data(), 120);
    std::memcpy(file.data() + 120, &header, 8);
  }
  const std::string path = ada::fuzz::write_scratch("input.mlm", file.data(), file.size());
  expect_clean([&] { ada::data::MlmShard::open(path)->verify(); });
  // The path the trainer takes: MlmCorpus::open, then the dataset.
  expect_clean([&] {
    auto corpus = std::make_shared<const ada::data::MlmCorpus>(ada::data::MlmCorpus::open({path}));
    (void)corpus->describe();
    const int64_t vocab = corpus->vocab().vocab_size;
    ada::data::MlmOptions opt;
    opt.nsp = (flags & 2) != 0;
    const int64_t lens[] = {8, 12, 16, 32};
    opt.seq_len = lens[(flags >> 2) & 3];
    opt.seed = flags;
    const ada::data::MlmDataset ds(corpus, opt);
    const int64_t n = ds.size();
    for (int64_t epoch = 0; epoch < 2; ++epoch)
      for (int64_t i = 0; i < n; ++i) {
        if (n > 32 && i == 16) i = n - 16;
        const ada::data::Example ex = ds.get(i, epoch);
        // Every id the model will look up lies inside the vocabulary.
        for (const char* f : {"input_ids", "labels"})
          for (int64_t id : ex.at(f).to_vector<int64_t>())
            if (id >= vocab || (id < 0 && id != -100)) {
              std::fprintf(stderr, "fuzz: %s holds id %lld outside the vocabulary of %lld\n", f,
                           static_cast<long long>(id), static_cast<long long>(vocab));
              std::abort();
            }
      }
  });
  return 0;
}
