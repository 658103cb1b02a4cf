// BERT (Devlin et al. 2019): post-LN encoder, GELU, learned positions, token types, and one head
// (model.head):
//   pretraining (default): MLM head (transform + LayerNorm + decoder tied to the word embeddings
//     + bias) evaluated only at masked positions, optional NSP head with pooler;
//   classification: pooled [CLS] (pooler: dense + tanh) -> dropout -> `classifier` [C, H],
//     cross-entropy against "label" [B] (BertForSequenceClassification); with model.pooling:
//     mean, the mean of the encoder's outputs over the attended tokens (attention_mask) instead
//     of the pooler (no pooler: a linear probe of a frozen encoder then reads what the MLM head
//     trained, where [CLS] gets no training signal without NSP);
//   question_answering: `qa_outputs` [2, H] on every token -> start and end logits [B, S], loss
//     the mean of the two cross-entropies against "start_position" / "end_position" [B]
//     (BertForQuestionAnswering); the logits are also returned (ModelOutput::outputs), and are
//     all a batch without positions gets (prediction: no loss, no figures).
// Presets (layers, hidden, heads, FFN): tiny 2/128/2/512, mini 4/256/4/1024,
// base 12/768/12/3072 (110,106,428 parameters with NSP), large 24/1024/16/4096 (336,226,108).
// Init: truncated normal (std 0.02) for weights and embeddings, zeros for biases, LayerNorm 1/0.
#include <map>
#include <tuple>

#include "nn/layers/dropout.h"
#include "nn/layers/embedding.h"
#include "nn/layers/layer_norm.h"
#include "nn/layers/linear.h"
#include "nn/layers/multi_head_attention.h"
#include "nn/losses.h"
#include "nn/models/models.h"

namespace ada::nn {
namespace {

struct BertConfig {
  int64_t vocab = 30522, hidden = 128, layers = 2, heads = 2, ffn = 512, max_positions = 512,
          type_vocab = 2;
  float dropout = 0.1f, attention_dropout = 0.1f, init_std = 0.02f, ln_eps = 1e-12f;
  bool nsp = false;
  bool fused_attention = false;  // model.attention: fused
  // model.recompute: [attention_dropout, gelu]: tensors computed again in backward, not kept
  bool recompute_attention_dropout = false, recompute_gelu = false;
  std::string head = "pretraining";  // pretraining | classification | question_answering
  int64_t num_classes = 2;           // classification
  bool mean_pooling = false;         // classification: model.pooling: mean
};

std::shared_ptr<Linear> bert_linear(int64_t in, int64_t out, Generator& g, float std) {
  auto l = std::make_shared<Linear>(in, out, g);
  l->weight().mutable_value().copy_from(init::truncated_normal({out, in}, g, std));
  ops::fill_(l->bias().mutable_value(), 0.f);
  return l;
}

class EncoderLayer : public Module {
 public:
  EncoderLayer(const BertConfig& c, Generator& g) {
    attention_ = register_module(
        "attention",
        std::make_shared<MultiHeadAttention>(c.hidden, c.heads, c.attention_dropout, g, c.init_std,
                                             c.fused_attention, c.recompute_attention_dropout));
    recompute_gelu_ = c.recompute_gelu;
    attention_norm_ =
        register_module("attention_norm", std::make_shared<LayerNorm>(c.hidden, c.ln_eps));
    intermediate_ = register_module("intermediate", bert_linear(c.hidden, c.ffn, g, c.init_std));
    output_ = register_module("output", bert_linear(c.ffn, c.hidden, g, c.init_std));
    output_norm_ = register_module("output_norm", std::make_shared<LayerNorm>(c.hidden, c.ln_eps));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  }
  // `key_bias`: the padding mask as MultiHeadAttention::key_bias made it (or undefined).
  Variable forward(const Variable& x, const Tensor& key_bias, Generator& gen) {
    Variable a = attention_->forward(x, key_bias, gen);
    Variable h = attention_norm_->forward(fn::add(x, dropout_->forward(a, gen)));
    const Variable i = intermediate_->forward(h);
    Variable f = recompute_gelu_ ? fn::gelu_linear(i, output_->weight(), output_->bias())
                                 : output_->forward(fn::gelu(i));
    return output_norm_->forward(fn::add(h, dropout_->forward(f, gen)));
  }
  std::string type_name() const override { return "EncoderLayer"; }

