#include "data/synthetic_dataset.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/random.h"
#include "data/dataset.h"
#include "data/held_out.h"

namespace ada::data {

SyntheticDataset::SyntheticDataset(int64_t size, std::vector<SyntheticField> fields, uint64_t seed)
    : size_(size), fields_(std::move(fields)), seed_(seed) {
  ADA_CHECK_ARG(size_ >= 0, ConfigError) << "synthetic dataset: negative size " << size_;
  ADA_CHECK_ARG(!fields_.empty(), ConfigError) << "synthetic dataset: no fields given";
  std::set<std::string> names;
  for (const auto& f : fields_) {
    ADA_CHECK_ARG(names.insert(f.name).second, ConfigError)
        << "synthetic dataset: field '" << f.name << "' given twice";
    ADA_CHECK_ARG(f.dtype == DType::f32 || f.dtype == DType::i32 || f.dtype == DType::i64,
                  ConfigError)
        << "synthetic dataset: field '" << f.name << "' has dtype " << dtype_name(f.dtype)
        << "; supported: f32, i32, i64";
    ADA_CHECK_ARG(f.dtype == DType::f32 || f.high > f.low, ConfigError)
        << "synthetic dataset: field '" << f.name << "' has the empty range [" << f.low << ", "
        << f.high << ")";
    ADA_CHECK_ARG(f.keep_prob >= 0.0 && f.keep_prob <= 1.0, ConfigError)
        << "synthetic dataset: field '" << f.name << "' has keep_prob " << f.keep_prob
        << " outside [0, 1]";
    shape_numel(f.shape);  // rejects negative dims
  }
}

std::shared_ptr<SyntheticDataset> SyntheticDataset::images(int64_t size, int64_t channels,
                                                           int64_t height, int64_t width,
                                                           int64_t num_classes, uint64_t seed) {
  SyntheticField image{"image", {channels, height, width}, DType::f32};
  SyntheticField label{"label", {}, DType::i64};
  label.high = num_classes;
  return std::make_shared<SyntheticDataset>(size, std::vector<SyntheticField>{image, label}, seed);
}

std::shared_ptr<SyntheticDataset> SyntheticDataset::tokens(int64_t size, int64_t seq_len,
                                                           int64_t vocab_size, uint64_t seed) {
  SyntheticField ids{"input_ids", {seq_len}, DType::i64};
  ids.high = vocab_size;
  SyntheticField seg{"segment_ids", {seq_len}, DType::i64};
  seg.high = 2;
  SyntheticField mask{"attention_mask", {seq_len}, DType::i64};
  mask.low = 1;
  mask.high = 2;
  SyntheticField labels{"labels", {seq_len}, DType::i64};
  labels.high = vocab_size;
  labels.keep_prob = 0.15;
  labels.drop_value = -100;
  return std::make_shared<SyntheticDataset>(
      size, std::vector<SyntheticField>{ids, seg, mask, labels}, seed);
}

std::string SyntheticDataset::describe() const {
  std::string s = "synthetic dataset (" + std::to_string(size_) + " examples:";
  for (const auto& f : fields_) s += " " + f.name + " " + dtype_name(f.dtype) + shape_str(f.shape);
  return s + ")";
}

Example SyntheticDataset::get(int64_t index, int64_t /*epoch*/) const {
  ADA_CHECK_ARG(index >= 0 && index < size_, ConfigError)
      << "synthetic dataset: index " << index << " outside [0, " << size_ << ")";
  Example ex;
  for (size_t fi = 0; fi < fields_.size(); ++fi) {
    const SyntheticField& f = fields_[fi];
    // Data does not depend on the epoch: a fixed stream per (seed, field), counters per index.
    const Generator g = example_generator(seed_ + 0x1000003ull * fi, 0, index);
    Tensor t = Tensor::empty(f.shape, f.dtype);
    const int64_t n = t.numel();
    if (f.dtype == DType::f32) {
      float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i)
        p[i] =
            static_cast<float>(f.mean + f.stddev * Generator::normal_at(g.seed(), g.offset(), i));
    } else {
      const auto range = static_cast<uint64_t>(f.high - f.low);
      for (int64_t i = 0; i < n; ++i) {
        auto r = philox4x32(g.offset() + i, 0x5E17E71Cull, g.seed());
        uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
        auto v = f.low + static_cast<int64_t>((static_cast<unsigned __int128>(bits) * range) >> 64);
        if (f.keep_prob < 1.0 && uint_to_unit(r[2]) >= f.keep_prob) v = f.drop_value;
        if (f.dtype == DType::i64)
          t.data<int64_t>()[i] = v;
        else
          t.data<int32_t>()[i] = static_cast<int32_t>(v);
      }
    }
    ex.set(f.name, std::move(t));
  }
  return ex;
}

