#include "sync/model_average.h"

#include <cstring>

#include "core/ops.h"

namespace ada::sync {
namespace {
int64_t total_numel(const std::vector<Param>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.var.value().numel();
  return n;
}
}  // namespace

FlatModel::FlatModel(const std::vector<Param>& params)
    : buffer_(Tensor::empty({total_numel(params)})) {
  pack(params);
}

void FlatModel::pack(const std::vector<Param>& params) {
  float* dst = buffer_.data<float>();
  for (const auto& p : params) {
    const Tensor& w = p.var.value();
    std::memcpy(dst, w.data<float>(), sizeof(float) * w.numel());
    dst += w.numel();
  }
}

void FlatModel::unpack(std::vector<Param>& params) const {
  const float* src = buffer_.data<float>();
  for (auto& p : params) {
    Tensor& w = p.var.mutable_value();
    std::memcpy(w.data<float>(), src, sizeof(float) * w.numel());
    src += w.numel();
  }
}

void average_parameters(std::vector<Param>& params, comm::Communicator& world) {
  FlatModel flat(params);
  world.allreduce(flat.buffer());
  ops::scale_(flat.buffer(), 1.f / static_cast<float>(world.size()));
  flat.unpack(params);
}

void with_world_average(std::vector<Param>& params, comm::Communicator& world,
                        const std::function<void()>& fn) {
  const FlatModel own(params);
  average_parameters(params, world);
  fn();
  own.unpack(params);
}

}  // namespace ada::sync
