// Loss scaling for mixed precision (train.loss_scale): backward starts from loss x S instead of
// the loss, so small gradients survive fp16's range inside the matrix products; the strategy
// checks the gradients for NaN/Inf and divides them by S before the optimizer sees them
// (sync/step_guard.h, settle_step).
//   static   S fixed; an overflow is a non-finite step like any other (train.on_nonfinite);
//   dynamic  PyTorch GradScaler's rule: an overflow skips the step on every rank that agrees on
//            it and halves S; after `growth_interval` steps in a row without one, S doubles.
//            S never goes below 1: an overflow at S = 1 is a genuine non-finite step.
// With power-of-two scales (every dynamic scale from a power-of-two start) the scaling is exact
// in binary floating point, barring overflow and subnormals: a run with loss scaling takes the
// same steps, bit for bit, as one without (tested) — sum, average and Adasum are all
// homogeneous in their inputs.
#pragma once

#include <cstdint>
#include <string>

#include "core/serialize.h"

namespace ada::optim {

constexpr double kMaxLossScale =
    18446744073709551616.0;  // 2^64: backward's seed stays a finite float

struct LossScaleOptions {
  bool dynamic = true;
  double init = 65536.0;           // 2^16, GradScaler's default
  int64_t growth_interval = 2000;  // good steps in a row before S doubles (dynamic)
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleOptions& options);

  // The current scale S: backward's seed.
  double scale() const { return scale_; }
  bool dynamic() const { return options_.dynamic; }

  enum class Outcome {
    apply,     // finite: unscale by the scale() read before update() and step
    overflow,  // dynamic overflow: skip the step; the scale was halved
    nonfinite  // static scale, or S already 1: a non-finite step (train.on_nonfinite decides)
  };
  // Records one step's outcome (whether its loss or gradients held NaN/Inf) and moves the scale.
  Outcome update(bool nonfinite);

  int64_t overflows() const { return overflows_; }  // steps skipped as overflows so far
  std::string describe() const;  // "dynamic from 65536, x2 every 2000 good steps", "static 1024"

  // scale, good-step count and overflow count, for checkpoints (state() under any prefix).
  NamedTensors state() const;
  // Restores state(); an empty set (a checkpoint written without loss scaling) keeps the start.
  void load_state(const NamedTensors& state);

 private:
  LossScaleOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t overflows_ = 0;
};

}  // namespace ada::optim
