#include "data/squad_dataset.h"

#include "base/error.h"

namespace ada::data {

SquadDataset first_answers_only(SquadDataset dataset) {
  for (auto& article : dataset.articles)
    for (auto& paragraph : article.paragraphs)
      for (auto& q : paragraph.qas)
        if (q.answers.size() > 1) q.answers.resize(1);
  return dataset;
}

std::shared_ptr<const SquadWindows> SquadWindows::open(const std::string& path,
                                                       const Tokenizer& tokenizer,
                                                       const SquadFeatureOptions& options) {
  auto ds = std::shared_ptr<SquadWindows>(new SquadWindows());
  ds->path_ = path;
  const SquadDataset squad = first_answers_only(read_squad(path));
  for (const auto& a : squad.articles)
    for (const auto& p : a.paragraphs) ds->questions_ += static_cast<int64_t>(p.qas.size());
  ds->features_ = make_squad_features(squad, tokenizer, options, /*training=*/true);
  ADA_CHECK_ARG(!ds->features_.empty(), IoError)
      << path << ": no question has an answer found in its context, so the file gives no "
      << "example to train or evaluate on (a SQuAD v2 file of unanswerable questions?)";
  return ds;
}

Example SquadWindows::get(int64_t index, int64_t /*epoch*/) const {
  ADA_CHECK_ARG(index >= 0 && index < size(), ShapeError)
      << describe() << ": index " << index << " out of range";
  const SquadFeature& f = features_[static_cast<size_t>(index)];
  auto field = [](const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i64);
    for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
    return t;
  };
  Example ex;
  ex.set("input_ids", field(f.input_ids));
  ex.set("segment_ids", field(f.segment_ids));
  ex.set("attention_mask", field(f.attention_mask));
  ex.set("start_position", Tensor::full({}, static_cast<double>(f.start_position), DType::i64));
  ex.set("end_position", Tensor::full({}, static_cast<double>(f.end_position), DType::i64));
  return ex;
}

std::string SquadWindows::describe() const {
  return "SQuAD '" + path_ + "' (" + std::to_string(questions_) + " questions, " +
         std::to_string(size()) + " windows)";
}

SquadFeatureOptions squad_feature_options(const Config& data, const Config& model) {
  SquadFeatureOptions o;
  o.max_seq_length =
      static_cast<int>(data.get_in_or<int64_t>("max_seq_length", 384, Range::closed(8, 1 << 20)));
  o.doc_stride = static_cast<int>(data.get_in_or<int64_t>("doc_stride", 128, Range::at_least(1)));
  o.max_query_length =
      static_cast<int>(data.get_in_or<int64_t>("max_query_length", 64, Range::at_least(0)));
  ADA_CHECK_ARG(o.max_seq_length > o.max_query_length + 3, ConfigError)
      << data.where("max_seq_length") << ": " << o.max_seq_length
      << " leaves no room for the document after a question of up to max_query_length "
      << o.max_query_length << " tokens, [CLS] and two [SEP]; raise it above "
      << o.max_query_length + 3;
  const int64_t positions = model.get_or<int64_t>("max_positions", 512);
  ADA_CHECK_ARG(o.max_seq_length <= positions, ConfigError)
      << data.where("max_seq_length") << ": " << o.max_seq_length
      << " tokens per window, but the model has " << positions
      << " positions (model.max_positions); lower it or raise max_positions";
  return o;
}

DataSets read_squad_windows(const DatasetRequest& request) {
  const Config &d = request.section, &model = request.model;
  ADA_CHECK_ARG(model.get_or<std::string>("head", "pretraining") == "question_answering",
                ConfigError)
      << d.where("name") << ": squad trains BERT's question-answering head; set model.head: "
      << "question_answering";
  const Tokenizer tokenizer = fine_tuning_tokenizer(d, model);
  const SquadFeatureOptions o = squad_feature_options(d, model);
  DataSets out;
  const char* expected = "one SQuAD JSON file (e.g. train-v1.1.json)";
  out.train = SquadWindows::open(data_file(d, "path", expected), tokenizer, o);
  out.vocab_hash = tokenizer.vocab_hash();
  if (d.has("eval_path"))
    out.eval = SquadWindows::open(data_file(d, "eval_path", expected), tokenizer, o);
  else
    out.no_eval_reason = "data.eval_path is not set";
  return out;
}

}  // namespace ada::data
