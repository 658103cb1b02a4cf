// Modules and models: pinned parameter counts, torchvision-compatible names, weight-decay
// flags, train/eval propagation, state save/load by name and its errors, forward shapes.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/backend/cpu/op_profile.h"
#include "core/host_memory.h"
#include "core/serialize.h"
#include "nn/init.h"
#include "nn/layers/multi_head_attention.h"
#include "nn/model.h"
#include "util/temp_dir.h"

namespace ada::nn {
namespace {

ModelRegistry& models() {
  static ModelRegistry r = [] {
    ModelRegistry reg("model");
    register_builtin_models(reg);
    return reg;
  }();
  return r;
}

std::unique_ptr<Model> build(const std::string& yaml, uint64_t seed = 1) {
  Config cfg = Config::parse(yaml, "test");
  auto m = models().get(cfg.get<std::string>("name"))(cfg, seed);
  cfg.finish();
  return m;
}

TEST(Models, PinnedParameterCounts) {
  init::ShapesOnly shapes_only;  // counts need shapes, not random weights
  EXPECT_EQ(build("name: lenet5")->parameter_count(), 61706);
  EXPECT_EQ(build("name: resnet18")->parameter_count(), 11689512);
  EXPECT_EQ(build("name: resnet34")->parameter_count(), 21797672);
  auto r50 = build("name: resnet50");
  EXPECT_EQ(r50->parameter_count(), 25557032);
  EXPECT_EQ(r50->parameters().size(), 161u);
  EXPECT_EQ(build("{name: bert, preset: base, nsp: true}")->parameter_count(), 110106428);
  EXPECT_EQ(build("{name: bert, preset: large, nsp: true}")->parameter_count(), 336226108);
  // tiny: 2 layers of 128 wide, FFN 512, BERT vocab, MLM head only.
  EXPECT_EQ(build("{name: bert, preset: tiny}")->parameter_count(), 4416698);
}

TEST(Models, TorchvisionNamesAndDecayFlags) {
  auto r50 = build("name: resnet50");
  auto params = r50->parameters();
  std::map<std::string, Param> by;
  for (auto& p : params) by.emplace(p.name, p);
  for (const char* n :
       {"conv1.weight", "bn1.weight", "layer1.0.conv2.weight", "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.bias", "layer4.2.bn3.weight", "fc.weight", "fc.bias"})
    EXPECT_TRUE(by.count(n)) << n;
  EXPECT_TRUE(by.at("fc.weight").weight_decay);
  EXPECT_FALSE(by.at("fc.bias").weight_decay);
  EXPECT_FALSE(by.at("bn1.weight").weight_decay);
  EXPECT_EQ(by.at("layer2.0.conv2.weight").var.value().shape(), (Shape{128, 128, 3, 3}));
  // v1.5 zero-init: the last BN gamma of each block starts at 0, others at 1.
  EXPECT_EQ(ops::sum_all(by.at("layer1.0.bn3.weight").var.value()), 0.0);
  EXPECT_EQ(ops::sum_all(by.at("layer1.0.bn1.weight").var.value()), 64.0);
  EXPECT_EQ(r50->buffers().size(), 2u * 53);  // running mean/var of every BN
  // Variables carry their dotted names (used in messages and by the bucketer).
  EXPECT_EQ(by.at("layer3.1.conv1.weight").var.name(), "layer3.1.conv1.weight");
  auto bert = build("{name: bert, preset: tiny, nsp: true}");
  for (auto& p : bert->parameters()) {
    const bool norm_or_bias = p.name.find("norm") != std::string::npos ||
                              p.name.find("LayerNorm") != std::string::npos ||
                              p.name.find("bias") != std::string::npos;
    EXPECT_EQ(p.weight_decay, !norm_or_bias) << p.name;
  }
}

TEST(Models, SameSeedSameWeightsDifferentSeedDifferent) {
  auto a = build("name: resnet20_mnist", 5), b = build("name: resnet20_mnist", 5),
       c = build("name: resnet20_mnist", 6);
  auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  EXPECT_EQ(pa[0].var.value().to_vector<float>(), pb[0].var.value().to_vector<float>());
  EXPECT_NE(pa[0].var.value().to_vector<float>(), pc[0].var.value().to_vector<float>());
}

TEST(Models, ForwardBackwardShapesAndModes) {
  auto m = build("name: lenet5");
  Generator g(3);
  TensorMap batch{{"image", Tensor::randn({3, 1, 28, 28}, g)},
                  {"label", Tensor::from_vector<int64_t>({1, 7, 3}, {3})}};
  auto out = m->forward(batch);
  EXPECT_EQ(out.metric("top1").count, 3.0);
  EXPECT_EQ(out.metric("loss").count, 3.0);
  EXPECT_EQ(out.metric("loss").sum, 3.0 * out.loss.value().item());
  EXPECT_GT(out.loss.value().item(), 0.f);
  backward(out.loss);
  for (auto& p : m->parameters()) EXPECT_TRUE(p.var.grad().defined()) << p.name;
  m->set_training_metrics(false);
  const auto quiet = m->forward(batch);
  EXPECT_TRUE(quiet.metrics.empty());
  EXPECT_EQ(quiet.loss.value().item(), out.loss.value().item());
  m->train(false);
  EXPECT_FALSE(m->training());
  EXPECT_EQ(m->forward(batch).metric("top1").count, 3.0);
  try {
    m->forward({{"image", Tensor::zeros({1, 1, 28, 28})}});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("no field 'label'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m->forward({{"image", Tensor::zeros({1, 3, 32, 32})},
                           {"label", Tensor::zeros({1}, DType::i64)}}),
               ShapeError);
}

// Every parameter gradient of `other` is `model`'s up to summation order: their difference within
// 1e-5 of the gradient's norm (+1e-9 for a gradient that is 0, e.g. the key projection's bias,
// softmax ignoring a constant).
void expect_gradients_up_to_summation_order(const Model& model, const Model& other) {
  const auto pa = model.parameters(), pb = other.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto ga = pa[i].var.grad().to_vector<float>(), gb = pb[i].var.grad().to_vector<float>();
    double diff = 0, norm = 0;
    for (size_t j = 0; j < ga.size(); ++j) {
      diff += (double(gb[j]) - ga[j]) * (double(gb[j]) - ga[j]);
      norm += double(ga[j]) * ga[j];
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-9) << pa[i].name;
  }
}

