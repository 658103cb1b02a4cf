#include "apps/trainer/datasets.h"

#include "data/image_folder_dataset.h"
#include "data/mlm_dataset.h"
#include "data/mnist_dataset.h"
#include "data/synthetic_dataset.h"

namespace ada::trainer {
namespace {

// Synthetic BERT batches: random ids, and labels at ~15% of the positions (-100 elsewhere).
class SyntheticMlm : public data::Dataset {
 public:
  SyntheticMlm(int64_t size, int64_t seq, int64_t vocab, bool nsp, uint64_t seed)
      : size_(size), seq_(seq), vocab_(vocab), nsp_(nsp), seed_(seed) {}
  int64_t size() const override { return size_; }
  data::Example get(int64_t index, int64_t epoch) const override {
    Generator g = data::example_generator(seed_, epoch, index);
    const uint64_t first = g.take(static_cast<uint64_t>(2 * seq_));
    Tensor ids = Tensor::empty({seq_}, DType::i64), labels = Tensor::empty({seq_}, DType::i64);
    for (int64_t i = 0; i < seq_; ++i) {
      ids.data<int64_t>()[i] =
          static_cast<int64_t>(Generator::uniform_at(g.seed(), first, i) * vocab_) % vocab_;
      const bool chosen = Generator::uniform_at(g.seed(), first, seq_ + i) < 0.15f;
      labels.data<int64_t>()[i] = chosen ? ids.data<int64_t>()[i] : -100;
    }
    data::Example e;
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

std::vector<std::string> paths_of(const Config& c, const std::string& key) {
  // A single path or a list of paths.
  try {
    return c.get<std::vector<std::string>>(key);
  } catch (const ConfigError&) {
    return {c.get<std::string>(key)};
  }
}

// The classifier's outputs as the model factories read them (nn/models: lenet.cc, resnet.cc);
// 0 for models without classes (bert).
int64_t model_classes(const Config& m) {
  const std::string model = m.get<std::string>("name");
  if (model == "bert") return 0;
  const bool small = model == "lenet5" || model == "resnet20_mnist";
  return m.get_or<int64_t>("num_classes", small ? 10 : 1000);
}

}  // namespace

DataSets make_datasets(const Config& d, const Config& model_cfg, uint64_t seed) {
  const std::string name = d.get<std::string>("name");
  const std::string model = model_cfg.get<std::string>("name");
  DataSets out;
  if (name == "mnist" || name == "fashion_mnist") {
    const bool fashion = name == "fashion_mnist";
    const std::string dir =
        d.get_or<std::string>("path", fashion ? "data/fashion-mnist" : "data/mnist");
    data::MnistOptions o = fashion ? data::MnistOptions::fashion() : data::MnistOptions{};
    o.mean = static_cast<float>(d.get_or<double>("mean", o.mean));
    o.std = static_cast<float>(d.get_or<double>("std", o.std));
    o.num_classes = model_classes(model_cfg);
    auto train = data::MnistDataset::open(dir, "train", o);
    out.train = train;
    if (d.get_or<bool>("eval", true)) {
      auto test = data::MnistDataset::open(dir, "test", o);
      ADA_CHECK_ARG(test->height() == train->height() && test->width() == train->width(), IoError)
          << "data: " << test->describe() << " holds " << test->height() << "x" << test->width()
          << " images but " << train->describe() << " holds " << train->height() << "x"
          << train->width() << "; both splits must come from one data set (" << d.where("path")
          << ")";
      out.eval = test;
    } else {
      out.no_eval_reason = d.where("eval") + " is false";
    }
    out.eval_metric = "top1";
  } else if (name == "image_folder") {
    data::ImageTransformOptions train_t, eval_t;
    train_t.crop_size = eval_t.crop_size = d.get_or<int64_t>("crop_size", 224);
    eval_t.resize_size = d.get_or<int64_t>("resize_size", 256);
    eval_t.train = false;
    auto train =
        std::make_shared<data::ImageFolderDataset>(d.get<std::string>("path"), train_t, seed);
    std::shared_ptr<data::ImageFolderDataset> eval;
    if (d.has("eval_path"))
      eval =
          std::make_shared<data::ImageFolderDataset>(d.get<std::string>("eval_path"), eval_t, seed);
    else
      out.no_eval_reason = "data.eval_path is not set";
    data::check_image_folder_classes(*train, eval.get(), model_classes(model_cfg));
    out.train = train;
    out.eval = eval;
    out.eval_metric = "top1";
  } else if (name == "mlm") {
    data::MlmOptions o;
    o.seq_len = d.get_or<int64_t>("seq_len", 128);
    o.nsp = model_cfg.get_or<bool>("nsp", false);
    o.max_predictions = d.get_or<int64_t>("max_predictions", 0);
    o.seed = seed;
    // The defaults are those of nn/models/bert.cc (every preset: 30522 tokens, 512 positions).
    o.vocab_size = model_cfg.get_or<int64_t>("vocab_size", 30522);
    const int64_t positions = model_cfg.get_or<int64_t>("max_positions", 512);
    ADA_CHECK_ARG(o.seq_len <= positions, ConfigError)
        << d.where("seq_len") << ": " << o.seq_len << " tokens per sequence, but the model has "
        << positions
        << " positions (model.max_positions); lower data.seq_len or raise max_positions";
    out.train = data::MlmDataset::open(paths_of(d, "path"), o);
    if (d.has("eval_path"))
      out.eval = data::MlmDataset::open(paths_of(d, "eval_path"), o);
    else
      out.no_eval_reason =
          "data.eval_path is not set (prepare_mlm --eval-out writes an evaluation set)";
    out.eval_metric = "mlm";
  } else if (name == "synthetic") {
    // Stands in for any data set in smoke and throughput runs (--set data.name=synthetic): the
    // keys of the data set it replaces are accepted and ignored.
    for (const char* k : {"path", "eval_path", "eval", "mean", "std", "crop_size", "resize_size",
                          "max_predictions"})
      if (d.has(k)) (void)d.get<std::string>(k);
    const int64_t size = d.get_or<int64_t>("size", 1024),
                  eval_size = d.get_or<int64_t>("eval_size", 256);
    ADA_CHECK_ARG(size > 0 && eval_size >= 0, ConfigError)
        << d.where("size") << ": sizes must be positive";
    if (model == "bert") {
      const int64_t seq = d.get_or<int64_t>("seq_len", 128);
      const int64_t vocab = model_cfg.get_or<int64_t>("vocab_size", 30522);
      const bool nsp = model_cfg.get_or<bool>("nsp", false);
      out.train = std::make_shared<SyntheticMlm>(size, seq, vocab, nsp, seed);
      if (eval_size > 0)
        out.eval = std::make_shared<SyntheticMlm>(eval_size, seq, vocab, nsp, seed + 1);
      else
        out.no_eval_reason = d.where("eval_size") + " is 0";
      out.eval_metric = "mlm";
    } else {
      const bool small = model == "lenet5" || model == "resnet20_mnist";
      std::vector<int64_t> shape =
          d.get_or<std::vector<int64_t>>("image_shape", small ? std::vector<int64_t>{1, 28, 28}
                                                              : std::vector<int64_t>{3, 224, 224});
      const int64_t classes = model_classes(model_cfg);
      std::vector<data::SyntheticField> f = {
          {"image", Shape(shape.begin(), shape.end()), DType::f32},
          {"label", {}, DType::i64, 0, 1, 0, classes}};
      out.train = std::make_shared<data::SyntheticDataset>(size, f, seed);
      if (eval_size > 0)
        out.eval = std::make_shared<data::SyntheticDataset>(eval_size, f, seed + 1);
      else
        out.no_eval_reason = d.where("eval_size") + " is 0";
      out.eval_metric = "top1";
    }
  } else {
    ADA_THROW(ConfigError) << d.where("name") << ": unknown data set '" << name
                           << "'; known: fashion_mnist, image_folder, mlm, mnist, synthetic";
  }
  return out;
}

void check_eval_keys(const DataSets& sets, const Config& t) {
  if (sets.eval) return;
  for (const char* key : {"eval_every", "max_eval_batches"})
    ADA_CHECK_ARG(!t.has(key), ConfigError)
        << t.where(key) << ": set, but there is no evaluation set (" << sets.no_eval_reason
        << "), so nothing would ever be evaluated; give the data an evaluation set or remove "
        << t.path() << "." << key;
}

}  // namespace ada::trainer
