// Hugging Face BERT checkpoints: the name mapping by hand; tests/golden/bert_hf.safetensors (a
// BertForPreTraining state dict and the losses of a PyTorch twin written against HF's module
// structure, tools/make_hf_golden.py) imported into our BERT gives the twin's losses and MLM
// accuracy; export gives back HF's tensors bit for bit; a BertModel checkpoint (no heads) loads
// the encoder and names the heads it left; untied decoders and foreign tensors are refused. The
// task heads (model.head: classification, question_answering) against the twin's logits, losses
// and gradients on tests/golden/bert_hf_heads.safetensors (BertForSequenceClassification's and
// BertForQuestionAnswering's names).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "core/ops.h"
#include "nn/losses.h"
#include "nn/model.h"
#include "nn/models/bert_hf.h"
#include "util/error_of.h"
#include "util/golden.h"

namespace ada::nn {
namespace {

constexpr char kRegenerate[] =
    "regenerate it from the repository root with `/usr/bin/python3 tools/make_hf_golden.py` "
    "(needs Debian's python3-torch)";

TEST(BertHf, NamesByHand) {
  EXPECT_EQ(bert_name_from_hf("bert.encoder.layer.11.attention.self.query.weight"),
            "encoder.layer11.attention.query.weight");
  EXPECT_EQ(bert_name_from_hf("encoder.layer.0.attention.output.LayerNorm.bias"),
            "encoder.layer0.attention_norm.bias");  // BertModel: no "bert." prefix
  EXPECT_EQ(bert_name_from_hf("bert.encoder.layer.3.output.LayerNorm.gamma"),
            "encoder.layer3.output_norm.weight");  // TF-converted checkpoints
  EXPECT_EQ(bert_name_from_hf("bert.pooler.dense.bias"), "pooler.bias");
  EXPECT_EQ(bert_name_from_hf("cls.predictions.bias"), "cls.decoder_bias");
  EXPECT_EQ(bert_name_from_hf("cls.seq_relationship.weight"), "cls.nsp.weight");
  EXPECT_EQ(bert_name_from_hf("bert.encoder.layer.1.crossattention.self.query.weight"),
            std::nullopt);
  EXPECT_EQ(hf_name_from_bert("encoder.layer7.intermediate.bias"),
            "bert.encoder.layer.7.intermediate.dense.bias");
  EXPECT_EQ(hf_name_from_bert("cls.transform_norm.weight"),
            "cls.predictions.transform.LayerNorm.weight");
  EXPECT_EQ(hf_name_from_bert("embeddings.LayerNorm.bias"), "bert.embeddings.LayerNorm.bias");
}

// Loads golden file `stem` into *g and splits it: "batch/<field>" into *batch, the
// un-prefixed Hugging Face state dict into *hf (the rest, "twin/...", stays in *g).
void load_hf_golden(const std::string& stem, NamedTensors* g, TensorMap* batch, NamedTensors* hf) {
  ASSERT_NO_FATAL_FAILURE(ada::testing::load_golden(stem, kRegenerate, g));
  for (const auto& [name, t] : g->tensors) {
    if (name.rfind("batch/", 0) == 0)
      (*batch)[name.substr(6)] = t;
    else if (name.find('/') == std::string::npos)
      hf->tensors.emplace_back(name, t);
  }
  hf->source = stem + ".safetensors";
}

class BertHfGolden : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(load_hf_golden("bert_hf", &g_, &batch_, &hf_)); }
  std::unique_ptr<Model> model(uint64_t seed = 1) {
    const Config c =
        Config::parse(ada::testing::golden_meta(g_, "model_config", kRegenerate), "golden");
    return builtin_models().get("bert")(c, seed);
  }
  NamedTensors g_, hf_;
  TensorMap batch_;
};