// model.attention: fused routes every encoder layer through ops::fused_attention (the op's own
// accuracy is tests/core/test_fused_attention.cc's): in training mode, with dropout, every
// gradient is the composed model's up to summation order (another dropout mask or a wrong
// backward moves the attention projections' by far more than 1e-5 of their norm); a bad value
// is refused.
TEST(Models, BertFusedAttentionIsTheComposedModel) {
  std::vector<int64_t> ids = {2, 5, 9, 3, 0, 0, 2, 7, 7, 8, 3, 1};
  std::vector<int64_t> labels = {-100, 6, 4, -100, -100, -100, 9, -100, 11, 2, -100, -100};
  TensorMap batch{{"input_ids", Tensor::from_vector<int64_t>(ids, {2, 6})},
                  {"segment_ids", Tensor::zeros({2, 6}, DType::i64)},
                  {"attention_mask",
                   Tensor::from_vector<int64_t>({1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, {2, 6})},
                  {"labels", Tensor::from_vector<int64_t>(labels, {2, 6})}};
  auto composed = build("{name: bert, preset: tiny, vocab_size: 50, attention_dropout: 0.3}");
  auto fused =
      build("{name: bert, preset: tiny, vocab_size: 50, attention_dropout: 0.3, attention: fused}");
  cpu::set_profiling(true);
  const Variable lc = composed->forward(batch).loss;
  EXPECT_EQ(cpu::profile_report(1).find("fused_attention"), std::string::npos);
  const Variable lf = fused->forward(batch).loss;
  EXPECT_NE(cpu::profile_report(1).find("fused_attention"), std::string::npos);
  cpu::set_profiling(false);
  backward(lc);
  backward(lf);
  // Every parameter's gradient (the attention projections' carry the masks) agrees.
  expect_gradients_up_to_summation_order(*composed, *fused);
  try {
    build("{name: bert, preset: tiny, attention: flash}");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'flash'; known: composed"), std::string::npos)
        << e.what();
  }
}

// model.recompute: [attention_dropout, gelu] draws the dropped attention probabilities and
// computes the feed-forward GELU's output again in backward: the same loss and every gradient bit
// for bit (the same dropout masks, the same products), with exactly one [B*heads, S, S] and one
// [B*S, ffn] f32 tensor fewer kept per layer between forward and backward; bad values refused.
TEST(Models, BertRecomputeKeepsLessWithTheSameBits) {
  const int64_t b = 2, s = 64, heads = 2, ffn = 512, layers = 2;  // tiny; bin-sized tensors
  std::vector<int64_t> ids(b * s), labels(b * s, -100), mask(b * s, 1);
  for (int64_t i = 0; i < b * s; ++i) {
    ids[i] = (i * 7 + 3) % 50;
    if (i % 5 == 1) labels[i] = (i * 3) % 50;
  }
  for (int64_t i = s - 9; i < s; ++i) mask[i] = 0;  // the first sequence padded
  TensorMap batch{{"input_ids", Tensor::from_vector<int64_t>(ids, {b, s})},
                  {"segment_ids", Tensor::zeros({b, s}, DType::i64)},
                  {"attention_mask", Tensor::from_vector<int64_t>(mask, {b, s})},
                  {"labels", Tensor::from_vector<int64_t>(labels, {b, s})}};
  const std::string yaml =
      "{name: bert, preset: tiny, vocab_size: 50, max_positions: 64, "
      "dropout: 0.1, attention_dropout: 0.3";
  struct Run {
    std::unique_ptr<Model> m;
    Variable loss;
    int64_t kept = 0;
  };
  auto run = [&](const std::string& extra) {
    Run r{build(yaml + extra + "}"), {}, 0};
    const int64_t before = host::memory_stats().allocated;
    r.loss = r.m->forward(batch).loss;
    r.kept = host::memory_stats().allocated - before;
    backward(r.loss);
    return r;
  };
  const Run plain = run(""), both = run(", recompute: [attention_dropout, gelu]"),
            attn = run(", recompute: [attention_dropout]");
  const int64_t probs = b * heads * s * s * 4, gelu_out = b * s * ffn * 4;
  EXPECT_EQ(plain.kept - both.kept, layers * (probs + gelu_out));
  EXPECT_EQ(plain.kept - attn.kept, layers * probs);
  for (const Run* r : {&both, &attn}) {
    EXPECT_EQ(r->loss.value().item(), plain.loss.value().item());
    const auto pp = plain.m->parameters(), pr = r->m->parameters();
    ASSERT_EQ(pp.size(), pr.size());
    for (size_t i = 0; i < pp.size(); ++i)
      EXPECT_EQ(pp[i].var.grad().to_vector<float>(), pr[i].var.grad().to_vector<float>())
          << pp[i].name;
  }
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {", recompute: [softmax]",
            "recompute (line 1, column 101): unknown 'softmax'; known: attention_dropout"},
           {", attention: fused, recompute: [attention_dropout]",
            "model.attention: fused keeps no"},
           {", recompute: gelu", "recompute"}}) {
    try {
      build(yaml + extra + "}");
      ADD_FAILURE() << extra;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(Models, BertRunsWithPaddingAndNsp) {
  auto m = build(
      "{name: bert, preset: tiny, vocab_size: 50, nsp: true, dropout: 0.0, attention_dropout: "
      "0.0}");
  std::vector<int64_t> ids = {2, 5, 9, 3, 0, 0, 2, 7, 7, 8, 3, 1};
  std::vector<int64_t> labels(12, -100);
  labels[1] = 6;
  labels[8] = 11;
  TensorMap batch{{"input_ids", Tensor::from_vector<int64_t>(ids, {2, 6})},
                  {"segment_ids", Tensor::zeros({2, 6}, DType::i64)},
                  {"attention_mask",
                   Tensor::from_vector<int64_t>({1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, {2, 6})},
                  {"labels", Tensor::from_vector<int64_t>(labels, {2, 6})},
                  {"nsp_label", Tensor::from_vector<int64_t>({0, 1}, {2})}};
  auto out = m->forward(batch);
  EXPECT_EQ(out.metric("mlm_accuracy").count, 2.0);
  EXPECT_EQ(out.metric("mlm_loss").count, 2.0);
  EXPECT_EQ(out.metric("nsp_accuracy").count, 2.0);
  EXPECT_NEAR(out.loss.value().item(), std::log(50.0) + std::log(2.0),
              1.0);  // near-uniform at init
  // Without training metrics (the trainer's steps) the loss is the same, the figures are not
  // made; in eval mode they always are.
  m->set_training_metrics(false);
  auto quiet = m->forward(batch);
  EXPECT_TRUE(quiet.metrics.empty());
  EXPECT_EQ(quiet.loss.value().item(), out.loss.value().item());
  m->train(false);
  EXPECT_EQ(m->forward(batch).metric("mlm_accuracy").count, 2.0);
  backward(out.loss);
  // The word embedding gets gradient from the input and from the tied decoder.
  for (auto& p : m->parameters()) {
    if (p.name == "embeddings.word_embeddings.weight") {
      EXPECT_GT(ops::norm2_sq(p.var.grad()), 0.0);
    }
  }
}

// prepare_batch adds the masked tokens' positions and labels on the host (the trainer calls it
// before the copy to a GPU, whose forward then reads nothing back): the same loss and gradients,
// bit for bit, as a forward that reads the labels itself; the fields come in pairs; other models
// add nothing.
TEST(Models, BertPreparedBatchGivesTheSameBits) {
  const int64_t b = 3, s = 16;
  std::vector<int64_t> ids(b * s), labels(b * s, -100);
  for (int64_t i = 0; i < b * s; ++i) {
    ids[i] = (i * 11 + 1) % 50;
    if (i % 4 == 2) labels[i] = (i * 5) % 50;
  }
  const TensorMap raw{{"input_ids", Tensor::from_vector<int64_t>(ids, {b, s})},
                      {"segment_ids", Tensor::zeros({b, s}, DType::i64)},
                      {"labels", Tensor::from_vector<int64_t>(labels, {b, s})},
                      {"nsp_label", Tensor::from_vector<int64_t>({0, 1, 1}, {b})}};
  const std::string yaml =
      "{name: bert, preset: tiny, vocab_size: 50, max_positions: 16, nsp: true, dropout: 0.1}";
  TensorMap prepared = raw;
  build(yaml)->prepare_batch(prepared);
  ASSERT_EQ(prepared.count("mlm_positions"), 1u);
  const std::vector<int64_t> where = prepared.at("mlm_positions").to_vector<int64_t>();
  ASSERT_EQ(where.size(), 12u);
  for (size_t k = 0; k < where.size(); ++k) {
    EXPECT_EQ(where[k], static_cast<int64_t>(4 * k + 2));
    EXPECT_EQ(prepared.at("mlm_labels").to_vector<int64_t>()[k], labels[where[k]]);
  }
  auto a = build(yaml), p = build(yaml);
  const Variable la = a->forward(raw).loss, lp = p->forward(prepared).loss;
  EXPECT_EQ(la.value().item(), lp.value().item());
  backward(la);
  backward(lp);
  const auto pa = a->parameters(), pp = p->parameters();
  ASSERT_EQ(pa.size(), pp.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].var.grad().to_vector<float>(), pp[i].var.grad().to_vector<float>())
        << pa[i].name;
  TensorMap half = raw;
  half["mlm_positions"] = prepared.at("mlm_positions");
  try {
    a->forward(half);
    ADD_FAILURE() << "a batch with mlm_positions alone was taken";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("mlm_positions without mlm_labels"), std::string::npos)
        << e.what();
  }
  TensorMap images{{"image", Tensor::zeros({2, 1, 28, 28})},
                   {"label", Tensor::zeros({2}, DType::i64)}};
  build("{name: lenet5}")->prepare_batch(images);
  EXPECT_EQ(images.size(), 2u);
}

// MlmDataset's batches carry the masked positions per sequence, [B, P], padded with label -100 to
// one count (every batch one shape, which CUDA graphs need): prepare_batch makes them flat
// positions of the batch, and the padding slots reach neither the loss nor any gradient nor the
// figures: the model given the labels alone (11 masked tokens) has the same loss and gradients up
// to summation order (a padding slot reaching the loss would move it by about 1/11, and the MLM
// head's gradients as much) and the same counts. A position outside its sequence is refused.
TEST(Models, BertPaddedMaskedPositionsAreTheUnpaddedModel) {
  const int64_t b = 3, s = 16, per = 6;
  std::vector<int64_t> ids(b * s), labels(b * s, -100), positions(b * per, 0),
      chosen(b * per, -100), flat_want;
  const std::vector<std::vector<int64_t>> picked = {{1, 4, 9, 15}, {3, 7}, {0, 2, 5, 11, 13}};
  for (int64_t i = 0; i < b * s; ++i) ids[i] = (i * 11 + 1) % 50;
  for (int64_t r = 0; r < b; ++r)
    for (size_t k = 0; k < picked[r].size(); ++k) {
      const int64_t at = r * s + picked[r][k];
      labels[at] = (at * 7) % 50;
      positions[r * per + k] = picked[r][k];
      chosen[r * per + k] = labels[at];
    }
  for (int64_t r = 0; r < b; ++r)
    for (int64_t k = 0; k < per; ++k) flat_want.push_back(r * s + positions[r * per + k]);
  const TensorMap raw{{"input_ids", Tensor::from_vector<int64_t>(ids, {b, s})},
                      {"segment_ids", Tensor::zeros({b, s}, DType::i64)},
                      {"labels", Tensor::from_vector<int64_t>(labels, {b, s})},
                      {"nsp_label", Tensor::from_vector<int64_t>({0, 1, 1}, {b})}};
  TensorMap padded = raw;
  padded["mlm_positions"] = Tensor::from_vector<int64_t>(positions, {b, per});
  padded["mlm_labels"] = Tensor::from_vector<int64_t>(chosen, {b, per});
  const std::string yaml =
      "{name: bert, preset: tiny, vocab_size: 50, max_positions: 16, nsp: true, dropout: 0.1}";
  TensorMap prepared = padded;
  build(yaml)->prepare_batch(prepared);
  EXPECT_EQ(prepared.at("mlm_positions").to_vector<int64_t>(), flat_want);
  EXPECT_EQ(prepared.at("mlm_labels").to_vector<int64_t>(), chosen);

  auto a = build(yaml), p = build(yaml), u = build(yaml);
  const auto oa = a->forward(raw), op = p->forward(prepared);
  EXPECT_EQ(op.metric("mlm_loss").count, 11.0);
  EXPECT_EQ(op.metric("mlm_accuracy").count, 11.0);
  EXPECT_EQ(op.metric("mlm_accuracy").sum, oa.metric("mlm_accuracy").sum);
  const double la = oa.loss.value().item(), lp = op.loss.value().item();
  EXPECT_NEAR(lp, la, 1e-5 * std::abs(la));
  // Unflattened (a forward without prepare_batch) gives the prepared batch's bits.
  EXPECT_EQ(u->forward(padded).loss.value().item(), lp);
  backward(oa.loss);
  backward(op.loss);
  expect_gradients_up_to_summation_order(*a, *p);
  TensorMap outside = padded;
  positions[per + 1] = s;
  outside["mlm_positions"] = Tensor::from_vector<int64_t>(positions, {b, per});
  try {
    build(yaml)->prepare_batch(outside);
    ADD_FAILURE() << "a position outside its sequence was taken";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("mlm_positions [1, 1] is 16, outside a sequence of 16"),
              std::string::npos)
        << e.what();
  }
}

