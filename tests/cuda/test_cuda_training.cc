// A short real training on the GPU against the same training on the CPU: LeNet-5 with
// Momentum-SGD on MNIST (the first 8,000 images of the t10k files, evaluated on the last 2,000,
// so that only the small test files need to travel to a GPU machine), same initial weights,
// batches and LR on both devices, the LR decaying linearly to 0 so that the final model is not a
// snapshot of a noisy constant-LR walk. The GPU must reach the CPU's accuracy: the devices
// differ only in summation order (and the GPU's atomics make its run vary from run to run); with
// a constant LR that alone moved the final accuracy by 1.5 points between two GPU runs. The
// same training in bf16 and in fp16 with loss scaling must reach the fp32 accuracy too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "base/config.h"
#include "core/autograd.h"
#include "core/precision.h"
#include "cuda/cuda_test_util.h"
#include "data/mnist_dataset.h"
#include "nn/losses.h"
#include "nn/model.h"
#include "nn/models/image_classifier.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "sync/step_guard.h"

namespace {

using namespace ada;

constexpr int64_t kTrain = 8000, kEval = 2000, kBatch = 64, kEpochs = 3;
constexpr double kLr = 0.05;

// Stacks examples [begin, begin + n) of `order` into one batch on `device`.
nn::TensorMap make_batch(const data::MnistDataset& ds, const std::vector<int64_t>& order,
                         int64_t begin, int64_t n, Device device) {
  Tensor images = Tensor::empty({n, 1, ds.height(), ds.width()});
  Tensor labels = Tensor::empty({n}, DType::i64);
  const int64_t plane = ds.height() * ds.width();
  for (int64_t i = 0; i < n; ++i) {
    const data::Example ex = ds.get(order[static_cast<size_t>(begin + i)], 0);
    std::copy_n(ex.at("image").data<float>(), plane, images.data<float>() + i * plane);
    labels.data<int64_t>()[i] = ds.label_at(order[static_cast<size_t>(begin + i)]);
  }
  return {{"image", images.to(device)}, {"label", labels.to(device)}};
}

struct TrainResult {
  std::vector<double> losses;
  double accuracy = 0;
};

// `precision` sets the GPU's matrix products for the run; with `scaler` the loss is scaled and
// each step settled as a strategy does it (sync::settle_step: skip and back off on overflow,
// else unscale).
// `shuffle` picks the epochs' example orders (the same on every device for one value).
TrainResult train(const data::MnistDataset& ds, Device device,
                  Precision precision = Precision::fp32, optim::LossScaler* scaler = nullptr,
                  uint64_t shuffle = 0) {
  struct PrecisionScope {
    explicit PrecisionScope(Precision p) { set_cuda_matmul_precision(p); }
    ~PrecisionScope() { set_cuda_matmul_precision(Precision::fp32); }
  } scope(device.is_cpu() ? Precision::fp32 : precision);
  sync::StrategyOptions settle;
  settle.loss_scale = scaler;
  nn::ModelRegistry models("model");
  nn::register_builtin_models(models);
  Config mc = Config::parse("{name: lenet5, num_classes: 10}", "test model");
  auto model = models.get("lenet5", mc.where("name"))(mc, 7);
  model->to(device);
  optim::OptimizerRegistry optimizers("optimizer");
  optim::register_builtin_optimizers(optimizers);
  Config oc =
      Config::parse("{name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0005}", "test optimizer");
  const int64_t total = kEpochs * (kTrain / kBatch);
  auto opt = optim::make_optimizer(optimizers, oc);
  const auto params = model->parameters();

  std::vector<int64_t> order(kTrain + kEval);
  std::iota(order.begin(), order.end(), 0);
  TrainResult run;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    // A fixed shuffle per epoch (the same on both devices).
    std::vector<int64_t> perm(order.begin(), order.begin() + kTrain);
    Generator g(100 + 1000 * shuffle + static_cast<uint64_t>(epoch));
    for (int64_t i = kTrain - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(
          Generator::uniform_at(g.seed(), 0, static_cast<uint64_t>(i)) * (i + 1));
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    }
    for (int64_t b = 0; b + kBatch <= kTrain; b += kBatch) {
      model->zero_grad();
      nn::ModelOutput out = model->forward(make_batch(ds, perm, b, kBatch, device));
      run.losses.push_back(out.loss.value().item());
      const double done = static_cast<double>(run.losses.size() - 1) / static_cast<double>(total);
      if (!scaler) {
        backward(out.loss);
        opt->step(params, static_cast<float>(kLr * (1.0 - done)));
        continue;
      }
      backward(out.loss, Tensor::full({}, scaler->scale(), DType::f32, device));
      const bool bad = !std::isfinite(run.losses.back()) || sync::any_nonfinite_grad(params);
      if (sync::settle_step(static_cast<int64_t>(run.losses.size() - 1), run.losses.back(), bad,
                            settle, params))
        opt->step(params, static_cast<float>(kLr * (1.0 - done)));
    }
  }
  NoGradGuard ng;
  model->train(false);
  auto* clf = dynamic_cast<nn::ImageClassifier*>(model.get());
  EXPECT_NE(clf, nullptr);
  int64_t correct = 0;
  for (int64_t b = kTrain; b < kTrain + kEval; b += 500) {
    const nn::TensorMap batch = make_batch(ds, order, b, 500, device);
    Variable logits = clf->logits(Variable(batch.at("image")));
    correct += nn::count_correct(logits.value(), batch.at("label")).first;
  }
  run.accuracy = static_cast<double>(correct) / kEval;
  return run;
}