 private:
  std::shared_ptr<MultiHeadAttention> attention_;
  std::shared_ptr<LayerNorm> attention_norm_, output_norm_;
  std::shared_ptr<Linear> intermediate_, output_;
  std::shared_ptr<Dropout> dropout_;
  bool recompute_gelu_ = false;
};

class Holder : public Module {  // a named group of children ("embeddings", "encoder", "cls")
 public:
  explicit Holder(std::string type) : type_(std::move(type)) {}
  template <class M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
  Variable& param(const std::string& name, Tensor init, bool decay = true) {
    return register_parameter(name, std::move(init), decay);
  }
  std::string type_name() const override { return type_; }

 private:
  std::string type_;
};

class Bert : public Model {
 public:
  Bert(const BertConfig& c, uint64_t seed) : c_(c) {
    Generator g(seed);
    rng_ = Generator(seed ^ 0x9e3779b97f4a7c15ull);
    auto emb = register_module("embeddings", std::make_shared<Holder>("Embeddings"));
    word_ = emb->add(
        "word_embeddings",
        std::make_shared<Embedding>(c.vocab, c.hidden,
                                    init::truncated_normal({c.vocab, c.hidden}, g, c.init_std)));
    pos_ = emb->add("position_embeddings",
                    std::make_shared<Embedding>(
                        c.max_positions, c.hidden,
                        init::truncated_normal({c.max_positions, c.hidden}, g, c.init_std)));
    type_ = emb->add("token_type_embeddings",
                     std::make_shared<Embedding>(
                         c.type_vocab, c.hidden,
                         init::truncated_normal({c.type_vocab, c.hidden}, g, c.init_std)));
    emb_norm_ = emb->add("LayerNorm", std::make_shared<LayerNorm>(c.hidden, c.ln_eps));
    dropout_ = emb->add("dropout", std::make_shared<Dropout>(c.dropout));
    auto enc = register_module("encoder", std::make_shared<Holder>("Encoder"));
    for (int64_t l = 0; l < c.layers; ++l)
      layers_.push_back(
          enc->add("layer" + std::to_string(l), std::make_shared<EncoderLayer>(c, g)));
    if (c.nsp || (c.head == "classification" && !c.mean_pooling))
      pooler_ = register_module("pooler", bert_linear(c.hidden, c.hidden, g, c.init_std));
    if (c.head == "classification") {
      classifier_ =
          register_module("classifier", bert_linear(c.hidden, c.num_classes, g, c.init_std));
    } else if (c.head == "question_answering") {
      qa_outputs_ = register_module("qa_outputs", bert_linear(c.hidden, 2, g, c.init_std));
    } else {
      auto cls = register_module("cls", std::make_shared<Holder>("PreTrainingHeads"));
      transform_ = cls->add("transform", bert_linear(c.hidden, c.hidden, g, c.init_std));
      transform_norm_ = cls->add("transform_norm", std::make_shared<LayerNorm>(c.hidden, c.ln_eps));
      decoder_bias_ = cls->param("decoder_bias", Tensor::zeros({c.vocab}), false);
      if (c.nsp) nsp_ = cls->add("nsp", bert_linear(c.hidden, 2, g, c.init_std));
    }
  }

