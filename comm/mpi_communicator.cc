#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <exception>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/mpi_check.h"
#include "core/half.h"

namespace ada::comm {
namespace {

// f16 and bf16 tensors travel as 16-bit words of their own MPI types; their sum (allreduce,
// reduce_scatter) is a user-defined op that adds in f32 and rounds back to nearest even at every
// step of MPI's algorithm (as NCCL does for these types). Made once, on the communication
// thread, by the first communicator.
struct HalfTypes {
  MPI_Datatype f16 = MPI_DATATYPE_NULL, bf16 = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL;
};
HalfTypes g_half;

void half_sum(void* in, void* inout, int* len, MPI_Datatype* type) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  const int n = *len;
  if (*type == g_half.bf16) {
    for (int i = 0; i < n; ++i)
      b[i] = half::bf16_from_float(half::bf16_to_float(a[i]) + half::bf16_to_float(b[i]));
  } else {
    for (int i = 0; i < n; ++i)
      b[i] = half::f16_from_float(half::f16_to_float(a[i]) + half::f16_to_float(b[i]));
  }
}

void make_half_types() {  // on the communication thread
  if (g_half.sum != MPI_OP_NULL) return;
  ADA_MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &g_half.f16));
  ADA_MPI_CHECK(MPI_Type_commit(&g_half.f16));
  ADA_MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &g_half.bf16));
  ADA_MPI_CHECK(MPI_Type_commit(&g_half.bf16));
  ADA_MPI_CHECK(MPI_Op_create(&half_sum, /*commute=*/1, &g_half.sum));
}

bool is_half(const Tensor& t) {
  return t.dtype() == DType::f16 || t.dtype() == DType::bf16;
}

MPI_Datatype mpi_type(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::f16:
      return g_half.f16;
    case DType::bf16:
      return g_half.bf16;
  }
  ADA_THROW(DTypeError) << "MPI " << op << ": dtype " << dtype_name(t.dtype())
                        << " is not supported (f32, f16, bf16, i32, i64)";
  return MPI_DATATYPE_NULL;
}

// The reduction `op` on `t`'s type; f16/bf16 have their sum only.
MPI_Op mpi_op(ReduceOp op, const Tensor& t, const char* what) {
  if (is_half(t)) {
    ADA_CHECK_ARG(op == ReduceOp::sum, DTypeError)
        << "MPI " << what << ": " << dtype_name(t.dtype())
        << " tensors can be summed only, not reduced by max/min";
    return g_half.sum;
  }
  return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
}

// MPI works on host memory (Debian's OpenMPI is not CUDA-aware): a tensor on a CUDA device is
// copied to a host tensor for the call, and a result back. Correct, and slower than NCCL, which
// GPU runs use where they can; it is how one GPU serves several ranks (NCCL refuses that).
bool on_device(const Tensor& t) {
  return t.defined() && !t.device().is_cpu();
}
Tensor host_copy(const Tensor& t) {
  return on_device(t) ? t.to(Device::cpu()) : t;
}
Tensor host_output(const Tensor& t) {
  return on_device(t) ? Tensor::empty(t.shape(), t.dtype()) : t;
}
void write_back(Tensor& t, const Tensor& host) {
  if (on_device(t)) t.copy_from(host);
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
}

// MPI counts are int: operations on more elements go in chunks of at most this many.
constexpr int64_t kMaxChunk = INT_MAX / 2;

template <class F>
void chunked(int64_t count, F f) {
  for (int64_t off = 0; off < count; off += kMaxChunk)
    f(off, static_cast<int>(std::min(kMaxChunk, count - off)));
}

