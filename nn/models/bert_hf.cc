#include "nn/models/bert_hf.h"

#include <cstring>
#include <regex>
#include <utility>
#include <vector>

#include "base/error.h"

namespace ada::nn {
namespace {

// (Hugging Face name pattern, our name pattern); {L} stands for the layer number, {P} for
// weight or bias. Prefix "bert." is added on export and optional on import.
const std::pair<const char*, const char*> kNames[] = {
    {"embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"},
    {"embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"},
    {"embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"},
    {"embeddings.LayerNorm.{P}", "embeddings.LayerNorm.{P}"},
    {"encoder.layer.{L}.attention.self.query.{P}", "encoder.layer{L}.attention.query.{P}"},
    {"encoder.layer.{L}.attention.self.key.{P}", "encoder.layer{L}.attention.key.{P}"},
    {"encoder.layer.{L}.attention.self.value.{P}", "encoder.layer{L}.attention.value.{P}"},
    {"encoder.layer.{L}.attention.output.dense.{P}", "encoder.layer{L}.attention.output.{P}"},
    {"encoder.layer.{L}.attention.output.LayerNorm.{P}", "encoder.layer{L}.attention_norm.{P}"},
    {"encoder.layer.{L}.intermediate.dense.{P}", "encoder.layer{L}.intermediate.{P}"},
    {"encoder.layer.{L}.output.dense.{P}", "encoder.layer{L}.output.{P}"},
    {"encoder.layer.{L}.output.LayerNorm.{P}", "encoder.layer{L}.output_norm.{P}"},
    {"pooler.dense.{P}", "pooler.{P}"},
    {"cls.predictions.bias", "cls.decoder_bias"},
    {"cls.predictions.transform.dense.{P}", "cls.transform.{P}"},
    {"cls.predictions.transform.LayerNorm.{P}", "cls.transform_norm.{P}"},
    {"cls.seq_relationship.{P}", "cls.nsp.{P}"},
    {"classifier.{P}", "classifier.{P}"},  // BertForSequenceClassification
    {"qa_outputs.{P}", "qa_outputs.{P}"},  // BertForQuestionAnswering
};

// Heads outside the "bert." module in Hugging Face's models.
bool hf_top_level(const std::string& hf) {
  for (const char* p : {"cls.", "classifier.", "qa_outputs."})
    if (hf.rfind(p, 0) == 0) return true;
  return false;
}

// "a.{L}.b.{P}" -> a regex capturing the layer and the part, and a replacement for the other side.
std::regex pattern_of(std::string p) {
  std::string r;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, 3, "{L}") == 0)
      r += "([0-9]+)", i += 3;
    else if (p.compare(i, 3, "{P}") == 0)
      r += "(weight|bias)", i += 3;
    else if (p[i] == '.')
      r += "\\.", ++i;
    else
      r += p[i++];
  }
  return std::regex(r);
}

std::string fill(std::string p, const std::smatch& m) {
  size_t next = 1;
  for (const char* key : {"{L}", "{P}"}) {
    const size_t at = p.find(key);
    if (at == std::string::npos) continue;
    p.replace(at, 3, m[next++].str());
  }
  return p;
}

// `from` side 0 (HF) or 1 (ours) -> the other side's name.
std::optional<std::string> translate(const std::string& name, int from) {
  for (const auto& pair : kNames) {
    const char* src = from == 0 ? pair.first : pair.second;
    const char* dst = from == 0 ? pair.second : pair.first;
    std::smatch m;
    if (std::regex_match(name, m, pattern_of(src))) {
      // {L} before {P} in both patterns, so the captures fill in order.
      return fill(dst, m);
    }
  }
  return std::nullopt;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

std::optional<std::string> bert_name_from_hf(const std::string& hf) {
  std::string name = starts_with(hf, "bert.") ? hf.substr(5) : hf;
  for (const auto& [old, now] :
       {std::pair<const char*, const char*>{".gamma", ".weight"}, {".beta", ".bias"}})
    if (name.size() > std::strlen(old) &&
        name.compare(name.size() - std::strlen(old), std::strlen(old), old) == 0 &&
        name.find("LayerNorm") != std::string::npos)
      name = name.substr(0, name.size() - std::strlen(old)) + now;
  return translate(name, 0);
}

std::string hf_name_from_bert(const std::string& ours) {
  const auto hf = translate(ours, 1);
  ADA_CHECK(hf.has_value()) << "no Hugging Face name for BERT tensor '" << ours << "'";
  return hf_top_level(*hf) ? *hf : "bert." + *hf;
}

bool is_hf_bert(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors.tensors)
    if (starts_with(name, "bert.") || name.find("encoder.layer.") != std::string::npos ||
        starts_with(name, "cls.predictions."))
      return true;
  return false;
}

