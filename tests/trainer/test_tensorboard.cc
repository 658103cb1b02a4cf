// TensorBoard event files: the masked CRC-32C of TFRecord frames, events read back as written, a
// fresh run starting its folder afresh, a resumed one keeping the events up to its step, a frame
// cut short by a crash dropped, a damaged one refused naming the file. (An independent reader in
// Python checks the trainer's files: tests/tools/tensorboard_reader.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/trainer/tensorboard.h"
#include "base/error.h"
#include "util/temp_dir.h"

namespace ada::trainer {
namespace {

namespace fs = std::filesystem;

TEST(TensorBoard, MaskedCrc32c) {
  // CRC-32C("123456789") = 0xE3069283 (the check value of the Castagnoli polynomial), masked.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const uint32_t empty = 0;  // CRC-32C of nothing
  EXPECT_EQ(masked_crc32c("", 0), ((empty >> 15) | (empty << 17)) + 0xa282ead8u);
}

std::vector<fs::path> files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

TEST(TensorBoard, WritesReadsResumes) {
  testing::TempDir dir;
  const std::string folder = (dir.path() / "run").string();
  {
    TensorBoardWriter w(folder, 0);
    for (int64_t step = 1; step <= 4; ++step)
      w.write({step, 1000.0 + step, {{"loss", 1.f / step}, {"lr", 0.1f}}});
  }
  auto ev = read_scalar_events(folder);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[2].step, 3);
  EXPECT_EQ(ev[2].wall_time, 1003.0);
  EXPECT_EQ(ev[2].values,
            (std::vector<std::pair<std::string, float>>{{"loss", 1.f / 3}, {"lr", 0.1f}}));
  // Resumed at step 2: steps 1 and 2 stay, in a new file that replaces the old one.
  {
    TensorBoardWriter w(folder, 2);
    w.write({3, 2000.0, {{"loss", 0.25f}}});
  }
  ev = read_scalar_events(folder);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].step, 1);
  EXPECT_EQ(ev[1].step, 2);
  EXPECT_EQ(ev[2].step, 3);
  EXPECT_EQ(ev[2].values[0].second, 0.25f);
  ASSERT_EQ(files(folder).size(), 1u);
  // A frame cut short (a crash while writing) loses that event only.
  const fs::path f = files(folder)[0];
  fs::resize_file(f, fs::file_size(f) - 3);
  EXPECT_EQ(read_scalar_events(folder).size(), 2u);
  // A damaged byte inside an event is refused, naming the file.
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(40);
    io.put('\x7f');
  }
  try {
    read_scalar_events(folder);
    ADD_FAILURE() << "a damaged file was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
  }
  // Asked for the damage instead: the events before it, and what it is.
  std::string damage;
  // (byte 40 is the length of the frame after the file-version event: no scalar event before it)
  EXPECT_TRUE(read_scalar_events(folder, &damage).empty());
  EXPECT_EQ(damage, f.string() + ": the frame at byte 40 has a damaged length");
  // A fresh run starts afresh; another writer's file stays.
  std::ofstream(fs::path(folder) / "events.out.tfevents.1.other") << "not ours";
  { TensorBoardWriter w(folder, 0); }
  EXPECT_TRUE(read_scalar_events(folder).empty());
  EXPECT_EQ(files(folder).size(), 2u);
}

}  // namespace
}  // namespace ada::trainer