  int64_t num_classes() const override { return c_.head == "classification" ? c_.num_classes : 0; }
  std::vector<std::string> figures() const override {
    if (c_.head == "classification") return {"loss", "accuracy"};
    if (c_.head == "question_answering") return {"loss", "start_accuracy", "end_accuracy"};
    if (c_.nsp) return {"mlm_loss", "mlm_accuracy", "nsp_accuracy"};
    return {"mlm_loss", "mlm_accuracy"};
  }

  ModelOutput forward(const TensorMap& batch) override {
    const Tensor& ids = field(batch, "input_ids");
    ADA_CHECK_ARG(ids.dim() == 2, ShapeError)
        << "bert: input_ids " << ids.str() << " must be [batch, seq]";
    if (c_.head == "classification") return classify(batch, encode(batch, ids));
    if (c_.head == "question_answering") return answer_spans(batch, encode(batch, ids));
    // The masked positions are read from the labels before the encoder is queued: on a GPU,
    // reading them after it would make the host wait for the whole encoder.
    const auto [where, target] = masked_positions(batch, ids);
    return pretraining_heads(batch, ids, where, target, encode(batch, ids));
  }
  std::string type_name() const override { return "Bert"; }

  // Pre-training batches on the host get "mlm_positions" and "mlm_labels" [m] (i64): the flat
  // positions of the labels other than -100 and those labels, which forward() then reads instead
  // of the labels themselves (on a GPU that read waits for the device). A batch that has them
  // per sequence, [B, P] (MlmDataset's: the same count for every batch, padded with label
  // -100), gets them flattened to [B * P].
  void prepare_batch(TensorMap& batch) const override {
    if (c_.head != "pretraining") return;
    auto it = batch.find("labels");
    if (it == batch.end() || !it->second.device().is_cpu()) return;
    auto pos = batch.find("mlm_positions"), lab = batch.find("mlm_labels");
    if (pos == batch.end() && lab == batch.end()) {
      std::tie(batch["mlm_positions"], batch["mlm_labels"]) = labels_at(it->second);
    } else if (pos != batch.end() && lab != batch.end() && pos->second.dim() == 2 &&
               pos->second.device().is_cpu() && lab->second.device().is_cpu()) {
      std::tie(pos->second, lab->second) = flat_positions(pos->second, lab->second, it->second);
    }
  }

 private:
  // The encoder's output [B, S, H] for input_ids [B, S] (segment ids and mask from the batch).
  Variable encode(const TensorMap& batch, const Tensor& ids) {
    const int64_t b = ids.size(0), s = ids.size(1);
    ADA_CHECK_ARG(s <= c_.max_positions, ShapeError)
        << "bert: sequence length " << s << " exceeds max_positions " << c_.max_positions;
    auto seg_it = batch.find("segment_ids");
    const Device dev = ids.device();  // the batch's device is the model's (Trainer places both)
    Tensor segments =
        seg_it != batch.end() ? seg_it->second : Tensor::zeros(ids.shape(), DType::i64, dev);
    auto mask_it = batch.find("attention_mask");
    Tensor mask = mask_it != batch.end() ? mask_it->second : Tensor();
    // Position ids [B, S] (0..S-1 per row), made on the host once per shape and device.
    const Tensor& positions =
        index_cache(positions_, {b, s}, s, dev, [&](int64_t i) { return i % s; });

    Variable x =
        fn::add(fn::add(word_->forward(ids), pos_->forward(positions)), type_->forward(segments));
    x = dropout_->forward(emb_norm_->forward(x), rng_);
    const Tensor key_bias = MultiHeadAttention::key_bias(mask, dev);  // once for all layers
    for (auto& layer : layers_) x = layer->forward(x, key_bias, rng_);
    return x;
  }

  // The [CLS] rows [B, H] of the encoder's output.
  // Their flat row indices [B] are made on the host once per shape and device (as positions).
  Variable cls_rows(const Variable& x) {
    const int64_t b = x.value().size(0), s = x.value().size(1);
    const Tensor& firsts =
        index_cache(cls_firsts_, {b}, s, x.value().device(), [&](int64_t i) { return i * s; });
    return fn::embedding(fn::reshape(x, {b * s, c_.hidden}), firsts);
  }

