// Shape helpers of the reductions over axes, shared by the CPU and CUDA backends: which dims an
// axes list reduces (checked; negative axes count from the end) and the shapes of the result
// with and without the reduced dims.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ada::backend {

// Normalises axes (negative from the end), checks them, returns a per-dim "reduced" mask.
inline std::vector<bool> reduced_mask(const Shape& s, const std::vector<int>& axes, const char* op) {
  const int nd = static_cast<int>(s.size());
  std::vector<bool> red(nd, false);
  for (int a : axes) {
    int ax = a < 0 ? a + nd : a;
    ADA_CHECK_ARG(ax >= 0 && ax < nd, ShapeError)
        << op << ": axis " << a << " out of range for shape " << shape_str(s);
    ADA_CHECK_ARG(!red[ax], ShapeError) << op << ": axis " << a << " given twice";
    red[ax] = true;
  }
  return red;
}
// Shape of the reduction result with keepdim (reduced dims become 1).
inline Shape kept_shape(const Shape& s, const std::vector<bool>& red) {
  Shape k = s;
  for (size_t i = 0; i < s.size(); ++i)
    if (red[i]) k[i] = 1;
  return k;
}
// Shape of the reduction result without the reduced dims.
inline Shape squeezed_shape(const Shape& s, const std::vector<bool>& red) {
  Shape k;
  for (size_t i = 0; i < s.size(); ++i)
    if (!red[i]) k.push_back(s[i]);
  return k;
}

}  // namespace ada::backend
