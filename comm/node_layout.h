// NodeLayout: a communicator's ranks seen as nodes of L consecutive ranks (node-major: rank =
// node * L + local rank), with a node communicator and a cross-node communicator made by split().
// Hierarchical reducers compose over these two (Adasum now, NCCL forms later): reduce inside the
// node, reduce across nodes, gather inside the node. No reduction math and no MPI here.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ada::comm {

struct NodeLayout {
  int local_size = 1;                        // L: ranks per node
  int local_rank = 0;                        // this rank's place in its node: rank % L
  int node = 0;                              // this rank's node: rank / L
  int nodes = 1;                             // size / L
  std::unique_ptr<Communicator> node_comm;   // the L ranks of this node, ordered by local rank
  std::unique_ptr<Communicator> cross_comm;  // the ranks with this local rank, ordered by node
};

// Collective over `comm`. local_size > 0 simulates nodes on any machine: ranks r..r+L-1 form
// node r/L, and comm.size() must be a multiple of L. local_size == 0 takes the nodes MPI reports
// (comm.local_rank()/local_size(), the shared-memory split); they must be homogeneous and
// node-major, which is checked on every rank alike. Errors are ConfigErrors that start with
// `where` (the setting's config location) and say what to change; all ranks throw together.
NodeLayout make_node_layout(Communicator& comm, int local_size, const std::string& where);

}  // namespace ada::comm
