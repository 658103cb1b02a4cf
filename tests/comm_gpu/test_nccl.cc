// The NCCL communicator (label `cuda`, under mpiexec): every collective on device buffers against
// its closed form, CPU tensors through the host communicator, the compute stream's producers
// ordered before NCCL, pipelined exchanges, split, and the errors a caller can make. Needs one
// GPU per rank (NCCL refuses two ranks on one device) or ADA_NCCL_SHARED_GPU=1 (comm/shared_gpu.h:
// how tools/gpu_test.sh runs it at 2-4 ranks on one GPU); otherwise every test skips with the
// reason, the same on every rank.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/comm_thread.h"
#include "comm/nccl_library.h"
#include "comm_gpu/nccl_test_util.h"
#include "core/backend/cuda_runtime.h"
#include "core/ops.h"
#include "core/random.h"

namespace ada::comm {
namespace {

std::shared_ptr<Communicator> host() {
  return testing::nccl_host();
}
Device gpu() {
  return testing::test_gpu();
}
using testing::nccl;

template <class T>
Tensor on_gpu(const std::vector<T>& v) {
  return Tensor::from_vector<T>(v, {static_cast<int64_t>(v.size())}).to(gpu());
}

// x in dtype `dt` (16-bit), on x's device; and a 16-bit tensor's values as floats.
Tensor narrowed(const Tensor& x, DType dt) {
  Tensor out = Tensor::empty(x.shape(), dt, x.device());
  ops::cast_out(x, out);
  return out;
}
std::vector<float> widened(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::f32, x.device());
  ops::cast_out(x, out);
  return out.to_vector<float>();
}

std::vector<float> iota(int64_t n, float start) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(Nccl, IdentityAndBackend) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  EXPECT_EQ(c.backend(), "nccl");
  EXPECT_EQ(c.rank(), host()->rank());
  EXPECT_EQ(c.size(), host()->size());
}

TEST(Nccl, AllreduceSumMaxMinEveryDtype) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  const int r = c.rank(), p = c.size();
  Tensor f = on_gpu(iota(1000, static_cast<float>(r)));
  c.allreduce(f);
  std::vector<float> got = f.to_vector<float>();
  for (int i = 0; i < 1000; ++i)
    ASSERT_FLOAT_EQ(got[i], p * static_cast<float>(i) + p * (p - 1) / 2.f) << i;
  Tensor i32 = on_gpu(std::vector<int32_t>{r, -r, 7});
  c.allreduce(i32, ReduceOp::max);
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{p - 1, 0, 7}));
  Tensor i64 = on_gpu(std::vector<int64_t>{int64_t{1} << 40 | r, -r});
  c.allreduce(i64, ReduceOp::min);
  EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -(p - 1)}));
  // 16-bit floats: integers whose every partial sum stays within +-256, exact in both (bf16
  // has 8 significant bits).
  std::vector<float> small(300);
  for (int i = 0; i < 300; ++i) small[i] = static_cast<float>(i % 41 - 20 + r);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor h = narrowed(on_gpu(small), dt);
    c.allreduce(h);
    ASSERT_EQ(h.dtype(), dt);
    const std::vector<float> hv = widened(h);
    for (int i = 0; i < 300; ++i)
      ASSERT_EQ(hv[i], p * (i % 41 - 20.f) + p * (p - 1) / 2.f) << dtype_name(dt) << " " << i;
    Tensor m = narrowed(on_gpu(std::vector<float>{1.f * r, -1.f * r}), dt);
    c.allreduce(m, ReduceOp::max);
    EXPECT_EQ(widened(m), (std::vector<float>{p - 1.f, 0.f})) << dtype_name(dt);
  }
  Tensor empty = Tensor::empty({0}, DType::f32, gpu());
  c.allreduce(empty);
}

TEST(Nccl, BroadcastAllgatherReduceScatter) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  const int r = c.rank(), p = c.size();
  Tensor b = on_gpu(iota(33, 100.f * r));
  c.broadcast(b, p - 1);
  EXPECT_EQ(b.to_vector<float>(), iota(33, 100.f * (p - 1)));

  Tensor in = on_gpu(iota(5, 10.f * r));
  Tensor out = Tensor::empty({5 * p}, DType::f32, gpu());
  c.allgather(in, out);
  std::vector<float> all = out.to_vector<float>();
  for (int q = 0; q < p; ++q)
    EXPECT_EQ(std::vector<float>(all.begin() + 5 * q, all.begin() + 5 * q + 5), iota(5, 10.f * q))
        << q;

  Tensor blocks = on_gpu(iota(4 * p, static_cast<float>(r)));
  Tensor mine = Tensor::empty({4}, DType::f32, gpu());
  c.reduce_scatter(blocks, mine);
  std::vector<float> got = mine.to_vector<float>();
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], p * (4.f * r + i) + p * (p - 1) / 2.f) << i;
}

