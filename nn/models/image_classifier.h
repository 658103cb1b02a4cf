// ImageClassifier: the Model for "image" -> logits -> cross-entropy (with label smoothing)
// against "label"; metrics "correct" and "count". Subclasses implement logits().
#pragma once

#include "nn/losses.h"
#include "nn/model.h"

namespace ada::nn {

class ImageClassifier : public Model {
 public:
  explicit ImageClassifier(float label_smoothing = 0.f) : label_smoothing_(label_smoothing) {}
  virtual Variable logits(const Variable& image) = 0;
  ModelOutput forward(const TensorMap& batch) override {
    const Tensor& image = field(batch, "image");
    const Tensor& label = field(batch, "label");
    Variable out = logits(Variable(image));
    ModelOutput r{cross_entropy_loss(out, label, label_smoothing_), {}};
    auto [correct, count] = count_correct(out.value(), label);
    r.metrics["correct"] = static_cast<double>(correct);
    r.metrics["count"] = static_cast<double>(count);
    return r;
  }

 private:
  float label_smoothing_;
};

}  // namespace ada::nn
