// Helpers shared by the optimizer tests: parameters from values, optimizers and schedules built
// through the registries from YAML (as the trainer builds them), exception text, bit equality.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/config.h"
#include "core/parameter.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "util/error_of.h"

namespace ada::optim::testing {

inline Param make_param(const std::string& name, const std::vector<float>& values,
                        const Shape& shape, bool weight_decay = true) {
  Param p;
  p.name = name;
  p.var = Variable(Tensor::from_vector(values, shape), true, name);
  p.weight_decay = weight_decay;
  return p;
}

inline void set_grad(const Param& p, const std::vector<float>& g) {
  p.var.grad() = Tensor::from_vector(g, p.var.shape());
}

inline std::vector<float> values(const Param& p) {
  return p.var.value().to_vector<float>();
}

// Indents `body` under `section:` so that messages name e.g. "optimizer.lr".
inline std::string nest(const std::string& section, const std::string& body) {
  std::ostringstream os;
  os << section << ":\n";
  std::istringstream is(body);
  for (std::string line; std::getline(is, line);) os << "  " << line << "\n";
  return os.str();
}

// Builds the optimizer of YAML `body` (the keys of the `optimizer:` section) and checks that
// every key was read (Config::finish).
inline std::unique_ptr<Optimizer> build_optimizer(const std::string& body) {
  OptimizerRegistry reg("optimizer");
  register_builtin_optimizers(reg);
  Config c = Config::parse(nest("optimizer", body), "test.yaml");
  auto o = make_optimizer(reg, c.child("optimizer"));
  c.finish();
  return o;
}

inline std::unique_ptr<Schedule> build_schedule(const std::string& body, double base_lr) {
  ScheduleRegistry reg("schedule");
  register_builtin_schedules(reg);
  Config c = Config::parse(nest("schedule", body), "test.yaml");
  auto s = make_schedule(reg, c.child("schedule"), base_lr);
  c.finish();
  return s;
}

using ada::testing::error_of;

inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace ada::optim::testing
