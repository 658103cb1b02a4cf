#include "nn/losses.h"

namespace ada::nn {

std::pair<int64_t, int64_t> count_correct(const Tensor& logits, const Tensor& labels,
                                          int64_t ignore_index) {
  check_dim(logits, 2, "count_correct", "logits");
  ADA_CHECK_ARG(labels.numel() == logits.size(0), ShapeError)
      << "count_correct: " << labels.numel() << " labels for " << logits.size(0) << " rows";
  const int64_t n = logits.size(0), c = logits.size(1);
  // Metrics are read on the host: device tensors are copied once (small: one row per example).
  const Tensor host_logits = logits.to(Device::cpu());
  const Tensor host_labels = labels.to(Device::cpu());
  const float* p = host_logits.data<float>();
  int64_t correct = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = host_labels.dtype() == DType::i64 ? host_labels.data<int64_t>()[i]
                                                        : host_labels.data<int32_t>()[i];
    if (t == ignore_index) continue;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (p[i * c + j] > p[i * c + best]) best = j;
    correct += best == t;
    ++count;
  }
  return {correct, count};
}

}  // namespace ada::nn