// MNIST's t10k files (kTrain + kEval images); a test failure naming the reason otherwise.
std::shared_ptr<data::MnistDataset> open_mnist() {
  std::shared_ptr<data::MnistDataset> ds;
  try {
    ds = data::MnistDataset::open(std::string(ADA_DATA_DIR) + "/mnist", "test");
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return nullptr;
  }
  EXPECT_GE(ds->size(), kTrain + kEval);
  return ds->size() >= kTrain + kEval ? ds : nullptr;
}

TEST(CudaTraining, LeNetOnMnistMatchesTheCpu) {
  ADA_REQUIRE_GPU();
  const auto ds = open_mnist();
  ASSERT_TRUE(ds);
  const TrainResult cpu = train(*ds, Device::cpu());
  const TrainResult gpu = train(*ds, ada::testing::gpu());
  std::printf(
      "[ training ] LeNet-5, %lld steps: accuracy cpu %.2f%%, cuda %.2f%%; last loss cpu %.4f, "
      "cuda %.4f\n",
      static_cast<long long>(cpu.losses.size()), 100 * cpu.accuracy, 100 * gpu.accuracy,
      cpu.losses.back(), gpu.losses.back());
  ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
  // Same weights and batch: the first losses agree to f32 reordering error.
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-4 * std::fabs(cpu.losses[i])) << "step " << i;
  EXPECT_GE(cpu.accuracy, 0.96) << "the CPU run itself did not learn: the test's setup is wrong";
  EXPECT_GE(gpu.accuracy, cpu.accuracy - 0.01) << "the GPU run learns worse than the CPU run";
}

// Mixed precision on the GPU (train.precision: bf16, and fp16 with dynamic loss scaling from
// 2^16) reaches the fp32 GPU run's accuracy within a point, the tolerance the GPU has against
// the CPU above. One run per precision was not enough: across four sessions on an H200 single
// fp16 runs ended at 97.65-98.50% and fp32 at 98.45-98.70% (the GPU's atomics vary each run,
// and 2,000 evaluation images give a standard error of 0.3 points), so one in four runs failed
// the bound. The means over three example orders each are compared instead, the bound unchanged.
TEST(CudaTraining, MixedPrecisionLeNetReachesTheFp32Accuracy) {
  ADA_REQUIRE_GPU();
  const auto ds = open_mnist();
  ASSERT_TRUE(ds);
  constexpr int kOrders = 3;
  double fp32 = 0, bf16 = 0, fp16 = 0;
  for (uint64_t order = 0; order < kOrders; ++order) {
    const TrainResult r32 = train(*ds, ada::testing::gpu(), Precision::fp32, nullptr, order);
    const TrainResult rb16 = train(*ds, ada::testing::gpu(), Precision::bf16, nullptr, order);
    optim::LossScaler scaler({/*dynamic=*/true, 65536, 2000});
    const TrainResult r16 = train(*ds, ada::testing::gpu(), Precision::fp16, &scaler, order);
    std::printf(
        "[ training ] LeNet-5 on cuda, example order %llu: accuracy fp32 %.2f%%, bf16 %.2f%%, fp16 "
        "%.2f%% "
        "(loss scale %g after %lld overflows)\n",
        static_cast<unsigned long long>(order), 100 * r32.accuracy, 100 * rb16.accuracy,
        100 * r16.accuracy, scaler.scale(), static_cast<long long>(scaler.overflows()));
    EXPECT_GE(r32.accuracy, 0.96) << "order " << order;
    EXPECT_LT(scaler.overflows(), 10)
        << "order " << order << ": fp16 overflowed on many steps: the scale does not settle";
    fp32 += r32.accuracy / kOrders;
    bf16 += rb16.accuracy / kOrders;
    fp16 += r16.accuracy / kOrders;
  }
  std::printf("[ training ] LeNet-5 on cuda, mean of %d: fp32 %.2f%%, bf16 %.2f%%, fp16 %.2f%%\n",
              kOrders, 100 * fp32, 100 * bf16, 100 * fp16);
  EXPECT_GE(bf16, fp32 - 0.01) << "bf16 learns worse than fp32";
  EXPECT_GE(fp16, fp32 - 0.01) << "fp16 with loss scaling learns worse than fp32";
}

}  // namespace
