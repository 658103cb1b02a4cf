// ResNets with torchvision's layout and parameter names ("layer1.0.conv2.weight",
// "layer1.0.downsample.0.weight", "fc.bias"), so checkpoints line up with PyTorch's.
// resnet18/34: basic blocks; resnet50: bottlenecks, v1.5 (stride in the 3x3 conv).
// ImageNet stem: 7x7/2 conv, BN, ReLU, 3x3/2 max-pool. resnet20_mnist: 3x3 stem on 1 channel,
// three stages of three basic blocks (16, 32, 64 channels), for 28x28 inputs.
// Init: He normal (fan_out) for convolutions, BN gamma 1 / beta 0, and (option
// zero_init_last_bn, default on) gamma 0 in each block's last BN, so blocks start as identity.
// Option channels_last: NHWC activations throughout (see make_resnet).
#include "nn/layers/batch_norm2d.h"
#include "nn/layers/conv2d.h"
#include "nn/layers/global_avg_pool.h"
#include "nn/layers/linear.h"
#include "nn/layers/max_pool2d.h"
#include "nn/models/image_classifier.h"
#include "nn/models/models.h"

namespace ada::nn {
namespace {

// Makes one ResNet's layers: convolutions He-initialised from g, every layer in one layout
// (NCHW, or NHWC with model.channels_last).
struct Make {
  Generator& g;
  bool channels_last;
  std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int k, int stride) const {
    auto c = std::make_shared<Conv2d>(in, out, k, g,
                                      Conv2dOptions{stride, k / 2, 1, false, channels_last});
    c->weight().mutable_value().copy_from(init::kaiming_normal({out, in, k, k}, g, out * k * k));
    return c;
  }
  std::shared_ptr<BatchNorm2d> bn(int64_t channels) const {
    return std::make_shared<BatchNorm2d>(channels, channels_last);
  }
};

// A module whose children are named "0", "1", ... (torchvision's Sequential naming).
class Seq : public Module {
 public:
  template <class M>
  std::shared_ptr<M> add(std::shared_ptr<M> m) {
    return register_module(std::to_string(count_++), std::move(m));
  }
  std::string type_name() const override { return "Sequential"; }