void run(const std::function<void()>& op) {
  CommThread::instance().run(op);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  run([&] {
    make_half_types();
    ADA_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    ADA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    ADA_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_Comm node;
    ADA_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    ADA_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
    ADA_MPI_CHECK(MPI_Comm_size(node, &local_size_));
    ADA_MPI_CHECK(MPI_Comm_free(&node));
  });
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !signals_.empty()) {
    try {  // signals not yet received stay in flight: MPI completes them without our buffer
      run([&] {
        for (auto& s : signals_) {
          int done = 0;
          MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
          if (!done) MPI_Request_free(&s.request);
        }
      });
    } catch (...) {
    }
  }
  if (!owned_) return;
  if (!finalized) {
    try {
      run([&] { MPI_Comm_free(&comm_); });
    } catch (...) {
    }
  }
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  ADA_CHECK_ARG(initialized, CommError) << "MpiCommunicator::world(): MPI is not initialised; "
                                           "create an ada::comm::MpiRuntime in main()";
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

void MpiCommunicator::allreduce(Tensor& t, ReduceOp op) {
  if (on_device(t)) {
    if (size_ == 1) return;  // nothing to stage
    Tensor h = host_copy(t);
    allreduce(h, op);
    return write_back(t, h);
  }
  MPI_Datatype type = mpi_type(t, "allreduce");
  const MPI_Op mop = mpi_op(op, t, "allreduce");
  char* p = static_cast<char*>(t.raw_data());
  const size_t es = dtype_size(t.dtype());
  run([&] {
    chunked(t.numel(), [&](int64_t off, int n) {
      ADA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * es, n, type, mop, comm_));
    });
  });
}

void MpiCommunicator::allreduce(double* data, int64_t count, ReduceOp op) {
  run([&] {
    chunked(count, [&](int64_t off, int n) {
      ADA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_DOUBLE, mpi_op(op), comm_));
    });
  });
}

void MpiCommunicator::broadcast(Tensor& t, int root) {
  if (on_device(t)) {
    if (size_ == 1 && root == 0) return;
    Tensor h = host_copy(t);
    broadcast(h, root);
    return write_back(t, h);
  }
  MPI_Datatype type = mpi_type(t, "broadcast");
  ADA_CHECK_ARG(root >= 0 && root < size_, CommError)
      << "broadcast: root " << root << " outside [0, " << size_ << ")";
  char* p = static_cast<char*>(t.raw_data());
  const size_t es = dtype_size(t.dtype());
  run([&] {
    chunked(t.numel(), [&](int64_t off, int n) {
      ADA_MPI_CHECK(MPI_Bcast(p + off * es, n, type, root, comm_));
    });
  });
}

void MpiCommunicator::allgather(const Tensor& in, Tensor& out) {
  if (on_device(in) || on_device(out)) {
    Tensor h = host_output(out);
    allgather(host_copy(in), h);
    return write_back(out, h);
  }
  MPI_Datatype type = mpi_type(in, "allgather");
  ADA_CHECK_ARG(out.dtype() == in.dtype() && out.numel() == in.numel() * size_, ShapeError)
      << "allgather: output " << out.str() << " must hold " << size_ << " x " << in.numel()
      << " elements of " << dtype_name(in.dtype());
  ADA_CHECK_ARG(in.numel() <= kMaxChunk, CommError)
      << "allgather: " << in.numel() << " elements per rank exceed the MPI count limit";
  run([&] {
    ADA_MPI_CHECK(MPI_Allgather(in.raw_data(), static_cast<int>(in.numel()), type, out.raw_data(),
                                static_cast<int>(in.numel()), type, comm_));
  });
}