TEST(Nccl, UnevenReduceScatterAndAllgatherInplace) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  const int r = c.rank(), p = c.size();
  std::vector<int64_t> counts(p);
  for (int q = 0; q < p; ++q) counts[q] = q % 3 == 1 ? 0 : 3 + 2 * q;  // some empty blocks
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + r, int64_t{0});
  Tensor in = on_gpu(iota(total, static_cast<float>(r)));
  Tensor out = Tensor::empty({counts[r]}, DType::f32, gpu());
  c.reduce_scatter(in, out, counts);
  std::vector<float> got = out.to_vector<float>();
  for (int64_t i = 0; i < counts[r]; ++i)
    EXPECT_FLOAT_EQ(got[i], p * static_cast<float>(offset + i) + p * (p - 1) / 2.f);

  std::vector<float> buf(total, -1.f);
  for (int64_t i = 0; i < counts[r]; ++i) buf[offset + i] = 1000.f * r + i;
  Tensor shared = on_gpu(buf);
  c.allgather_inplace(shared, counts);
  std::vector<float> all = shared.to_vector<float>();
  int64_t at = 0;
  for (int q = 0; q < p; ++q)
    for (int64_t i = 0; i < counts[q]; ++i)
      EXPECT_FLOAT_EQ(all[at++], 1000.f * q + i) << q << " " << i;
  EXPECT_THROW(c.reduce_scatter(in, out, std::vector<int64_t>(p + 1, 0)), ShapeError);
}

TEST(Nccl, SendrecvRingAndPipelinedPieces) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  const int r = c.rank(), p = c.size(), to = (r + 1) % p, from = (r + p - 1) % p;
  Tensor out = on_gpu(iota(100, 1000.f * r));
  Tensor in = Tensor::zeros({100}, DType::f32, gpu());
  c.sendrecv(out, to, in, from);
  EXPECT_EQ(in.to_vector<float>(), iota(100, 1000.f * from));

  Tensor piecewise = Tensor::zeros({100}, DType::f32, gpu());
  std::vector<std::pair<int64_t, int64_t>> seen;
  c.sendrecv_pipelined(out, to, piecewise, from, 0, 7, [&](int64_t off, int64_t n) {
    seen.emplace_back(off, n);
    // The piece has arrived when it is handed over.
    std::vector<float> v = piecewise.narrow(off, n).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(v[i], 1000.f * from + off + i);
  });
  ASSERT_EQ(seen.size(), 15u);
  for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k].first, static_cast<int64_t>(k) * 7);
  EXPECT_EQ(seen.back().second, 2);

  // A failing consumer: every piece still arrives (nothing left in flight), then the error leaves.
  Tensor late = Tensor::zeros({100}, DType::f32, gpu());
  EXPECT_THROW(c.sendrecv_pipelined(out, to, late, from, 0, 10,
                                    [&](int64_t off, int64_t) {
                                      if (off == 10) throw ConfigError("consumer failed");
                                    }),
               ConfigError);
  EXPECT_EQ(late.to_vector<float>(), iota(100, 1000.f * from));
  // The communication thread is fail-fast (comm/comm_thread.h): the consumer's error stopped it
  // like any failed operation, so the job would end here. The tests after this one restart it.
  EXPECT_NE(CommThread::instance().failure(), nullptr);
  CommThread::instance().reset_failure();
}

TEST(Nccl, WaitsForTheComputeStreamsProducers) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  Generator g(7 + c.rank());
  Tensor a = Tensor::randn({1024, 1024}, g).to(gpu());
  Tensor x = ops::matmul(a, a);  // queued on the compute stream; allgather must see its result
  for (int k = 0; k < 4; ++k) x = ops::matmul(x, a);
  Tensor out = Tensor::empty({x.numel() * c.size()}, DType::f32, gpu());
  c.allgather(x.flatten(), out);
  const std::vector<float> want = x.to_vector<float>();
  const std::vector<float> got = out.narrow(x.numel() * c.rank(), x.numel()).to_vector<float>();
  EXPECT_EQ(got, want);
}

