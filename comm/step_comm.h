// The communicator a training step reduces with (train.comm: auto | mpi | nccl): MPI for CPU
// training, NCCL over the same ranks for device buffers when every rank can use it.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace ada::comm {

// ConfigError naming `where` (train.comm's location) for an unknown choice, or nccl for CPU
// parameters.
void check_step_comm_choice(const std::string& choice, const Device& device,
                            const std::string& where);

// Null when `world` itself serves (CPU parameters, `choice` mpi, or NCCL unusable on some rank
// with `choice` auto: one log line says why, and device buffers are staged through host
// memory); otherwise an NCCL communicator over world's ranks on `device`. Decided together, so
// that all ranks agree. ConfigError as check_step_comm_choice, or for nccl that cannot run.
// Collective.
std::unique_ptr<Communicator> make_step_communicator(Communicator& world, const Device& device,
                                                     const std::string& choice,
                                                     const std::string& where);

}  // namespace ada::comm
