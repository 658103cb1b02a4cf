// NcclCommunicator (see nccl_communicator.h for the contract). Built with ADA_WITH_NCCL.
#include "comm/nccl_communicator.h"
#include "comm/watchdog.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/nccl_library.h"
#include "comm/shared_gpu.h"
#include "core/backend/cuda/cuda_common.h"

namespace ada::comm {
namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  ADA_THROW(DTypeError) << "NCCL " << op << ": dtype " << dtype_name(t) << " is not supported";
  return ncclFloat32;
}

// ADA_NCCL_TIMEOUT_S when set, else the communication timeout of watchdog.h (0: none).
double timeout_seconds() {
  const char* env = std::getenv("ADA_NCCL_TIMEOUT_S");
  if (!env || !*env) return comm_timeout() > 0 ? comm_timeout() : 1e300;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  ADA_CHECK_ARG(end && *end == '\0' && v > 0, ConfigError)
      << "ADA_NCCL_TIMEOUT_S='" << env << "' must be a positive number of seconds";
  return v;
}

// A CUDA event without timing, destroyed with its owner (an event still pending is released by
// the driver once it completes).
class Event {
 public:
  Event() { ADA_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  // `comm` null: create one over `host` (collective); else adopt `comm` (from ncclCommSplit).
  NcclCommunicator(std::shared_ptr<Communicator> host, int device, ncclComm_t comm)
      : host_(std::move(host)), device_(device), comm_(comm), timeout_s_(timeout_seconds()) {
    ADA_CHECK_ARG(host_ != nullptr, CommError) << "make_nccl_communicator: no host communicator";
    cuda::require_device(device_);
    const nccl::Library& lib = nccl::library();
    cuda::set_device(device_);
    ADA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (!comm_) {
      // The unique id travels over the host communicator as 32-bit words.
      static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0, "ncclUniqueId size");
      ncclUniqueId id;
      std::memset(&id, 0, sizeof(id));
      if (host_->rank() == 0)
        check(lib.ncclGetUniqueId(&id), "ncclGetUniqueId(&id)", __FILE__, __LINE__);
      Tensor words =
          Tensor::zeros({static_cast<int64_t>(sizeof(id) / sizeof(int32_t))}, DType::i32);
      std::memcpy(words.raw_data(), &id, sizeof(id));
      host_->broadcast(words, 0);
      std::memcpy(&id, words.raw_data(), sizeof(id));
      CommThread::instance().run([&] {
        cuda::set_device(device_);
        check(lib.ncclCommInitRank(&comm_, host_->size(), id, host_->rank()),
              "ncclCommInitRank(&comm, size, id, rank)", __FILE__, __LINE__);
      });
    }
    int count = 0, rank = 0;
    check(lib.ncclCommCount(comm_, &count), "ncclCommCount(comm, &count)", __FILE__, __LINE__);
    check(lib.ncclCommUserRank(comm_, &rank), "ncclCommUserRank(comm, &rank)", __FILE__, __LINE__);
    ADA_CHECK_ARG(count == host_->size() && rank == host_->rank(), CommError)
        << "NCCL communicator has rank " << rank << " of " << count
        << ", its host communicator rank " << host_->rank() << " of " << host_->size();
  }

