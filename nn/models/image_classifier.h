// ImageClassifier: the Model for "image" -> logits -> cross-entropy (with label smoothing)
// against "label"; figures "loss" and "top1". Subclasses implement logits().
#pragma once

#include "nn/losses.h"
#include "nn/model.h"

namespace ada::nn {

class ImageClassifier : public Model {
 public:
  ImageClassifier(int64_t classes, float label_smoothing)
      : classes_(classes), label_smoothing_(label_smoothing) {}
  virtual Variable logits(const Variable& image) = 0;
  ModelOutput forward(const TensorMap& batch) override {
    const Tensor& image = field(batch, "image");
    const Tensor& label = field(batch, "label");
    Variable out = logits(Variable(image));
    ModelOutput r;
    r.loss = cross_entropy_loss(out, label, label_smoothing_);
    if (!metrics_wanted()) return r;
    auto [correct, count] = count_correct(out.value(), label);
    const double n = static_cast<double>(count);
    r.metrics = {{"loss", {static_cast<double>(r.loss.value().item()) * n, n}},
                 {"top1", {static_cast<double>(correct), n}}};
    return r;
  }
  int64_t num_classes() const override { return classes_; }
  std::vector<std::string> figures() const override { return {"loss", "top1"}; }
  // The example's "image" [C, H, W] against the input set by expect_images().
  void check_example(const TensorMap& example, const std::string& source) const override;

 protected:
  // The images this model takes: `channels`, and `height` x `width` (0: any size); `fix` says
  // what to change when a data set's differ (e.g. "set model.in_channels (config x.yaml: ...)").
  void expect_images(int64_t channels, int64_t height, int64_t width, std::string fix) {
    channels_ = channels, height_ = height, width_ = width, fix_ = std::move(fix);
  }

 private:
  int64_t classes_;
  float label_smoothing_;
  int64_t channels_ = 0, height_ = 0, width_ = 0;  // channels_ 0: expect_images() not called
  std::string fix_;
};

}  // namespace ada::nn
