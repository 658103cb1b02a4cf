// Agreement across ranks on values the ranks compute alone: a decision rank 0 makes for all
// (and its failure stopping all together), checks that every rank holds the same value, and
// the list of ranks that differ, for messages; errors raised alone, reported once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/error.h"
#include "comm/communicator.h"

namespace ada::comm {

// Thrown on a rank whose stop another rank reports (decide_on_rank0, stop_together): the
// caller ends the process without printing it again.
class StoppedTogether : public Error {
  using Error::Error;
};

// Runs `decide` on rank 0 only and hands its result to every rank. If it throws, rank 0 rethrows
// and every other rank throws StoppedTogether with the same message, so all stop together (none
// waits for the others) and the message is printed once, by rank 0. Collective.
std::string decide_on_rank0(Communicator& comm, const std::function<std::string()>& decide);

// The ranks whose `value` differs from rank 0's, as "1, 3" ("" when none). Collective.
std::string ranks_differing(Communicator& comm, double value);

// ConfigError naming the ranks unless every rank holds the same `value` (e.g. a config hash);
// `what` names it. Collective.
void require_same_on_all_ranks(Communicator& comm, uint64_t value, const std::string& what);

// Runs `work` on every rank. If it throws on any rank, all stop together: each distinct message
// is logged once, as `label`: message, by the lowest rank that raised it (a config mistake every
// rank finds alike prints once, not once a rank), the output drained, and after a barrier every
// rank throws StoppedTogether. Collective; `work` must not communicate (a rank that failed would
// never join).
void stop_together(Communicator& comm, const std::string& label, const std::function<void()>& work);

}  // namespace ada::comm
