#include "comm/node_layout.h"

#include <vector>

namespace ada::comm {

NodeLayout make_node_layout(Communicator& comm, int local_size, const std::string& where) {
  const int p = comm.size(), r = comm.rank();
  const std::string at = where.empty() ? std::string("local_size") : where;
  ADA_CHECK_ARG(local_size >= 0, ConfigError)
      << at << ": local_size must be >= 0 (0: the nodes MPI reports), got " << local_size;
  NodeLayout l;
  if (local_size > 0) {
    ADA_CHECK_ARG(p % local_size == 0, ConfigError)
        << at << ": the world size " << p << " is not a multiple of local_size " << local_size
        << " (ranks r..r+" << local_size - 1 << " form node r/" << local_size
        << "); pick a divisor of " << p << " or change the number of ranks";
    l.local_size = local_size;
  } else {
    // Every rank checks every rank's (local rank, local size), so all decide alike.
    const double mine[2] = {static_cast<double>(comm.local_rank()),
                            static_cast<double>(comm.local_size())};
    std::vector<double> all(2 * static_cast<size_t>(p));
    comm.allgather(mine, 2, all.data());
    const int ls = static_cast<int>(all[1]);
    for (int i = 0; i < p; ++i) {
      const int lr_i = static_cast<int>(all[2 * i]), ls_i = static_cast<int>(all[2 * i + 1]);
      ADA_CHECK_ARG(ls_i == ls && lr_i == i % ls && p % ls == 0, ConfigError)
          << at << ": the nodes MPI reports are not homogeneous and node-major (rank " << i
          << " is local rank " << lr_i << " of " << ls_i << ", rank 0's node has " << ls
          << " ranks); launch the same number of ranks on every node, packed by node (mpirun "
             "--map-by slot), or set local_size explicitly";
    }
    l.local_size = ls;
  }
  l.local_rank = r % l.local_size;
  l.node = r / l.local_size;
  l.nodes = p / l.local_size;
  l.node_comm = comm.split(l.node, l.local_rank);
  l.cross_comm = comm.split(l.local_rank, l.node);
  return l;
}

}  // namespace ada::comm