void MpiCommunicator::allgather(const double* in, int64_t count, double* out) {
  ADA_CHECK_ARG(count <= kMaxChunk, CommError) << "allgather: count exceeds the MPI limit";
  run([&] {
    ADA_MPI_CHECK(MPI_Allgather(in, static_cast<int>(count), MPI_DOUBLE, out,
                                static_cast<int>(count), MPI_DOUBLE, comm_));
  });
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out) {
  if (on_device(in) || on_device(out)) {
    Tensor h = host_output(out);
    reduce_scatter(host_copy(in), h);
    return write_back(out, h);
  }
  MPI_Datatype type = mpi_type(in, "reduce_scatter");
  ADA_CHECK_ARG(out.dtype() == in.dtype() && in.numel() == out.numel() * size_, ShapeError)
      << "reduce_scatter: input " << in.str() << " must hold " << size_ << " blocks of output "
      << out.str();
  ADA_CHECK_ARG(out.numel() <= kMaxChunk, CommError)
      << "reduce_scatter: block of " << out.numel() << " elements exceeds the MPI count limit";
  run([&] {
    ADA_MPI_CHECK(MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(),
                                           static_cast<int>(out.numel()), type,
                                           mpi_op(ReduceOp::sum, in, "reduce_scatter"), comm_));
  });
}

// MPI's int counts and displacements for uneven blocks; checks that `counts` has one
// non-negative entry per rank summing to `total`.
void MpiCommunicator::block_layout(const char* op, const std::vector<int64_t>& counts,
                                   int64_t total, std::vector<int>& icounts,
                                   std::vector<int>& displs) const {
  ADA_CHECK_ARG(static_cast<int>(counts.size()) == size_, ShapeError)
      << op << ": " << counts.size() << " block counts for a communicator of " << size_ << " ranks";
  icounts.resize(size_);
  displs.resize(size_);
  int64_t off = 0;
  for (int i = 0; i < size_; ++i) {
    ADA_CHECK_ARG(counts[i] >= 0, ShapeError) << op << ": block " << i << " has a negative count";
    ADA_CHECK_ARG(off <= INT_MAX && counts[i] <= INT_MAX, CommError)
        << op << ": block " << i << " (offset " << off << ", " << counts[i]
        << " elements) exceeds MPI's int counts; use smaller buckets";
    icounts[i] = static_cast<int>(counts[i]);
    displs[i] = static_cast<int>(off);
    off += counts[i];
  }
  ADA_CHECK_ARG(off == total, ShapeError)
      << op << ": block counts sum to " << off << " but the buffer holds " << total << " elements";
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out,
                                     const std::vector<int64_t>& counts) {
  if (on_device(in) || on_device(out)) {
    Tensor h = host_output(out);
    reduce_scatter(host_copy(in), h, counts);
    return write_back(out, h);
  }
  MPI_Datatype type = mpi_type(in, "reduce_scatter");
  std::vector<int> icounts, displs;
  block_layout("reduce_scatter", counts, in.numel(), icounts, displs);
  ADA_CHECK_ARG(out.dtype() == in.dtype() && out.numel() == counts[rank_], ShapeError)
      << "reduce_scatter: output " << out.str() << " must hold block " << rank_ << " ("
      << counts[rank_] << " elements of " << dtype_name(in.dtype()) << ")";
  run([&] {
    ADA_MPI_CHECK(MPI_Reduce_scatter(in.raw_data(), out.raw_data(), icounts.data(), type,
                                     mpi_op(ReduceOp::sum, in, "reduce_scatter"), comm_));
  });
}

void MpiCommunicator::allgather_inplace(Tensor& buffer, const std::vector<int64_t>& counts) {
  if (on_device(buffer)) {
    if (size_ == 1 && counts.size() == 1 && counts[0] == buffer.numel()) return;
    Tensor h = host_copy(buffer);
    allgather_inplace(h, counts);
    return write_back(buffer, h);
  }
  MPI_Datatype type = mpi_type(buffer, "allgather_inplace");
  std::vector<int> icounts, displs;
  block_layout("allgather_inplace", counts, buffer.numel(), icounts, displs);
  run([&] {
    ADA_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.raw_data(),
                                 icounts.data(), displs.data(), type, comm_));
  });
}

void MpiCommunicator::send(const Tensor& t, int peer, int tag) {
  if (on_device(t)) return send(host_copy(t), peer, tag);
  MPI_Datatype type = mpi_type(t, "send");
  const char* p = static_cast<const char*>(t.raw_data());
  const size_t es = dtype_size(t.dtype());
  run([&] {
    chunked(t.numel(), [&](int64_t off, int n) {
      ADA_MPI_CHECK(MPI_Send(p + off * es, n, type, peer, tag, comm_));
    });
  });
}

