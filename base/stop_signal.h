// A graceful stop on SIGTERM, SIGINT or SIGUSR1: what Slurm sends before it kills a job
// (preemption, `scancel`, the time limit; `sbatch --signal=USR1@120` asks for it ahead of time)
// and what mpirun forwards (SIGUSR1; on SIGTERM or Ctrl-C mpirun itself kills the ranks 1 s later
// unless `--mca odls_base_sigkill_timeout S` gives them longer). While a StopSignals is alive the
// first such signal only sets a flag; the trainer reads it between steps, every rank agrees on the
// step to stop at, writes a checkpoint there and exits with 128 + the signal's number. The handler
// is one-shot (SA_RESETHAND): a second signal of the same kind kills the process as before.
#pragma once

namespace ada {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the dispositions found; received() is 0 again
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received while a StopSignals lives (SIGTERM, SIGINT or SIGUSR1), 0 if none
  // (or none lives). The trainer destroys it once the ranks agreed to stop; until then the
  // communication watchdog gives a waiting call kStopWaitSeconds (comm/watchdog.h).
  static int received();
};

// "SIGTERM", "SIGINT", "SIGUSR1" ("a signal" for any other).
const char* signal_name(int signo);

}  // namespace ada
