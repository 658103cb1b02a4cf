#include "core/autograd.h"

#include <unordered_map>

#include "core/ops.h"

namespace ada {
namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() {
  return t_grad_enabled;
}
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = prev_;
}

Variable::Variable(Tensor value, bool requires_grad, std::string name)
    : impl_(std::make_shared<VarImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

Tensor& Variable::grad() const {
  if (impl_->grad_stale) {
    ops::fill_(impl_->grad, 0.f);
    impl_->grad_stale = false;
  }
  return impl_->grad;
}

void Variable::zero_grad() {
  if (impl_->grad.defined()) impl_->grad_stale = true;
}

Variable make_result(Tensor out, const char* op, std::vector<Variable> inputs, BackwardFn fn) {
  bool needs = false;
  if (t_grad_enabled)
    for (const auto& v : inputs) needs = needs || v.requires_grad();
  Variable result(std::move(out));
  if (!needs) return result;
  auto node = std::make_shared<Node>();
  node->op = op;
  node->backward = std::move(fn);
  node->output_shape = result.shape();
  node->inputs.reserve(inputs.size());
  for (auto& v : inputs) {
    Edge e;
    if (v.defined()) {
      if (v.is_leaf())
        e.leaf = v.impl_ptr();
      else
        e.producer = v.grad_fn();
      e.shape = v.shape();
    }
    node->inputs.push_back(std::move(e));
  }
  result.impl()->requires_grad = true;
  result.impl()->grad_fn = std::move(node);
  return result;
}

namespace {
// Adds g into acc without mutating tensors that may be shared: the first contribution is kept
// as is, later ones produce a fresh sum.
void accumulate_out_of_place(Tensor& acc, const Tensor& g) {
  if (!acc.defined())
    acc = g;
  else
    acc = ops::add(acc, g);
}
}  // namespace

void backward(const Variable& root, const Tensor& seed, const GradReadyHook& on_ready) {
  ADA_CHECK_ARG(root.defined(), Error) << "backward() on an undefined Variable";
  ADA_CHECK_ARG(root.requires_grad(), Error)
      << "backward(): the output does not require grad (no input requires grad, or it was "
         "computed under NoGradGuard)";
  Tensor root_grad = seed;
  if (!root_grad.defined()) {
    ADA_CHECK_ARG(root.value().numel() == 1, ShapeError)
        << "backward() without a seed gradient needs a scalar output, got " << root.value().str();
    root_grad = Tensor::ones(root.shape(), DType::f32, root.value().device());
  } else {
    check_same_shape(root.value(), root_grad, "backward (seed gradient)");
  }

  if (root.is_leaf()) {  // d root / d root
    Variable leaf = root;
    accumulate_out_of_place(leaf.grad(), root_grad.clone());
    if (on_ready) on_ready(leaf);
    return;
  }

  // Post-order DFS over nodes; children visited in input order, so the order is deterministic.
  // `order` owns the nodes: releasing a consumer drops its inputs, which may hold the last
  // reference to a producer that has yet to run.
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_map<Node*, int> state;  // 1 = on stack, 2 = done
  std::unordered_map<VarImpl*, int> leaf_uses;
  std::vector<VarImpl*> leaves_in_order;
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{root.grad_fn(), 0}};
  state[root.grad_fn().get()] = 1;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    ADA_CHECK_ARG(node->backward != nullptr, Error)
        << "backward(): op '" << node->op
        << "' was already differentiated and its saved tensors freed; run the forward again";
    if (next < node->inputs.size()) {
      const Edge& e = node->inputs[next++];
      if (Node* child = e.producer.get()) {
        if (!state.count(child)) {
          state[child] = 1;
          stack.push_back({e.producer, 0});
        }
      } else if (e.leaf && e.leaf->requires_grad && leaf_uses[e.leaf.get()]++ == 0) {
        leaves_in_order.push_back(e.leaf.get());
      }
      continue;
    }
    state[node.get()] = 2;
    order.push_back(std::move(node));
    stack.pop_back();
  }

  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = root_grad;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = it->get();
    Tensor gout = std::move(pending[node]);
    pending.erase(node);
    std::vector<Edge> inputs = std::move(node->inputs);
    std::vector<Tensor> gins;
    if (gout.defined()) {
      gins = node->backward(gout);
      ADA_CHECK(gins.size() == inputs.size()) << "op '" << node->op << "' returned " << gins.size()
                                              << " gradients for " << inputs.size() << " inputs";
    } else {
      gins.resize(inputs.size());  // output unused by the loss: contributes nothing
    }
    node->release();  // saved activations go now, not at the end of backward
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Edge& e = inputs[i];
      VarImpl* in = e.leaf.get();
      if (!e.producer && !(in && in->requires_grad)) continue;
      const Tensor& g = gins[i];
      if (g.defined()) {
        ADA_CHECK(g.shape() == e.shape) << "op '" << node->op << "' returned gradient " << g.str()
                                        << " for input of shape " << shape_str(e.shape);
      }
      if (Node* child = e.producer.get()) {
        if (g.defined()) accumulate_out_of_place(pending[child], g);
        continue;
      }
      if (g.defined()) {
        // A leaf's gradient has its value's dtype (a parameter's f32 from 16-bit activations).
        Tensor cast;
        if (g.dtype() != in->value.dtype()) cast = ops::to_dtype(g, in->value.dtype());
        const Tensor& gl = cast.defined() ? cast : g;
        if (!in->grad.defined()) {  // take the tensor if nobody else holds it, else copy
          in->grad = gl.storage_use_count() == 1 ? gl : gl.clone();
        } else if (in->grad_stale) {  // zeroed by zero_grad(): the first gradient is copied in
          in->grad.copy_from(gl);
          in->grad_stale = false;
        } else {
          ops::add_(in->grad, gl);
        }
      }
      if (--leaf_uses[in] == 0 && on_ready) {
        Variable leaf = Variable::from_impl(e.leaf);
        on_ready(leaf);
      }
    }
  }
}

}  // namespace ada
