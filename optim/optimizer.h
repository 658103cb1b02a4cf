// Optimizer: updates parameters from their gradients. The trainer calls step(params, lr) with the
// LR of each step (from a Schedule); per-parameter state (update count and buffers such as
// momentum or Adam's moments) is keyed by the parameter's NAME, saved by state() and restored by
// load_state(), so a resumed run continues bit for bit whatever the parameters' order.
// A new optimizer is one file (a subclass implementing update()) plus one registry line.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/registry.h"
#include "core/ops.h"
#include "core/parameter.h"
#include "core/serialize.h"

namespace ada::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update, at learning rate `lr`, of every parameter in `params` that has a gradient. A
  // parameter whose grad is undefined has no gradient this step: its value and its state (update
  // count included) stay as they are. Values change in place (a Param holds shared handles);
  // gradients are only read. Names must be unique within `params`.
  void step(const std::vector<Param>& params, float lr);
  // The same update for one parameter (strategies that step each parameter as soon as its
  // gradient is final, while backward goes on). Allocates nothing after its first call.
  void step(const Param& param, float lr);

  // The state as named tensors, sorted by parameter name: "<param>.step" (i64, 0-d: how many
  // updates that parameter has had) and "<param>.<buffer>" (f32, the parameter's shape; buffer
  // names are the optimizer's, e.g. "exp_avg"), with metadata {"optimizer": name()}. The tensors
  // share storage with the live state: save them (save_safetensors) before the next step; CUDA
  // tensors must be copied to the CPU first. A parameter that never had a gradient has no entry.
  NamedTensors state() const;
  // Replaces the whole state by `state`'s, matched by name against `params` (in any order); a
  // parameter of `params` absent from `state` starts fresh. Buffers are copied onto each
  // parameter's device. IoError (naming state.source) when `state` was saved by another kind of
  // optimizer, has entries for parameters that are not in `params`, lacks a buffer, or has a
  // buffer whose shape differs from its parameter's. On error the current state is kept.
  void load_state(const NamedTensors& state, const std::vector<Param>& params);

  const std::string& name() const { return name_; }  // registry name: "sgd", "adam", ...
  // The configured LR (`lr` in the config section). The LR of each step is step()'s argument;
  // the trainer derives its schedule's base LR from this one (see schedule.h, scaled_lr).
  double lr() const { return lr_; }

 protected:
  // `buffer_names`: the per-parameter f32 buffers the subclass keeps, each of the parameter's
  // shape, in the order update() finds them in Slot::buffers.
  Optimizer(std::string name, double lr, std::vector<std::string> buffer_names);

  struct Slot {
    int64_t step = 0;             // updates so far, this one included, when update() runs
    std::vector<Tensor> buffers;  // zero-filled before the parameter's first update
  };
  // Updates one parameter `p` whose gradient `grad` is defined (same shape as p's value).
  virtual void update(const Param& p, const Tensor& grad, Slot& slot, float lr) = 0;
  // One parameter of step(params, lr): slot->step already counts this update.
  struct Item {
    const Param* param;
    const Tensor* grad;  // defined
    Slot* slot;
  };
  // Updates every parameter of one step(params, lr). The default calls update() on each in turn;
  // the built-in optimizers override it with one multi-tensor op (core/ops.h: a fixed number of
  // GPU launches for the whole model, no host synchronisation) and implement update() as this
  // on one item, so that both steps give the same bits.
  virtual void update_all(const std::vector<Item>& items, float lr);
  // The Adam family's common entry for `it`: its value, gradient, first two buffers (m, v) and
  // the AdamArgs of its step (no coupled decay).
  static ops::MomentsEntry moments_entry(const Item& it, double beta1, double beta2, double eps);

 private:
  void check(const Param& p) const;  // the shape checks of step(), before anything changes
  // The slot of `p`, its buffers allocated and its step counted; nullptr when p has no gradient.
  Slot* begin_update(const Param& p);
  std::string name_;
  double lr_;
  std::vector<std::string> buffer_names_;
  std::map<std::string, Slot> slots_;  // by parameter name
  std::vector<Item> items_;            // step()'s list, kept to allocate nothing per step
};

// Builds an optimizer from its config section (e.g. `optimizer:`), reading every key it knows so
// that Config::finish() reports the rest as typos. ConfigError names the key for a bad value.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(const Config& section)>;
using OptimizerRegistry = Registry<OptimizerFactory>;

// Adds sgd (momentum, optional Nesterov), adam, adamw and lamb.
void register_builtin_optimizers(OptimizerRegistry& registry);
// The built-in optimizers, registered once.
const OptimizerRegistry& builtin_optimizers();
// The optimizer named by `section`'s `name` key, built from the section.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerRegistry& registry, const Config& section);

}  // namespace ada::optim
