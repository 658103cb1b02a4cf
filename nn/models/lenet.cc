// LeNet-5 for 28x28x1 (MNIST): conv5x5(6, pad 2) - ReLU - maxpool2 - conv5x5(16) - ReLU -
// maxpool2 - fc120 - ReLU - fc84 - ReLU - fc(classes). 61,706 parameters for 10 classes.
#include "base/error.h"
#include "nn/layers/conv2d.h"
#include "nn/layers/flatten.h"
#include "nn/layers/linear.h"
#include "nn/layers/max_pool2d.h"
#include "nn/layers/relu.h"
#include "nn/models/image_classifier.h"
#include "nn/models/models.h"

namespace ada::nn {
namespace {

class LeNet5 : public ImageClassifier {
 public:
  LeNet5(int64_t classes, float smoothing, Generator& g) : ImageClassifier(classes, smoothing) {
    conv1_ = register_module("conv1",
                             std::make_shared<Conv2d>(1, 6, 5, g, Conv2dOptions{1, 2, 1, true}));
    conv2_ = register_module("conv2",
                             std::make_shared<Conv2d>(6, 16, 5, g, Conv2dOptions{1, 0, 1, true}));
    fc1_ = register_module("fc1", std::make_shared<Linear>(16 * 5 * 5, 120, g));
    fc2_ = register_module("fc2", std::make_shared<Linear>(120, 84, g));
    fc3_ = register_module("fc3", std::make_shared<Linear>(84, classes, g));
    expect_images(1, 28, 28,
                  "LeNet-5 is for 28x28 greyscale images (MNIST, Fashion-MNIST); for other "
                  "images choose a ResNet (model.name, with model.in_channels)");
  }
  Variable logits(const Variable& x) override {
    ADA_CHECK_ARG(
        x.value().dim() == 4 && x.shape()[1] == 1 && x.shape()[2] == 28 && x.shape()[3] == 28,
        ShapeError)
        << "lenet5 expects images [N,1,28,28], got " << x.value().str();
    Variable h = pool_.forward(relu_.forward(conv1_->forward(x)));
    h = pool_.forward(relu_.forward(conv2_->forward(h)));
    h = flatten_.forward(h);
    h = relu_.forward(fc1_->forward(h));
    h = relu_.forward(fc2_->forward(h));
    return fc3_->forward(h);
  }
  std::string type_name() const override { return "LeNet5"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<Linear> fc1_, fc2_, fc3_;
  ReLU relu_;
  MaxPool2d pool_{2, 2};
  Flatten flatten_;
};

}  // namespace

std::unique_ptr<Model> make_lenet5(const Config& cfg, uint64_t seed) {
  Generator g(seed);
  const int64_t classes = cfg.get_or<int64_t>("num_classes", 10);
  const float smoothing = static_cast<float>(
      cfg.get_in_or<double>("label_smoothing", 0.0, Range::half_open(0, 1), "typical: 0.1"));
  ADA_CHECK_ARG(classes >= 2, ConfigError)
      << cfg.where("num_classes") << ": a classifier needs at least 2 classes, got " << classes;
  return std::make_unique<LeNet5>(classes, smoothing, g);
}

}  // namespace ada::nn
