// Whole-model golden tests: lenet5, resnet20_mnist and bert (preset tiny, vocab 97, 32 positions,
// NSP, no dropout) against the PyTorch twins of tools/make_model_golden.py, which wrote
// tests/golden/model_*.safetensors (see tests/golden/README.md). Per model: names, order, shapes
// and weight-decay flags of the parameters and buffers; the logits (CNNs; BERT does not expose
// its logits, so its MLM and NSP losses and arg-max counts stand in for them); the loss; every
// parameter's gradient; the BN running statistics after one training-mode forward; and the
// losses and final parameters of 5 optimizer steps on the fixed batch (SGD for the CNNs, AdamW
// for BERT).
//
// The reference is torch in float64 from f32-exact weights and inputs, so every difference is our
// f32 error. The initial state is not stored (the folder must stay small): it is a counter-based
// formula evaluated here bit for bit as in the generator (init_tensor); its checksums are in the
// file. Gradients and final parameters of more than `full_max` elements are stored as a hashed
// sample plus [sum, L2 norm, two random-sign projections, max |x|], so every element still counts.
//
// Tolerances (|ours - torch| <= atol + rtol*|torch|): see the constants below. They are set from
// torch's own float32 error against the same float64 reference, which the generator records in
// the file's metadata (f32_err_*) and which this test prints, times a margin of about 10-100 for
// different summation orders; the defects they exist to catch (a wrong layer order, padding,
// stride, mask, eps, GELU form, tied weight, weight-decay flag, optimizer formula) change these
// values by 1e-3 relative or more. Regenerate with `/usr/bin/python3 tools/make_model_golden.py`.
//
// The same file is compiled into test_cuda with ADA_GOLDEN_ON_GPU: model and batch then live on
// cuda:0 and every check and tolerance stays as it is (cuBLAS/cuDNN sum in other orders than our
// CPU kernels, well inside the margins above); without a usable GPU each test skips, saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/config.h"
#include "core/autograd.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "nn/losses.h"
#include "nn/model.h"
#include "nn/models/image_classifier.h"
#include "optim/optimizer.h"
#include "util/golden.h"

#ifdef ADA_GOLDEN_ON_GPU
#include "cuda/cuda_test_util.h"
#define ADA_GOLDEN_REQUIRE_DEVICE() ADA_REQUIRE_GPU()
#else
#define ADA_GOLDEN_REQUIRE_DEVICE() \
  do {                              \
  } while (0)
#endif