  // An i64 index tensor of `shape` (element i: value(i)) for batches of sequence length `s` on
  // `dev`, made on the host once and kept for the model's life (a CUDA graph captured with it
  // keeps reading it, whatever shapes come between; a few per run): positions' [B, S] and
  // cls_rows' [B].
  using IndexCache = std::map<std::tuple<Shape, int64_t, int, int>, Tensor>;
  template <class F>
  static const Tensor& index_cache(IndexCache& cache, const Shape& shape, int64_t s,
                                   const Device& dev, F value) {
    auto key = std::make_tuple(shape, s, static_cast<int>(dev.type), dev.index);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Tensor t = Tensor::empty(shape, DType::i64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = value(i);
    return cache.emplace(key, t.to(dev)).first->second;
  }

  // The mean [B, H] of each row's encoder outputs over its attended tokens (attention_mask 1; all
  // tokens without a mask): one [B, 1, S] x [B, S, H] product by constant weights 1/count.
  Variable mean_rows(const TensorMap& batch, const Variable& x) const {
    const int64_t b = x.value().size(0), s = x.value().size(1);
    std::vector<float> w(static_cast<size_t>(b * s), 1.f / static_cast<float>(s));
    auto mask_it = batch.find("attention_mask");
    if (mask_it != batch.end()) {
      ADA_CHECK_ARG(mask_it->second.shape() == (Shape{b, s}), ShapeError)
          << "bert: attention_mask " << mask_it->second.str() << " must be [" << b << ", " << s
          << "]";
      // 0 where a token is attended to, as the encoder reads the mask.
      const Tensor bias = MultiHeadAttention::key_bias(mask_it->second, Device::cpu());
      const float* kv = bias.data<float>();
      for (int64_t i = 0; i < b; ++i) {
        float count = 0;
        for (int64_t j = 0; j < s; ++j) count += kv[i * s + j] == 0.f;
        ADA_CHECK_ARG(count > 0, ShapeError)
            << "bert: example " << i << " attends to no token (attention_mask all 0)";
        for (int64_t j = 0; j < s; ++j) w[i * s + j] = kv[i * s + j] == 0.f ? 1.f / count : 0.f;
      }
    }
    Tensor weights = Tensor::from_vector<float>(w, {b, 1, s}).to(x.value().device());
    if (weights.dtype() != x.value().dtype()) weights = ops::to_dtype(weights, x.value().dtype());
    return fn::reshape(fn::bmm(Variable(weights), x), {b, c_.hidden});
  }

  // The values of a [B] integer label field, each checked to lie in [0, limit).
  std::vector<int64_t> label_values(const TensorMap& batch, const char* name, int64_t b,
                                    int64_t limit, const char* what) const {
    const Tensor& t = field(batch, name);
    ADA_CHECK_ARG(t.dim() == 1 && t.size(0) == b, ShapeError)
        << "bert: " << name << " " << t.str() << " must be [" << b << "]";
    const Tensor host = t.to(Device::cpu());
    std::vector<int64_t> v(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) {
      v[i] = host.dtype() == DType::i64 ? host.data<int64_t>()[i] : host.data<int32_t>()[i];
      ADA_CHECK_ARG(v[i] >= 0 && v[i] < limit, ShapeError)
          << "bert: " << name << " " << v[i] << " of example " << i << " is outside [0, " << limit
          << "): " << what;
    }
    return v;
  }

  ModelOutput classify(const TensorMap& batch, const Variable& x) {
    const int64_t b = x.value().size(0);
    label_values(batch, "label", b, c_.num_classes, "set model.num_classes");
    const Tensor& label = field(batch, "label");
    Variable pooled =
        c_.mean_pooling ? mean_rows(batch, x) : fn::tanh(pooler_->forward(cls_rows(x)));
    Variable logits = classifier_->forward(dropout_->forward(pooled, rng_));
    ModelOutput out;
    out.loss = cross_entropy_loss(logits, label);
    out.outputs["logits"] = ops::to_dtype(logits.value(), DType::f32);
    if (!metrics_wanted()) return out;
    const auto [correct, count] = count_correct(logits.value(), label);
    out.metrics = {{"loss", {static_cast<double>(out.loss.value().item()) * b, double(b)}},
                   {"accuracy", {static_cast<double>(correct), static_cast<double>(count)}}};
    return out;
  }

  ModelOutput answer_spans(const TensorMap& batch, const Variable& x) {
    const int64_t b = x.value().size(0), s = x.value().size(1);
    const Device dev = x.value().device();
    Variable logits = qa_outputs_->forward(fn::reshape(x, {b * s, c_.hidden}));  // [B*S, 2]
    // [B*S, 2] -> [2, B, S] -> [2B, S]: rows 0..B-1 start logits, B..2B-1 end logits.
    Variable rows = fn::reshape(fn::permute(fn::reshape(logits, {b, s, 2}), {2, 0, 1}), {2 * b, s});
    if (!batch.count("start_position") && !batch.count("end_position")) {
      ModelOutput out;  // prediction: logits only, no loss (build/bin/squad_predict)
      out.outputs["start_logits"] = ops::to_dtype(rows.value().narrow(0, b), DType::f32);
      out.outputs["end_logits"] = ops::to_dtype(rows.value().narrow(b, b), DType::f32);
      return out;
    }
    const char* why = "a position must lie inside the sequence ([CLS], 0, when not in it)";
    std::vector<int64_t> targets = label_values(batch, "start_position", b, s, why);
    const std::vector<int64_t> end = label_values(batch, "end_position", b, s, why);
    targets.insert(targets.end(), end.begin(), end.end());
    const Tensor t = Tensor::from_vector<int64_t>(targets, {2 * b}).to(dev);
    ModelOutput out;
    out.loss = cross_entropy_loss(rows, t);  // the mean over 2B rows: (start CE + end CE) / 2
    const Tensor both = rows.value();
    out.outputs["start_logits"] = ops::to_dtype(both.narrow(0, b), DType::f32);
    out.outputs["end_logits"] = ops::to_dtype(both.narrow(b, b), DType::f32);
    if (!metrics_wanted()) return out;
    const auto [start_ok, n1] = count_correct(both.narrow(0, b), t.narrow(0, b));
    const auto [end_ok, n2] = count_correct(both.narrow(b, b), t.narrow(b, b));
    out.metrics = {{"loss", {static_cast<double>(out.loss.value().item()) * b, double(b)}},
                   {"start_accuracy", {double(start_ok), double(n1)}},
                   {"end_accuracy", {double(end_ok), double(n2)}}};
    return out;
  }

  // The flat positions of the masked tokens (labels != -100) and their labels, [m] i64 each, on
  // the host.
  static std::pair<Tensor, Tensor> labels_at(const Tensor& labels) {
    std::vector<int64_t> where, target;
    const std::vector<int64_t> values = index_values(labels);
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] != -100) {
        where.push_back(static_cast<int64_t>(i));
        target.push_back(values[i]);
      }
    }
    const int64_t m = static_cast<int64_t>(where.size());
    return {Tensor::from_vector<int64_t>(where, {m}), Tensor::from_vector<int64_t>(target, {m})};
  }
  // Positions within each sequence and their labels, [B, P] each, as flat positions of the batch
  // and labels [B * P] on the host (slots labelled -100 are padding; cross-entropy skips them).
  static std::pair<Tensor, Tensor> flat_positions(const Tensor& positions, const Tensor& labels,
                                                  const Tensor& token_labels) {
    ADA_CHECK_ARG(token_labels.dim() == 2, ShapeError)
        << "bert: labels " << token_labels.str() << " must be [batch, seq]";
    const int64_t b = token_labels.size(0), s = token_labels.size(1);
    ADA_CHECK_ARG(positions.dim() == 2 && positions.size(0) == b &&
                      labels.shape() == positions.shape() && is_index(positions) &&
                      is_index(labels),
                  ShapeError)
        << "bert: mlm_positions " << positions.str() << " and mlm_labels " << labels.str()
        << " per sequence must be integer [batch, predictions] tensors of one shape, batch " << b;
    const std::vector<int64_t> p = index_values(positions), l = index_values(labels);
    const int64_t per = positions.size(1);
    std::vector<int64_t> flat(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      ADA_CHECK_ARG(p[i] >= 0 && p[i] < s, ShapeError)
          << "bert: mlm_positions [" << static_cast<int64_t>(i) / per << ", "
          << static_cast<int64_t>(i) % per << "] is " << p[i] << ", outside a sequence of " << s
          << " tokens";
      flat[i] = static_cast<int64_t>(i) / per * s + p[i];
    }
    const int64_t m = static_cast<int64_t>(flat.size());
    return {Tensor::from_vector<int64_t>(flat, {m}), Tensor::from_vector<int64_t>(l, {m})};
  }
  static bool is_index(const Tensor& t) {
    return t.dtype() == DType::i64 || t.dtype() == DType::i32;
  }
  // An i64 or i32 tensor's values, read on the host.
  static std::vector<int64_t> index_values(const Tensor& t) {
    if (t.dtype() == DType::i64) return t.to_vector<int64_t>();
    const std::vector<int32_t> v = t.to_vector<int32_t>();
    return {v.begin(), v.end()};
  }
  // The masked tokens' flat positions and labels [m] on the batch's device: prepare_batch's
  // fields when the batch has them (flattened here when they are still per sequence), else read
  // from the labels.
  std::pair<Tensor, Tensor> masked_positions(const TensorMap& batch, const Tensor& ids) const {
    const Tensor& labels = field(batch, "labels");
    ADA_CHECK_ARG(labels.shape() == ids.shape(), ShapeError)
        << "bert: input_ids " << ids.str() << " and labels " << labels.str()
        << " must both be [batch, seq]";
    const Device dev = ids.device();
    auto pos = batch.find("mlm_positions"), lab = batch.find("mlm_labels");
    if (pos == batch.end() && lab == batch.end()) {
      const auto [where, target] = labels_at(labels);
      return {where.to(dev), target.to(dev)};
    }
    ADA_CHECK_ARG(pos != batch.end() && lab != batch.end(), ShapeError)
        << "bert: the batch has " << (pos != batch.end() ? "mlm_positions" : "mlm_labels")
        << " without " << (pos != batch.end() ? "mlm_labels" : "mlm_positions")
        << "; give both (Model::prepare_batch makes them from the labels) or neither";
    const Tensor &p = pos->second, &l = lab->second;
    if (p.dim() == 2) {
      const auto [flat, flat_labels] = flat_positions(p, l, labels);
      return {flat.to(dev), flat_labels.to(dev)};
    }
    ADA_CHECK_ARG(p.dim() == 1 && l.shape() == p.shape() && is_index(p) && is_index(l), ShapeError)
        << "bert: mlm_positions " << p.str() << " and mlm_labels " << l.str()
        << " must be integer vectors of one length (the masked tokens')";
    return {p.to(dev), l.to(dev)};
  }