  ~NcclCommunicator() override {
    // Every operation has completed when its call returned, so destroying cannot wait on a peer.
    if (comm_) nccl::library().ncclCommDestroy(comm_);  // null after an abort
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string backend() const override { return "nccl"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }

  void allreduce(Tensor& t, ReduceOp op) override {
    if (!on_device({&t}, "allreduce")) return host_->allreduce(t, op);
    allreduce_after(t, op, ready());
  }
  void allreduce(double* data, int64_t count, ReduceOp op) override {
    host_->allreduce(data, count, op);
  }

  void broadcast(Tensor& t, int root) override {
    if (!on_device({&t}, "broadcast")) return host_->broadcast(t, root);
    check_rank(root, "broadcast", "root");
    broadcast_after(t, root, ready());
  }

  void allgather(const Tensor& in, Tensor& out) override {
    if (!on_device({&in, &out}, "allgather")) return host_->allgather(in, out);
    ADA_CHECK_ARG(out.dtype() == in.dtype() && out.numel() == in.numel() * size(), ShapeError)
        << "allgather: output " << out.str() << " must hold " << size() << " x " << in.numel()
        << " elements of " << dtype_name(in.dtype());
    const ncclDataType_t type = nccl_type(in.dtype(), "allgather");
    launch("allgather", ready(), [&](const nccl::Library& lib) {
      check(lib.ncclAllGather(in.raw_data(), out.raw_data(), in.numel(), type, comm_, stream_),
            "ncclAllGather(in, out, count, type, comm, stream)", __FILE__, __LINE__);
    });
  }
  void allgather(const double* in, int64_t count, double* out) override {
    host_->allgather(in, count, out);
  }

  void reduce_scatter(const Tensor& in, Tensor& out) override {
    if (!on_device({&in, &out}, "reduce_scatter")) return host_->reduce_scatter(in, out);
    ADA_CHECK_ARG(out.dtype() == in.dtype() && in.numel() == out.numel() * size(), ShapeError)
        << "reduce_scatter: input " << in.str() << " must hold " << size()
        << " blocks of the output " << out.str();
    const ncclDataType_t type = nccl_type(in.dtype(), "reduce_scatter");
    launch("reduce_scatter", ready(), [&](const nccl::Library& lib) {
      check(lib.ncclReduceScatter(in.raw_data(), out.raw_data(), out.numel(), type, ncclSum, comm_,
                                  stream_),
            "ncclReduceScatter(in, out, count, type, ncclSum, comm, stream)", __FILE__, __LINE__);
    });
  }

  // Uneven blocks: one ncclReduce per block, rooted at the block's rank, in one group.
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    if (!on_device({&in, &out}, "reduce_scatter")) return host_->reduce_scatter(in, out, counts);
    const std::vector<int64_t> offsets = block_offsets("reduce_scatter", counts, in.numel());
    ADA_CHECK_ARG(out.dtype() == in.dtype() && out.numel() == counts[rank()], ShapeError)
        << "reduce_scatter: output " << out.str() << " must hold this rank's block of "
        << counts[rank()] << " elements of " << dtype_name(in.dtype());
    ADA_CHECK_ARG(!in.shares_storage_with(out), CommError)
        << "reduce_scatter: in and out must not overlap";
    const ncclDataType_t type = nccl_type(in.dtype(), "reduce_scatter");
    const size_t es = dtype_size(in.dtype());
    launch("reduce_scatter", ready(), [&](const nccl::Library& lib) {
      group(lib, [&] {
        for (int r = 0; r < size(); ++r) {
          if (counts[r] == 0) continue;
          const char* src = static_cast<const char*>(in.raw_data()) + offsets[r] * es;
          check(lib.ncclReduce(src, out.raw_data(), counts[r], type, ncclSum, r, comm_, stream_),
                "ncclReduce(block, out, count, type, ncclSum, root, comm, stream)", __FILE__,
                __LINE__);
        }
      });
    });
  }

  // Uneven blocks in place: one ncclBroadcast per block from its rank, in one group.
  void allgather_inplace(Tensor& buffer, const std::vector<int64_t>& counts) override {
    if (!on_device({&buffer}, "allgather_inplace")) return host_->allgather_inplace(buffer, counts);
    const std::vector<int64_t> offsets = block_offsets("allgather_inplace", counts, buffer.numel());
    const ncclDataType_t type = nccl_type(buffer.dtype(), "allgather_inplace");
    const size_t es = dtype_size(buffer.dtype());
    launch("allgather_inplace", ready(), [&](const nccl::Library& lib) {
      group(lib, [&] {
        for (int r = 0; r < size(); ++r) {
          if (counts[r] == 0) continue;
          char* p = static_cast<char*>(buffer.raw_data()) + offsets[r] * es;
          check(lib.ncclBroadcast(p, p, counts[r], type, r, comm_, stream_),
                "ncclBroadcast(block, block, count, type, root, comm, stream)", __FILE__, __LINE__);
        }
      });
    });
  }

  void send(const Tensor& t, int peer, int tag) override {
    if (!on_device({&t}, "send")) return host_->send(t, peer, tag);
    check_rank(peer, "send", "peer");
    const ncclDataType_t type = nccl_type(t.dtype(), "send");
    launch("send", ready(), [&](const nccl::Library& lib) {
      check(lib.ncclSend(t.raw_data(), t.numel(), type, peer, comm_, stream_),
            "ncclSend(t, count, type, peer, comm, stream)", __FILE__, __LINE__);
    });
  }

