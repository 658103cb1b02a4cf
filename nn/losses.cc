#include "nn/losses.h"

namespace ada::nn {

std::pair<int64_t, int64_t> count_correct(const Tensor& logits, const Tensor& labels,
                                          int64_t ignore_index) {
  check_dim(logits, 2, "count_correct", "logits");
  ADA_CHECK_ARG(labels.numel() == logits.size(0), ShapeError)
      << "count_correct: " << labels.numel() << " labels for " << logits.size(0) << " rows";
  const int64_t n = logits.size(0);
  ADA_CHECK_ARG(logits.size(1) >= 1, ShapeError)
      << "count_correct: logits " << logits.str() << " have no classes";
  // The predictions are taken on the logits' device: n indices cross to the host, not n x C
  // logits (BERT's MLM head: 75 MB a step, which left the GPU idle for 20-40 ms).
  const Tensor pred = ops::argmax_rows(logits).to(Device::cpu());
  const Tensor host_labels = labels.to(Device::cpu());
  const int64_t* p = pred.data<int64_t>();
  int64_t correct = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = host_labels.dtype() == DType::i64 ? host_labels.data<int64_t>()[i]
                                                        : host_labels.data<int32_t>()[i];
    if (t == ignore_index) continue;
    correct += p[i] == t;
    ++count;
  }
  return {correct, count};
}

}  // namespace ada::nn
