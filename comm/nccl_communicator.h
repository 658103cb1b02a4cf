// The NCCL communicator: the Communicator interface on CUDA device buffers (one GPU per rank),
// beside a host communicator (MPI) for everything that is not a device tensor. NCCL is opened at
// run time (comm/nccl_library.h). Ordering, failures and timeouts: docs/architecture.md, "The
// NCCL communicator".
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
