// Row-major Eigen views over raw float buffers, for the CPU kernels only (Eigen stays out of
// public headers).
#pragma once

#include <Eigen/Core>

namespace ada::cpu {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMat>;
using ConstMatMap = Eigen::Map<const RowMat>;
}  // namespace ada::cpu
