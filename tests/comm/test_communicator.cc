// The MPI communicator's operations at every rank count the suite runs (1..8).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "comm/comm_thread.h"
#include "comm/watchdog.h"
#include "comm_test_util.h"
#include "core/ops.h"

namespace ada::comm {
namespace {
using testing::world;

TEST(Communicator, AllreduceSumMaxOnTensorsAndDoubles) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  Tensor t = Tensor::from_vector<float>({float(r), 1.f, float(-r)}, {3});
  c.allreduce(t);
  EXPECT_EQ(t.to_vector<float>(),
            (std::vector<float>{float(p * (p - 1) / 2), float(p), float(-p * (p - 1) / 2)}));
  Tensor m = Tensor::from_vector<int64_t>({r, -r}, {2});
  c.allreduce(m, ReduceOp::max);
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{p - 1, 0}));
  double d[2] = {0.5 * r, 1e-300};
  c.allreduce(d, 2);
  EXPECT_DOUBLE_EQ(d[0], 0.25 * p * (p - 1));
  EXPECT_DOUBLE_EQ(d[1], 1e-300 * p);
  Tensor empty = Tensor::zeros({0});
  c.allreduce(empty);
}

// f16/bf16 tensors: summed in f32 and rounded at each step of MPI's algorithm (exact for small
// integers), the same bits on every rank; sent, gathered and broadcast as 16-bit words; max is
// an error.
TEST(Communicator, HalfPrecisionSumsAndMoves) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  for (DType t : {DType::f16, DType::bf16}) {
    const std::string what = dtype_name(t);
    auto to_half = [&](const std::vector<float>& v) {
      Tensor h = Tensor::empty({static_cast<int64_t>(v.size())}, t);
      ops::cast_out(Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}), h);
      return h;
    };
    auto to_float = [](const Tensor& h) {
      Tensor f = Tensor::empty(h.shape());
      ops::cast_out(h, f);
      return f.to_vector<float>();
    };
    Tensor exact = to_half({float(r), 1.f, float(-2 * r), 0.5f});
    c.allreduce(exact);
    EXPECT_EQ(to_float(exact),
              (std::vector<float>{float(p * (p - 1) / 2), float(p), float(-p * (p - 1)), 0.5f * p}))
        << what;
    // Random values: within the rounding of p - 1 additions, identical on every rank.
    Generator g(40 + r);
    const std::vector<float> mine = Tensor::randn({999}, g).to_vector<float>();
    Tensor h = to_half(mine);
    const std::vector<float> rounded = to_float(h);
    c.allreduce(h);
    const std::vector<float> got = to_float(h);
    const auto all = testing::gather_all(rounded);
    const double ulp = t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    for (size_t i = 0; i < got.size(); ++i) {
      double sum = 0, mag = 0;
      for (int k = 0; k < p; ++k) sum += all[k][i], mag += std::fabs(all[k][i]);
      ASSERT_LE(std::fabs(got[i] - sum), p * ulp * mag + 1e-6) << what << " element " << i;
    }
    const auto seen = testing::gather_all(got);
    for (int k = 1; k < p; ++k) ASSERT_EQ(seen[k], seen[0]) << what << ": rank " << k << " differs";
    // reduce_scatter, allgather, broadcast.
    Tensor blocks = to_half(std::vector<float>(3 * p, 2.f)), block = Tensor::empty({3}, t);
    c.reduce_scatter(blocks, block);
    EXPECT_EQ(to_float(block), std::vector<float>(3, 2.f * p)) << what;
    Tensor all_blocks = Tensor::empty({3 * p}, t);
    c.allgather(block, all_blocks);
    EXPECT_EQ(to_float(all_blocks), std::vector<float>(3 * p, 2.f * p)) << what;
    Tensor b = to_half({float(r), 3.f});
    c.broadcast(b, p - 1);
    EXPECT_EQ(to_float(b), (std::vector<float>{float(p - 1), 3.f})) << what;
    EXPECT_THROW(c.allreduce(b, ReduceOp::max), DTypeError) << what;
  }
}