  // MLM head at the masked positions only, and NSP when configured.
  // where, target: the masked tokens' flat positions and labels [m], on the batch's device
  // (padding slots labelled -100: the loss and the figures skip them).
  ModelOutput pretraining_heads(const TensorMap& batch, const Tensor& ids, const Tensor& where,
                                const Tensor& t, const Variable& x) {
    const int64_t b = ids.size(0), s = ids.size(1);
    const int64_t m = where.numel();
    Variable flat = fn::reshape(x, {b * s, c_.hidden});
    ModelOutput out;
    Variable loss;
    double mlm_correct = 0, masked = 0;
    if (m > 0) {
      Variable h = fn::embedding(flat, where);  // row gather
      h = transform_norm_->forward(fn::gelu(transform_->forward(h)));
      Variable logits = fn::linear(h, word_->weight(), decoder_bias_);  // the tied decoder
      loss = mlm_loss(logits, t);
      if (metrics_wanted()) {
        const auto [correct, count] = count_correct(logits.value(), t);
        mlm_correct = static_cast<double>(correct);
        masked = static_cast<double>(count);
      }
    } else {
      loss = fn::scale(fn::sum(flat, {0, 1}), 0.f);  // no masked token: zero loss, graph intact
    }
    if (metrics_wanted())
      out.metrics = {{"mlm_loss", {static_cast<double>(loss.value().item()) * masked, masked}},
                     {"mlm_accuracy", {mlm_correct, masked}}};
    if (c_.nsp) {
      const Tensor& nsp_label = field(batch, "nsp_label");
      Variable logits = nsp_->forward(fn::tanh(pooler_->forward(cls_rows(x))));
      loss = fn::add(loss, nsp_loss(logits, nsp_label));
      if (metrics_wanted()) {
        auto [correct, count] = count_correct(logits.value(), nsp_label);
        out.metrics.push_back(
            {"nsp_accuracy", {static_cast<double>(correct), static_cast<double>(count)}});
      }
    }
    out.loss = loss;
    return out;
  }

