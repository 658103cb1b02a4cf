// Helpers of the model-averaging strategies: a flat copy of all parameters (one collective per
// average instead of one per tensor), and running code on the world-average model.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/parameter.h"

namespace ada::sync {

// Every parameter's value back to back, in `params` order, on `device` (default: the
// parameters' own; WAGMA's agent keeps a host copy of a GPU model, staged every step).
class FlatModel {
 public:
  explicit FlatModel(const std::vector<Param>& params, std::optional<Device> device = {});
  Tensor& buffer() { return buffer_; }
  void pack(const std::vector<Param>& params);    // parameters -> buffer
  void unpack(std::vector<Param>& params) const;  // buffer -> parameters

 private:
  Tensor buffer_;
};

// Sets every rank's parameters to their world average (collective).
void average_parameters(std::vector<Param>& params, comm::Communicator& world);
// Runs `fn` on the world-average model, then gives each rank its own parameters back.
void with_world_average(std::vector<Param>& params, comm::Communicator& world,
                        const std::function<void()>& fn);

}  // namespace ada::sync
