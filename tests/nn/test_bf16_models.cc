// train.precision: bf16 (core/precision.h) on whole models: lenet5, resnet20_mnist and BERT-tiny
// (composed and fused attention) run one forward and backward on a fixed batch in fp32 and again
// with bf16 matrix products. The loss and every gradient must (a) change — linear layers,
// convolutions (forward and both backwards) and attention really take bf16 inputs — and (b) stay
// within bf16's error. bfloat16 keeps 8 significant bits (relative rounding 2^-9 = 2e-3 per
// operand), but a gradient that is a sum of many cancelling terms (weight gradients of the first
// convolution, batch-norm biases at initialisation) loses more relative to its own size: measured
// here (printed), the worst parameter's relative L2 error is 0.7% (BERT-tiny) to 10% (conv1 of
// lenet5 / resnet20) and the whole model's 0.3-4%. Bounds: 25% per parameter, 8% for the whole
// model, 1% for the loss. A wrong kernel (a transposed operand, a lost k pair) gives errors of
// order 1 or none; exact rounding (nearest even) is checked element by element in test_sgemm. On a
// CPU without AVX512_BF16 the mode is refused (DeviceError), which is what is checked there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "core/autograd.h"
#include "core/backend/cpu/op_profile.h"
#include "core/cpu_isa.h"
#include "core/host_memory.h"
#include "core/precision.h"
#include "core/random.h"
#include "core/tensor.h"
#include "nn/model.h"