 private:
  int count_ = 0;
};

class Block : public Module {
 public:
  virtual Variable forward(const Variable& x) = 0;
};

// 1x1 conv + BN shortcut when the shape changes.
struct Downsample {
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  Variable forward(const Variable& x) const { return bn->forward(conv->forward(x)); }
};

Downsample make_downsample(Seq& seq, int64_t in, int64_t out, int stride, const Make& mk) {
  return {seq.add(mk.conv(in, out, 1, stride)), seq.add(mk.bn(out))};
}

class BasicBlock : public Block {
 public:
  BasicBlock(int64_t in, int64_t planes, int stride, bool zero_last, const Make& mk) {
    conv1_ = register_module("conv1", mk.conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", mk.bn(planes));
    conv2_ = register_module("conv2", mk.conv(planes, planes, 3, 1));
    bn2_ = register_module("bn2", mk.bn(planes));
    if (zero_last) ops::fill_(bn2_->weight().mutable_value(), 0.f);
    if (stride != 1 || in != planes) {
      auto seq = register_module("downsample", std::make_shared<Seq>());
      down_ = make_downsample(*seq, in, planes, stride, mk);
    }
  }
  Variable forward(const Variable& x) override {
    Variable h = bn1_->forward_relu(conv1_->forward(x));
    return bn2_->forward_add_relu(conv2_->forward(h), down_.conv ? down_.forward(x) : x);
  }
  std::string type_name() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  Downsample down_;
};

class Bottleneck : public Block {
 public:
  Bottleneck(int64_t in, int64_t planes, int stride, bool zero_last, const Make& mk) {
    const int64_t out = planes * 4;
    conv1_ = register_module("conv1", mk.conv(in, planes, 1, 1));
    bn1_ = register_module("bn1", mk.bn(planes));
    conv2_ = register_module("conv2", mk.conv(planes, planes, 3, stride));  // v1.5
    bn2_ = register_module("bn2", mk.bn(planes));
    conv3_ = register_module("conv3", mk.conv(planes, out, 1, 1));
    bn3_ = register_module("bn3", mk.bn(out));
    if (zero_last) ops::fill_(bn3_->weight().mutable_value(), 0.f);
    if (stride != 1 || in != out) {
      auto seq = register_module("downsample", std::make_shared<Seq>());
      down_ = make_downsample(*seq, in, out, stride, mk);
    }
  }
  Variable forward(const Variable& x) override {
    Variable h = bn1_->forward_relu(conv1_->forward(x));
    h = bn2_->forward_relu(conv2_->forward(h));
    return bn3_->forward_add_relu(conv3_->forward(h), down_.conv ? down_.forward(x) : x);
  }
  std::string type_name() const override { return "Bottleneck"; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
  Downsample down_;
};

struct Spec {
  bool bottleneck;
  std::vector<int> blocks;
  std::vector<int64_t> widths;
  bool imagenet_stem;
  int64_t in_channels;
};

class ResNet : public ImageClassifier {
 public:
  ResNet(const std::string& name, const Spec& s, int64_t classes, bool zero_last, float smoothing,
         bool channels_last, const std::string& in_channels_key, Generator& g)
      : ImageClassifier(classes, smoothing),
        name_(name),
        imagenet_stem_(s.imagenet_stem),
        channels_last_(channels_last),
        pool_(3, 2, 1, channels_last),
        gap_(channels_last) {
    const Make mk{g, channels_last};
    const int64_t stem = s.widths[0];
    conv1_ = register_module(
        "conv1", mk.conv(s.in_channels, stem, s.imagenet_stem ? 7 : 3, s.imagenet_stem ? 2 : 1));
    bn1_ = register_module("bn1", mk.bn(stem));
    int64_t in = stem;
    const int expansion = s.bottleneck ? 4 : 1;
    for (size_t st = 0; st < s.blocks.size(); ++st) {
      auto layer = register_module("layer" + std::to_string(st + 1), std::make_shared<Seq>());
      for (int b = 0; b < s.blocks[st]; ++b) {
        const int stride = (st > 0 && b == 0) ? 2 : 1;
        std::shared_ptr<Block> blk;
        if (s.bottleneck)
          blk = layer->add(std::make_shared<Bottleneck>(in, s.widths[st], stride, zero_last, mk));
        else
          blk = layer->add(std::make_shared<BasicBlock>(in, s.widths[st], stride, zero_last, mk));
        blocks_.push_back(blk);
        in = s.widths[st] * expansion;
      }
    }
    fc_ = register_module("fc", std::make_shared<Linear>(in, classes, g));
    expect_images(s.in_channels, 0, 0, in_channels_key + " must be the images' channels");
  }
  Variable logits(const Variable& x) override {
    // Channels-last: the [N, C, H, W] images permuted once, every activation NHWC after.
    Variable h =
        bn1_->forward_relu(conv1_->forward(channels_last_ ? fn::permute(x, {0, 2, 3, 1}) : x));
    if (imagenet_stem_) h = pool_.forward(h);
    for (auto& b : blocks_) h = b->forward(h);
    return fc_->forward(gap_.forward(h));
  }
  std::string type_name() const override { return name_; }

 private:
  std::string name_;
  bool imagenet_stem_, channels_last_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<Linear> fc_;
  MaxPool2d pool_;
  GlobalAvgPool gap_;
};

}  // namespace

std::unique_ptr<Model> make_resnet(const std::string& variant, const Config& cfg, uint64_t seed) {
  Spec s;
  if (variant == "resnet18")
    s = {false, {2, 2, 2, 2}, {64, 128, 256, 512}, true, 3};
  else if (variant == "resnet34")
    s = {false, {3, 4, 6, 3}, {64, 128, 256, 512}, true, 3};
  else if (variant == "resnet50")
    s = {true, {3, 4, 6, 3}, {64, 128, 256, 512}, true, 3};
  else if (variant == "resnet20_mnist")
    s = {false, {3, 3, 3}, {16, 32, 64}, false, 1};
  else
    ADA_THROW(ConfigError) << "unknown ResNet variant '" << variant << "'";
  s.in_channels = cfg.get_in_or<int64_t>("in_channels", s.in_channels, Range::above(0));
  const int64_t classes =
      cfg.get_or<int64_t>("num_classes", variant == "resnet20_mnist" ? 10 : 1000);
  const bool zero_last = cfg.get_or<bool>("zero_init_last_bn", true);
  // NHWC activations (cuDNN's channels-last convolutions on a GPU; the CPU runs its convolutions
  // and the stem's max-pool on NCHW copies, so there it only costs time). Parameters,
  // checkpoints and results are those of NCHW.
  const bool channels_last = cfg.get_or<bool>("channels_last", false);
  const float smoothing = static_cast<float>(
      cfg.get_in_or<double>("label_smoothing", 0.0, Range::half_open(0, 1), "typical: 0.1"));
  ADA_CHECK_ARG(classes >= 2, ConfigError)
      << cfg.where("num_classes") << ": a classifier needs at least 2 classes, got " << classes;
  Generator g(seed);
  return std::make_unique<ResNet>(variant, s, classes, zero_last, smoothing, channels_last,
                                  cfg.where("in_channels"), g);
}

}  // namespace ada::nn