TEST(Communicator, BroadcastAllgatherReduceScatter) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  Tensor b = Tensor::full({4}, r == p - 1 ? 7.0 : -1.0);
  c.broadcast(b, p - 1);
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(4, 7.f));
  Tensor in = Tensor::full({2}, r), out = Tensor::empty({2 * p});
  c.allgather(in, out);
  for (int i = 0; i < p; ++i) EXPECT_EQ(out.to_vector<float>()[2 * i + 1], float(i));
  Tensor blocks = Tensor::arange(0, 3 * p), mine = Tensor::empty({3});
  c.reduce_scatter(blocks, mine);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(mine.to_vector<float>()[j], float(p * (3 * r + j)));
  EXPECT_THROW(c.allgather(in, mine), ShapeError);
}

TEST(Communicator, UnevenReduceScatterAndInPlaceAllgather) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  // Block i holds i + 1 elements, except block 1 (if any), which is empty.
  std::vector<int64_t> counts(p);
  for (int i = 0; i < p; ++i) counts[i] = i == 1 ? 0 : i + 1;
  int64_t n = 0, mine_at = 0;
  for (int i = 0; i < p; ++i) {
    if (i == r) mine_at = n;
    n += counts[i];
  }
  Tensor in = Tensor::empty({n});
  for (int64_t k = 0; k < n; ++k) in.data<float>()[k] = float(k + 100 * r);
  Tensor out = Tensor::empty({counts[r]});
  c.reduce_scatter(in, out, counts);
  for (int64_t k = 0; k < counts[r]; ++k)
    EXPECT_EQ(out.data<float>()[k], float(p * (mine_at + k) + 100 * p * (p - 1) / 2)) << k;
  // Each rank fills only its own block; afterwards every rank holds every block.
  Tensor buf = Tensor::full({n}, -1.0);
  for (int64_t k = 0; k < counts[r]; ++k) buf.data<float>()[mine_at + k] = float(r);
  c.allgather_inplace(buf, counts);
  int64_t off = 0;
  for (int i = 0; i < p; ++i)
    for (int64_t k = 0; k < counts[i]; ++k) EXPECT_EQ(buf.data<float>()[off++], float(i)) << i;
  // Counts that do not describe the buffer are errors on the calling rank, before any MPI call.
  std::vector<int64_t> bad = counts;
  bad[0] += 1;
  EXPECT_THROW(c.allgather_inplace(buf, bad), ShapeError);
  EXPECT_THROW(c.reduce_scatter(in, out, std::vector<int64_t>(p + 1, 0)), ShapeError);
}

TEST(Communicator, PipelinedSendrecvDeliversPiecesInOrder) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const int to = (r + 1) % p, from = (r + p - 1) % p;
  for (int64_t n : {0, 1, 10, 1000, 4097}) {
    for (int64_t chunk : {0, 1, 7, 1024, 100000}) {
      Tensor out = Tensor::empty({n}), in = Tensor::full({n}, -1.0);
      for (int64_t k = 0; k < n; ++k) out.data<float>()[k] = float(r * 10000 + k);
      int64_t next = 0;  // pieces cover [0, n) in order, each one already arrived when reported
      c.sendrecv_pipelined(out, to, in, from, 5, chunk, [&](int64_t off, int64_t count) {
        EXPECT_EQ(off, next);
        EXPECT_GT(count, 0);
        if (chunk > 0) {
          EXPECT_LE(count, chunk);
        }
        for (int64_t k = off; k < off + count; ++k)
          ASSERT_EQ(in.data<float>()[k], float(from * 10000 + k));
        next = off + count;
      });
      EXPECT_EQ(next, n) << "n " << n << " chunk " << chunk;
    }
  }
  // One side empty: rank 0 only sends, rank 1 only receives (a fold); others sit out.
  if (p >= 2 && r < 2) {
    Tensor data = Tensor::full({300}, 3.0), none = Tensor::empty({0});
    int pieces = 0;
    if (r == 0)
      c.sendrecv_pipelined(data, 1, none, 1, 6, 64, [&](int64_t, int64_t) { ++pieces; });
    else
      c.sendrecv_pipelined(none, 0, data, 0, 6, 64, [&](int64_t, int64_t) { ++pieces; });
    EXPECT_EQ(pieces, r == 0 ? 0 : 5);
    EXPECT_EQ(data.to_vector<float>(), std::vector<float>(300, 3.f));
  }
  // An exception from the callback leaves only after every piece went both ways (pieces above
  // MPI's eager limit: a send left unmatched would hang here).
  Tensor out = Tensor::full({100000}, r), in = Tensor::empty({100000});
  EXPECT_THROW(c.sendrecv_pipelined(out, to, in, from, 7, 20000,
                                    [](int64_t, int64_t) { ADA_THROW(Error) << "stop"; }),
               Error);
  // The failure stops the communication thread (fail-fast); for the tests that follow in this
  // process, start it again.
  ASSERT_NE(CommThread::instance().failure(), nullptr);
  CommThread::instance().reset_failure();
  c.barrier();
  EXPECT_EQ(in.to_vector<float>()[99999], float(from));
}

