// Test-only fault injection, so tests can prove that a failure on one rank stops every rank and
// that a crash never loses a checkpoint. Off unless the environment says:
//   ADA_FAULT=<point>@<rank>[#<n>][:kill|:hang|:wait|:term|:usr1|:pause]
// makes the n-th (default first) call of fault_point("<point>") on rank <rank> throw an Error
// ("injected fault at <point> on rank r"), or with ":kill" die at once by SIGKILL (no cleanup,
// like a node failure), or with ":hang" stop there for good (a rank stuck in a loop: its peers'
// communication watchdog, comm/watchdog.h, has to end the job), or with ":wait" wait there until
// the process has a stop signal (base/stop_signal.h) and go on (a run still in progress whenever
// a test interrupts it, as an operator's Ctrl-C would), or with ":term" (":usr1") send itself
// SIGTERM (SIGUSR1) and go on (what a scheduler's preemption sends; base/stop_signal.h), or with
// ":pause" sleep 8 s and go on (a slow disk under a huge checkpoint).
// Several specs may be given separated by ','. Points in the code: backward (a gradient-ready hook,
// buckets in flight), adasum (inside a bucket's reduction), optimizer, checkpoint (every rank,
// between its own checkpoint files and the shared ones), checkpoint_json (rank 0, before a
// checkpoint's JSON), atomic_write (between the parts of a file being written), eval, step (the
// start of each training step).
#pragma once

namespace ada {

void fault_point(const char* point);

}  // namespace ada