namespace {

#ifdef ADA_GOLDEN_ON_GPU
const ada::Device kDevice = ada::Device::cuda(0);
#else
const ada::Device kDevice = ada::Device::cpu();
#endif

using ada::Config;
using ada::NamedTensors;
using ada::Shape;
using ada::Tensor;
using ada::Variable;
namespace nn = ada::nn;

constexpr char kRegenerate[] =
    "regenerate the model golden files from the repository root with "
    "`/usr/bin/python3 tools/make_model_golden.py` (needs Debian's python3-torch)";

struct Tol {
  double atol, rtol;
};

// ---- tolerances ---------------------------------------------------------------------------------
// Loss (a mean cross-entropy of O(1)): torch f32 is within 6e-8 (lenet5), 7e-9 (resnet20), 3e-7
// (bert) of the f64 reference; ours within 2.4e-7.
constexpr Tol kLossTol{1e-5, 1e-5};
// Logits: torch f32 within 2e-7 (lenet5) and 1e-6 (resnet20; BN over 196 values per channel in
// the last stage) of f64, absolute, for logits of magnitude ~1-5; ours within 2.1e-7 and 1.4e-6.
constexpr Tol kLogitTol{2e-5, 1e-5};
// Gradients: atol is relative to the largest |gradient| of the same tensor (the rounding error of
// a backpropagated element scales with the magnitudes flowing through the graph, not with the
// element itself, so elements near zero are judged on the tensor's scale, as llm.c does), with a
// floor of kGradFloor times the largest gradient of the whole model for tensors whose exact
// gradient is zero (BERT's attention key biases: softmax ignores a per-query shift; f32 gives
// ~3e-9 of noise there). torch f32 is within 2.5e-6 of the tensor's max (resnet20
// layer3.1.conv2.weight; 7e-7 lenet5, 1.2e-6 bert); ours at most 0.05 of the allowed difference
// (BERT's key biases against the floor; 0.02 elsewhere).
constexpr double kGradAtolRel = 1e-4;
constexpr double kGradRtol = 1e-4;
constexpr double kGradFloor = 1e-3;
// Running statistics after one forward (O(1) values, a mean over 196 to 3136 elements and a
// momentum blend): f32 is within ~1e-6; ours within 2.4e-7.
constexpr Tol kStatTol{1e-5, 1e-5};
// The 6 losses of 5 steps (before each step and after the last): torch f32 is within 3e-6
// (lenet5, whose step-5 loss jumps from 0.76 to 3.4 as momentum overshoots), 9e-8 (resnet20),
// 7e-7 (bert); ours within 1.4e-6, 2.4e-7, 4.8e-7.
constexpr Tol kStepLossTol{1e-4, 1e-4};
// Final parameters, atol relative to the tensor's largest |value|. SGD: torch f32 within 5e-7 of
// the tensor's max. AdamW divides by sqrt(v)+eps with eps 1e-8, so for elements whose gradient
// is ~eps the update's f32 error is ~lr * (gradient rounding) / eps: torch f32 is 5.5e-4 of the
// tensor's max off there (bert encoder.layer0.output.weight, 3.7e-5 absolute at lr 1e-3).
// Ours: at most 0.05 (SGD) and 0.001 (AdamW) of the allowed difference, 2.4e-7 absolute.
// Consequence: AdamW's decay (lr*0.01*w, ~5e-5 over 5 steps) is below this check's resolution;
// the weight-decay flags are compared directly (NamesFlagsAndInitialState) and the update
// formulas by tests/optim.
constexpr double kFinalSgdAtolRel = 1e-5, kFinalSgdRtol = 1e-5;
constexpr double kFinalAdamAtolRel = 5e-3, kFinalAdamRtol = 1e-4;

// ---- the generator's counter-based formulas -----------------------------------------------------
constexpr uint64_t kGoldenRatio = 0x9E3779B97F4A7C15ull;

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// splitmix64's finaliser of key + (i+1)*golden ratio (wrapping), as numpy computes it.
uint64_t mix(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * kGoldenRatio;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i = offset + bound * (2m - 2^24) / 2^24 with m = mix(fnv1a64("init:" + name), i) >> 40,
// formed in double and rounded to f32 (exact for a power-of-two bound).
Tensor init_tensor(const std::string& name, const Shape& shape, double offset, double bound) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  const uint64_t key = fnv1a64("init:" + name);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double m = static_cast<double>(mix(key, static_cast<uint64_t>(i)) >> 40);
    const double x = (2.0 * m - 16777216.0) / 16777216.0;
    p[i] = static_cast<float>(offset + bound * x);
  }
  return t;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::vector<double> to_double(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  return {v.begin(), v.end()};
}

std::string index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? "," : "") << idx[d];
  os << "]";
  return os.str();
}

// The worst element of one category (e.g. "grad") over all its tensors, for the summary line
// each test prints: the largest |diff| / allowed and the largest |diff|.
struct Worst {
  double ratio = 0, abs = 0;
  std::string where_ratio, where_abs;
  void add(double diff, double allowed, const std::string& where) {
    if (diff / allowed > ratio) ratio = diff / allowed, where_ratio = where;
    if (diff > abs) abs = diff, where_abs = where;
  }
};

void print_worst(const std::string& model, const std::string& what, const Worst& w) {
  std::printf("[ golden   ] %s %s: max |ours-torch| %.3g (%s); max |diff|/allowed %.3g (%s)\n",
              model.c_str(), what.c_str(), w.abs, w.where_abs.c_str(), w.ratio,
              w.where_ratio.c_str());
}