TEST_F(BertHfGolden, ImportedWeightsGiveTheTwinsLosses) {
  auto m = model();
  m->load_state(import_hf_bert(hf_));  // every tensor present, nothing left over
  m->train(false);
  const ModelOutput out = m->forward(batch_);
  const double mlm = out.metric("mlm_loss").sum / out.metric("mlm_loss").count;
  const double twin_mlm = g_.at("twin/mlm_loss").to_vector<float>()[0];
  const double twin_nsp = g_.at("twin/nsp_loss").to_vector<float>()[0];
  // Losses of O(1) from f32 kernels against a float64 twin rounded to f32: within 1e-5
  // relative (tests/nn/test_model_golden.cc measures ours within 2.4e-7 on the same arithmetic).
  EXPECT_NEAR(mlm, twin_mlm, 1e-5 * std::fabs(twin_mlm));
  EXPECT_NEAR(out.loss.value().item(), twin_mlm + twin_nsp, 1e-5 * (twin_mlm + twin_nsp));
  // MLM accuracy: the twin's arg-max at the masked positions (row-major, as our model takes them).
  const Tensor logits = g_.at("twin/prediction_logits");  // [B, S, V]
  const auto labels = batch_.at("labels").to_vector<int64_t>();
  const int64_t v = logits.size(2);
  const auto lv = logits.to_vector<float>();
  int64_t correct = 0, count = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == -100) continue;
    ++count;
    int64_t best = 0;
    for (int64_t j = 1; j < v; ++j)
      if (lv[i * v + j] > lv[i * v + best]) best = j;
    correct += best == labels[i];
  }
  EXPECT_EQ(out.metric("mlm_accuracy").count, count);
  EXPECT_EQ(out.metric("mlm_accuracy").sum, correct);
}

TEST_F(BertHfGolden, ExportGivesBackTheHuggingFaceTensors) {
  auto m = model();
  m->load_state(import_hf_bert(hf_));
  NamedTensors ours;
  for (auto& [name, t] : m->state()) ours.tensors.emplace_back(name, t);
  const NamedTensors back = export_hf_bert(ours);
  EXPECT_EQ(back.metadata.at("format"), "pt");
  size_t compared = 0;
  for (const auto& [name, t] : hf_.tensors) {
    if (name == "bert.embeddings.position_ids" || name == "cls.predictions.decoder.weight") {
      EXPECT_FALSE(back.contains(name)) << name;  // a buffer and a tied copy: not ours to write
      continue;
    }
    ASSERT_TRUE(back.contains(name)) << name;
    EXPECT_EQ(back.at(name).to_vector<float>(), t.to_vector<float>()) << name;
    ++compared;
  }
  EXPECT_EQ(compared, back.tensors.size());
}

TEST(BertHfExport, AMeanPooledClassifierIsRefused) {
  // model.pooling: mean has a classifier and no pooler: BertForSequenceClassification would load
  // it with a random pooler and compute something else.
  NamedTensors ours;
  ours.source = "ckpt.safetensors";
  ours.tensors.emplace_back("classifier.weight", Tensor::zeros({2, 4}));
  ours.tensors.emplace_back("classifier.bias", Tensor::zeros({2}));
  EXPECT_NE(ada::testing::error_of<IoError>([&] {
              export_hf_bert(ours);
            }).find("ckpt.safetensors: a classifier without a pooler (model.pooling: mean)"),
            std::string::npos);
  ours.tensors.emplace_back("pooler.weight", Tensor::zeros({4, 4}));
  EXPECT_TRUE(export_hf_bert(ours).contains("classifier.weight"));
}

TEST(BertHfExport, ACheckpointOfAnotherModelIsRefusedByName) {
  NamedTensors lenet;
  lenet.source = "runs/lenet/checkpoints/ckpt-00000010.safetensors";
  lenet.tensors.emplace_back("conv1.weight", Tensor::zeros({6, 1, 5, 5}));
  EXPECT_NE(
      ada::testing::error_of<IoError>([&] { export_hf_bert(lenet); })
          .find("ckpt-00000010.safetensors: tensor 'conv1.weight' is not one of BERT's: this is "
                "not a BERT checkpoint"),
      std::string::npos);
}

TEST_F(BertHfGolden, BertModelWithoutHeadsLoadsTheEncoder) {
  NamedTensors encoder;
  for (const auto& [name, t] : hf_.tensors)
    if (name.rfind("bert.", 0) == 0) encoder.tensors.emplace_back(name.substr(5), t);
  auto m = model(/*seed=*/99);
  const auto before = m->state();
  const std::vector<std::string> fresh = m->load_present(import_hf_bert(encoder));
  EXPECT_EQ(fresh, (std::vector<std::string>{"cls.decoder_bias", "cls.transform.weight",
                                             "cls.transform.bias", "cls.transform_norm.weight",
                                             "cls.transform_norm.bias", "cls.nsp.weight",
                                             "cls.nsp.bias"}));
  for (const auto& [name, t] : m->state()) {
    if (name.rfind("cls.", 0) != 0) {
      EXPECT_EQ(t.to_vector<float>(),
                encoder.at(hf_name_from_bert(name).substr(5)).to_vector<float>())
          << name;
    }
  }
}

