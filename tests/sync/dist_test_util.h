// Shared by the dist tests: the world communicator (created once per process).
#pragma once

#include <memory>

#include "comm/mpi_communicator.h"

namespace ada::sync::testing {

inline comm::MpiCommunicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> w = comm::MpiCommunicator::world();
  return *w;
}

}  // namespace ada::sync::testing
