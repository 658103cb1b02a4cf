#include "data/text_classification.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"

namespace ada::data {

namespace {

// The first `max_bytes` of `s`, not cutting a UTF-8 sequence, and cut back to its last
// whitespace when that is not its end (a word cut in two can tokenise to other pieces).
std::string_view utf8_prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  const size_t space = s.substr(0, n).find_last_of(" \t\r\n");
  return s.substr(0, space != std::string_view::npos && space > 0 ? space : n);
}

// The text's first `want` word pieces (or all it has): a long text is tokenised only as far as
// needed, from a prefix of about 32 bytes a piece that grows while it gives too few (a text
// that starts with a long run of spaces or markup).
std::vector<int32_t> first_pieces(const Tokenizer& tokenizer, std::string_view text, size_t want) {
  for (size_t budget = 32 * std::max<size_t>(want, 1);; budget *= 4) {
    const std::string_view prefix = utf8_prefix(text, budget);
    std::vector<int32_t> pieces = tokenizer.encode(prefix);
    if (pieces.size() >= want || prefix.size() == text.size()) {
      if (pieces.size() > want) pieces.resize(want);
      return pieces;
    }
  }
}

std::string known_labels(const std::vector<std::string>& labels) {
  std::string s;
  for (const auto& l : labels) s += (s.empty() ? "" : ", ") + l;
  return s;
}

}  // namespace

std::shared_ptr<const TextClassificationDataset> TextClassificationDataset::open(
    const std::string& path, const Tokenizer& tokenizer, const TextClassificationOptions& o) {
  ADA_CHECK_ARG(o.seq_len >= 3, ConfigError)
      << "text_classification: seq_len " << o.seq_len << " leaves no room for a word piece";
  std::ifstream in(path, std::ios::binary);
  ADA_CHECK_ARG(in.good(), IoError)
      << path << ": cannot open the classification data (tools/fetch_data.sh spam makes "
      << "data/spam/{train,dev,test}.jsonl)";
  auto ds = std::shared_ptr<TextClassificationDataset>(new TextClassificationDataset());
  ds->path_ = path;
  ds->opt_ = o;
  const SpecialIds& sp = tokenizer.special_ids();
  ds->pad_ = sp.pad;
  std::string line;
  int64_t no_pieces = 0, no_pieces_line = 0;  // texts without a word piece, and the first's line
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ADA_THROW(IoError) << path << ":" << lineno << ": not a JSON object (" << e.what() << ")";
    }
    ADA_CHECK_ARG(j.is_object() && j.contains("text") && j["text"].is_string(), IoError)
        << path << ":" << lineno << ": needs a string field \"text\"";
    ADA_CHECK_ARG(j.contains("label") && j["label"].is_string(), IoError)
        << path << ":" << lineno << ": needs a string field \"label\" (one of "
        << known_labels(o.labels) << ")";
    const std::string label = j["label"].get<std::string>();
    const auto it = std::find(o.labels.begin(), o.labels.end(), label);
    ADA_CHECK_ARG(it != o.labels.end(), IoError)
        << path << ":" << lineno << ": label '" << label << "' is not in data.labels ("
        << known_labels(o.labels) << "); add it there (and raise model.num_classes)";
    const std::string& text = j["text"].get_ref<const std::string&>();
    std::vector<int32_t> pieces = first_pieces(tokenizer, text, static_cast<size_t>(o.seq_len - 2));
    if (pieces.empty() && no_pieces++ == 0) no_pieces_line = lineno;
    std::vector<int32_t> ids;
    ids.reserve(pieces.size() + 2);
    ids.push_back(sp.cls);
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    ids.push_back(sp.sep);
    ds->ids_.push_back(std::move(ids));
    ds->labels_.push_back(it - o.labels.begin());
  }
  ADA_CHECK_ARG(in.eof(), IoError) << path << ": read error";
  ADA_CHECK_ARG(!ds->labels_.empty(), IoError) << path << ": no example in the file";
  if (no_pieces > 0)
    log_warn(
        "{}: {} of {} examples have no word piece (an empty text, or only spaces and control "
        "characters; the first at line {}): each is read as [CLS] [SEP] with its label, as "
        "BertTokenizer would",
        path, no_pieces, ds->labels_.size(), no_pieces_line);
  return ds;
}

