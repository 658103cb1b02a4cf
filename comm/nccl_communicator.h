// The NCCL communicator: the Communicator interface on CUDA device buffers (one GPU per rank).
//
// Built with ADA_WITH_NCCL (on by default with ADA_WITH_CUDA); NCCL itself is opened at run time
// (comm/nccl_library.h). It stands beside a host communicator (MPI) that it owns a share of:
// the NCCL unique id is broadcast over it, and everything that is not a device tensor goes
// through it — host doubles, CPU tensors, barriers, WAGMA's signals — so one communicator serves
// a whole training step.
//
// Ordering: every call runs on the communication thread (comm_thread.h) in the process's one
// FIFO order, like MPI's. A device operation first makes the NCCL stream wait for the work
// queued on the device's compute stream when the call was made (an event), so the buffer's
// producers have finished; it returns (or its Work finishes) when the NCCL stream has done the
// operation, so the result may be used on any stream and the buffer freed. The host thread
// that waits polls ncclCommGetAsyncError: a failure, a peer's abort, or no progress for
// ADA_NCCL_TIMEOUT_S seconds (default 600) aborts the NCCL communicator (ncclCommAbort) and
// throws CommError naming the call, file:line and rank; the failed communication thread then
// fails every later operation and main() aborts the job, so no rank hangs.
//
// NCCL has no message tags: sends and receives between two ranks match in call order (the tag
// arguments are accepted and ignored). NCCL refuses two ranks on one GPU; a one-GPU machine tests
// this class at one rank and the multi-rank logic through MPI.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ada::comm {

// Whether this build has the NCCL communicator.
bool nccl_built();
// Why no NCCL communicator can be made here ("" when the build has one and the library loads).
std::string nccl_unavailable_reason();
// An NCCL communicator over the ranks of `host` (collective over it), each on its CUDA device
// `device`. Throws DeviceError in a build without NCCL or CUDA, when the device does not exist,
// or when the NCCL library cannot be loaded; CommError when NCCL fails to connect.
std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> host,
                                                     int device);

}  // namespace ada::comm
