#include "apps/trainer/run_timeline.h"

#include <chrono>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/timeline.h"
#include "comm/agreement.h"

namespace ada::trainer {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

RunTimeline::RunTimeline(comm::Communicator& world, std::string path, const std::string& where)
    : world_(world), path_(std::move(path)) {
  // One time base for all ranks: rank 0's clock reading (steady_clock is system-wide on a node;
  // across nodes the spans are aligned only as well as the clocks are).
  double epoch = static_cast<double>(Clock::now().time_since_epoch().count());
  world_.allreduce(&epoch, 1, comm::ReduceOp::max);
  comm::decide_on_rank0(world_, [&] {
    const auto dir = fs::path(path_).parent_path();
    std::error_code ec;
    if (!dir.empty()) fs::create_directories(dir, ec);
    ADA_CHECK_ARG(!ec, IoError) << where << ": cannot create the folder " << dir.string() << " ("
                                << ec.message() << ")";
    return std::string();
  });
  Timeline::instance().open(rank_file(world_.rank()), world_.rank(),
                            Clock::time_point(Clock::duration(static_cast<Clock::rep>(epoch))));
  Timeline::instance().set_thread_name("main");
  world_.run_async([] { Timeline::instance().set_thread_name("communication"); })->wait();
}

void RunTimeline::close() {
  Timeline::instance().close();
  world_.barrier();
  if (world_.rank() != 0) return;
  std::vector<std::string> files;
  for (int r = 0; r < world_.size(); ++r) files.push_back(rank_file(r));
  Timeline::merge(files, path_);
  for (const auto& f : files) fs::remove(f);
}

}  // namespace ada::trainer
