// Communicator: the collective and point-to-point operations reducers and the trainer use.
// Backends: MPI on host memory (mpi_communicator.h); NCCL on device memory comes with the CUDA
// work and implements this same interface (its constructor will take the MPI communicator to
// broadcast the NCCL unique id). Blocking calls return when the local buffer is ready; `_async`
// variants return a Work whose wait() does that. All operations of one process are executed in
// one global FIFO order (see comm_thread.h), which must be the same on every rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/work.h"
#include "core/tensor.h"

namespace ada::comm {

enum class ReduceOp { sum, max, min };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "mpi", later "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and size among the processes of this node (shared-memory split).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // Element-wise reduction in place (f32, i32, i64 tensors; any size, including 0).
  virtual void allreduce(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // Host doubles (norms, dot products, metrics, checksums), in place.
  virtual void allreduce(double* data, int64_t count, ReduceOp op = ReduceOp::sum) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // out holds size() blocks of in.numel() elements, block r from rank r.
  virtual void allgather(const Tensor& in, Tensor& out) = 0;
  virtual void allgather(const double* in, int64_t count, double* out) = 0;
  // in holds size() equal blocks; out (one block) gets the sum of block rank() over all ranks.
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;
  // Uneven blocks: in holds size() blocks of counts[0], counts[1], ... elements back to back
  // (counts the same on every rank, sum = in.numel()); out (counts[rank()] elements) gets the
  // sum of block rank() over all ranks. in and out must not overlap.
  virtual void reduce_scatter(const Tensor& in, Tensor& out,
                              const std::vector<int64_t>& counts) = 0;
  // In-place allgather of uneven blocks: buffer holds size() blocks of counts[0], counts[1], ...
  // elements back to back; every rank's block rank() is copied into the same place on every
  // other rank, so all ranks end with identical buffers.
  virtual void allgather_inplace(Tensor& buffer, const std::vector<int64_t>& counts) = 0;
  virtual void send(const Tensor& t, int peer, int tag = 0) = 0;
  virtual void recv(Tensor& t, int peer, int tag = 0) = 0;
  // Sends `out` to `to` and receives `in` from `from` in one step (no deadlock between pairs).
  virtual void sendrecv(const Tensor& out, int to, Tensor& in, int from, int tag = 0) = 0;
  // sendrecv in pieces of `chunk` elements (<= 0: one piece), pipelined: on_piece(offset, count)
  // runs on each piece of `in` as soon as it has arrived, while the next one is on its way, so
  // work on received data overlaps the transfer and finds the data in cache. Either side may be
  // empty (nothing is sent or received for it). The partner's matching call must send `in`'s
  // size with the same chunk (a sendrecv_pipelined, pieces matched in order). If on_piece
  // throws, the transfers still complete (unreported) before the exception leaves.
  virtual void sendrecv_pipelined(
      const Tensor& out, int to, Tensor& in, int from, int tag, int64_t chunk,
      const std::function<void(int64_t offset, int64_t count)>& on_piece) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new communicator, ordered by key (then by rank). A color
  // < 0 means "not a member": the result is null. Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Small control messages (WAGMA's activations): post_signal sends `value` to `peer` and returns
  // without waiting for it to be received; poll_signal takes one waiting message with `tag` from
  // any rank, if there is one (false otherwise). Neither blocks.
  virtual void post_signal(int peer, int tag, int64_t value) = 0;
  virtual bool poll_signal(int tag, int* source, int64_t* value) = 0;

  // Asynchronous variants: the operation is queued behind every earlier one of this process.
  // The buffers must stay alive and untouched until wait() returns.
  virtual WorkHandle allreduce_async(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  virtual WorkHandle broadcast_async(Tensor& t, int root) = 0;
  // Runs a composite operation (e.g. a whole Adasum reduction of a bucket) in the queue; the
  // calls it makes on any communicator run inside it, in order.
  virtual WorkHandle run_async(std::function<void()> op) = 0;
};

// `text` of rank `root` on every rank (collective).
std::string broadcast_string(Communicator& comm, const std::string& text, int root);

}  // namespace ada::comm
