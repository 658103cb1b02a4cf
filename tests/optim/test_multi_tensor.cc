// The built-in optimizers update a whole step with one multi-tensor op (Optimizer::update_all);
// a strategy that steps each parameter as its gradient is final calls step(Param) instead. Both
// must give the same bits, state and LAMB trust ratios included, whatever the mix of parameters
// (with and without decay, with and without a gradient this step, several sizes).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/random.h"
#include "optim/lamb.h"
#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

std::vector<Param> model(uint64_t seed) {
  Generator gen(seed);
  std::vector<Param> ps;
  const Shape shapes[] = {{5, 3}, {3}, {1}, {40000}, {7, 2, 2}};
  for (size_t i = 0; i < std::size(shapes); ++i) {
    Param p;
    p.name = "p";
    p.name += std::to_string(i);  // (gcc 12 warns, falsely, of overlap in "p" + to_string)
    p.var = Variable(Tensor::randn(shapes[i], gen), true, p.name);
    p.weight_decay = i % 2 == 0;  // p1 and p3 are "biases"
    ps.push_back(p);
  }
  return ps;
}

// Gradients of step k; p2 has none on step 1.
void set_grads(const std::vector<Param>& ps, int k) {
  Generator gen(100 + k);
  for (size_t i = 0; i < ps.size(); ++i)
    ps[i].var.grad() = k == 1 && i == 2 ? Tensor() : Tensor::randn(ps[i].var.shape(), gen);
}

class MultiTensor : public ::testing::TestWithParam<const char*> {};

TEST_P(MultiTensor, OneCallPerStepEqualsOneParameterAtATime) {
  auto all = build_optimizer(GetParam()), one = build_optimizer(GetParam());
  std::vector<Param> a = model(7), b = model(7);
  for (int k = 0; k < 4; ++k) {
    set_grads(a, k);
    set_grads(b, k);
    const float lr = 0.01f * static_cast<float>(k + 1);
    all->step(a, lr);
    for (const Param& p : b) one->step(p, lr);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(bit_equal(a[i].var.value(), b[i].var.value())) << a[i].name << " step " << k;
  }
  const NamedTensors sa = all->state(), sb = one->state();
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (size_t i = 0; i < sa.tensors.size(); ++i) {
    EXPECT_EQ(sa.tensors[i].first, sb.tensors[i].first);
    EXPECT_TRUE(bit_equal(sa.tensors[i].second, sb.tensors[i].second)) << sa.tensors[i].first;
  }
  if (const auto* la = dynamic_cast<const Lamb*>(all.get())) {
    const auto ra = la->last_trust_ratios();
    const auto rb = dynamic_cast<const Lamb&>(*one).last_trust_ratios();
    EXPECT_EQ(ra, rb);
    ASSERT_EQ(ra.size(), a.size());
    EXPECT_NE(ra.at("p0"), 1.0);
    // p1 has no decay: adapted only with always_adapt.
    EXPECT_EQ(ra.at("p1") == 1.0, !la->options().always_adapt);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, MultiTensor,
    ::testing::Values("name: sgd\nlr: 0.1\nmomentum: 0\nweight_decay: 0.01\n",
                      "name: sgd\nlr: 0.1\nweight_decay: 0.01\n",
                      "name: sgd\nlr: 0.1\nnesterov: true\nweight_decay: 0.01\n",
                      "name: adam\nlr: 0.01\nweight_decay: 0.1\n", "name: adamw\nlr: 0.01\n",
                      "name: lamb\nlr: 0.01\n", "name: lamb\nlr: 0.01\nalways_adapt: true\n"));

}  // namespace
}  // namespace ada::optim::testing
