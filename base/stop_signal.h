// A graceful stop on SIGTERM, SIGINT or SIGUSR1: what Slurm sends before it kills a job
// (preemption, `scancel`, the time limit; `sbatch --signal=USR1@120` asks for it ahead of time)
// and what mpirun forwards (SIGUSR1; on SIGTERM or Ctrl-C mpirun itself kills the ranks 1 s later
// unless `--mca odls_base_sigkill_timeout S` gives them longer). While a StopSignals is alive the
// first such signal only sets a flag; the trainer reads it between steps, every rank agrees on the
// step to stop at, writes a checkpoint there and exits with 128 + the signal's number.
// A second signal of the same kind to one process has its default effect (ends the process), so
// a stop that hangs can still be cut short. Launchers signal ranks one at a time (mpirun forwards
// to its children in turn, and on a loaded machine the last may get it a while later): a rank's
// first signal that comes after the ranks agreed to stop (stop_agreed) is let pass, and the rank
// goes on writing its stop checkpoint with the others.
#pragma once

namespace ada {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the dispositions found; received() is 0 again
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received while a StopSignals lives (SIGTERM, SIGINT or SIGUSR1), 0 if none
  // (or none lives, or the ranks agreed to stop). While it is SIGTERM or SIGINT the
  // communication watchdog gives a waiting call kStopWaitSeconds (comm/watchdog.h).
  static int received();
  // The ranks agreed to stop: received() is 0 from now on (the watchdog's stop rule is off while
  // the stop checkpoint is written), and signals still to come only count towards a second one.
  static void stop_agreed();
};

// "SIGTERM", "SIGINT", "SIGUSR1" ("a signal" for any other).
const char* signal_name(int signo);

}  // namespace ada
