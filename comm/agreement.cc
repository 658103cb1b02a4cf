#include "comm/agreement.h"

#include <exception>
#include <vector>

#include "base/error.h"
#include "base/hash.h"
#include "base/log.h"

namespace ada::comm {

std::string decide_on_rank0(Communicator& comm, const std::function<std::string()>& decide) {
  std::string text;
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      text = decide();
    } catch (const std::exception& e) {
      error = std::current_exception();
      text = e.what();
    }
  }
  double failed = error ? 1.0 : 0.0;
  comm.allreduce(&failed, 1, ReduceOp::max);
  text = broadcast_string(comm, text, 0);
  if (error) std::rethrow_exception(error);
  if (failed != 0.0) throw StoppedTogether("rank 0 stopped the run: " + text);  // rank 0 says it
  return text;
}

std::string ranks_differing(Communicator& comm, double value) {
  std::vector<double> all(comm.size());
  comm.allgather(&value, 1, all.data());
  std::string differ;
  for (int r = 1; r < comm.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  return differ;
}

void require_same_on_all_ranks(Communicator& comm, uint64_t value, const std::string& what) {
  const std::string differ = ranks_differing(comm, static_cast<double>(value >> 11));  // exact
  ADA_CHECK_ARG(differ.empty(), ConfigError)
      << what << " differs between rank 0 and rank(s) " << differ
      << "; every rank must run the same config and code (check --set arguments and binaries)";
}

void stop_together(Communicator& comm, const std::string& label,
                   const std::function<void()>& work) {
  std::string message;
  bool failed = false;
  try {
    work();
  } catch (const std::exception& e) {
    failed = true;
    message = e.what();
  }
  const double mine[2] = {failed ? 1.0 : 0.0,
                          static_cast<double>(fnv1a64(message) >> 11)};  // exact as a double
  std::vector<double> all(2 * static_cast<size_t>(comm.size()));
  comm.allgather(mine, 2, all.data());
  bool any = false, said_below = false;
  for (int r = 0; r < comm.size(); ++r) {
    const double* theirs = &all[2 * static_cast<size_t>(r)];
    any = any || theirs[0] != 0;
    said_below = said_below || (r < comm.rank() && theirs[0] != 0 && theirs[1] == mine[1]);
  }
  if (!any) return;
  if (failed && !said_below) {
    log_error(label + ": " + message);
    drain_output();
  }
  comm.barrier();  // every message out before any rank ends the job
  throw StoppedTogether(failed ? message : "another rank failed");
}

}  // namespace ada::comm
