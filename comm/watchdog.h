// The hang watchdog of blocking communication. A collective that a peer never joins (a rank
// stuck in a loop, stopped, deadlocked or far behind) would block MPI forever; with a timeout
// set, a watchdog thread checks twice a second whether the MPI call in progress (ADA_MPI_CHECK
// marks each) has run for longer, and if so logs an error naming the call, its file:line, the
// rank and the seconds waited, and ends the process (exit status 1), so that mpirun ends the job.
// The NCCL communicator applies the same timeout to its waits (nccl_communicator.cc). The
// trainer sets it from `train.comm_timeout_s` (default 600 s; 0: never).
// After SIGTERM or SIGINT (base/stop_signal.h), while the ranks are still to agree on the step
// to stop at, a call that has waited kStopWaitSeconds since the signal ends the process at once
// with exit status 128 + the signal: srun -K and mpirun send SIGTERM to the other ranks when one
// fails, and a rank that is gone never joins the agreement. SIGUSR1 is never that (a scheduler's
// or an operator's request to stop: the timeout alone applies), and the rule is off inside a
// PatientWait: a wait every rank knows to be long, such as the barrier behind rank 0's
// checkpoint write (a checkpoint of BERT-Large's size takes well over 5 s, and a rank ended
// there loses the stop checkpoint and can take rank 0's half-written one with it).
#pragma once

namespace ada::comm {

inline constexpr double kStopWaitSeconds = 5;

// The signal that rule applies to now: SIGTERM or SIGINT pending (StopSignals::received())
// outside any PatientWait; 0 otherwise.
int stop_rule_signal();

// While one lives (on this process; they nest), stop_rule_signal() is 0.
class PatientWait {
 public:
  PatientWait() noexcept;
  ~PatientWait();
  PatientWait(const PatientWait&) = delete;
  PatientWait& operator=(const PatientWait&) = delete;
};

// Ends the process by that rule: logs that `call` (with its file:line) has not completed `waited`
// seconds after the signal `signo`, and exits 128 + signo. For waits of their own (NCCL's).
[[noreturn]] void end_after_stop_signal(int signo, const char* call, const char* file, int line,
                                        double waited);

// Seconds a blocking communication call may take (0: no limit). Starts the watchdog thread the
// first time it is called.
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