  void recv(Tensor& t, int peer, int tag) override {
    if (!on_device({&t}, "recv")) return host_->recv(t, peer, tag);
    check_rank(peer, "recv", "peer");
    const ncclDataType_t type = nccl_type(t.dtype(), "recv");
    launch("recv", ready(), [&](const nccl::Library& lib) {
      check(lib.ncclRecv(t.raw_data(), t.numel(), type, peer, comm_, stream_),
            "ncclRecv(t, count, type, peer, comm, stream)", __FILE__, __LINE__);
    });
  }

  void sendrecv(const Tensor& out, int to, Tensor& in, int from, int tag) override {
    if (!on_device({&out, &in}, "sendrecv")) return host_->sendrecv(out, to, in, from, tag);
    check_rank(to, "sendrecv", "destination");
    check_rank(from, "sendrecv", "source");
    ADA_CHECK_ARG(in.dtype() == out.dtype(), DTypeError)
        << "sendrecv: send and receive dtypes differ";
    const ncclDataType_t type = nccl_type(out.dtype(), "sendrecv");
    launch("sendrecv", ready(), [&](const nccl::Library& lib) {
      group(lib,
            [&] { send_recv_piece(lib, out, 0, out.numel(), to, in, 0, in.numel(), from, type); });
    });
  }

  // Every piece is queued at once (pairs of sends and receives in call order on both sides);
  // the host then waits for the pieces in turn and hands each to on_piece.
  void sendrecv_pipelined(const Tensor& out, int to, Tensor& in, int from, int tag, int64_t chunk,
                          const std::function<void(int64_t, int64_t)>& on_piece) override {
    if (!on_device({&out, &in}, "sendrecv_pipelined"))
      return host_->sendrecv_pipelined(out, to, in, from, tag, chunk, on_piece);
    check_rank(to, "sendrecv_pipelined", "destination");
    check_rank(from, "sendrecv_pipelined", "source");
    ADA_CHECK_ARG(in.dtype() == out.dtype(), DTypeError)
        << "sendrecv_pipelined: send and receive dtypes differ";
    const ncclDataType_t type = nccl_type(out.dtype(), "sendrecv_pipelined");
    const int64_t total = std::max<int64_t>(1, std::max(out.numel(), in.numel()));
    const int64_t piece = chunk <= 0 ? total : std::min(chunk, total);
    const int64_t pieces = (total + piece - 1) / piece;
    auto count = [&](const Tensor& t, int64_t k) {
      return std::max<int64_t>(0, std::min(piece, t.numel() - k * piece));
    };
    std::shared_ptr<Event> producers = ready();
    CommThread::instance().run([&] {
      const nccl::Library& lib = start("sendrecv_pipelined", *producers);
      std::vector<std::unique_ptr<Event>> arrived;
      for (int64_t k = 0; k < pieces; ++k) {
        group(lib, [&] {
          send_recv_piece(lib, out, k * piece, count(out, k), to, in, k * piece, count(in, k), from,
                          type);
        });
        arrived.push_back(std::make_unique<Event>());
        ADA_CUDA_CHECK(cudaEventRecord(arrived.back()->get(), stream_));
      }
      std::exception_ptr error;
      for (int64_t k = 0; k < pieces; ++k) {
        wait(arrived[k]->get(), "sendrecv_pipelined");
        if (error || count(in, k) == 0) continue;
        try {
          on_piece(k * piece, count(in, k));
        } catch (...) {
          error = std::current_exception();  // the remaining pieces still arrive first
        }
      }
      if (error) std::rethrow_exception(error);
    });
  }

  void barrier() override { host_->barrier(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub_host = host_->split(color, key);
    ncclComm_t sub = nullptr;
    CommThread::instance().run([&] {
      cuda::set_device(device_);
      check(nccl::library().ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub,
                                          nullptr),
            "ncclCommSplit(comm, color, key, &sub, nullptr)", __FILE__, __LINE__);
    });
    if (color < 0) return nullptr;
    return std::make_unique<NcclCommunicator>(std::shared_ptr<Communicator>(std::move(sub_host)),
                                              device_, sub);
  }

  void post_signal(int peer, int tag, int64_t value) override {
    host_->post_signal(peer, tag, value);
  }
  bool poll_signal(int tag, int* source, int64_t* value) override {
    return host_->poll_signal(tag, source, value);
  }

  WorkHandle allreduce_async(Tensor& t, ReduceOp op) override {
    if (!on_device({&t}, "allreduce_async")) return host_->allreduce_async(t, op);
    nccl_type(t.dtype(), "allreduce_async");
    Tensor held = t;  // keeps the storage alive until the operation ran
    std::shared_ptr<Event> producers =
        ready();  // the producers queued by now, not by the time it runs
    return CommThread::instance().submit(
        [this, held, op, producers]() mutable { allreduce_after(held, op, producers); });
  }

