// 16-bit activations on the CPU (core/ops.h): every op of tests/util/act16_cases.h takes bf16 and
// f16 activations, gives each output in its documented dtype (activations in the input's 16-bit
// type; parameter gradients, statistics, losses and log-probabilities f32) and computes in f32:
// each output equals the op on the f32 values of the same inputs, rounded once to its dtype, bit
// for bit (a backward reading a forward output reads it as stored). The CUDA backend is held to
// these results (tests/cuda/test_cuda_ops.cc).
#include <gtest/gtest.h>

#include <cstring>

#include "core/ops.h"
#include "util/act16_cases.h"

namespace ada {
namespace {

using testing::Kind;

TEST(Activations16Ops, EveryOpComputesInF32AndRoundsItsActivationOutputs) {
  for (const testing::Act16Case& c : testing::act16_cases()) {
    for (DType act : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(c.name + " on " + dtype_name(act) + " activations");
      const std::vector<Tensor> in = testing::act16_inputs(c, act, 7);
      std::vector<Tensor> wide;
      for (const Tensor& t : in)
        wide.push_back(t.dtype() == act ? ops::to_dtype(t, DType::f32) : t);
      // The reference multiplies into `act` too (matmul's out) and rounds what a backward reads
      // as it is stored (testing::as_stored).
      const std::vector<Tensor> got = c.run(in, act), want = c.run(wide, act);
      ASSERT_EQ(got.size(), c.outputs.size());
      ASSERT_EQ(want.size(), c.outputs.size());
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("output " + std::to_string(i));
        const DType expect = c.outputs[i] == Kind::act ? act : DType::f32;
        ASSERT_EQ(got[i].dtype(), expect);
        ASSERT_EQ(got[i].shape(), want[i].shape());
        const Tensor ref = ops::to_dtype(want[i], expect);
        EXPECT_EQ(std::memcmp(got[i].raw_data(), ref.raw_data(), ref.numel() * dtype_size(expect)),
                  0);
      }
    }
  }
}

// A 16-bit activation among f32 operands of an elementwise op: the result takes the first
// argument's dtype.
TEST(Activations16Ops, MixedOperandsTakeTheFirstArgumentsDtype) {
  Generator g(3);
  const Tensor a = Tensor::randn({4, 5}, g),
               b = ops::to_dtype(Tensor::randn({4, 5}, g), DType::bf16);
  EXPECT_EQ(ops::add(a, b).dtype(), DType::f32);
  EXPECT_EQ(ops::add(b, a).dtype(), DType::bf16);
  Tensor t = ops::to_dtype(a, DType::f16);
  ops::add_(t, b);  // in place on a 16-bit tensor: rounded back into it
  EXPECT_EQ(t.dtype(), DType::f16);
  const Tensor sum = ops::add(ops::to_dtype(ops::to_dtype(a, DType::f16), DType::f32),
                              ops::to_dtype(b, DType::f32));
  const Tensor want = ops::to_dtype(sum, DType::f16);
  EXPECT_EQ(std::memcmp(t.raw_data(), want.raw_data(), want.numel() * 2), 0);
}

}  // namespace
}  // namespace ada
