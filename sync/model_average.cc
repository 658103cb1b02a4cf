#include "sync/model_average.h"

#include "core/ops.h"

namespace ada::sync {
namespace {
int64_t total_numel(const std::vector<Param>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.var.value().numel();
  return n;
}
}  // namespace

FlatModel::FlatModel(const std::vector<Param>& params, std::optional<Device> device)
    : buffer_(Tensor::empty({total_numel(params)}, DType::f32,
                            device           ? *device
                            : params.empty() ? Device::cpu()
                                             : params.front().var.value().device())) {
  pack(params);
}

void FlatModel::pack(const std::vector<Param>& params) {
  int64_t at = 0;
  for (const auto& p : params) {
    const Tensor& w = p.var.value();
    buffer_.narrow(at, w.numel()).copy_from(w);
    at += w.numel();
  }
}

void FlatModel::unpack(std::vector<Param>& params) const {
  int64_t at = 0;
  for (auto& p : params) {
    Tensor& w = p.var.mutable_value();
    w.copy_from(buffer_.narrow(at, w.numel()));
    at += w.numel();
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
