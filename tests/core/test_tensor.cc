// Tensor creation, views, copies, dtypes, devices and the counter-based generator.
#include <gtest/gtest.h>

#include <cmath>

#include "core/backend/cuda_runtime.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/tensor.h"

namespace ada {
namespace {

TEST(Tensor, CreationAndShape) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.size(-1), 3);
  EXPECT_EQ(z.str(), "f32[2,3] cpu");
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.f);
  for (float v : Tensor::ones({4}).to_vector<float>()) EXPECT_EQ(v, 1.f);
  for (int64_t v : Tensor::full({3}, 7, DType::i64).to_vector<int64_t>()) EXPECT_EQ(v, 7);
  EXPECT_EQ(Tensor::arange(0, 5, 2, DType::i32).to_vector<int32_t>(),
            (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(Tensor::arange(1, 2, 0.25).to_vector<float>(),
            (std::vector<float>{1, 1.25, 1.5, 1.75}));
  Tensor s = Tensor::empty({});
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(Tensor::empty({0, 5}).numel(), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Tensor::empty({3}).raw_data()) % 64, 0u);
}

TEST(Tensor, HalfTypesAreRepresentable) {
  Tensor h = Tensor::empty({4}, DType::f16), b = Tensor::empty({4}, DType::bf16);
  EXPECT_EQ(h.nbytes(), 8u);
  EXPECT_EQ(b.nbytes(), 8u);
  EXPECT_NE(h.data<Half>(), nullptr);
  EXPECT_THROW(h.data<float>(), DTypeError);
  EXPECT_EQ(dtype_from_name("BF16"), DType::bf16);
  EXPECT_THROW(dtype_from_name("f8"), DTypeError);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::arange(0, 12);
  Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  Tensor row = r.narrow(1, 2);
  EXPECT_EQ(row.shape(), (Shape{2, 4}));
  EXPECT_EQ(row.to_vector<float>()[0], 4.f);
  row.data<float>()[0] = 100.f;
  EXPECT_EQ(t.to_vector<float>()[4], 100.f);
  EXPECT_TRUE(row.shares_storage_with(t));
  Tensor c = t.clone();
  c.data<float>()[0] = -1.f;
  EXPECT_EQ(t.to_vector<float>()[0], 0.f);
}

TEST(Tensor, BadShapesThrowShapeError) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_THROW(t.reshape({4, 2}), ShapeError);
  EXPECT_THROW(t.reshape({-1, -1}), ShapeError);
  EXPECT_THROW(t.narrow(1, 2), ShapeError);
  EXPECT_THROW(t.size(2), ShapeError);
  EXPECT_THROW(Tensor::zeros({2, -3}), ShapeError);
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  EXPECT_THROW(t.item(), ShapeError);
  Tensor u = Tensor::zeros({3, 2});
  EXPECT_NO_THROW(u.copy_from(t));  // same numel and dtype
  EXPECT_THROW(u.copy_from(Tensor::zeros({5})), ShapeError);
  EXPECT_THROW(u.copy_from(Tensor::zeros({6}, DType::i32)), DTypeError);
  try {
    t.reshape({4, 2});
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2,3]"), std::string::npos) << e.what();
  }
}

#ifndef ADA_WITH_CUDA  // a CUDA build links the real runtime instead of the stub
TEST(Tensor, CudaWithoutCudaSaysHowToEnableIt) {
  try {
    Tensor::zeros({2}).to(Device::cuda(0));
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("-DADA_WITH_CUDA=ON"), std::string::npos) << e.what();
  }
}

TEST(Tensor, CudaGraphWithoutCudaSaysHowToEnableIt) {
  cuda::Graph g;
  bool ran = false;
  try {
    g.capture(0, [&] { ran = true; });
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("capturing a CUDA graph"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-DADA_WITH_CUDA=ON"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ran);
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(cuda::capturing(0));
  EXPECT_THROW(g.replay(), DeviceError);
}
#endif

TEST(Random, PhiloxKnownAnswer) {
  // Known-answer vectors of Philox4x32-10 (Random123 kat_vectors): counter 0, key 0 and
  // counter all-ones, key all-ones.
  auto r0 = philox4x32(0, 0, 0);
  EXPECT_EQ(r0[0], 0x6627e8d5u);
  EXPECT_EQ(r0[1], 0xe169c58du);
  EXPECT_EQ(r0[2], 0xbc57ac4cu);
  EXPECT_EQ(r0[3], 0x9b00dbd8u);
  auto r1 = philox4x32(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(r1[0], 0x408f276du);
  EXPECT_EQ(r1[1], 0x41c83b0eu);
  EXPECT_EQ(r1[2], 0xa20bc7c6u);
  EXPECT_EQ(r1[3], 0x6d5451fdu);
}

TEST(Random, IndependentOfThreadCountAndResumable) {
  set_num_threads(1);
  Generator g1(42);
  Tensor a = Tensor::randn({100003}, g1);
  set_num_threads(2);
  Generator g2(42);
  Tensor b = Tensor::randn({100003}, g2);
  set_num_threads(0);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  // Two draws equal one draw of the concatenation's counters; state restores exactly.
  Generator g3(7);
  Tensor u1 = Tensor::uniform({10}, g3);
  uint64_t off = g3.offset();
  Tensor u2 = Tensor::uniform({10}, g3);
  Generator g4(0);
  g4.set_state(7, off);
  EXPECT_EQ(Tensor::uniform({10}, g4).to_vector<float>(), u2.to_vector<float>());
  EXPECT_NE(u1.to_vector<float>(), u2.to_vector<float>());
}

TEST(Random, MomentsAreRight) {
  Generator g(3);
  auto n = Tensor::randn({200000}, g, 1.f, 2.f).to_vector<float>();
  double m = 0, v = 0;
  for (float x : n) m += x;
  m /= n.size();
  for (float x : n) v += (x - m) * (x - m);
  v /= n.size();
  EXPECT_NEAR(m, 1.0, 0.02);
  EXPECT_NEAR(std::sqrt(v), 2.0, 0.02);
  auto u = Tensor::uniform({200000}, g, -1.f, 3.f).to_vector<float>();
  double mu = 0;
  for (float x : u) {
    ASSERT_GE(x, -1.f);
    ASSERT_LT(x, 3.f);
    mu += x;
  }
  EXPECT_NEAR(mu / u.size(), 1.0, 0.02);
}

}  // namespace
}  // namespace ada