TEST(Modules, StateRoundTripAndErrors) {
  auto a = build("name: resnet20_mnist", 1), b = build("name: resnet20_mnist", 2);
  ada::testing::TempDir tmp("ada_modules");
  const std::string path = tmp / "r20.safetensors";
  save_safetensors(path, a->state());
  b->load_state(load_safetensors(path));
  auto sa = a->state(), sb = b->state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.to_vector<float>());
  auto lenet = build("name: lenet5");
  try {
    lenet->load_state(load_safetensors(path));
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "entry 'conv1.weight' is f32[16,1,3,3] but this LeNet5 expects f32[6,1,5,5] (is "
                  "it a checkpoint of another model or configuration?"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("r20.safetensors"), std::string::npos) << e.what();
  }
  auto wide = build("{name: resnet20_mnist, num_classes: 7}");
  EXPECT_THROW(wide->load_state(load_safetensors(path)), IoError);
}

TEST(Models, DescribeAndConfigErrors) {
  auto m = build("name: lenet5");
  const std::string d = m->describe();
  EXPECT_NE(d.find("conv1  Conv2d  params 156"), std::string::npos) << d;
  EXPECT_NE(d.find("total parameters: 61706"), std::string::npos) << d;
  EXPECT_THROW(build("{name: bert, preset: huge}"), ConfigError);
  EXPECT_THROW(build("{name: bert, hidden: 100, heads: 3}"), ConfigError);
  EXPECT_THROW(build("{name: resnet50, label_smoothing: 1.5}"), ConfigError);
  EXPECT_THROW(build("{name: lenet5, num_clases: 10}"), ConfigError);  // typo caught by finish()
  // A classifier needs two classes; the message gives the key, its line and the value.
  for (const char* m : {"lenet5", "resnet20_mnist", "resnet18"})
    for (const char* n : {"0", "1", "-3"}) {
      try {
        build(std::string("name: ") + m + "\nnum_classes: " + n + "\n");
        ADD_FAILURE() << m << " accepted num_classes " << n;
      } catch (const ConfigError& e) {
        const std::string want = std::string(
                                     "num_classes (line 2, column 14): a classifier "
                                     "needs at least 2 classes, got ") +
                                 n;
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
    }
  EXPECT_THROW(build("{name: lenet5, label_smoothing: -0.1}"), ConfigError);
  EXPECT_THROW(build("{name: resnet20_mnist, in_channels: 0}"), ConfigError);
  try {
    models().get("resnet51", "config x.yaml: model.name (line 2, column 9)");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'resnet50'"), std::string::npos) << e.what();
  }
}

TEST(Layers, AttentionIgnoresPaddedKeys) {
  Generator g(4), d(5);
  MultiHeadAttention att(8, 2, 0.f, g);
  Tensor x = Tensor::randn({1, 4, 8}, g);
  Tensor mask = MultiHeadAttention::key_bias(Tensor::from_vector<int64_t>({1, 1, 0, 0}, {1, 4}),
                                             Device::cpu());
  auto y1 = att.forward(Variable(x), mask, d).value().to_vector<float>();
  // Changing the padded positions must not change the outputs at the real positions.
  Tensor x2 = x.clone();
  for (int i = 16; i < 32; ++i) x2.data<float>()[i] += 5.f;
  auto y2 = att.forward(Variable(x2), mask, d).value().to_vector<float>();
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-5) << i;
  // A mask made for another batch shape is refused, naming the expected shape.
  EXPECT_THROW(att.forward(Variable(x),
                           MultiHeadAttention::key_bias(Tensor::ones({2, 4}), Device::cpu()), d),
               ShapeError);
}

}  // namespace
}  // namespace ada::nn
