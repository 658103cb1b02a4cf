// Define-by-run reverse-mode autodiff over the coarse ops of core/ops.h.
// A Variable holds a value Tensor; when grad mode is on and an input requires grad, each op in
// core/functional.h records a Node whose backward closure owns exactly what it saved. backward()
// walks the recorded graph once in reverse topological order, accumulates leaf gradients into
// Variable::grad() (so successive backward calls accumulate), frees each node's saved tensors as
// soon as it has run, and calls the grad-ready hook for each leaf the moment its gradient is
// final. The graph is consumed: a second backward through the same nodes is an error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ada {

struct Node;

struct VarImpl {
  Tensor value;
  Tensor grad;              // leaves only; undefined until a gradient arrives
  bool grad_stale = false;  // zero_grad() ran since: grad's contents stand for zeros
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::string name;               // optional, for messages (parameters carry their dotted name)
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = {});
  static Variable from_impl(std::shared_ptr<VarImpl> impl) {
    Variable v;
    v.impl_ = std::move(impl);
    return v;
  }

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& mutable_value() { return impl_->value; }
  const Shape& shape() const { return impl_->value.shape(); }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  bool is_leaf() const { return !impl_->grad_fn; }
  const std::string& name() const { return impl_->name; }
  // The gradient (undefined until one arrives). After zero_grad() it reads as zeros.
  Tensor& grad() const;
  // Keeps the buffer (no allocation per step) but does not fill it: the next gradient that
  // backward delivers is copied over it instead of added (one pass instead of a fill and an
  // add; one kernel instead of two on a GPU), and grad() fills it with zeros first if it is
  // read before one arrives (a parameter the loss did not use).
  void zero_grad();
  VarImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<VarImpl>& impl_ptr() const { return impl_; }
  std::shared_ptr<Node> grad_fn() const { return impl_->grad_fn; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

// Backward closure: receives dL/d(output) and returns one gradient per input (an undefined
// Tensor where an input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// An input of a recorded op. A leaf input (a parameter, a batch) is held by its VarImpl, where
// its gradient accumulates; an intermediate input only by the node that produced it, so its
// value is freed as soon as no Variable and no backward closure holds it (an op's output that
// its consumer did not save, e.g. batch-norm's output under ReLU, does not live until backward).
struct Edge {
  std::shared_ptr<VarImpl> leaf;   // leaves only
  std::shared_ptr<Node> producer;  // intermediates only
  Shape shape;                     // of the input, to check the gradient an op returns
};

struct Node {
  std::string op;  // op name, for error messages
  std::vector<Edge> inputs;
  BackwardFn backward;
  Shape output_shape;
  void release() {
    backward = nullptr;
    inputs.clear();
  }
};

// Called with a leaf once its gradient for this backward pass is final.
using GradReadyHook = std::function<void(Variable& leaf)>;

// Gradient of `root` (a scalar, or with an explicit seed gradient of its shape).
void backward(const Variable& root, const Tensor& seed = {}, const GradReadyHook& on_ready = {});

// Records `out` as the result of an op on `inputs` when grad mode is on and some input requires
// grad; otherwise returns a plain Variable. Used by core/functional.h and by custom ops.
Variable make_result(Tensor out, const char* op, std::vector<Variable> inputs, BackwardFn fn);

bool grad_enabled();
// Disables recording in its scope (per thread); restores the previous mode on exit.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace ada
