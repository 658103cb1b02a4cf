// train.freeze: which parameters a list of names or prefixes takes, and the errors for a list
// that names nothing or leaves nothing to train. No MPI: a pure function of the parameters.
#include "apps/trainer/freeze.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace ada::trainer {
namespace {

std::vector<Param> params(const std::vector<std::string>& names) {
  std::vector<Param> out;
  for (const auto& n : names) out.push_back({n, Variable(Tensor::zeros({2, 3}), true, n), true});
  return out;
}

std::vector<std::string> names(const std::vector<Param>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.name);
  return out;
}

std::string error(const std::vector<std::string>& prefixes) {
  try {
    freeze_parameters(params({"encoder.layer0.weight", "encoder_x.weight", "classifier.weight"}),
                      prefixes, "config run.yaml: train.freeze (line 7, column 11)");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Freeze, APrefixTakesWholeNamesOrWholeComponentsOnly) {
  const auto ps = params({"encoder.layer0.weight", "encoder.layer1.weight", "encoder_x.weight",
                          "pooler.weight", "pooler.bias", "classifier.weight"});
  const Frozen f = freeze_parameters(ps, {"encoder", "pooler.bias"}, "train.freeze");
  EXPECT_EQ(f.tensors, 3);
  EXPECT_EQ(f.elements, 18);
  EXPECT_EQ(names(trainable(ps)),
            (std::vector<std::string>{"encoder_x.weight", "pooler.weight", "classifier.weight"}));
  EXPECT_FALSE(ps[0].var.requires_grad());
  EXPECT_TRUE(ps[2].var.requires_grad());
}

TEST(Freeze, BadListsNameTheKeyTheValueAndTheFix) {
  EXPECT_EQ(
      error({"encoder", "decoder"}),
      "config run.yaml: train.freeze (line 7, column 11): 'decoder' names no parameter of "
      "the model; its parameters lie under encoder, encoder_x, classifier (trainer --describe "
      "lists them all)");
  EXPECT_NE(error({"encoder.layer"}).find("'encoder.layer' names no parameter"), std::string::npos);
  EXPECT_NE(error({""}).find("train.freeze (line 7, column 11): an empty name"), std::string::npos);
  EXPECT_NE(error({"encoder", "encoder_x", "classifier"})
                .find("freezes every parameter of the model, so nothing would train"),
            std::string::npos);
  EXPECT_EQ(error({"encoder", "encoder_x"}), "(accepted)");
}

}  // namespace
}  // namespace ada::trainer
