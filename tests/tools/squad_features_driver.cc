// Companion of tests/tools/squad_features_twin.py: runs data/squad_features.h on one job and
// writes what it made as JSON, for the twin to compare with its Python re-statement of
// run_squad.py. `squad_features_driver JOB.json`, the job being
//   {"mode": "features" | "predict" | "final_text", "vocab": PATH, "out": PATH, ...}
//   features:   "dataset", "training", "options" {max_seq_length, doc_stride, max_query_length}
//               -> {"features": [{example, span, input_ids, segment_ids, attention_mask,
//                   start_position, end_position, token_to_orig_map, token_is_max_context}]}
//               (the two maps keyed by position, as run_squad.py's dicts)
//   predict:    the same, training false, plus "decode" {n_best_size, max_answer_length} and
//               "start_logits", "end_logits" (one row per feature) -> predictions.json as
//               write_squad_predictions writes it
//   final_text: "pairs" [[pred_text, orig_text], ...] -> [final text, ...]
// Exits 1 with the message on any error.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/squad_features.h"

using namespace ada::data;
using Json = nlohmann::json;

namespace {

Json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

void write_json(const std::string& path, const Json& j) {
  std::ofstream out(path, std::ios::binary);
  out << j.dump() << "\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

SquadFeatureOptions feature_options(const Json& job) {
  SquadFeatureOptions o;
  const Json& j = job.at("options");
  o.max_seq_length = j.at("max_seq_length").get<int>();
  o.doc_stride = j.at("doc_stride").get<int>();
  o.max_query_length = j.at("max_query_length").get<int>();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2) throw std::runtime_error("usage: squad_features_driver JOB.json");
    const Json job = read_json(argv[1]);
    const std::string mode = job.at("mode").get<std::string>();
    const Tokenizer tokenizer = Tokenizer::from_file(job.at("vocab").get<std::string>());
    const std::string out = job.at("out").get<std::string>();
    if (mode == "final_text") {
      Json texts = Json::array();
      for (const auto& pair : job.at("pairs"))
        texts.push_back(squad_final_text(pair.at(0).get<std::string>(),
                                         pair.at(1).get<std::string>(), tokenizer));
      write_json(out, texts);
      return 0;
    }
    const SquadDataset dataset = read_squad(job.at("dataset").get<std::string>());
    if (mode == "features") {
      const bool training = job.at("training").get<bool>();
      Json list = Json::array();
      for (const SquadFeature& f :
           make_squad_features(dataset, tokenizer, feature_options(job), training)) {
        Json to_orig = Json::object(), max_context = Json::object();
        for (size_t k = 0; k < f.token_to_orig.size(); ++k) {
          const std::string position = std::to_string(f.doc_offset + static_cast<int64_t>(k));
          to_orig[position] = f.orig_word(f.doc_offset + static_cast<int64_t>(k));
          max_context[position] = f.is_max_context(f.doc_offset + static_cast<int64_t>(k));
        }
        list.push_back({{"example", f.example},
                        {"span", f.span},
                        {"doc_start", f.doc_start},
                        {"input_ids", f.input_ids},
                        {"segment_ids", f.segment_ids},
                        {"attention_mask", f.attention_mask},
                        {"start_position", f.start_position},
                        {"end_position", f.end_position},
                        {"token_to_orig_map", to_orig},
                        {"token_is_max_context", max_context}});
      }
      write_json(out, {{"features", list}});
      return 0;
    }
    if (mode == "predict") {
      const auto features = make_squad_features(dataset, tokenizer, feature_options(job), false);
      SquadDecodeOptions d;
      d.n_best_size = job.at("decode").at("n_best_size").get<int>();
      d.max_answer_length = job.at("decode").at("max_answer_length").get<int>();
      const auto start = job.at("start_logits").get<std::vector<std::vector<float>>>();
      const auto end = job.at("end_logits").get<std::vector<std::vector<float>>>();
      write_squad_predictions(out, squad_predictions(dataset, tokenizer, features, start, end, d));
      return 0;
    }
    throw std::runtime_error("unknown mode '" + mode + "'");
  } catch (const std::exception& e) {
    std::cerr << "squad_features_driver: " << e.what() << "\n";
    return 1;
  }
}