void MpiCommunicator::recv(Tensor& t, int peer, int tag) {
  if (on_device(t)) {
    Tensor h = host_output(t);
    recv(h, peer, tag);
    return write_back(t, h);
  }
  MPI_Datatype type = mpi_type(t, "recv");
  char* p = static_cast<char*>(t.raw_data());
  const size_t es = dtype_size(t.dtype());
  run([&] {
    chunked(t.numel(), [&](int64_t off, int n) {
      MPI_Status st;
      ADA_MPI_CHECK(MPI_Recv(p + off * es, n, type, peer, tag, comm_, &st));
      int got = 0;
      MPI_Get_count(&st, type, &got);
      ADA_CHECK_ARG(got == n, CommError)
          << "recv from rank " << peer << ": expected " << n << " elements, got " << got
          << " (ranks disagree on tensor sizes)";
    });
  });
}

void MpiCommunicator::sendrecv(const Tensor& out, int to, Tensor& in, int from, int tag) {
  if (on_device(out) || on_device(in)) {
    Tensor h = host_output(in);
    sendrecv(host_copy(out), to, h, from, tag);
    return write_back(in, h);
  }
  MPI_Datatype type = mpi_type(out, "sendrecv");
  ADA_CHECK_ARG(in.dtype() == out.dtype(), DTypeError)
      << "sendrecv: send and receive dtypes differ";
  const char* sp = static_cast<const char*>(out.raw_data());
  char* rp = static_cast<char*>(in.raw_data());
  const size_t es = dtype_size(out.dtype());
  const int64_t total = std::max(out.numel(), in.numel());
  run([&] {
    for (int64_t off = 0; off < total || off == 0; off += kMaxChunk) {
      int ns = static_cast<int>(std::clamp<int64_t>(out.numel() - off, 0, kMaxChunk));
      int nr = static_cast<int>(std::clamp<int64_t>(in.numel() - off, 0, kMaxChunk));
      ADA_MPI_CHECK(MPI_Sendrecv(sp + off * es, ns, type, to, tag, rp + off * es, nr, type, from,
                                 tag, comm_, MPI_STATUS_IGNORE));
      if (total == 0) break;
    }
  });
}

