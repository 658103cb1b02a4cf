// Optimizer state by parameter name: save → load → continue equals an unbroken run bit for bit
// (every optimizer, parameters reordered, one without gradient on some steps, through a
// safetensors file with model, optimizer and schedule in one checkpoint); load errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/random.h"
#include "core/serialize.h"
#include "optim/checkpoint.h"
#include "optim_test_util.h"
#include "util/temp_dir.h"

namespace ada::optim::testing {
namespace {

std::vector<Param> make_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Param> ps(3);
  const char* names[] = {"enc.layer.0.weight", "enc.layer.0.bias", "head.weight"};
  const Shape shapes[] = {{4, 6}, {6}, {3, 4}};
  for (int i = 0; i < 3; ++i) {
    ps[i].name = names[i];
    ps[i].var = Variable(Tensor::randn(shapes[i], gen), true, names[i]);
    ps[i].weight_decay = i != 1;  // the bias is excluded from decay
  }
  return ps;
}

// Step k's gradients, by name; head.weight has none at steps 1 and 5.
void set_grads(std::vector<Param>& ps, int k) {
  for (Param& p : ps) {
    if (p.name == "head.weight" && (k == 1 || k == 5)) {
      p.var.grad() = Tensor();
      continue;
    }
    Generator gen(1000 + k * 7 + p.name.size());
    p.var.grad() = Tensor::randn(p.var.shape(), gen, 0.f, k % 2 ? 0.3f : 2.f);
  }
}

const char* const kOptimizers[] = {
    "name: sgd\nlr: 0.1\nmomentum: 0.9\nweight_decay: 0.01\n",
    "name: sgd\nlr: 0.1\nmomentum: 0.9\nnesterov: true\nweight_decay: 0.01\n",
    "name: sgd\nlr: 0.1\nmomentum: 0\nweight_decay: 0.01\n",
    "name: adam\nlr: 0.01\nweight_decay: 0.01\n",
    "name: adamw\nlr: 0.01\nbeta1: 0.8\nbeta2: 0.95\n",
    "name: lamb\nlr: 0.01\n",
    "name: lamb\nlr: 0.01\nalways_adapt: true\nweight_decay: 0.1\n",
};
const char* const kSchedule = "name: cosine\nwarmup_steps: 2\ntotal_steps: 8\nend_lr: 0.001\n";

class Resume : public ::testing::TestWithParam<const char*> {};

TEST_P(Resume, SaveLoadContinueEqualsUnbrokenRunBitForBit) {
  constexpr int kSteps = 8, kSplit = 4;
  // Unbroken run.
  auto opt = build_optimizer(GetParam());
  auto sched = build_schedule(kSchedule, opt->lr());
  std::vector<Param> ref = make_params(7);
  for (int k = 0; k < kSteps; ++k) {
    set_grads(ref, k);
    opt->step(ref, static_cast<float>(sched->lr()));
    sched->advance();
  }

  // Run to kSplit, write one checkpoint (model, optimizer, schedule), drop everything.
  ada::testing::TempDir tmp("ada_optim_resume");
  const std::string path = tmp / "ckpt.safetensors";
  {
    auto o1 = build_optimizer(GetParam());
    auto s1 = build_schedule(kSchedule, o1->lr());
    std::vector<Param> ps = make_params(7);
    for (int k = 0; k < kSplit; ++k) {
      set_grads(ps, k);
      o1->step(ps, static_cast<float>(s1->lr()));
      s1->advance();
    }
    NamedTensors ckpt, model;
    for (const Param& p : ps) model.tensors.emplace_back(p.name, p.var.value());
    add_prefixed(ckpt, model, "model.");
    add_prefixed(ckpt, o1->state(), "optim.");
    add_prefixed(ckpt, s1->state(), "sched.");
    save_safetensors(path, ckpt.tensors, ckpt.metadata);
  }

  // Fresh objects, parameters in another order, state by name from the file.
  const NamedTensors ckpt = load_safetensors(path);
  std::filesystem::remove(path);
  std::vector<Param> ps = make_params(99);  // different values: the checkpoint must overwrite
  std::reverse(ps.begin(), ps.end());
  const NamedTensors model = take_prefixed(ckpt, "model.");
  for (Param& p : ps) p.var.mutable_value().copy_from(model.at(p.name));
  auto o2 = build_optimizer(GetParam());
  auto s2 = build_schedule(kSchedule, o2->lr());
  o2->load_state(take_prefixed(ckpt, "optim."), ps);
  s2->load_state(take_prefixed(ckpt, "sched."));
  ASSERT_EQ(s2->step(), kSplit);
  for (int k = kSplit; k < kSteps; ++k) {
    set_grads(ps, k);
    o2->step(ps, static_cast<float>(s2->lr()));
    s2->advance();
  }

  std::map<std::string, Tensor> got;
  for (const Param& p : ps) got[p.name] = p.var.value();
  for (const Param& p : ref)
    EXPECT_TRUE(bit_equal(got.at(p.name), p.var.value())) << p.name << " differs after resume";
  // And the states agree too, entry by entry.
  const NamedTensors a = opt->state(), b = o2->state();
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_TRUE(bit_equal(a.tensors[i].second, b.tensors[i].second)) << a.tensors[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Resume, ::testing::ValuesIn(kOptimizers));

TEST(OptimizerState, NamesAndLayout) {
  auto opt = build_optimizer("name: adam\nlr: 0.01\n");
  std::vector<Param> ps = make_params(1);
  set_grads(ps, 1);  // head.weight has no gradient
  opt->step(ps, 0.01f);
  const NamedTensors s = opt->state();
  EXPECT_EQ(s.metadata.at("optimizer"), "adam");
  std::vector<std::string> names;
  for (const auto& [n, t] : s.tensors) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "enc.layer.0.bias.step", "enc.layer.0.bias.exp_avg",
                       "enc.layer.0.bias.exp_avg_sq", "enc.layer.0.weight.step",
                       "enc.layer.0.weight.exp_avg", "enc.layer.0.weight.exp_avg_sq"}));
  EXPECT_EQ(s.tensors[0].second.dtype(), DType::i64);
  EXPECT_EQ(s.tensors[0].second.to_vector<int64_t>()[0], 1);
  EXPECT_EQ(s.tensors[1].second.shape(), (Shape{6}));
}

