// Dropout (inverted): identity in eval mode or with p = 0. The mask comes from the generator
// passed to forward (the model owns it and checkpoints its state).
#pragma once

#include "core/functional.h"
#include "nn/module.h"

namespace ada::nn {

class Dropout : public Module {
 public:
  explicit Dropout(float p) : p_(p) {
    ADA_CHECK_ARG(p >= 0.f && p < 1.f, ConfigError)
        << "dropout probability must be in [0, 1), got " << p;
  }
  Variable forward(const Variable& x, Generator& gen) const {
    return fn::dropout(x, p_, training(), gen);
  }
  float p() const { return p_; }
  std::string type_name() const override { return "Dropout"; }

 private:
  float p_;
};

}  // namespace ada::nn
