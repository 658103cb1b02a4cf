// Hugging Face BERT checkpoints <-> ours: the names of BertForPreTraining / BertModel /
// BertForSequenceClassification / BertForQuestionAnswering state dicts (bert.embeddings.*,
// bert.encoder.layer.N.attention.self.query.*, ..., cls.predictions.*, cls.seq_relationship.*,
// classifier.*, qa_outputs.*; BertModel's without the "bert." prefix and the heads) mapped to our
// BERT's (nn/models/bert.cc, each head); the layouts are the same ([out, in] linear weights).
#pragma once

#include <optional>
#include <string>

#include "core/serialize.h"

namespace ada::nn {

// Our name for a Hugging Face tensor name; nullopt for one that has none.
std::optional<std::string> bert_name_from_hf(const std::string& hf);
// The Hugging Face (BertForPreTraining) name of one of our BERT's tensors; InternalError if none.
std::string hf_name_from_bert(const std::string& ours);

// Whether `tensors` look like a Hugging Face BERT state dict.
bool is_hf_bert(const NamedTensors& tensors);
// A Hugging Face state dict under our names. Dropped: the position_ids buffer, the decoder
// weight tied to the word embeddings and a decoder bias equal to cls.predictions.bias (IoError if
// either is not tied: our decoder is the word embeddings); "gamma"/"beta" of TF-converted
// checkpoints read as weight/bias. IoError naming the file and the tensor for any other name.
NamedTensors import_hf_bert(const NamedTensors& hf);
// Our BERT's tensors under BertForPreTraining's names (what from_pretrained reads); IoError for
// a classifier without a pooler (model.pooling: mean: no Hugging Face model computes it).
NamedTensors export_hf_bert(const NamedTensors& ours);

}  // namespace ada::nn