TEST_F(BertHfGolden, UntiedDecodersAndForeignTensorsAreRefused) {
  NamedTensors untied = hf_;
  for (auto& [name, t] : untied.tensors)
    if (name == "cls.predictions.decoder.weight") {
      t = t.clone();
      ops::scale_(t, 2.f);
    }
  EXPECT_NE(ada::testing::error_of<IoError>([&] {
              import_hf_bert(untied);
            }).find("bert_hf.safetensors: cls.predictions.decoder.weight is not tied"),
            std::string::npos);
  NamedTensors foreign = hf_;
  foreign.tensors.emplace_back("bert.encoder.layer.0.attention.self.rotary.weight",
                               Tensor::zeros({2}));
  EXPECT_NE(ada::testing::error_of<IoError>([&] {
              import_hf_bert(foreign);
            }).find("tensor 'bert.encoder.layer.0.attention.self.rotary.weight' is not part of"),
            std::string::npos);
  EXPECT_TRUE(is_hf_bert(hf_));
  NamedTensors plain;
  plain.tensors.emplace_back("encoder.layer0.attention.query.weight", Tensor::zeros({2}));
  EXPECT_FALSE(is_hf_bert(plain));
}

// ---- task heads -------------------------------------------------------------------------------

class BertHfHeads : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(load_hf_golden("bert_hf_heads", &g_, &batch_, &hf_));
  }
  // "classification_mean": head: classification with pooling: mean.
  std::unique_ptr<Model> model(const std::string& head) {
    std::string yaml = ada::testing::golden_meta(g_, "model_config", kRegenerate);
    if (head == "question_answering")
      yaml += "head: question_answering\n";
    else
      yaml += "head: classification\nnum_classes: 3\n" +
              std::string(head == "classification_mean" ? "pooling: mean\n" : "");
    return builtin_models().get("bert")(Config::parse(yaml, "golden"), 5);
  }
  // |got - want| <= atol + rtol |want| elementwise.
  static void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                           const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    const auto g = got.to_vector<float>(), w = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_LE(std::fabs(g[i] - w[i]), atol + rtol * std::fabs(w[i])) << what << " element " << i;
  }
  NamedTensors g_, hf_;
  TensorMap batch_;
};

TEST_P(BertHfHeads, LogitsLossAndGradientsOfTheTwin) {
  const std::string head = GetParam();
  auto m = model(head);
  std::vector<std::string> unused;
  const std::vector<std::string> fresh = m->load_present(import_hf_bert(hf_), &unused);
  EXPECT_TRUE(fresh.empty()) << "left at their initial values: " << fresh.front();
  // The other heads' tensors match nothing here (BertForQuestionAnswering and mean pooling have
  // no pooler).
  std::sort(unused.begin(), unused.end());
  std::vector<std::string> want_unused = {"classifier.bias", "classifier.weight", "pooler.bias",
                                          "pooler.weight"};
  if (head == "classification")
    want_unused = {"qa_outputs.bias", "qa_outputs.weight"};
  else if (head == "classification_mean")
    want_unused = {"pooler.bias", "pooler.weight", "qa_outputs.bias", "qa_outputs.weight"};
  EXPECT_EQ(unused, want_unused);
  m->train(false);  // dropout off, as the twin
  const ModelOutput out = m->forward(batch_);
  const int64_t b = batch_.at("input_ids").size(0), s = batch_.at("input_ids").size(1);
  // Tolerances as tests/nn/test_model_golden.cc's (f32 kernels against a float64 twin).
  const double twin_loss = g_.at("twin/" + head + "_loss").to_vector<float>()[0];
  EXPECT_NEAR(out.loss.value().item(), twin_loss, 1e-5 * std::fabs(twin_loss));
  EXPECT_NEAR(out.metric("loss").sum / out.metric("loss").count, twin_loss,
              1e-5 * std::fabs(twin_loss));
  if (head != "question_answering") {
    const Tensor& want = g_.at("twin/" + head + "_logits");
    ASSERT_EQ(out.outputs.at("logits").shape(), (Shape{b, 3}));
    expect_close(out.outputs.at("logits"), want, 2e-5, 1e-5, "logits");
    EXPECT_EQ(out.metric("accuracy").count, b);
    EXPECT_EQ(out.metric("accuracy").sum, count_correct(want, batch_.at("label")).first);
  } else {
    for (const char* k : {"start_logits", "end_logits"}) {
      ASSERT_EQ(out.outputs.at(k).shape(), (Shape{b, s})) << k;
      expect_close(out.outputs.at(k), g_.at(std::string("twin/") + k), 2e-5, 1e-5, k);
    }
    EXPECT_EQ(out.metric("start_accuracy").sum,
              count_correct(g_.at("twin/start_logits"), batch_.at("start_position")).first);
    EXPECT_EQ(out.metric("end_accuracy").sum,
              count_correct(g_.at("twin/end_logits"), batch_.at("end_position")).first);
  }
  // Gradients: atol 1e-4 of the tensor's largest |gradient|, floored at 1e-3 of the largest of
  // all (test_model_golden's rule; qa_outputs.bias's exact gradient is 0: softmax rows sum to 1).
  ada::backward(out.loss);
  const std::string prefix = "twin/" + head + "_grad/";
  auto max_abs = [](const Tensor& t) {
    double m = 0;
    for (float v : t.to_vector<float>()) m = std::max(m, double(std::fabs(v)));
    return m;
  };
  double all_max = 0;
  for (const auto& [name, t] : g_.tensors)
    if (name.rfind(prefix, 0) == 0) all_max = std::max(all_max, max_abs(t));
  size_t compared = 0;
  for (const auto& p : m->parameters()) {
    const std::string hf = hf_name_from_bert(p.name);
    if (!g_.contains(prefix + hf)) continue;
    const Tensor& want = g_.at(prefix + hf);
    expect_close(p.var.grad(), want, 1e-4 * std::max(max_abs(want), 1e-3 * all_max), 1e-4,
                 "gradient of " + hf);
    ++compared;
  }
  EXPECT_EQ(compared, head == "classification" ? 6u : 5u);
}