NamedTensors import_hf_bert(const NamedTensors& hf) {
  NamedTensors out;
  out.source = hf.source;
  const std::string from = hf.source.empty() ? "Hugging Face state" : hf.source;
  auto equal = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() &&
           a.to_vector<float>() == b.to_vector<float>();
  };
  for (const auto& [name, t] : hf.tensors) {
    if (name == "bert.embeddings.position_ids" || name == "embeddings.position_ids") continue;
    if (name == "cls.predictions.decoder.weight") {
      const std::string words = hf.contains("bert.embeddings.word_embeddings.weight")
                                    ? "bert.embeddings.word_embeddings.weight"
                                    : "embeddings.word_embeddings.weight";
      ADA_CHECK_ARG(hf.contains(words) && equal(t, hf.at(words)), IoError)
          << from << ": cls.predictions.decoder.weight is not tied to the word embeddings; our "
          << "BERT's decoder is the word embedding matrix";
      continue;
    }
    if (name == "cls.predictions.decoder.bias") {
      ADA_CHECK_ARG(hf.contains("cls.predictions.bias") && equal(t, hf.at("cls.predictions.bias")),
                    IoError)
          << from << ": cls.predictions.decoder.bias differs from cls.predictions.bias";
      continue;
    }
    const auto ours = bert_name_from_hf(name);
    ADA_CHECK_ARG(ours.has_value(), IoError)
        << from << ": tensor '" << name << "' is not part of a Hugging Face BERT "
        << "(BertForPreTraining, BertModel, BertForSequenceClassification or "
        << "BertForQuestionAnswering); is this another architecture?";
    ADA_CHECK_ARG(!out.contains(*ours), IoError)
        << from << ": two tensors map to '" << *ours << "' (the second: '" << name << "')";
    out.tensors.emplace_back(*ours, t);
  }
  return out;
}

NamedTensors export_hf_bert(const NamedTensors& ours) {
  // A classifier without a pooler is model.pooling: mean, which BertForSequenceClassification
  // (pooled [CLS]) cannot express: exported, it would load with a random pooler and compute
  // another function.
  ADA_CHECK_ARG(!ours.contains("classifier.weight") || ours.contains("pooler.weight"), IoError)
      << ours.source << ": a classifier without a pooler (model.pooling: mean) has no Hugging Face "
      << "equivalent (BertForSequenceClassification pools [CLS] through bert.pooler); export "
         "the pre-training checkpoint it was fine-tuned from, or fine-tune with pooling: cls";
  NamedTensors out;
  out.source = ours.source;
  out.metadata["format"] = "pt";  // what transformers' from_pretrained expects of safetensors
  for (const auto& [name, t] : ours.tensors) {
    // A checkpoint of another model (LeNet's conv1.weight, ...) has tensors BERT has not.
    ADA_CHECK_ARG(translate(name, 1).has_value(), IoError)
        << ours.source << ": tensor '" << name << "' is not one of BERT's: this is not a BERT "
        << "checkpoint (model.name: bert), and only BERT has Hugging Face names to export";
    out.tensors.emplace_back(hf_name_from_bert(name), t);
  }
  return out;
}

}  // namespace ada::nn
