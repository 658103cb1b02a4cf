#!/usr/bin/python3
"""Runs an mpirun line with its output on the terminal and appended to LOG; interrupted (Ctrl-C,
or SIGTERM to this process), the trainer run stops at its next step with a checkpoint there, as
under the study runners (study.run.call_stopping_at_a_step). tools/train.sh runs every mpirun
through it.

    /usr/bin/python3 tools/mpirun_stopping.py LOG mpirun -np 4 build/bin/trainer --config C ...

Exit status: mpirun's, or 130 when interrupted (whatever the trainer run then did, which its
ranks print: "stopped by SIGUSR1 at step N" and the checkpoint's path when it stopped at a step)."""
import signal
import subprocess
import sys

from study.run import call_stopping_at_a_step, stop_on_sigterm


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    log, cmd = argv[0], argv[1:]
    stop_on_sigterm()
    # tee -i: a terminal's Ctrl-C reaches this process group, tee included; the log must keep
    # what the ranks print while they stop. SIGINT is ignored from before tee starts: a Ctrl-C
    # in the moment before tee -i took effect killed it, and the log was never written.
    tee = subprocess.Popen(["tee", "-i", "-a", log], stdin=subprocess.PIPE,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        return call_stopping_at_a_step(cmd, stdout=tee.stdin, stderr=subprocess.STDOUT)
    except KeyboardInterrupt:
        return 130
    finally:
        tee.stdin.close()
        tee.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
