// Shared helpers of the MPI tests: the world communicator and gathering values from all ranks.
#pragma once

#include <vector>

#include "comm/mpi_communicator.h"

namespace ada::comm::testing {

inline MpiCommunicator& world() {
  static std::unique_ptr<MpiCommunicator> w = MpiCommunicator::world();
  return *w;
}

// Every rank's copy of a float vector (same length on every rank), rank-major.
inline std::vector<std::vector<float>> gather_all(const std::vector<float>& mine) {
  Communicator& c = world();
  Tensor in = Tensor::from_vector<float>(mine, {static_cast<int64_t>(mine.size())});
  Tensor out = Tensor::empty({static_cast<int64_t>(mine.size()) * c.size()});
  c.allgather(in, out);
  std::vector<std::vector<float>> all(c.size());
  auto v = out.to_vector<float>();
  for (int r = 0; r < c.size(); ++r)
    all[r].assign(v.begin() + r * mine.size(), v.begin() + (r + 1) * mine.size());
  return all;
}

}  // namespace ada::comm::testing
