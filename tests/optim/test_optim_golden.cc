// SGD (momentum, Nesterov, weight decay, plain), Adam (with and without L2) and AdamW against
// PyTorch 1.13's optimizers: tests/golden/optim_*.safetensors, written by
// tools/make_optim_golden.py (regenerate from the repository root with
//     /usr/bin/python3 tools/make_optim_golden.py
// ). Each file runs 6 steps with a different LR each step, a no-decay parameter group (fc.bias),
// and a parameter without gradient at step 2 (emb.weight). The optimizer is built through the
// registry from the YAML section recorded in the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/serialize.h"
#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

constexpr const char* kFormatVersion = "1";
constexpr const char* kRegenerate =
    "regenerate the golden files from the repository root with "
    "`/usr/bin/python3 tools/make_optim_golden.py` (needs Debian's python3-torch)";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

class OptimGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(OptimGolden, MatchesPyTorch) {
  const std::string path =
      std::string(ADA_TEST_DATA_DIR) + "/golden/" + GetParam() + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing; " << kRegenerate;
  const NamedTensors g = load_safetensors(path);
  auto meta = [&](const std::string& key) {
    auto it = g.metadata.find(key);
    if (it == g.metadata.end()) {
      ADD_FAILURE() << path << " lacks metadata '" << key << "'; " << kRegenerate;
      return std::string();
    }
    return it->second;
  };
  ASSERT_EQ(meta("format_version"), kFormatVersion) << kRegenerate;
  EXPECT_EQ(meta("generator"), "tools/make_optim_golden.py");
  EXPECT_FALSE(meta("torch_version").empty());

  auto opt = build_optimizer(meta("config"));
  ASSERT_EQ(opt->name(), meta("optimizer"));
  const auto names = split(meta("params"));
  const auto no_decay = split(meta("no_decay"));
  std::vector<Param> params;
  for (const auto& n : names) {
    Param p;
    p.name = n;
    p.var = Variable(g.at("init." + n).clone(), true, n);
    p.weight_decay = std::find(no_decay.begin(), no_decay.end(), n) == no_decay.end();
    params.push_back(p);
  }
  const int steps = std::stoi(meta("steps"));
  const std::vector<float> lrs = g.at("lr").to_vector<float>();
  ASSERT_EQ(static_cast<int>(lrs.size()), steps);

  double worst = 0;
  int skipped = 0;
  for (int k = 0; k < steps; ++k) {
    for (Param& p : params) {
      const std::string key = "grad." + std::to_string(k) + "." + p.name;
      p.var.grad() = g.contains(key) ? g.at(key).clone() : Tensor();
      skipped += !g.contains(key);
    }
    opt->step(params, lrs[k]);
    for (const Param& p : params) {
      const auto want = g.at("after." + std::to_string(k) + "." + p.name).to_vector<float>();
      const auto got = values(p);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::abs(static_cast<double>(got[i]) - want[i]);
        worst = std::max(worst, err);
        ASSERT_LE(err, 2e-6 * (1.0 + std::abs(want[i])))
            << GetParam() << ": step " << k << ", " << p.name << "[" << i << "]: got " << got[i]
            << ", PyTorch " << want[i];
      }
    }
  }
  EXPECT_EQ(skipped, 1) << "each file has one parameter without gradient for one step";
  RecordProperty("max_abs_error", std::to_string(worst));
  std::cout << GetParam() << ": max |ours - PyTorch| over " << steps << " steps = " << worst
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(Files, OptimGolden,
                         ::testing::Values("optim_sgd_momentum", "optim_sgd_momentum_wd",
                                           "optim_sgd_nesterov_wd", "optim_sgd_plain_wd",
                                           "optim_adam", "optim_adam_l2", "optim_adamw"));

}  // namespace
}  // namespace ada::optim::testing
