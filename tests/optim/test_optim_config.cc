// Building optimizers from config sections through the registry: bad values are ConfigErrors
// that name the key (with file and line) and the allowed range; unknown names list the known
// ones; keys nothing reads are caught by Config::finish().
#include <gtest/gtest.h>

#include "optim_test_util.h"

namespace ada::optim::testing {
namespace {

std::string config_error(const std::string& body) {
  return error_of<ConfigError>([&] { build_optimizer(body); });
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nlacks: " << part;
}

// The uniform range message (Config::get_in): the key where the user wrote it, then the range.
void expect_range(const std::string& msg, const std::string& key, const std::string& range) {
  expect_has(msg, "optimizer." + key + " (line ");
  expect_has(msg, "): must be " + range);
}

TEST(OptimizerConfig, RegistryHasTheBuiltins) {
  OptimizerRegistry reg("optimizer");
  register_builtin_optimizers(reg);
  EXPECT_EQ(reg.names(), (std::vector<std::string>{"adam", "adamw", "lamb", "sgd"}));
  for (const char* n : {"sgd", "adam", "adamw", "lamb"}) {
    auto o = build_optimizer(std::string("name: ") + n + "\nlr: 0.5\n");
    EXPECT_EQ(o->name(), n);
    EXPECT_EQ(o->lr(), 0.5);
  }
}

TEST(OptimizerConfig, UnknownNameListsTheKnownOnes) {
  const auto msg = config_error("name: adamm\nlr: 0.1\n");
  expect_has(msg, "config test.yaml: optimizer.name (line 2");
  expect_has(msg, "unknown optimizer 'adamm'; known: adam, adamw, lamb, sgd");
  expect_has(msg, "did you mean 'adam'");
}

TEST(OptimizerConfig, NegativeLr) {
  const auto msg = config_error("name: sgd\nlr: -0.1\n");
  expect_has(msg, "optimizer.lr (line 3");
  expect_range(msg, "lr", "> 0, got -0.1");
  expect_range(config_error("name: adam\nlr: 0\n"), "lr", "> 0, got 0");
  expect_has(config_error("name: lamb\nlr: .nan\n"), "optimizer.lr");
}

TEST(OptimizerConfig, MissingLr) {
  expect_has(config_error("name: adamw\n"), "optimizer.lr");
}

TEST(OptimizerConfig, MomentumMustBeBelowOne) {
  auto msg = config_error("name: sgd\nlr: 0.1\nmomentum: 1\n");
  expect_has(msg, "optimizer.momentum (line 4");
  expect_range(msg, "momentum", "in [0, 1), got 1");
  expect_range(config_error("name: sgd\nlr: 0.1\nmomentum: -0.5\n"), "momentum", "in [0, 1)");
  msg = config_error("name: sgd\nlr: 0.1\nmomentum: 0\nnesterov: true\n");
  expect_has(msg, "optimizer.nesterov");
  expect_has(msg, "nesterov needs momentum > 0");
}

TEST(OptimizerConfig, AdamFamilyRanges) {
  expect_range(config_error("name: adam\nlr: 0.1\nbeta1: 1.0\n"), "beta1", "in [0, 1), got 1");
  expect_has(config_error("name: adamw\nlr: 0.1\nbeta2: 1.5\n"), "optimizer.beta2");
  expect_range(config_error("name: lamb\nlr: 0.1\neps: 0\n"), "eps", "> 0, got 0");
  expect_range(config_error("name: lamb\nlr: 0.1\nweight_decay: -1\n"), "weight_decay",
               ">= 0, got -1");
  expect_has(config_error("name: sgd\nlr: 0.1\nweight_decay: -1\n"), "optimizer.weight_decay");
}

TEST(OptimizerConfig, TyposAreCaughtByFinish) {
  auto msg = config_error("name: sgd\nlr: 0.1\nmomentm: 0.9\n");
  expect_has(msg, "momentm");
  expect_has(
      msg, "momentum");  // "did you mean" // A key of another optimizer is unread, hence reported.
  expect_has(config_error("name: sgd\nlr: 0.1\nbeta1: 0.9\n"), "beta1");
  expect_has(config_error("name: adam\nlr: 0.1\nalways_adapt: true\n"), "always_adapt");
}

TEST(OptimizerConfig, WrongTypeNamesTheKey) {
  const auto msg = config_error("name: sgd\nlr: 0.1\nnesterov: maybe\n");
  expect_has(msg, "optimizer.nesterov");
}

}  // namespace
}  // namespace ada::optim::testing
