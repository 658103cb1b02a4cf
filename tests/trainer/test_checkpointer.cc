// Checkpointer: what validate() reads at each depth, and pruning that reads a checkpoint whole
// once per process (a BERT-Large checkpoint of 64 ranks' optimizer states is ~170 GB: re-reading
// `keep` of them at every save kept the other ranks waiting past the communication watchdog).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/trainer/checkpoint.h"
#include "base/error.h"
#include "util/temp_dir.h"

namespace ada::trainer {
namespace {

namespace fs = std::filesystem;
using Read = Checkpointer::Read;

// Checkpoint `step` as rank 0 writes it after two ranks wrote their optimizer-state files.
void write(const Checkpointer& ck, int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.world_size = 2;
  m.local_optimizer_state = true;
  for (int r = 0; r < 2; ++r) {
    const std::string f = ck.rank_file(step, r);
    save_safetensors(f, {{"optim.m", Tensor::full({64}, static_cast<double>(step + r))}});
    m.files.push_back(Checkpointer::record_of(f));
  }
  ck.save({{"model.w", Tensor::full({256}, static_cast<double>(step))}}, {}, m);
}

std::string stem(const Checkpointer& ck, int64_t step) {
  return ck.rank_file(step, 0).substr(0, ck.rank_file(step, 0).find(".optim-rank0"));
}

// Overwrites 4 bytes near the end (inside the tensor data): same size, another CRC-32.
void damage(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-8, std::ios::end);
  f.write("\x7f\x7f\x7f\x7f", 4);
}

void truncate(const std::string& path) {
  fs::resize_file(path, fs::file_size(path) - 1);
}

std::string error_of(const std::string& json, Read read) {
  try {
    Checkpointer::validate(json, "", read);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpointer, ValidateReadsWhatItIsAskedTo) {
  testing::TempDir dir;
  Checkpointer ck(dir.path(), 5, "run");
  write(ck, 1);
  const std::string json = stem(ck, 1) + ".json";
  EXPECT_EQ(error_of(json, Read::kAll), "");
  damage(ck.rank_file(1, 1));  // a rank's file: read by a resume, not by init_from
  EXPECT_NE(error_of(json, Read::kAll).find("optim-rank1.safetensors fails its CRC-32"),
            std::string::npos);
  EXPECT_EQ(error_of(json, Read::kShared), "");
  EXPECT_EQ(error_of(json, Read::kSizes), "");
  truncate(ck.rank_file(1, 1));  // sizes are checked at every depth
  for (Read read : {Read::kAll, Read::kShared, Read::kSizes})
    EXPECT_NE(error_of(json, read).find("optim-rank1.safetensors has "), std::string::npos);

  write(ck, 2);
  const std::string json2 = stem(ck, 2) + ".json";
  damage(stem(ck, 2) + ".safetensors");  // the shared file: init_from reads it whole
  EXPECT_NE(error_of(json2, Read::kShared).find("fails its CRC-32"), std::string::npos);
  EXPECT_EQ(error_of(json2, Read::kSizes), "");
}

TEST(Checkpointer, PruningReadsACheckpointWholeOncePerProcess) {
  testing::TempDir dir;
  {
    Checkpointer earlier(dir.path(), 3, "run");  // an earlier attempt of the run
    write(earlier, 1);
    write(earlier, 2);
  }
  damage(Checkpointer(dir.path(), 3).rank_file(2, 1));  // damaged after that attempt ended
  Checkpointer ck(dir.path(), 3, "run");                // the resumed attempt
  write(ck, 3);
  // Not read whole by this process yet: step 2 is read, found damaged and removed; 1 is kept.
  EXPECT_TRUE(fs::exists(stem(ck, 3) + ".json"));
  EXPECT_FALSE(fs::exists(stem(ck, 2) + ".json"));
  EXPECT_TRUE(fs::exists(stem(ck, 1) + ".json"));
  // Read whole once: from now on only sizes. A same-size change is not read again (a resume
  // reads every file before it takes a checkpoint), a truncated file is still caught.
  damage(ck.rank_file(3, 0));
  truncate(ck.rank_file(1, 1));
  write(ck, 4);
  EXPECT_TRUE(fs::exists(stem(ck, 4) + ".json"));
  EXPECT_TRUE(fs::exists(stem(ck, 3) + ".json"));
  EXPECT_FALSE(fs::exists(stem(ck, 1) + ".json"));
  EXPECT_EQ(ck.choose("run").path, stem(ck, 4) + ".json");
  EXPECT_NE(error_of(stem(ck, 3) + ".json", Read::kAll).find("fails its CRC-32"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::trainer