// Element-wise |ours - ref| <= atol + rtol*|ref|; `label(i)` names element i in messages.
template <class Label>
::testing::AssertionResult close(const std::string& what, const std::vector<double>& ours,
                                 const std::vector<double>& ref, Tol tol, Label label,
                                 Worst* worst) {
  if (ours.size() != ref.size())
    return ::testing::AssertionFailure()
           << what << ": " << ours.size() << " values, torch has " << ref.size();
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < ours.size(); ++i) {
    const double diff = std::fabs(ours[i] - ref[i]);
    const double allowed = tol.atol + tol.rtol * std::fabs(ref[i]);
    if (worst) worst->add(std::isfinite(diff) ? diff : INFINITY, allowed, what + label(i));
    if (!(diff <= allowed)) {
      if (bad < 5)
        first << "\n  " << what << label(i) << ": ours " << ours[i] << ", torch " << ref[i]
              << ", |diff| " << diff << " > allowed " << allowed;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << ours.size() << " values differ from torch beyond atol "
         << tol.atol << " + rtol " << tol.rtol << "*|torch|" << first.str();
}

::testing::AssertionResult close_tensor(const std::string& what, const Tensor& ours,
                                        const Tensor& ref, Tol tol, Worst* worst) {
  if (ours.shape() != ref.shape())
    return ::testing::AssertionFailure()
           << what << ": ours " << ours.str() << ", torch " << ref.str();
  const Shape& s = ref.shape();
  return close(
      what, to_double(ours), to_double(ref), tol,
      [&](size_t i) { return index_str(s, static_cast<int64_t>(i)); }, worst);
}

// How a category's element tolerance follows from the reference tensor: atol = atol_rel *
// max(max|ref|, floor), rtol.
struct Rule {
  double atol_rel, rtol, floor = 0;
  Tol tol(double ref_max) const { return {atol_rel * std::max(ref_max, floor), rtol}; }
};

class ModelGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ADA_GOLDEN_REQUIRE_DEVICE();
    model_ = GetParam();
    ASSERT_NO_FATAL_FAILURE(ada::testing::load_golden("model_" + model_, kRegenerate, &g_));
    ASSERT_EQ(meta("model"), model_);
    full_max_ = std::stoll(meta("full_max"));
    sample_ = std::stoll(meta("sample"));
    for (const auto& n : split(meta("zero_grad_params"), ',')) zero_grad_.insert(n);
  }

  std::string meta(const std::string& key) const {
    return ada::testing::golden_meta(g_, key, kRegenerate);
  }

  // The model from the file's model_config through the registry, every parameter and buffer set
  // from the init formula via Module::load_state.
  std::unique_ptr<nn::Model> build() const {
    nn::ModelRegistry reg("model");
    nn::register_builtin_models(reg);
    Config cfg = Config::parse(meta("model_config"), g_.source + " model_config");
    auto m = reg.get(cfg.get<std::string>("name"), cfg.where("name"))(cfg, 1);
    cfg.finish();  // every key of the twin's configuration is one our model reads
    m->load_state(initial_state(*m));
    m->train(meta("training") == "true");
    m->to(kDevice);
    return m;
  }

  NamedTensors initial_state(const nn::Model& m) const {
    NamedTensors init;
    init.source = g_.source + " (init formula)";
    for (const auto& [name, t] : m.state()) {
      auto it = g_.metadata.find("init/" + name);
      if (it == g_.metadata.end()) {
        ADD_FAILURE() << "the twin has no tensor '" << name << "' (" << t.str() << ") of our "
                      << model_ << "; the twin and nn/models disagree on names";
        continue;
      }
      const auto ob = split(it->second, ' ');
      init.tensors.emplace_back(
          name, init_tensor(name, t.shape(), std::stod(ob.at(0)), std::stod(ob.at(1))));
    }
    return init;
  }

  nn::TensorMap batch() const {
    nn::TensorMap b;
    for (const auto& [name, t] : g_.tensors)
      if (name.rfind("batch/", 0) == 0) b[name.substr(6)] = t.to(kDevice);
    return b;
  }

  // Compares `ours` with the file's "<prefix>/<name>" (whole) or "<prefix>_sample/<name>" +
  // "<prefix>_stats/<name>" (large tensors). The stats tolerances follow from the element rule:
  // if every |e_i| <= atol + rtol|r_i|, then |sum e| <= n atol + rtol sqrt(n) |r|_2, | |o|_2 -
  // |r|_2 | <= |e|_2 <= sqrt(n) atol + rtol |r|_2, a random-sign projection s.e stays within 4
  // |e|_2 (4 sigma; s is independent of e), and | max|o| - max|r| | <= max|e_i|.
  void compare(const std::string& prefix, const std::string& name, const Tensor& ours, Rule rule,
               Worst* worst) const {
    const std::string what = prefix + "/" + name;
    ASSERT_TRUE(ours.defined()) << what << ": ours is undefined";
    if (g_.contains(what)) {
      const Tensor& ref = g_.at(what);
      double ref_max = 0;
      for (double v : to_double(ref)) ref_max = std::max(ref_max, std::fabs(v));
      EXPECT_TRUE(close_tensor(what, ours, ref, rule.tol(ref_max), worst));
      return;
    }
    ASSERT_TRUE(g_.contains(prefix + "_sample/" + name) && g_.contains(prefix + "_stats/" + name))
        << g_.source << " has neither " << what << " nor its sample and stats; " << kRegenerate;
    const int64_t n = ours.numel();
    ASSERT_GT(n, full_max_) << what << ": stored as a sample, yet only " << n << " elements";
    const std::vector<double> o = to_double(ours);
    const std::vector<double> stats = to_double(g_.at(prefix + "_stats/" + name));
    ASSERT_EQ(stats.size(), 5u);
    const Tol tol = rule.tol(stats[4]);

    std::vector<double> sample;
    std::vector<int64_t> where;
    const uint64_t skey = fnv1a64("sample:" + name);
    for (int64_t j = 0; j < sample_; ++j) {
      where.push_back(
          static_cast<int64_t>(mix(skey, static_cast<uint64_t>(j)) % static_cast<uint64_t>(n)));
      sample.push_back(o[where.back()]);
    }
    const Shape& s = ours.shape();
    EXPECT_TRUE(close(
        what, sample, to_double(g_.at(prefix + "_sample/" + name)), tol,
        [&](size_t j) { return index_str(s, where[j]); }, worst));

    double sum = 0, sq = 0, p1 = 0, p2 = 0, mx = 0;
    const uint64_t k1 = fnv1a64("proj1:" + name), k2 = fnv1a64("proj2:" + name);
    for (int64_t i = 0; i < n; ++i) {
      sum += o[i];
      sq += o[i] * o[i];
      p1 += (mix(k1, static_cast<uint64_t>(i)) >> 63) ? -o[i] : o[i];
      p2 += (mix(k2, static_cast<uint64_t>(i)) >> 63) ? -o[i] : o[i];
      mx = std::max(mx, std::fabs(o[i]));
    }
    const double rn = std::sqrt(static_cast<double>(n)), norm = stats[1];
    const double e2 = rn * tol.atol + tol.rtol * norm;
    const std::vector<std::pair<const char*, double>> allowed = {
        {"sum", n * tol.atol + tol.rtol * rn * norm},
        {"L2 norm", e2},
        {"projection 1", 4 * e2},
        {"projection 2", 4 * e2},
        {"max |x|", tol.atol + tol.rtol * stats[4]}};
    const double got[5] = {sum, std::sqrt(sq), p1, p2, mx};
    for (int k = 0; k < 5; ++k) {
      const double diff = std::fabs(got[k] - stats[k]);
      EXPECT_LE(diff, allowed[k].second)
          << what << " " << allowed[k].first << ": ours " << got[k] << ", torch " << stats[k]
          << " (over all " << n << " elements)";
    }
  }

  // Largest |reference| of a category over all tensors (whole or from the stats).
  double ref_max_over(const std::string& prefix, const std::vector<ada::Param>& params) const {
    double m = 0;
    for (const auto& p : params) {
      if (g_.contains(prefix + "/" + p.name)) {
        for (double v : to_double(g_.at(prefix + "/" + p.name))) m = std::max(m, std::fabs(v));
      } else if (g_.contains(prefix + "_stats/" + p.name)) {
        m = std::max(m, static_cast<double>(to_double(g_.at(prefix + "_stats/" + p.name))[4]));
      }
    }
    return m;
  }

  void print_f32_reference_errors() const {
    for (const auto& [k, v] : g_.metadata)
      if (k.rfind("f32_err_", 0) == 0)
        std::printf("[ golden   ] %s torch-f32 vs f64: %s = %s\n", model_.c_str(), k.c_str(),
                    v.c_str());
  }

  std::string model_;
  NamedTensors g_;
  int64_t full_max_ = 0, sample_ = 0;
  std::set<std::string> zero_grad_;
};