  BertConfig c_;
  IndexCache positions_, cls_firsts_;  // index_cache()'s
  std::shared_ptr<Embedding> word_, pos_, type_;
  std::shared_ptr<LayerNorm> emb_norm_, transform_norm_;
  std::shared_ptr<Dropout> dropout_;
  std::vector<std::shared_ptr<EncoderLayer>> layers_;
  std::shared_ptr<Linear> pooler_, transform_, nsp_, classifier_, qa_outputs_;
  Variable decoder_bias_;
};

}  // namespace

std::unique_ptr<Model> make_bert(const Config& cfg, uint64_t seed) {
  const std::string preset = cfg.get_or<std::string>("preset", "tiny");
  BertConfig c;
  if (preset == "tiny")
    c.layers = 2, c.hidden = 128, c.heads = 2, c.ffn = 512;
  else if (preset == "mini")
    c.layers = 4, c.hidden = 256, c.heads = 4, c.ffn = 1024;
  else if (preset == "base")
    c.layers = 12, c.hidden = 768, c.heads = 12, c.ffn = 3072;
  else if (preset == "large")
    c.layers = 24, c.hidden = 1024, c.heads = 16, c.ffn = 4096;
  else
    ADA_THROW(ConfigError) << cfg.where("preset") << ": unknown BERT preset '" << preset
                           << "'; known: base, large, mini, tiny";
  // Bounds far above any BERT (vocabularies of 30-250K, hidden 768-1,024, ffn 4 x hidden, 512
  // positions): a typo'd size is named here, not found as an allocation of petabytes.
  c.vocab = cfg.get_in_or<int64_t>("vocab_size", c.vocab, Range::closed(1, 1 << 24),
                                   "bert-base-uncased: 30522");
  c.layers = cfg.get_in_or<int64_t>("layers", c.layers, Range::closed(1, 1024), "BERT-Large: 24");
  c.hidden =
      cfg.get_in_or<int64_t>("hidden", c.hidden, Range::closed(1, 1 << 16), "BERT-Large: 1024");
  c.heads = cfg.get_in_or<int64_t>("heads", c.heads, Range::closed(1, 1 << 16), "BERT-Large: 16");
  c.ffn = cfg.get_in_or<int64_t>("ffn", c.ffn, Range::closed(1, 1 << 18), "BERT-Large: 4096");
  c.max_positions = cfg.get_in_or<int64_t>("max_positions", c.max_positions,
                                           Range::closed(1, 1 << 20), "BERT: 512");
  c.dropout = static_cast<float>(
      cfg.get_in_or<double>("dropout", c.dropout, Range::half_open(0, 1), "BERT: 0.1"));
  c.attention_dropout = static_cast<float>(cfg.get_in_or<double>(
      "attention_dropout", c.attention_dropout, Range::half_open(0, 1), "BERT: 0.1"));
  const std::string attention = cfg.get_or<std::string>("attention", "composed");
  ADA_CHECK_ARG(attention == "composed" || attention == "fused", ConfigError)
      << cfg.where("attention") << ": unknown attention '" << attention
      << "'; known: composed (batched products, softmax and dropout as separate ops: the "
         "default), fused (one op that keeps nothing of size [batch*heads, seq, seq])";
  c.fused_attention = attention == "fused";
  for (const std::string& r : cfg.get_or<std::vector<std::string>>("recompute", {})) {
    ADA_CHECK_ARG(r == "attention_dropout" || r == "gelu", ConfigError)
        << cfg.where("recompute") << ": unknown '" << r
        << "'; known: attention_dropout (the dropped attention probabilities, drawn again in "
           "backward: one [batch*heads, seq, seq] tensor fewer kept per layer), gelu (the "
           "feed-forward GELU's output, computed again: one [batch, seq, ffn] fewer)";
    ADA_CHECK_ARG(r != "attention_dropout" || !c.fused_attention, ConfigError)
        << cfg.where("recompute") << ": attention_dropout recomputes what composed attention "
        << "keeps; model.attention: fused keeps no probabilities. Remove one of the two";
    (r == "gelu" ? c.recompute_gelu : c.recompute_attention_dropout) = true;
  }
  c.head = cfg.get_or<std::string>("head", c.head);
  ADA_CHECK_ARG(
      c.head == "pretraining" || c.head == "classification" || c.head == "question_answering",
      ConfigError)
      << cfg.where("head") << ": unknown BERT head '" << c.head
      << "'; known: pretraining (MLM, with nsp: NSP), classification (pooled [CLS], "
         "model.num_classes), question_answering (start/end logits)";
  c.nsp = cfg.get_or<bool>("nsp", c.nsp);
  ADA_CHECK_ARG(!c.nsp || c.head == "pretraining", ConfigError)
      << cfg.where("nsp") << ": the NSP head belongs to head: pretraining, not " << c.head
      << "; remove nsp";
  if (c.head == "classification") {
    c.num_classes = cfg.get_in_or<int64_t>("num_classes", c.num_classes, Range::at_least(2));
    const std::string pooling = cfg.get_or<std::string>("pooling", "cls");
    ADA_CHECK_ARG(pooling == "cls" || pooling == "mean", ConfigError)
        << cfg.where("pooling") << ": unknown pooling '" << pooling
        << "'; known: cls (the pooler, dense + tanh, on [CLS]: the default, as Hugging Face's "
           "BertForSequenceClassification), mean (the mean of the encoder's outputs over the "
           "attended tokens, no pooler)";
    c.mean_pooling = pooling == "mean";
  } else {
    for (const auto& [key, what] : {std::pair{"num_classes", "classes"}, {"pooling", "a pooling"}})
      ADA_CHECK_ARG(!cfg.has(key), ConfigError)
          << cfg.where(key) << ": only BERT's head: classification has " << what << "; remove it";
  }
  ADA_CHECK_ARG(c.hidden % c.heads == 0, ConfigError)
      << cfg.where("heads") << ": hidden " << c.hidden << " is not divisible by " << c.heads
      << " heads";
  return std::make_unique<Bert>(c, seed);
}

}  // namespace ada::nn
