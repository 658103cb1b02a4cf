// Builds without NCCL (ADA_WITH_NCCL off): the factory says how to get one.
#include "comm/nccl_communicator.h"

#include "base/error.h"

namespace ada::comm {

bool nccl_built() {
  return false;
}

std::string nccl_unavailable_reason() {
  return "this binary has no NCCL communicator (reconfigure with -DADA_WITH_CUDA=ON "
         "-DADA_WITH_NCCL=ON)";
}

std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator>, int) {
  ADA_THROW(DeviceError) << "the NCCL communicator is not built in this binary; reconfigure with "
                            "-DADA_WITH_CUDA=ON -DADA_WITH_NCCL=ON";
  return nullptr;
}

}  // namespace ada::comm
