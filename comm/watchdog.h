// The hang watchdog of blocking communication. A collective that a peer never joins (a rank
// stuck in a loop, stopped, deadlocked or far behind) would block MPI forever; with a timeout
// set, a watchdog thread checks twice a second whether the MPI call in progress (ADA_MPI_CHECK
// marks each) has run for longer, and if so logs an error naming the call, its file:line, the
// rank and the seconds waited, and ends the process (exit status 1), so that mpirun ends the job.
// The NCCL communicator applies the same timeout to its waits (nccl_communicator.cc). The
// trainer sets it from `train.comm_timeout_s` (default 600 s; 0: never).
#pragma once

namespace ada::comm {

// Seconds a blocking communication call may take (0: no limit). Starts the watchdog thread the
// first time it is set above 0.
void set_comm_timeout(double seconds);
double comm_timeout();

// Marks one blocking call as in progress for its lifetime (calls do not nest: MPI calls of a
// process are serialised on the communication thread, comm_thread.h).
class WatchedCall {
 public:
  WatchedCall(const char* call, const char* file, int line) noexcept;
  ~WatchedCall();
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;
};

}  // namespace ada::comm