// ---- tests -------------------------------------------------------------------------------------
// Names and order of parameters and buffers, the no-decay set, and the init formula's checksums.
TEST_P(ModelGolden, NamesFlagsAndInitialState) {
  auto m = build();
  std::vector<std::string> params, buffers, no_decay;
  for (const auto& p : m->parameters()) {
    params.push_back(p.name);
    if (!p.weight_decay) no_decay.push_back(p.name);
  }
  for (const auto& [n, t] : m->buffers()) buffers.push_back(n);
  EXPECT_EQ(params, split(meta("params"), ','));
  EXPECT_EQ(buffers, split(meta("buffers"), ','));
  EXPECT_EQ(no_decay, split(meta("no_decay"), ','));
  for (const auto& [name, t] : m->state()) {
    const auto ck = split(meta("init_checksum/" + name), ' ');
    ASSERT_EQ(ck.size(), 2u);
    double sum = 0, sq = 0;
    for (double v : to_double(t)) sum += v, sq += v * v;
    // numpy sums pairwise, we sum in order, both in double: the orders differ by ~1e-16
    // relative; a formula that disagrees differs by O(1).
    const double n = static_cast<double>(t.numel());
    EXPECT_NEAR(sum, std::stod(ck[0]), 1e-9 * std::sqrt(n * sq))
        << name << ": the init formula disagrees with the generator's";
    EXPECT_NEAR(sq, std::stod(ck[1]), 1e-9 * sq)
        << name << ": the init formula disagrees with the generator's";
  }
}

