// MpiCommunicator: the Communicator over an MPI communicator on host memory. Tensors on a CUDA
// device are staged: copied to host memory for the call and the result copied back (correct,
// slower than the NCCL communicator; it lets several ranks share one GPU, which NCCL refuses).
// Every call goes through the communication thread (comm_thread.h). Counts above INT_MAX are
// sent in chunks. The world communicator of a process: MpiCommunicator::world().
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>

#include "comm/communicator.h"

namespace ada::comm {

class MpiCommunicator : public Communicator {
 public:
  // Wraps `comm` (not owned unless `owned`); MPI must be initialised (comm/mpi_runtime.h).
  MpiCommunicator(MPI_Comm comm, bool owned);
  ~MpiCommunicator() override;
  static std::unique_ptr<MpiCommunicator> world();

  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void allreduce(Tensor& t, ReduceOp op = ReduceOp::sum) override;
  void allreduce(double* data, int64_t count, ReduceOp op = ReduceOp::sum) override;
  void broadcast(Tensor& t, int root) override;
  void allgather(const Tensor& in, Tensor& out) override;
  void allgather(const double* in, int64_t count, double* out) override;
  void reduce_scatter(const Tensor& in, Tensor& out) override;
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override;
  void allgather_inplace(Tensor& buffer, const std::vector<int64_t>& counts) override;
  void send(const Tensor& t, int peer, int tag = 0) override;
  void recv(Tensor& t, int peer, int tag = 0) override;
  void sendrecv(const Tensor& out, int to, Tensor& in, int from, int tag = 0) override;
  void sendrecv_pipelined(
      const Tensor& out, int to, Tensor& in, int from, int tag, int64_t chunk,
      const std::function<void(int64_t offset, int64_t count)>& on_piece) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void post_signal(int peer, int tag, int64_t value) override;
  bool poll_signal(int tag, int* source, int64_t* value) override;

  WorkHandle allreduce_async(Tensor& t, ReduceOp op = ReduceOp::sum) override;
  WorkHandle broadcast_async(Tensor& t, int root) override;
  WorkHandle run_async(std::function<void()> op) override;

  MPI_Comm handle() const { return comm_; }

 private:
  void reap_signals();  // frees the requests of signals that have been delivered (comm thread)
  void block_layout(const char* op, const std::vector<int64_t>& counts, int64_t total,
                    std::vector<int>& icounts, std::vector<int>& displs) const;

  MPI_Comm comm_;
  bool owned_;
  // Signals in flight: the value must stay put until MPI is done with it (deque: stable addresses).
  struct Signal {
    int64_t value;
    MPI_Request request;
  };
  std::deque<Signal> signals_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace ada::comm