namespace {

// Synthetic BERT batches: random ids, and labels at round(15%) of the positions (-100 elsewhere).
class SyntheticMlm : public Dataset {
 public:
  SyntheticMlm(int64_t size, int64_t seq, int64_t vocab, bool nsp, uint64_t seed)
      : size_(size), seq_(seq), vocab_(vocab), nsp_(nsp), seed_(seed) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index, int64_t epoch) const override {
    Generator g = example_generator(seed_, epoch, index);
    const uint64_t first = g.take(static_cast<uint64_t>(2 * seq_));
    Tensor ids = Tensor::empty({seq_}, DType::i64), labels = Tensor::full({seq_}, -100, DType::i64);
    std::vector<std::pair<float, int64_t>> draws(static_cast<size_t>(seq_));
    for (int64_t i = 0; i < seq_; ++i) {
      ids.data<int64_t>()[i] =
          static_cast<int64_t>(Generator::uniform_at(g.seed(), first, i) * vocab_) % vocab_;
      draws[static_cast<size_t>(i)] = {Generator::uniform_at(g.seed(), first, seq_ + i), i};
    }
    // The same count in every sequence (every batch one shape: CUDA graphs replay it): the
    // positions of the smallest draws.
    const auto chosen = static_cast<ptrdiff_t>(std::max<int64_t>(1, std::llround(0.15 * seq_)));
    std::partial_sort(draws.begin(), draws.begin() + chosen, draws.end());
    for (ptrdiff_t j = 0; j < chosen; ++j) {
      const int64_t i = draws[static_cast<size_t>(j)].second;
      labels.data<int64_t>()[i] = ids.data<int64_t>()[i];
    }
    Example e;
    e.set("input_ids", ids);
    e.set("segment_ids", Tensor::zeros({seq_}, DType::i64));
    e.set("attention_mask", Tensor::ones({seq_}, DType::i64));
    e.set("labels", labels);
    if (nsp_)
      e.set("nsp_label",
            Tensor::full({}, Generator::uniform_at(g.seed(), first, 0) < 0.5f ? 0 : 1, DType::i64));
    return e;
  }
  std::string describe() const override {
    return "synthetic MLM (" + std::to_string(size_) + " sequences of " + std::to_string(seq_) +
           ")";
  }

 private:
  int64_t size_, seq_, vocab_;
  bool nsp_;
  uint64_t seed_;
};

}  // namespace

DataSets read_synthetic(const DatasetRequest& request) {
  const Config &d = request.section, &model = request.model;
  for (const char* k : {"path", "eval_path", "eval", "mean", "std", "crop_size", "resize_size",
                        "max_predictions", "vocab"})
    if (d.has(k)) (void)d.get<std::string>(k);
  if (d.has("labels")) (void)d.get<std::vector<std::string>>("labels");       // text_classification
  for (const char* k : {"max_seq_length", "doc_stride", "max_query_length"})  // squad
    if (d.has(k)) (void)d.get<int64_t>(k);
  const int64_t size = d.get_in_or<int64_t>("size", 1024, Range::above(0));
  const int64_t eval_size =
      d.get_in_or<int64_t>("eval_size", 256, Range::at_least(0), "0: no evaluation");
  DataSets out;
  auto add = [&](auto make) {
    out.train = make(size, request.seed);
    if (eval_size > 0)
      out.eval = make(eval_size, request.seed + 1);
    else
      out.no_eval_reason = d.where("eval_size") + " is 0";
  };
  const std::string bert_head = model.get<std::string>("name") == "bert"
                                    ? model.get_or<std::string>("head", "pretraining")
                                    : "";
  if (bert_head == "pretraining") {  // MLM sequences
    const int64_t seq = d.get_or<int64_t>("seq_len", 128);
    const int64_t vocab = model.get_or<int64_t>("vocab_size", 30522);
    const bool nsp = model.get_or<bool>("nsp", false);
    add([&](int64_t n, uint64_t seed) {
      return std::make_shared<SyntheticMlm>(n, seq, vocab, nsp, seed);
    });
  } else if (!bert_head.empty()) {  // BERT's task heads: token ids and the head's labels
    const int64_t seq = d.get_or<int64_t>("seq_len", 128);
    const int64_t vocab = model.get_or<int64_t>("vocab_size", 30522);
    std::vector<SyntheticField> f = {{"input_ids", {seq}, DType::i64, 0, 1, 0, vocab},
                                     {"segment_ids", {seq}, DType::i64, 0, 1, 0, 1},
                                     {"attention_mask", {seq}, DType::i64, 0, 1, 1, 2}};
    if (bert_head == "classification")
      f.push_back({"label", {}, DType::i64, 0, 1, 0, request.num_classes});
    else
      for (const char* k : {"start_position", "end_position"})
        f.push_back({k, {}, DType::i64, 0, 1, 0, seq});
    add([&](int64_t n, uint64_t seed) { return std::make_shared<SyntheticDataset>(n, f, seed); });
  } else {
    const std::string name = model.get<std::string>("name");
    const bool small = name == "lenet5" || name == "resnet20_mnist";  // 28 x 28 grey images
    std::vector<int64_t> shape = d.get_or<std::vector<int64_t>>(
        "image_shape", small ? std::vector<int64_t>{1, 28, 28} : std::vector<int64_t>{3, 224, 224});
    const std::vector<SyntheticField> f = {{"image", Shape(shape.begin(), shape.end()), DType::f32},
                                           {"label", {}, DType::i64, 0, 1, 0, request.num_classes}};
    add([&](int64_t n, uint64_t seed) { return std::make_shared<SyntheticDataset>(n, f, seed); });
  }
  hold_out_tail(out, read_validation_size(d, size, out.train->describe()));
  return out;
}

}  // namespace ada::data