TEST(Communicator, RingSendrecvAndSplit) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  Tensor out = Tensor::full({5}, r), in = Tensor::empty({5});
  c.sendrecv(out, (r + 1) % p, in, (r + p - 1) % p, 3);
  EXPECT_EQ(in.to_vector<float>()[0], float((r + p - 1) % p));
  auto half = c.split(r % 2, -r);  // reverse order inside each half
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->size(), (p + 1 - r % 2) / 2);
  EXPECT_EQ(half->rank(), half->size() - 1 - r / 2);
  auto none = c.split(r == 0 ? 0 : -1, 0);
  EXPECT_EQ(none == nullptr, r != 0);
  EXPECT_EQ(c.local_size(), p);  // one node here
  EXPECT_EQ(c.local_rank(), r);
}

TEST(Communicator, AsyncOperationsKeepOrderAndPropagateErrors) {
  Communicator& c = world();
  const int p = c.size();
  std::vector<Tensor> ts;
  std::vector<WorkHandle> works;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(Tensor::full({1000}, i));
    works.push_back(c.allreduce_async(ts.back()));
  }
  c.barrier();  // a blocking call queues behind the async ones
  for (int i = 0; i < 6; ++i) {
    works[i]->wait();
    EXPECT_EQ(ts[i].to_vector<float>()[999], float(i * p));
  }
  Tensor f16 = Tensor::zeros({2}, DType::f16);
  EXPECT_THROW(c.allreduce(f16, ReduceOp::max),
               DTypeError);  // argument checks fail before anything is queued
  c.barrier();
}

TEST(Communicator, AfterAFailureNothingMoreRunsAndEveryWaitReturns) {
  Communicator& c = world();
  CommThread& thread = CommThread::instance();
  c.barrier();
  // Hold the thread busy so that later operations are queued behind the failing one.
  std::atomic<bool> release{false};
  auto gate = c.run_async([&] {
    while (!release) std::this_thread::yield();
  });
  auto boom = c.run_async([] { ADA_THROW(CommError) << "boom from the comm thread"; });
  bool ran = false;
  Tensor t = Tensor::full({8}, 1.0);
  auto queued = c.run_async([&] { ran = true; });
  auto queued_allreduce = c.allreduce_async(t);
  release = true;
  gate->wait();
  EXPECT_THROW(boom->wait(), CommError);
  for (auto& w : {queued, queued_allreduce}) {
    try {
      w->wait();
      ADD_FAILURE() << "an operation queued behind a failure ran";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "communication stopped on rank " + std::to_string(c.rank()) +
                    " after an earlier operation failed: boom from the comm thread"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(t.to_vector<float>()[0], 1.f);  // the allreduce never ran
  // Blocking calls and new submissions fail at once too (no collective a peer cannot join).
  EXPECT_THROW(c.barrier(), CommError);
  EXPECT_THROW(c.run_async([] {})->wait(), CommError);
  EXPECT_NE(thread.failure(), nullptr);
  thread.reset_failure();  // for the tests that follow in this process
  c.barrier();
}

// The hang watchdog counts only the time inside a call: calls shorter than the limit, and idle
// time between calls longer than it, leave the process running (the firing itself ends the
// process: tests/apps/reliability_e2e.sh, case faults).
TEST(CommWatchdog, CountsOnlyTimeInsideACall) {
  EXPECT_THROW(comm::set_comm_timeout(-1), ConfigError);
  comm::set_comm_timeout(1.0);
  EXPECT_EQ(comm::comm_timeout(), 1.0);
  {
    const comm::WatchedCall call("a short call", __FILE__, __LINE__);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));  // idle, past the limit
  auto& w = world();
  double v = 1;
  w.allreduce(&v, 1);  // watched MPI calls still work
  EXPECT_EQ(v, w.size());
  comm::set_comm_timeout(0);
  EXPECT_EQ(comm::comm_timeout(), 0.0);
}

}  // namespace
}  // namespace ada::comm