INSTANTIATE_TEST_SUITE_P(Heads, BertHfHeads,
                         ::testing::Values("classification", "classification_mean",
                                           "question_answering"));

TEST(BertHeads, BadConfigsAndLabelsAreNamed) {
  auto make = [](const std::string& yaml) {
    return builtin_models().get("bert")(Config::parse(yaml, "m.yaml"), 1);
  };
  const std::string base = "name: bert\nvocab_size: 50\nhidden: 8\nheads: 2\nffn: 16\n";
  EXPECT_NE(ada::testing::error_of<ConfigError>([&] {
              make(base + "head: qa\n");
            }).find("unknown BERT head 'qa'; known: pretraining"),
            std::string::npos);
  EXPECT_NE(ada::testing::error_of<ConfigError>([&] {
              make(base + "head: classification\nnum_classes: 1\n");
            }).find("num_classes"),
            std::string::npos);
  EXPECT_NE(ada::testing::error_of<ConfigError>([&] {
              make(base + "num_classes: 3\n");
            }).find("only BERT's head: classification has classes"),
            std::string::npos);
  EXPECT_NE(ada::testing::error_of<ConfigError>([&] {
              make(base + "head: question_answering\nnsp: true\n");
            }).find("the NSP head belongs to head: pretraining"),
            std::string::npos);
  auto qa = make(base + "head: question_answering\n");
  TensorMap batch{{"input_ids", Tensor::from_vector<int64_t>({2, 7, 9, 3}, {1, 4})},
                  {"start_position", Tensor::from_vector<int64_t>({4}, {1})},
                  {"end_position", Tensor::from_vector<int64_t>({1}, {1})}};
  EXPECT_NE(ada::testing::error_of<ShapeError>([&] {
              qa->forward(batch);
            }).find("start_position 4 of example 0 is outside [0, 4)"),
            std::string::npos);
  auto cls = make(base + "head: classification\n");
  EXPECT_EQ(cls->num_classes(), 2);
  TensorMap nolabel{{"input_ids", Tensor::from_vector<int64_t>({2, 7, 9, 3}, {1, 4})}};
  EXPECT_THROW(cls->forward(nolabel), Error);
  EXPECT_NE(ada::testing::error_of<ConfigError>([&] {
              make(base + "head: classification\npooling: max\n");
            }).find("unknown pooling 'max'; known: cls"),
            std::string::npos);
  EXPECT_NE(ada::testing::error_of<ConfigError>([&] {
              make(base + "head: question_answering\npooling: mean\n");
            }).find("only BERT's head: classification has a pooling; remove it"),
            std::string::npos);
  auto mean = make(base + "head: classification\npooling: mean\n");
  TensorMap unmasked{{"input_ids", Tensor::from_vector<int64_t>({2, 7, 9, 3}, {1, 4})},
                     {"attention_mask", Tensor::from_vector<int64_t>({0, 0, 0, 0}, {1, 4})},
                     {"label", Tensor::from_vector<int64_t>({1}, {1})}};
  EXPECT_NE(ada::testing::error_of<ShapeError>([&] {
              mean->forward(unmasked);
            }).find("example 0 attends to no token"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::nn