// Logits (CNNs), the loss, every gradient, and the running statistics after one forward.
TEST_P(ModelGolden, ForwardAndGradients) {
  print_f32_reference_errors();
  auto m = build();
  const nn::TensorMap b = batch();
  if (auto* clf = dynamic_cast<nn::ImageClassifier*>(m.get())) {
    Worst w;
    Variable logits = clf->logits(Variable(b.at("image")));
    EXPECT_TRUE(close_tensor("logits", logits.value(), g_.at("logits"), kLogitTol, &w));
    print_worst(model_, "logits", w);
    m->load_state(initial_state(*m));  // that forward moved the running statistics
  }
  nn::ModelOutput out = m->forward(b);
  ada::backward(out.loss);

  Worst wl;
  EXPECT_TRUE(close_tensor("loss", out.loss.value().reshape({}), g_.at("loss"), kLossTol, &wl));
  if (model_ == "bert") {
    // Our BERT returns only the loss and figure sums: the MLM loss is mlm_loss's sum / count,
    // the NSP loss the rest; arg-max counts are checked against the twin's stored logits.
    const double mlm = out.metric("mlm_loss").sum / out.metric("mlm_loss").count;
    const double nsp = out.loss.value().item() - mlm;
    EXPECT_TRUE(close(
        "mlm_loss", {mlm}, to_double(g_.at("mlm_loss")), kLossTol, [](size_t) { return ""; }, &wl));
    EXPECT_TRUE(close(
        "nsp_loss", {nsp}, to_double(g_.at("nsp_loss")), kLossTol, [](size_t) { return ""; }, &wl));
    std::vector<int64_t> targets;
    for (int64_t l : b.at("labels").to_vector<int64_t>())
      if (l != -100) targets.push_back(l);
    const Tensor t = Tensor::from_vector<int64_t>(targets, {static_cast<int64_t>(targets.size())});
    EXPECT_EQ(out.metric("mlm_accuracy").count, static_cast<double>(targets.size()));
    EXPECT_EQ(out.metric("mlm_accuracy").sum,
              static_cast<double>(nn::count_correct(g_.at("mlm_logits"), t).first));
    EXPECT_EQ(out.metric("nsp_accuracy").sum,
              static_cast<double>(nn::count_correct(g_.at("nsp_logits"), b.at("nsp_label")).first));
  } else {
    EXPECT_EQ(out.metric("top1").sum,
              static_cast<double>(nn::count_correct(g_.at("logits"), b.at("label")).first));
  }
  print_worst(model_, "loss", wl);

  const auto params = m->parameters();
  const Rule rule{kGradAtolRel, kGradRtol, kGradFloor * ref_max_over("grad", params)};
  Worst wg;
  for (const auto& p : params) {
    SCOPED_TRACE(p.name);
    compare("grad", p.name, p.var.grad(), rule, &wg);
  }
  print_worst(model_, "gradients", wg);

  Worst ws;
  for (const auto& [name, t] : m->buffers())
    EXPECT_TRUE(close_tensor("after1/" + name, t, g_.at("after1/" + name), kStatTol, &ws));
  if (!m->buffers().empty()) print_worst(model_, "running statistics", ws);
}

