// CUDA graphs (core/backend/cuda_runtime.h, cuda::Graph): a captured training step replayed gives
// the eager steps' bits, inputs written into the captured batch between replays included; what
// a graph cannot hold refuses to be captured, by name, and leaves the device working eagerly;
// the graph's memory is kept from eager reuse while it lives and given back after.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/precision.h"
#include "cuda/cuda_test_util.h"
#include "nn/model.h"
#include "optim/optimizer.h"

namespace ada {
namespace {

// MNIST-shaped batches (ResNet-20's input), different for each `seed`, on the GPU.
nn::TensorMap image_batch(uint64_t seed) {
  Generator g(seed);
  nn::TensorMap b;
  b["image"] = Tensor::randn({16, 1, 28, 28}, g).to(testing::gpu());
  Tensor labels = Tensor::empty({16}, DType::i64);
  for (int64_t i = 0; i < 16; ++i)
    labels.data<int64_t>()[i] = static_cast<int64_t>((i * 7 + seed) % 10);
  b["label"] = labels.to(testing::gpu());
  return b;
}

struct Trainee {
  std::unique_ptr<nn::Model> net;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<Param> params;
  void step(const nn::TensorMap& batch) {
    net->zero_grad();
    backward(net->forward(batch).loss);
    opt->step(params, 0.05f);
  }
  // Every parameter and buffer (batch norm's running statistics), as bytes on the host.
  std::vector<std::vector<unsigned char>> bytes() const {
    std::vector<std::vector<unsigned char>> out;
    for (const auto& [name, t] : net->state()) {
      const Tensor h = t.to(Device::cpu());
      const auto* p = static_cast<const unsigned char*>(h.raw_data());
      out.emplace_back(p, p + h.nbytes());
    }
    return out;
  }
};

Trainee make_trainee(const std::string& model_yaml) {
  Trainee t;
  const Config mc = Config::parse(model_yaml, "test");
  t.net = nn::builtin_models().get(mc.get<std::string>("name"))(mc, 3);
  t.net->set_training_metrics(false);
  t.net->to(testing::gpu());
  t.opt = optim::make_optimizer(
      optim::builtin_optimizers(),
      Config::parse("{name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0005}", "test"));
  t.params = t.net->parameters();
  return t;
}

// The precision of a case, and deterministic algorithms (cuDNN's atomic backward algorithms, the
// embedding and max-pool backward's atomics would make even two eager runs differ), restored at
// the end.
struct PrecisionScope {
  PrecisionScope(Precision p, DType act) {
    set_cuda_matmul_precision(p);
    set_activation_dtype(act);
  }
  ~PrecisionScope() {
    set_cuda_matmul_precision(Precision::fp32);
    set_activation_dtype(DType::f32);
  }
  const testing::DeterministicScope deterministic_;
};

TEST(CudaGraph, ReplayedSgdStepsAreTheEagerStepsBitForBit) {
  ADA_REQUIRE_GPU();
  struct Case {
    const char* model;
    Precision precision;
    DType act;
  };
  for (const Case& c :
       {Case{"{name: resnet20_mnist}", Precision::fp32, DType::f32},
        Case{"{name: resnet20_mnist, channels_last: true}", Precision::bf16, DType::bf16}}) {
    SCOPED_TRACE(std::string(c.model) + " " + dtype_name(c.act));
    PrecisionScope scope(c.precision, c.act);
    const nn::TensorMap a = image_batch(1), b = image_batch(2);
    Trainee eager = make_trainee(c.model), graphed = make_trainee(c.model);
    ASSERT_EQ(eager.bytes(), graphed.bytes());
    // Two eager steps each (the first update starts SGD's momentum; plans and workspaces).
    for (Trainee* t : {&eager, &graphed}) {
      t->step(a);
      t->step(b);
    }
    // The captured step reads `in`, into which each step's batch is copied.
    nn::TensorMap in;
    for (const auto& [name, t] : a) in[name] = t.clone();
    cuda::Graph graph;
    graph.capture(0, [&] { graphed.step(in); });
    EXPECT_TRUE(graph.captured());
    EXPECT_GT(graph.nodes(), 50);
    EXPECT_GT(graph.pool_bytes(), 0);
    EXPECT_EQ(eager.bytes(), graphed.bytes()) << "the capture ran kernels";
    for (int s = 0; s < 4; ++s) {
      const nn::TensorMap& batch = s % 2 ? b : a;
      eager.step(batch);
      for (const auto& [name, t] : batch) in[name].copy_from(t);
      graph.replay();
      ASSERT_EQ(eager.bytes(), graphed.bytes()) << "after replay " << s + 1;
    }
    // Eager steps go on beside the live graph (its memory kept apart), and after it.
    eager.step(b);
    graphed.step(b);
    EXPECT_EQ(eager.bytes(), graphed.bytes()) << "an eager step after the replays";
    for (const auto& [name, t] : a) in[name].copy_from(t);
    eager.step(a);
    graph.replay();
    EXPECT_EQ(eager.bytes(), graphed.bytes()) << "a replay after an eager step";
  }
}

// Runs `work` under capture; expects a DeviceError saying `says`, then checks the device still
// works eagerly (an add read back on the host) and that nothing is being captured.
void expect_refused(const std::function<void()>& work, const std::string& says) {
  cuda::Graph graph;
  try {
    graph.capture(0, work);
    ADD_FAILURE() << "captured; expected a refusal saying '" << says << "'";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(says), std::string::npos) << what;
    EXPECT_NE(what.find("cannot be captured in a CUDA graph"), std::string::npos) << what;
  }
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(cuda::capturing(0));
  EXPECT_THROW(graph.replay(), DeviceError);
  const Tensor x = Tensor::full({1000}, 1.5, DType::f32, testing::gpu());
  const std::vector<float> y = ops::add(x, x).to(Device::cpu()).to_vector<float>();
  for (float v : y) ASSERT_EQ(v, 3.f);
}

TEST(CudaGraph, WhatAGraphCannotHoldIsRefusedByName) {
  ADA_REQUIRE_GPU();
  const Tensor x = Tensor::full({4096}, 2.0, DType::f32, testing::gpu());
  expect_refused([&] { (void)ops::mul(x, x).to(Device::cpu()); }, "a copy to the host");
  expect_refused([&] { (void)Tensor::zeros({8}).to(testing::gpu()); },
                 "a copy from host memory to the device");
  expect_refused([&] { (void)ops::norm2_sq(x); }, "read on the host");
  expect_refused([&] { cuda::synchronize(0); }, "a wait for the device");
  // Dropout from a generator the capture was not given (its counters would not move).
  Generator gen(1);
  expect_refused(
      [&] {
        Tensor mask;
        (void)ops::dropout_forward(x, 0.1f, gen, mask);
      },
      "the capture was not given");
  Generator other(2);
  {
    cuda::Graph graph;
    EXPECT_THROW(graph.capture(
                     0,
                     [&] {
                       Tensor mask;
                       (void)ops::dropout_forward(x, 0.1f, gen, mask);
                     },
                     &other),
                 DeviceError);
  }
  // Adam: its bias corrections move every step.
  Trainee t = make_trainee("{name: lenet5}");
  auto adam = optim::make_optimizer(optim::builtin_optimizers(),
                                    Config::parse("{name: adamw, lr: 0.001}", "test"));
  const nn::TensorMap batch = image_batch(3);
  t.net->zero_grad();
  backward(t.net->forward(batch).loss);
  adam->step(t.params, 1e-3f);
  expect_refused(
      [&] {
        t.net->zero_grad();
        backward(t.net->forward(batch).loss);
        adam->step(t.params, 1e-3f);
      },
      "an Adam step");
  // SGD's first update of a parameter starts its momentum.
  Trainee fresh = make_trainee("{name: lenet5}");
  expect_refused([&] { fresh.step(batch); }, "first update");
}

// BERT-tiny with dropout (hidden and attention, composed and fused attention), forward and
// backward captured with the model's generator, against the same passes run eagerly on an
// identical model (the parameters fixed: no optimizer): every replay draws the masks its eager
// step draws, so the loss path is the same and so is every gradient, bit for bit, the embedding
// tables' included (deterministic algorithms: their backward adds in the ids' order). The batch
// carries prepare_batch's fields and the mask is made on the device: nothing is read back.
TEST(CudaGraph, BertReplaysDrawTheMasksOfTheEagerSteps) {
  ADA_REQUIRE_GPU();
  PrecisionScope scope(Precision::fp32, DType::f32);
  const int64_t b = 2, s = 64;
  Tensor ids = Tensor::empty({b, s}, DType::i64), labels = Tensor::empty({b, s}, DType::i64),
         mask = Tensor::ones({b, s}, DType::i64);
  for (int64_t i = 0; i < b * s; ++i) {
    ids.data<int64_t>()[i] = 5 + (i * 37) % 90;
    labels.data<int64_t>()[i] = i % 6 == 2 ? ids.data<int64_t>()[i] : -100;
  }
  for (int64_t j = 50; j < s; ++j) mask.data<int64_t>()[s + j] = 0;  // padding
  for (const char* attention : {"composed", "fused"}) {
    SCOPED_TRACE(attention);
    const Config mc = Config::parse(
        std::string("{name: bert, preset: tiny, vocab_size: 97, max_positions: 64, nsp: true, "
                    "dropout: 0.1, attention_dropout: 0.3, attention: ") +
            attention + "}",
        "test");
    auto make = [&] {
      auto net = nn::builtin_models().get("bert")(mc, 3);
      net->set_training_metrics(false);
      net->to(testing::gpu());
      return net;
    };
    auto eager = make(), graphed = make();
    nn::TensorMap batch{{"input_ids", ids},
                        {"labels", labels},
                        {"segment_ids", Tensor::zeros({b, s}, DType::i64)},
                        {"attention_mask", mask},
                        {"nsp_label", Tensor::from_vector<int64_t>({0, 1}, {b})}};
    eager->prepare_batch(batch);
    for (auto& [name, t] : batch) t = t.to(testing::gpu());
    auto pass = [&](nn::Model& m) {
      m.zero_grad();
      backward(m.forward(batch).loss);
    };
    pass(*eager);  // the first pass of each makes the gradients and the plans
    pass(*graphed);
    cuda::Graph graph;
    graph.capture(
        0, [&] { pass(*graphed); }, &graphed->rng());
    for (int step = 0; step < 3; ++step) {
      pass(*eager);
      graph.replay();
      const auto pe = eager->parameters(), pg = graphed->parameters();
      ASSERT_EQ(pe.size(), pg.size());
      for (size_t i = 0; i < pe.size(); ++i) {
        const std::vector<float> e = pe[i].var.grad().to(Device::cpu()).to_vector<float>(),
                                 g = pg[i].var.grad().to(Device::cpu()).to_vector<float>();
        ASSERT_EQ(e, g) << pe[i].name << " after replay " << step + 1;
      }
    }
    EXPECT_EQ(graphed->rng().offset(), eager->rng().offset());
  }
}

TEST(CudaGraph, ItsMemoryIsKeptFromEagerReuseWhileItLivesAndGivenBackAfter) {
  ADA_REQUIRE_GPU();
  cuda::synchronize(0);
  const int64_t reserved_before = cuda::memory_stats(0).reserved;
  const Tensor x = Tensor::full({1 << 20}, 1.0, DType::f32, testing::gpu());
  Tensor freed = Tensor::full({1 << 20}, 3.0, DType::f32, testing::gpu());
  const void* freed_at = freed.raw_data();
  Tensor y;
  int64_t reserved_with = 0, pool = 0;
  {
    cuda::Graph graph;
    graph.capture(0, [&] {
      Tensor tmp = ops::add(x, freed);  // reads `freed`, then lets it go: the graph still reads it
      freed = Tensor();
      y = ops::mul(tmp, tmp);
    });
    EXPECT_GT(graph.pool_bytes(), 0);
    EXPECT_NE(y.raw_data(), freed_at);
    Tensor again = Tensor::empty({1 << 20}, DType::f32, testing::gpu());
    EXPECT_NE(again.raw_data(), freed_at) << "a block the graph reads was handed out again";
    ops::fill_(again, 100.f);
    graph.replay();
    for (float v : y.to(Device::cpu()).to_vector<float>()) ASSERT_EQ(v, 16.f);
    pool = graph.pool_bytes();
    reserved_with = cuda::memory_stats(0).reserved;
    EXPECT_GE(reserved_with, reserved_before + pool);
  }
  // The graph is gone; `y` (its pool's) still reads back, and the pool goes back to the driver
  // once `y` is freed (the block it adopted went back to the device pool, still reserved).
  for (float v : y.to(Device::cpu()).to_vector<float>()) ASSERT_EQ(v, 16.f);
  y = Tensor();
  EXPECT_EQ(cuda::memory_stats(0).reserved, reserved_with - pool)
      << "the graph's pool was not given back";
}

// A block of graph A's pool that graph B's capture reads and lets go stays B's until B is gone:
// freed into A's pool at once, A's end would give it to the driver under B's kernels.
TEST(CudaGraph, AnotherGraphsBlockFreedInACaptureIsKeptUntilThatGraphIsGone) {
  ADA_REQUIRE_GPU();
  const Tensor x = Tensor::full({1 << 20}, 2.0, DType::f32, testing::gpu());
  cuda::synchronize(0);
  const int64_t reserved_before = cuda::memory_stats(0).reserved;
  Tensor from_a, y;
  auto a = std::make_unique<cuda::Graph>();
  a->capture(0, [&] { from_a = ops::add(x, x); });  // from_a: A's pool, 4 after a replay
  a->replay();
  {
    cuda::Graph b;
    b.capture(0, [&] {
      Tensor t = ops::mul(from_a, x);  // reads A's block, then lets it go
      from_a = Tensor();
      y = ops::add(t, t);
    });
    a.reset();
    EXPECT_GE(cuda::memory_stats(0).reserved, reserved_before + b.pool_bytes() + (4 << 20))
        << "the block B's kernels read went back to the driver with A";
    b.replay();
    for (float v : y.to(Device::cpu()).to_vector<float>()) ASSERT_EQ(v, 16.f);
  }
  y = Tensor();
  EXPECT_EQ(cuda::memory_stats(0).reserved, reserved_before) << "a graph's pool was not given back";
}

}  // namespace
}  // namespace ada
