// Parameter initialisers, all drawn from an ada::Generator so a seed fixes every weight.
#pragma once

#include <cmath>

#include "core/random.h"
#include "core/tensor.h"

namespace ada::nn::init {

// While one exists (per thread), initialisers return uninitialised tensors of the right shape:
// building a paper-scale model only to describe it or count its parameters then costs no
// random-number generation (e.g. BERT-Large's 336M weights).
class ShapesOnly {
 public:
  ShapesOnly();
  ~ShapesOnly();
  static bool active();

 private:
  bool prev_;
};

// U(-bound, bound).
Tensor uniform(const Shape& s, Generator& g, float bound);
// N(0, std^2).
Tensor normal(const Shape& s, Generator& g, float std);
// He/Kaiming normal for ReLU nets: std = sqrt(2 / fan).
Tensor kaiming_normal(const Shape& s, Generator& g, int64_t fan);
// N(0, std^2) truncated to [-2 std, 2 std] (BERT's initialiser): values outside are redrawn
// from later counters of the same generator, so the result depends only on its state.
Tensor truncated_normal(const Shape& s, Generator& g, float std);

}  // namespace ada::nn::init