// 5 optimizer steps on the fixed batch: the loss before each step and after the last, and the
// final parameters.
TEST_P(ModelGolden, FiveOptimizerSteps) {
  auto m = build();
  const nn::TensorMap b = batch();
  ada::optim::OptimizerRegistry reg("optimizer");
  ada::optim::register_builtin_optimizers(reg);
  Config oc = Config::parse(meta("optimizer_config"), g_.source + " optimizer_config");
  auto opt = ada::optim::make_optimizer(reg, oc);
  oc.finish();
  const float lr = static_cast<float>(opt->lr());
  const int steps = std::stoi(meta("steps"));
  const auto params = m->parameters();
  std::vector<double> losses;
  for (int k = 0; k <= steps; ++k) {
    m->zero_grad();
    nn::ModelOutput out = m->forward(b);
    losses.push_back(out.loss.value().item());
    if (k == steps) break;
    ada::backward(out.loss);
    opt->step(params, lr);
  }
  Worst wl;
  EXPECT_TRUE(close(
      "steps/loss", losses, to_double(g_.at("steps/loss")), kStepLossTol,
      [](size_t i) {
        std::string s = "[";  // (not "[" + ...: GCC 12's -Wrestrict false positive)
        s += std::to_string(i);
        return s += "]";
      },
      &wl));
  print_worst(model_, "losses of " + std::to_string(steps) + " " + opt->name() + " steps", wl);
  std::printf("[ golden   ] %s losses: ours", model_.c_str());
  for (double l : losses) std::printf(" %.6f", l);
  std::printf("\n");

  const bool adam = opt->name() != "sgd";
  Worst wf;
  for (const auto& p : params) {
    SCOPED_TRACE(p.name);
    if (zero_grad_.count(p.name) && adam) {
      // Its exact gradient is zero, so Adam's normalised update of f32 rounding noise is
      // arbitrary (up to ~lr per step) in both implementations; it cannot change the loss.
      continue;
    }
    const Rule rule =
        adam ? Rule{kFinalAdamAtolRel, kFinalAdamRtol} : Rule{kFinalSgdAtolRel, kFinalSgdRtol};
    compare("final", p.name, p.var.value(), rule, &wf);
  }
  print_worst(model_, "final parameters", wf);
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Golden, ModelGolden, ::testing::Values("lenet5", "resnet20_mnist", "bert"),
                         param_name);

}  // namespace