Example TextClassificationDataset::get(int64_t index, int64_t /*epoch*/) const {
  ADA_CHECK_ARG(index >= 0 && index < size(), ShapeError)
      << describe() << ": index " << index << " out of range";
  const std::vector<int32_t>& src = ids_[static_cast<size_t>(index)];
  const int64_t L = opt_.seq_len, n = static_cast<int64_t>(src.size());
  Tensor ids = Tensor::empty({L}, DType::i64), mask = Tensor::empty({L}, DType::i64);
  int64_t* pi = ids.data<int64_t>();
  int64_t* pm = mask.data<int64_t>();
  for (int64_t i = 0; i < L; ++i) {
    pi[i] = i < n ? src[static_cast<size_t>(i)] : pad_;
    pm[i] = i < n ? 1 : 0;
  }
  Example ex;
  ex.set("input_ids", std::move(ids));
  ex.set("segment_ids", Tensor::zeros({L}, DType::i64));
  ex.set("attention_mask", std::move(mask));
  ex.set("label",
         Tensor::full({}, static_cast<double>(labels_[static_cast<size_t>(index)]), DType::i64));
  return ex;
}

std::vector<int64_t> TextClassificationDataset::class_counts() const {
  std::vector<int64_t> c(opt_.labels.size(), 0);
  for (int64_t l : labels_) ++c[static_cast<size_t>(l)];
  return c;
}

std::string TextClassificationDataset::describe() const {
  std::string classes;
  const auto counts = class_counts();
  for (size_t i = 0; i < counts.size(); ++i)
    classes += (i ? ", " : "") + opt_.labels[i] + " " + std::to_string(counts[i]);
  return "text classification '" + path_ + "' (" + std::to_string(size()) +
         " examples: " + classes + "; " + std::to_string(opt_.seq_len) + " tokens)";
}

DataSets read_text_classification(const DatasetRequest& request) {
  const Config &d = request.section, &model = request.model;
  TextClassificationOptions o;
  o.labels = d.get<std::vector<std::string>>("labels");
  ADA_CHECK_ARG(o.labels.size() >= 2, ConfigError)
      << d.where("labels") << ": " << o.labels.size() << " label(s); a classifier needs at least 2";
  for (size_t i = 0; i < o.labels.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      ADA_CHECK_ARG(o.labels[i] != o.labels[k], ConfigError)
          << d.where("labels") << ": label '" << o.labels[i] << "' given twice";
  ADA_CHECK_ARG(static_cast<int64_t>(o.labels.size()) == request.num_classes, ConfigError)
      << d.where("labels") << ": " << o.labels.size() << " labels, but the model has "
      << request.num_classes
      << " classes; set model.head: classification and model.num_classes: " << o.labels.size();
  o.seq_len = d.get_in_or<int64_t>("seq_len", 128, Range::at_least(3));
  const int64_t positions = model.get_or<int64_t>("max_positions", 512);
  ADA_CHECK_ARG(o.seq_len <= positions, ConfigError)
      << d.where("seq_len") << ": " << o.seq_len << " tokens per sequence, but the model has "
      << positions << " positions (model.max_positions); lower data.seq_len or raise max_positions";
  const Tokenizer tokenizer = fine_tuning_tokenizer(d, model);
  DataSets out;
  const char* expected = "one JSON-lines file (e.g. data/spam/train.jsonl)";
  out.train = TextClassificationDataset::open(data_file(d, "path", expected), tokenizer, o);
  out.vocab_hash = tokenizer.vocab_hash();
  if (d.has("eval_path"))
    out.eval = TextClassificationDataset::open(data_file(d, "eval_path", expected), tokenizer, o);
  else
    out.no_eval_reason = "data.eval_path is not set";
  return out;
}

}  // namespace ada::data
