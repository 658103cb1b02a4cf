// The run log: the step meter's windows, the metrics line, metrics.jsonl kept up to a resumed
// step (a line cut short by a crash dropped), and summary.json.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "apps/trainer/run_log.h"
#include "util/temp_dir.h"

namespace ada::trainer {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StepMeter, RunTotalsAndWindows) {
  StepMeter m;
  m.add(2.0, 0.5, 0.1, 0.05);
  m.add(1.0, 1.5, 0.3, 0.15);
  EXPECT_EQ(m.window().steps, 2);
  EXPECT_DOUBLE_EQ(m.window().loss, 3.0);
  EXPECT_DOUBLE_EQ(m.window().seconds, 2.0);
  EXPECT_DOUBLE_EQ(m.window().comm, 0.4);
  EXPECT_DOUBLE_EQ(m.window().exposed, 0.2);
  m.reset_window();
  EXPECT_EQ(m.window().steps, 0);
  m.add(4.0, 1.0, 0.2, 0.0);
  EXPECT_EQ(m.window().steps, 1);
  EXPECT_EQ(m.run().steps, 3);
  EXPECT_DOUBLE_EQ(m.run().loss, 7.0);
  EXPECT_DOUBLE_EQ(m.run().seconds, 3.0);
  EXPECT_DOUBLE_EQ(m.run().comm, 0.6);
}

TEST(StepMeter, WindowRecordIsTheMetricsLine) {
  StepMeter m;
  m.add(2.0, 0.5, 0.1, 0.05);
  m.add(1.0, 1.5, 0.3, 0.15);
  const Json r = window_record(40, 1, 0.05, 1.5, m.window(), 128, 12.5);
  EXPECT_EQ(r.dump(), Json({{"step", 40},
                            {"epoch", 1},
                            {"lr", 0.05},
                            {"loss", 1.5},
                            {"samples_per_s", 128.0},  // 128 examples x 2 steps in 2 s
                            {"compute_s", 1.0 - 0.2},
                            {"comm_s", 0.2},
                            {"exposed_comm_s", 0.1},
                            {"wall_s", 12.5}})
                          .dump());
}

TEST(RunLog, KeepsTheLinesUpToTheResumedStep) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "metrics.jsonl").string();
  std::ofstream(path) << "{\"step\":10,\"loss\":1}\n{\"step\":20,\"loss\":0.5}\n"
                      << "{\"step\":20,\"eval_top1\":0.9}\n{\"step\":30,\"loss\":0.4}\n"
                      << "{\"step\":40,\"lo";  // cut short by a crash
  {
    RunLog log(dir.path().string(), true, 10);
    log.open(20);
    log.write({{"step", 30}, {"loss", 0.3}});
  }
  EXPECT_EQ(
      read_all(path),
      "{\"step\":10,\"loss\":1}\n{\"step\":20,\"loss\":0.5}\n{\"step\":20,\"eval_top1\":0.9}\n"
      "{\"step\":30,\"loss\":0.3}\n");
  {
    RunLog fresh(dir.path().string(), true, 10);
    fresh.open(0);  // a fresh run starts the file afresh
  }
  EXPECT_EQ(read_all(path), "");
}

TEST(RunLog, OnlyTheWriterWrites) {
  testing::TempDir dir;
  RunLog log(dir.path().string(), false, 10);
  log.open(0);
  log.write({{"step", 1}});
  log.write_summary({{"steps", 1}});
  EXPECT_FALSE(std::ifstream(dir.path() / "metrics.jsonl").good());
  EXPECT_FALSE(std::ifstream(dir.path() / "summary.json").good());
  RunLog writer(dir.path().string(), true, 10);
  writer.write_summary({{"steps", 3}, {"eval_top1", 0.5}});
  EXPECT_EQ(read_all((dir.path() / "summary.json").string()),
            "{\n  \"steps\": 3,\n  \"eval_top1\": 0.5\n}\n");
}

TEST(RunLog, Durations) {
  EXPECT_EQ(format_duration(0), "0:00:00");
  EXPECT_EQ(format_duration(3725.4), "1:02:05");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
}

}  // namespace
}  // namespace ada::trainer
