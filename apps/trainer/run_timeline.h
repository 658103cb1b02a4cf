// train.timeline: each rank records its spans (base/timeline.h) into PATH.rank<r> on one time
// base, rank 0's clock; at the end rank 0 merges them into PATH (a Chrome trace).
#pragma once

#include <string>

#include "comm/communicator.h"

namespace ada::trainer {

class RunTimeline {
 public:
  // Opens this rank's file; IoError naming `where` (the key's location) when the folder cannot
  // be created. Collective.
  RunTimeline(comm::Communicator& world, std::string path, const std::string& where);
  // Merges every rank's file into the path and removes them. Collective.
  void close();

 private:
  std::string rank_file(int rank) const { return path_ + ".rank" + std::to_string(rank); }
  comm::Communicator& world_;
  std::string path_;
};

}  // namespace ada::trainer