  WorkHandle broadcast_async(Tensor& t, int root) override {
    if (!on_device({&t}, "broadcast_async")) return host_->broadcast_async(t, root);
    check_rank(root, "broadcast_async", "root");
    nccl_type(t.dtype(), "broadcast_async");
    Tensor held = t;
    std::shared_ptr<Event> producers = ready();
    return CommThread::instance().submit(
        [this, held, root, producers]() mutable { broadcast_after(held, root, producers); });
  }

  WorkHandle run_async(std::function<void()> op) override {
    return CommThread::instance().submit(std::move(op));
  }

 private:
  // In-place allreduce and broadcast of a device tensor once `producers` have run.
  void allreduce_after(Tensor& t, ReduceOp op, const std::shared_ptr<Event>& producers) {
    const ncclDataType_t type = nccl_type(t.dtype(), "allreduce");
    launch("allreduce", producers, [&](const nccl::Library& lib) {
      check(lib.ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), type, nccl_op(op), comm_,
                              stream_),
            "ncclAllReduce(t, t, count, type, op, comm, stream)", __FILE__, __LINE__);
    });
  }
  void broadcast_after(Tensor& t, int root, const std::shared_ptr<Event>& producers) {
    const ncclDataType_t type = nccl_type(t.dtype(), "broadcast");
    launch("broadcast", producers, [&](const nccl::Library& lib) {
      check(lib.ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), type, root, comm_, stream_),
            "ncclBroadcast(t, t, count, type, root, comm, stream)", __FILE__, __LINE__);
    });
  }

  // True when every tensor is on this communicator's device, false when every one is on the CPU
  // (the host communicator's business); anything else is a DeviceError.
  bool on_device(std::initializer_list<const Tensor*> ts, const char* op) const {
    int on_cpu = 0, here = 0;
    for (const Tensor* t : ts) {
      ADA_CHECK_ARG(t->defined(), CommError) << "NCCL " << op << ": undefined tensor";
      if (t->device().is_cpu())
        ++on_cpu;
      else if (t->device() == Device::cuda(device_))
        ++here;
      else
        ADA_THROW(DeviceError) << "NCCL " << op << ": tensor " << t->str()
                               << " is not on this communicator's device cuda:" << device_;
    }
    ADA_CHECK_ARG(on_cpu == 0 || here == 0, DeviceError)
        << "NCCL " << op << ": tensors on the CPU and on cuda:" << device_
        << " in one call; use one device";
    return here > 0;
  }

  void check_rank(int r, const char* op, const char* what) const {
    ADA_CHECK_ARG(r >= 0 && r < size(), CommError)
        << "NCCL " << op << ": " << what << " " << r << " outside [0, " << size() << ")";
  }

  std::vector<int64_t> block_offsets(const char* op, const std::vector<int64_t>& counts,
                                     int64_t total) const {
    ADA_CHECK_ARG(static_cast<int>(counts.size()) == size(), ShapeError)
        << op << ": " << counts.size() << " block counts for " << size() << " ranks";
    std::vector<int64_t> offsets(counts.size());
    int64_t sum = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      ADA_CHECK_ARG(counts[r] >= 0, ShapeError) << op << ": negative block count " << counts[r];
      offsets[r] = sum;
      sum += counts[r];
    }
    ADA_CHECK_ARG(sum == total, ShapeError)
        << op << ": block counts sum to " << sum << ", the buffer holds " << total;
    return offsets;
  }

  // An event after the work queued on the compute stream so far (the buffers' producers).
  std::shared_ptr<Event> ready() const {
    cuda::set_device(device_);
    auto e = std::make_shared<Event>();
    ADA_CUDA_CHECK(cudaEventRecord(e->get(), cuda::stream(device_)));
    return e;
  }

  // On the communication thread: the NCCL stream waits for `producers`, `enqueue` queues the
  // NCCL calls, and the host waits until the stream has done them.
  // On the communication thread, before an operation's NCCL calls: the NCCL stream waits for
  // `producers`.
  const nccl::Library& start(const char* op, const Event& producers) {
    ADA_CHECK_ARG(comm_ != nullptr, CommError)
        << "NCCL " << op << " on rank " << rank()
        << ": the communicator was aborted after an earlier failure";
    cuda::set_device(device_);
    ADA_CUDA_CHECK(cudaStreamWaitEvent(stream_, producers.get(), 0));
    return nccl::library();
  }

  template <class F>
  void launch(const char* op, const std::shared_ptr<Event>& producers, F&& enqueue) {
    CommThread::instance().run([&] {
      const nccl::Library& lib = start(op, *producers);
      enqueue(lib);
      Event done;
      ADA_CUDA_CHECK(cudaEventRecord(done.get(), stream_));
      wait(done.get(), op);
    });
  }

  template <class F>
  void group(const nccl::Library& lib, F&& body) {
    check(lib.ncclGroupStart(), "ncclGroupStart()", __FILE__, __LINE__);
    try {
      body();
    } catch (...) {
      lib.ncclGroupEnd();
      throw;
    }
    check(lib.ncclGroupEnd(), "ncclGroupEnd()", __FILE__, __LINE__);
  }

  // One send and one receive (either may be empty), inside a group.
  void send_recv_piece(const nccl::Library& lib, const Tensor& out, int64_t out_off,
                       int64_t out_count, int to, Tensor& in, int64_t in_off, int64_t in_count,
                       int from, ncclDataType_t type) {
    const size_t es = dtype_size(out.dtype());
    if (out_count > 0)
      check(lib.ncclSend(static_cast<const char*>(out.raw_data()) + out_off * es, out_count, type,
                         to, comm_, stream_),
            "ncclSend(piece, count, type, to, comm, stream)", __FILE__, __LINE__);
    if (in_count > 0)
      check(lib.ncclRecv(static_cast<char*>(in.raw_data()) + in_off * es, in_count, type, from,
                         comm_, stream_),
            "ncclRecv(piece, count, type, from, comm, stream)", __FILE__, __LINE__);
  }

  // Waits for `e` on the host, polling NCCL for asynchronous errors; aborts on error or timeout.
  void wait(cudaEvent_t e, const char* op) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> signalled;  // a stop signal first seen
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort_comm();
        ADA_CUDA_CHECK(q);
      }
      ncclResult_t async = ncclSuccess;
      const nccl::Library& lib = nccl::library();
      lib.ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail(async, (std::string("asynchronous error during ") + op).c_str(), __FILE__, __LINE__);
      const auto now = std::chrono::steady_clock::now();
      const double waited = std::chrono::duration<double>(now - start).count();
      // watchdog.h's rule while SIGTERM/SIGINT is pending: a peer that is gone never completes
      // this.
      if (const int signo = stop_rule_signal(); signo != 0) {
        if (!signalled) signalled = now;
        const double after = std::chrono::duration<double>(now - *signalled).count();
        if (after > kStopWaitSeconds) {
          abort_comm();
          end_after_stop_signal(signo, op, __FILE__, __LINE__, after);
        }
      }
      if (waited > timeout_s_) {
        abort_comm();
        ADA_THROW(CommError) << "NCCL " << op << " on rank " << rank() << " of " << size()
                             << ": no progress for " << timeout_s_
                             << " s (a peer is stuck or gone); the communicator was aborted. "
                             << "Raise train.comm_timeout_s (or ADA_NCCL_TIMEOUT_S) if the peers "
                                "are only slow";
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void check(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess) fail(r, call, file, line);
  }

  [[noreturn]] void fail(ncclResult_t r, const char* call, const char* file, int line) {
    const nccl::Library& lib = nccl::library();
    std::ostringstream s;
    s << "NCCL " << call << " failed on rank " << rank() << " of " << size() << " ("
      << detail::base_name(file) << ":" << line << "): " << lib.ncclGetErrorString(r);
    if (comm_) {
      const char* last = lib.ncclGetLastError(comm_);
      if (last && *last) s << " (" << last << ")";
    }
    abort_comm();
    throw CommError(s.str());
  }

  // ncclCommAbort ends this rank's pending NCCL work; the peers see the failure through MPI.
  void abort_comm() noexcept {
    if (comm_) {
      nccl::library().ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  std::shared_ptr<Communicator> host_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  double timeout_s_;
};

}  // namespace

bool nccl_built() {
  return true;
}

std::string nccl_unavailable_reason() {
  try {
    nccl::library();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> host,
                                                     int device) {
  ADA_CHECK_ARG(host != nullptr, CommError) << "make_nccl_communicator: no host communicator";
  prepare_nccl_environment(host->rank(), host->local_rank(), cuda::device_count());
  return std::make_unique<NcclCommunicator>(std::move(host), device, nullptr);
}

}  // namespace ada::comm