TEST(Nccl, AsyncAllreduceAndBroadcast) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  Tensor t = on_gpu(iota(64, 1.f));
  Tensor b = on_gpu(iota(8, static_cast<float>(c.rank())));
  WorkHandle w1 = c.allreduce_async(t);
  WorkHandle w2 = c.broadcast_async(b, 0);
  w1->wait();
  w2->wait();
  std::vector<float> got = t.to_vector<float>();
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(got[i], c.size() * (1.f + i));
  EXPECT_EQ(b.to_vector<float>(), iota(8, 0.f));
}

TEST(Nccl, HostValuesAndCpuTensorsGoThroughTheHost) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  double d[2] = {1.0, static_cast<double>(c.rank())};
  c.allreduce(d, 2);
  EXPECT_EQ(d[0], c.size());
  Tensor cpu = Tensor::full({3}, 2.0);
  c.allreduce(cpu);
  EXPECT_EQ(cpu.to_vector<float>(), std::vector<float>(3, 2.f * c.size()));
  EXPECT_EQ(broadcast_string(c, c.rank() == 0 ? "from rank 0" : "", 0), "from rank 0");
  c.barrier();
}

TEST(Nccl, Split) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  std::unique_ptr<Communicator> half = c.split(c.rank() % 2, c.rank());
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->backend(), "nccl");
  EXPECT_EQ(half->size(), (c.size() + 1 - c.rank() % 2) / 2);
  Tensor t = on_gpu(std::vector<float>{1.f});
  half->allreduce(t);
  EXPECT_FLOAT_EQ(t.to_vector<float>()[0], static_cast<float>(half->size()));
  std::unique_ptr<Communicator> none = c.split(c.rank() == 0 ? -1 : 0, 0);
  EXPECT_EQ(none == nullptr, c.rank() == 0);
}

TEST(Nccl, CallerErrorsAreClear) {
  ADA_REQUIRE_NCCL();
  Communicator& c = nccl();
  Tensor g = Tensor::zeros({4}, DType::f32, gpu());
  Tensor out = Tensor::empty({4 * c.size()});
  try {
    c.allgather(g, out);
    FAIL() << "mixed devices accepted";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("one device"), std::string::npos) << e.what();
  }
  try {
    c.broadcast(g, c.size());
    FAIL() << "root out of range accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("root"), std::string::npos) << e.what();
  }
  Tensor wrong = Tensor::empty({3}, DType::f32, gpu());
  EXPECT_THROW(c.allgather(g, wrong), ShapeError);
}

TEST(Nccl, BadDeviceIsADeviceError) {
  ADA_REQUIRE_NCCL();
  EXPECT_THROW(make_nccl_communicator(host(), cuda::device_count()), DeviceError);
}

// The run-time loader, without a GPU: CTest runs this with ADA_NCCL_LIBRARY naming the toolkit's
// libnccl (ADA_TEST_NCCL_EXPECT=found) and a missing file (=missing). Run by hand (no expectation
// set): whatever this machine has must either load completely or say how to fix it.
TEST(NcclLibrary, LoadsTheNamedFileOrSaysHowToFixIt) {
  const char* env_expect = std::getenv("ADA_TEST_NCCL_EXPECT");
  const std::string named =
      std::getenv("ADA_NCCL_LIBRARY") ? std::getenv("ADA_NCCL_LIBRARY") : "libnccl.so.2";
  std::string expect = env_expect ? env_expect : "";
  if (expect.empty()) {
    try {
      nccl::library();
      expect = "found";
    } catch (const DeviceError&) {
      expect = "missing";
    }
  }
  if (expect == "found") {
    const nccl::Library& lib = nccl::library();
    EXPECT_EQ(lib.path, named);
    EXPECT_GE(lib.version, 21800);
    EXPECT_NE(lib.ncclCommSplit, nullptr);
    EXPECT_NE(lib.ncclGroupEnd, nullptr);
  } else {
    for (int twice = 0; twice < 2; ++twice) {  // the failure is remembered, and said again
      try {
        nccl::library();
        FAIL() << "loaded '" << named << "'";
      } catch (const DeviceError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(named), std::string::npos) << what;
        EXPECT_NE(what.find("ADA_NCCL_LIBRARY"), std::string::npos) << what;
      }
    }
  }
}

}  // namespace
}  // namespace ada::comm
