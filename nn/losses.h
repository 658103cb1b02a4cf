// Losses: softmax cross-entropy with label smoothing (image classification), the masked-LM
// loss over masked positions only, and the next-sentence-prediction loss.
#pragma once

#include "core/functional.h"

namespace ada::nn {

// Mean cross-entropy of logits [N, C] against labels [N]; rows labelled ignore_index skipped.
inline Variable cross_entropy_loss(const Variable& logits, const Tensor& labels,
                                   float label_smoothing = 0.f, int64_t ignore_index = -100) {
  return fn::cross_entropy(logits, labels, label_smoothing, ignore_index);
}
// MLM: logits [M, V] at the M masked positions against their original token ids [M].
inline Variable mlm_loss(const Variable& logits, const Tensor& labels) {
  return fn::cross_entropy(logits, labels, 0.f, -100);
}
// NSP: logits [B, 2] against is-next labels [B] (0 = is next, 1 = random, as BERT).
inline Variable nsp_loss(const Variable& logits, const Tensor& labels) {
  return fn::cross_entropy(logits, labels, 0.f, -100);
}
// Number of rows whose arg-max equals the label (ignored rows excluded), and the row count.
std::pair<int64_t, int64_t> count_correct(const Tensor& logits, const Tensor& labels,
                                          int64_t ignore_index = -100);

}  // namespace ada::nn
