// Agreement across ranks on values the ranks compute alone: a decision rank 0 makes for all
// (and its failure stopping all together), checks that every rank holds the same value, and
// the list of ranks that differ, for messages.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace ada::comm {

// Runs `decide` on rank 0 only and hands its result to every rank. If it throws, rank 0 rethrows
// and every other rank throws the same message, so all stop together (none waits for the
// others). Collective.
std::string decide_on_rank0(Communicator& comm, const std::function<std::string()>& decide);

// The ranks whose `value` differs from rank 0's, as "1, 3" ("" when none). Collective.
std::string ranks_differing(Communicator& comm, double value);

// ConfigError naming the ranks unless every rank holds the same `value` (e.g. a config hash);
// `what` names it. Collective.
void require_same_on_all_ranks(Communicator& comm, uint64_t value, const std::string& what);

}  // namespace ada::comm