TEST(OptimizerState, LoadErrorsSayWhatIsWrongAndKeepTheState) {
  auto adam = build_optimizer("name: adam\nlr: 0.01\n");
  std::vector<Param> ps = make_params(1);
  set_grads(ps, 0);
  adam->step(ps, 0.01f);
  NamedTensors good = adam->state();
  good.source = "ckpt.safetensors";

  auto sgd = build_optimizer("name: sgd\nlr: 0.1\n");
  auto msg = error_of<IoError>([&] { sgd->load_state(good, ps); });
  EXPECT_NE(msg.find("optimizer state ckpt.safetensors: saved by the 'adam' optimizer, cannot be "
                     "loaded into 'sgd'"),
            std::string::npos)
      << msg;

  auto other = build_optimizer("name: adam\nlr: 0.01\n");
  std::vector<Param> fewer(ps.begin(), ps.begin() + 2);  // the model lacks head.weight
  msg = error_of<IoError>([&] { other->load_state(good, fewer); });
  EXPECT_NE(msg.find("entries that match no parameter of the model: 'head.weight.step'"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(other->state().tensors.empty()) << "a failed load keeps the previous state";

  NamedTensors missing = good;
  missing.tensors.erase(
      std::find_if(missing.tensors.begin(), missing.tensors.end(),
                   [](const auto& e) { return e.first == "head.weight.exp_avg"; }));
  msg = error_of<IoError>([&] { other->load_state(missing, ps); });
  EXPECT_NE(msg.find("has 'head.weight.step' but no 'head.weight.exp_avg'"), std::string::npos)
      << msg;

  std::vector<Param> reshaped = make_params(1);
  reshaped[2].var = Variable(Tensor::zeros({2, 6}), true, "head.weight");
  msg = error_of<IoError>([&] { other->load_state(good, reshaped); });
  EXPECT_NE(msg.find("'head.weight.exp_avg' is f32[3,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("different model"), std::string::npos) << msg;

  NamedTensors no_meta = good;
  no_meta.metadata.clear();
  EXPECT_NE(error_of<IoError>([&] { other->load_state(no_meta, ps); }).find("no 'optimizer'"),
            std::string::npos);

  // A parameter of the model that the state lacks starts fresh; the rest load.
  std::vector<Param> more = make_params(1);
  more.push_back(make_param("new.weight", {1, 2}, {2}));
  other->load_state(good, more);
  EXPECT_EQ(other->state().tensors.size(), good.tensors.size());
}

}  // namespace
}  // namespace ada::optim::testing
