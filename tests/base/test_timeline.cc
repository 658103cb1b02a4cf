// Timeline::merge: the ranks' trace files joined into one Chrome trace, streamed line by line (a
// long run at scale has ~10^8 events), a line cut short by a crash ending that rank's events.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "base/timeline.h"
#include "util/temp_dir.h"

namespace ada {
namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(Timeline, MergeJoinsTheRanksAndStopsAtALineCutShort) {
  testing::TempDir dir;
  const std::string a = (dir.path() / "r0.json").string(), b = (dir.path() / "r1.json").string();
  write(a,
        "[\n{\"name\":\"forward\",\"ph\":\"X\",\"pid\":0,\"ts\":1,\"dur\":2},\n"
        "{\"name\":\"backward\",\"ph\":\"X\",\"pid\":0,\"ts\":3,\"dur\":4},\n]\n");
  write(b,  // rank 1 crashed in the middle of its second event
        "[\n{\"name\":\"forward\",\"ph\":\"X\",\"pid\":1,\"ts\":1,\"dur\":2},\n"
        "{\"name\":\"back");
  const std::string out = (dir.path() / "trace.json").string();
  Timeline::merge({a, b}, out);
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  const auto& ev = j.at("traceEvents");
  ASSERT_EQ(ev.size(), 3u) << j.dump();
  EXPECT_EQ(ev[0].at("name"), "forward");
  EXPECT_EQ(ev[1].at("name"), "backward");
  EXPECT_EQ(ev[2].at("pid"), 1);

  write(a, "[\n");  // no events at all: still a trace
  Timeline::merge({a}, out);
  std::ifstream again(out);
  EXPECT_TRUE(nlohmann::json::parse(again).at("traceEvents").empty());
  EXPECT_THROW(Timeline::merge({(dir.path() / "none.json").string()}, out), IoError);
}

}  // namespace
}  // namespace ada