namespace ada {
namespace {

struct Result {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> grads;
};

nn::TensorMap make_batch(bool bert) {
  Generator g(5);
  nn::TensorMap b;
  if (!bert) {
    // 16 images: ResNet-20's 3x3 convolutions run on the batch-blocked kernels (vdpbf16ps in
    // the bf16 mode), which take whole blocks of 16 images.
    b["image"] = Tensor::randn({16, 1, 28, 28}, g);
    Tensor labels = Tensor::empty({16}, DType::i64);
    for (int64_t i = 0; i < 16; ++i) labels.data<int64_t>()[i] = (i * 7) % 10;
    b["label"] = labels;
    return b;
  }
  const int64_t batch = 4, seq = 32;
  Tensor ids = Tensor::empty({batch, seq}, DType::i64),
         labels = Tensor::empty({batch, seq}, DType::i64);
  for (int64_t i = 0; i < batch * seq; ++i) {
    ids.data<int64_t>()[i] = 5 + (i * 31) % 90;
    labels.data<int64_t>()[i] = i % 7 == 3 ? ids.data<int64_t>()[i] : -100;
  }
  b["input_ids"] = ids;
  b["labels"] = labels;
  b["segment_ids"] = Tensor::zeros({batch, seq}, DType::i64);
  b["attention_mask"] = Tensor::ones({batch, seq}, DType::i64);
  return b;
}

// One forward and backward with matrix precision p and activations stored as `act`; `kept` (if
// given) gets the bytes the forward pass left allocated (what the graph keeps for backward).
Result run(const std::string& model_yaml, bool bert, Precision p, DType act = DType::f32,
           int64_t* kept = nullptr) {
  nn::ModelRegistry models("model");
  nn::register_builtin_models(models);
  Config mc = Config::parse(model_yaml, "test");
  auto net = models.get(mc.get<std::string>("name"))(mc, 3);
  const nn::TensorMap batch = make_batch(bert);
  set_cpu_matmul_precision(p);
  set_activation_dtype(act);
  const int64_t before = host::memory_stats().allocated;
  auto out = net->forward(batch);
  if (kept) *kept = host::memory_stats().allocated - before;
  backward(out.loss);
  set_activation_dtype(DType::f32);
  set_cpu_matmul_precision(Precision::fp32);
  Result r;
  r.loss = out.loss.value().data<float>()[0];
  for (const auto& prm : net->parameters()) {
    const Tensor& g = prm.var.grad();
    r.names.push_back(prm.name);
    r.grads.emplace_back(g.data<float>(), g.data<float>() + g.numel());
  }
  return r;
}

// Bounds on the 16-bit run's error against the fp32 one (relative): the loss, each parameter's
// gradient (L2) and the whole model's.
struct Bounds {
  double loss, param, whole;
};
// The runs' names in messages: the reference f, the run h; and whether h must differ from f.
struct Names {
  const char* f = "fp32";
  const char* h = "16-bit";
  bool must_differ = true;
};
void compare_results(const std::string& what, const Result& f, const Result& h, const Bounds& b,
                     const Names& n = {}) {
  ASSERT_EQ(f.names, h.names);
  EXPECT_LE(std::fabs(h.loss - f.loss), b.loss * std::fabs(f.loss))
      << what << ": loss " << n.f << " " << f.loss << ", " << n.h << " " << h.loss;
  double total_diff = 0, total_norm = 0, worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < f.names.size(); ++i) {
    double d2 = 0, n2 = 0;
    for (size_t j = 0; j < f.grads[i].size(); ++j) {
      const double d = double(h.grads[i][j]) - f.grads[i][j];
      d2 += d * d;
      n2 += double(f.grads[i][j]) * f.grads[i][j];
    }
    total_diff += d2;
    total_norm += n2;
    if (n2 < 1e-20) continue;  // e.g. embedding rows no token used
    const double rel = std::sqrt(d2 / n2);
    if (rel > worst) worst = rel, worst_name = f.names[i];
    EXPECT_LE(rel, b.param) << what << ": " << f.names[i] << ": relative L2 error of the " << n.h
                            << " gradient";
  }
  const double whole = std::sqrt(total_diff / total_norm);
  std::printf(
      "%s: loss %s %.8f %s %.8f; gradient relative L2 error: whole model %.3g, worst "
      "parameter %.3g (%s)\n",
      what.c_str(), n.f, f.loss, n.h, h.loss, whole, worst, worst_name.c_str());
  EXPECT_LE(whole, b.whole) << what;
  if (n.must_differ) {
    EXPECT_GT(total_diff, 0.0) << what << ": " << n.h << " changed no gradient";
  }
}

void compare(const std::string& model_yaml, bool bert) {
  if (!cpu::bf16_available()) {
    EXPECT_THROW(set_cpu_matmul_precision(Precision::bf16), DeviceError);
    return;
  }
  const Result f = run(model_yaml, bert, Precision::fp32);
  const Result h = run(model_yaml, bert, Precision::bf16);
  compare_results(model_yaml, f, h, {1e-2, 0.25, 0.08});
  EXPECT_NE(h.loss, f.loss);
}

// 16-bit activations (core/precision.h's activation_dtype) on the CPU, where every op computes
// in f32 and rounds its outputs: each model's loss and gradients against fp32 activations (the
// matrix products fp32 in both, so this runs on every CPU), every parameter gradient f32, and
// what the forward pass keeps for backward at most `kept_ratio` of the f32 run's bytes.
void compare_activations(const std::string& model_yaml, bool bert, DType act, const Bounds& b,
                         double kept_ratio) {
  int64_t kept32 = 0, kept16 = 0;
  const Result f = run(model_yaml, bert, Precision::fp32, DType::f32, &kept32);
  const Result h = run(model_yaml, bert, Precision::fp32, act, &kept16);
  const std::string what = model_yaml + " activations " + dtype_name(act);
  compare_results(what, f, h, b);
  std::printf("%s: the forward pass keeps %lld bytes (f32 activations: %lld, ratio %.3f)\n",
              what.c_str(), static_cast<long long>(kept16), static_cast<long long>(kept32),
              double(kept16) / double(kept32));
  EXPECT_LE(double(kept16), kept_ratio * double(kept32)) << what;
}

TEST(Bf16Models, LeNet5) {
  compare("{name: lenet5}", false);
}
TEST(Bf16Models, ResNet20) {
  compare("{name: resnet20_mnist}", false);
}
TEST(Bf16Models, BertTiny) {
  compare(
      "{name: bert, preset: tiny, vocab_size: 97, max_positions: 32, dropout: 0.0, "
      "attention_dropout: 0.0}",
      true);
}
// The fused attention's products (cpu::gemm) take bf16 operands too.
TEST(Bf16Models, BertTinyFusedAttention) {
  compare(
      "{name: bert, preset: tiny, vocab_size: 97, max_positions: 32, dropout: 0.0, "
      "attention_dropout: 0.0, attention: fused}",
      true);
}

// Measured here (printed): bf16 activations move the whole model's gradient by 0.7% (BERT-tiny)
// to 7% (lenet5, whose first convolution's weight gradient cancels most), the worst parameter by
// up to 9.4%; f16 activations (3 more bits) by 0.1-0.8% and 4%; the loss by less than 1e-4 (f16
// can leave it the same f32: resnet20_mnist). The forward pass keeps 50-58% of the f32 run's
// bytes (what stays f32: statistics, log-probabilities, max-pool indices).
constexpr Bounds kBf16Activations{1e-2, 0.25, 0.15}, kF16Activations{2e-3, 0.1, 0.03};
constexpr double kKeptRatio = 0.6;
constexpr const char* kBertTiny =
    "{name: bert, preset: tiny, vocab_size: 97, max_positions: 32, dropout: 0.1, "
    "attention_dropout: 0.1";
void compare_activations(const std::string& model_yaml, bool bert) {
  compare_activations(model_yaml, bert, DType::bf16, kBf16Activations, kKeptRatio);
  compare_activations(model_yaml, bert, DType::f16, kF16Activations, kKeptRatio);
}
TEST(Activations16, LeNet5) {
  compare_activations("{name: lenet5}", false);
}
TEST(Activations16, ResNet20) {
  compare_activations("{name: resnet20_mnist}", false);
}
TEST(Activations16, BertTiny) {
  compare_activations(std::string(kBertTiny) + "}", true);
}
TEST(Activations16, BertTinyFusedAttention) {
  compare_activations(std::string(kBertTiny) + ", attention: fused}", true);
}

// model.channels_last (NHWC activations) on the CPU against NCHW, the same initial weights: the
// convolutions and the stem's max-pool run on NCHW copies (the same bits), but batch norm's
// statistics over the [N*H*W, C] view and the global average as a mean over H and W may sum in
// another order, so the loss and gradients agree to float rounding carried through the net
// (measured, printed: relative L2 error 1.6e-7 for the whole of ResNet-20's gradient in f32, 0
// in bf16 and for ResNet-50; bounds about 100 times that, far below the order-1 error of a wrong
// layout: a permute the wrong way, statistics over the wrong axis). The NHWC run must permute
// (its convolutions' NCHW copies) and the NCHW run must not: the mode was not ignored.
double permutes_in(const std::string& report) {  // cpu::profile_report's calls of "permute"
  std::istringstream lines(report);
  std::string line, op;
  double calls = 0;
  while (std::getline(lines, line))
    if (std::istringstream(line) >> op >> calls && op == "permute") return calls;
  return 0;
}
void compare_channels_last(const std::string& model, DType act) {
  cpu::set_profiling(true);
  const Result f = run("{" + model + "}", false, Precision::fp32, act);
  const double nchw_permutes = permutes_in(cpu::profile_report(1));
  const Result c = run("{" + model + ", channels_last: true}", false, Precision::fp32, act);
  const double nhwc_permutes = permutes_in(cpu::profile_report(1));
  cpu::set_profiling(false);
  EXPECT_EQ(nchw_permutes, 0) << model;
  EXPECT_GT(nhwc_permutes, 0) << model << ": channels_last ran no NHWC/NCHW permute (ignored?)";
  compare_results(model + ", activations " + dtype_name(act), f, c, {1e-6, 1e-4, 1e-5},
                  {"NCHW", "NHWC", false});
}
TEST(ChannelsLast, ResNet20MatchesNchw) {
  compare_channels_last("name: resnet20_mnist", DType::f32);
  compare_channels_last("name: resnet20_mnist", DType::bf16);
}
// The ImageNet stem's 7x7 convolution and max-pool, and bottlenecks (1x1 convolutions).
TEST(ChannelsLast, ResNet50StemAndBottlenecksMatchNchw) {
  compare_channels_last("name: resnet50, in_channels: 1, num_classes: 10", DType::f32);
}

}  // namespace
}  // namespace ada
