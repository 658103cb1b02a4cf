// Module: the building block of models. A module owns named parameters (Variables that require
// grad, with per-parameter flags), named buffers (non-trained state such as batch-norm running
// statistics) and child modules. parameters() walks them in a stable order — own entries in
// registration order, then children in registration order — with dotted names
// ("layer1.0.conv2.weight") that are also set on the Variables, so optimizer state and
// checkpoints are keyed by name. Forward signatures belong to each layer; models implement
// nn::Model (model.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/parameter.h"
#include "core/serialize.h"

namespace ada::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // All parameters of this module and its descendants, in the stable order described above.
  std::vector<Param> parameters() const;
  // All buffers, same order and naming, as (name, tensor) with the tensor shared (not copied).
  std::vector<std::pair<std::string, Tensor>> buffers() const;
  int64_t parameter_count() const;

  void train(bool on = true);
  bool training() const { return training_; }
  // Zeroes every parameter's gradient in place (keeps the buffers; no allocation).
  void zero_grad();
  // Moves every parameter (value and gradient) and buffer to `device`. Params and buffers keep
  // their identity (the same Variables), so optimizers and hooks made afterwards see the moved
  // tensors; call it before making them.
  void to(Device device);

  // Parameters then buffers, by name, sharing storage (save with save_safetensors).
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Copies values from `source` by name. Every parameter and buffer must be present with the
  // same shape and dtype; extra entries are errors too, unless `allow_extra`. IoError names
  // the file (source.source) and the entry.
  void load_state(const NamedTensors& source, bool allow_extra = false);
  // The same for the entries `source` has (a model with a new head from a checkpoint without it):
  // returns the names of the parameters and buffers it left as they were. With `unused`, the
  // entries that match nothing (heads the model does not have) are listed there, not refused.
  std::vector<std::string> load_present(const NamedTensors& source,
                                        std::vector<std::string>* unused = nullptr);

  // One line per module: its dotted name, type and own parameter count; then the total.
  std::string describe() const;
  virtual std::string type_name() const = 0;

 protected:
  Variable& register_parameter(const std::string& name, Tensor init, bool weight_decay = true);
  // A buffer is held as a Variable that never requires grad, so that to() can move it while the
  // layer keeps its handle.
  Variable register_buffer(const std::string& name, Tensor init);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    check_new_name(name);
    children_.emplace_back(name, m);
    return m;
  }

 private:
  // load_state and load_present: entries copied by name; the names absent from `source`.
  std::vector<std::string> copy_state(const NamedTensors& source, bool allow_extra,
                                      bool require_all, std::vector<std::string>* unused);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, std::vector<Param>* params,
               std::vector<std::pair<std::string, Tensor>>* buffers) const;
  void describe_into(const std::string& prefix, std::string& out) const;

  struct OwnParam {
    std::string name;
    Variable var;
    bool weight_decay;
  };
  std::vector<OwnParam> params_;
  std::vector<std::pair<std::string, Variable>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace ada::nn