void MpiCommunicator::sendrecv_pipelined(const Tensor& out, int to, Tensor& in, int from, int tag,
                                         int64_t chunk,
                                         const std::function<void(int64_t, int64_t)>& on_piece) {
  if (on_device(out) || on_device(in)) {  // each piece goes to the device before on_piece sees it
    Tensor h = host_output(in);
    Tensor flat_in = in.flatten(), flat_h = h.flatten();
    return sendrecv_pipelined(host_copy(out), to, h, from, tag, chunk, [&](int64_t off, int64_t n) {
      if (on_device(in)) flat_in.narrow(off, n).copy_from(flat_h.narrow(off, n));
      on_piece(off, n);
    });
  }
  MPI_Datatype type = mpi_type(out, "sendrecv_pipelined");
  ADA_CHECK_ARG(in.dtype() == out.dtype(), DTypeError)
      << "sendrecv_pipelined: send and receive dtypes differ";
  const int64_t total = std::max<int64_t>(1, std::max(out.numel(), in.numel()));
  const int64_t piece = chunk <= 0 ? std::min(total, kMaxChunk) : std::min(chunk, kMaxChunk);
  const char* sp = static_cast<const char*>(out.raw_data());
  char* rp = static_cast<char*>(in.raw_data());
  const size_t es = dtype_size(out.dtype());
  const int64_t ns = (out.numel() + piece - 1) / piece, nr = (in.numel() + piece - 1) / piece;
  auto count = [&](const Tensor& t, int64_t k) {
    return static_cast<int>(std::min(piece, t.numel() - k * piece));
  };
  run([&] {
    // Every send is posted at once (the receiver pulls them as it goes); receives run one piece
    // ahead, so a piece is copied in just before it is used. After an exception from on_piece
    // the remaining pieces are still received (and not reported), so no message is left behind.
    std::vector<MPI_Request> sends(ns, MPI_REQUEST_NULL);
    MPI_Request recvs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    for (int64_t k = 0; k < ns; ++k)
      ADA_MPI_CHECK(MPI_Isend(sp + k * piece * es, count(out, k), type, to, tag, comm_, &sends[k]));
    auto post = [&](int64_t k) {
      if (k < nr)
        ADA_MPI_CHECK(
            MPI_Irecv(rp + k * piece * es, count(in, k), type, from, tag, comm_, &recvs[k % 2]));
    };
    post(0);
    post(1);
    std::exception_ptr error;
    for (int64_t k = 0; k < nr; ++k) {
      MPI_Status st;
      ADA_MPI_CHECK(MPI_Wait(&recvs[k % 2], &st));
      int got = 0;
      MPI_Get_count(&st, type, &got);
      ADA_CHECK_ARG(got == count(in, k), CommError)
          << "sendrecv_pipelined from rank " << from << ": piece " << k << " has " << got
          << " elements, expected " << count(in, k)
          << " (sizes or chunks differ between the ranks)";
      post(k + 2);
      if (error) continue;
      try {
        on_piece(k * piece, count(in, k));
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (ns > 0) ADA_MPI_CHECK(MPI_Waitall(static_cast<int>(ns), sends.data(), MPI_STATUSES_IGNORE));
    if (error) std::rethrow_exception(error);
  });
}

void MpiCommunicator::barrier() {
  run([&] { ADA_MPI_CHECK(MPI_Barrier(comm_)); });
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  run([&] { ADA_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub)); });
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(sub, true);
}

void MpiCommunicator::reap_signals() {
  while (!signals_.empty()) {
    int done = 0;
    ADA_MPI_CHECK(MPI_Test(&signals_.front().request, &done, MPI_STATUS_IGNORE));
    if (!done) return;
    signals_.pop_front();
  }
}

void MpiCommunicator::post_signal(int peer, int tag, int64_t value) {
  ADA_CHECK_ARG(peer >= 0 && peer < size_, CommError)
      << "post_signal: peer " << peer << " outside [0, " << size_ << ")";
  run([&] {
    reap_signals();
    signals_.push_back({value, MPI_REQUEST_NULL});
    Signal& s = signals_.back();
    ADA_MPI_CHECK(MPI_Isend(&s.value, 1, MPI_INT64_T, peer, tag, comm_, &s.request));
  });
}

bool MpiCommunicator::poll_signal(int tag, int* source, int64_t* value) {
  bool got = false;
  run([&] {
    reap_signals();
    int flag = 0;
    MPI_Status st;
    ADA_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_, &flag, &st));
    if (!flag) return;
    ADA_MPI_CHECK(MPI_Recv(value, 1, MPI_INT64_T, st.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE));
    *source = st.MPI_SOURCE;
    got = true;
  });
  return got;
}

WorkHandle MpiCommunicator::allreduce_async(Tensor& t, ReduceOp op) {
  mpi_type(t, "allreduce_async");
  Tensor held = t;  // keeps the storage alive until the operation ran
  return CommThread::instance().submit([this, held, op]() mutable { allreduce(held, op); });
}

WorkHandle MpiCommunicator::broadcast_async(Tensor& t, int root) {
  mpi_type(t, "broadcast_async");
  Tensor held = t;
  return CommThread::instance().submit([this, held, root]() mutable { broadcast(held, root); });
}

WorkHandle MpiCommunicator::run_async(std::function<void()> op) {
  return CommThread::instance().submit(std::move(op));
}

}  // namespace ada::comm
