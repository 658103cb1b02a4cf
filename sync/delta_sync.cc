#include "sync/delta_sync.h"

#include <cmath>
#include <map>

#include "base/log.h"
#include "base/stopwatch.h"
#include "base/timeline.h"
#include "core/ops.h"
#include "optim/clip.h"
#include "sync/model_average.h"
#include "sync/step_guard.h"

namespace ada::sync {
namespace {

StrategyMaker read_periodic(const SyncRequest& r, DeltaSyncOptions d) {
  check_averaging_sync(r, d.name, {"average", "adasum"},
                       "combines the ranks' model deltas (a sum of deltas moves the model world "
                       "x the mean)");
  const Config& s = r.section;
  ADA_CHECK_ARG(s.has("period"), ConfigError)
      << s.where("period") << ": sync " << d.name
      << " needs period (H, the local steps between reductions)";
  d.period = s.get_in<int64_t>("period", Range::at_least(1));
  if (d.outer) {
    d.outer_lr = s.get_in_or<double>("outer_lr", d.outer_lr, Range::above(0), "DiLoCo's: 0.7");
    d.outer_momentum = s.get_in_or<double>("outer_momentum", d.outer_momentum,
                                           Range::half_open(0, 1), "DiLoCo's: 0.9");
    d.nesterov = s.get_or<bool>("nesterov", d.nesterov);
  }
  return [d](const StrategyContext& c, const StrategyOptions& o) {
    return std::make_unique<DeltaSync>(c, o, d);
  };
}

}  // namespace

StrategyMaker read_local_sgd(const SyncRequest& request) {
  DeltaSyncOptions d;
  d.name = "local_sgd";
  return read_periodic(request, d);
}

StrategyMaker read_diloco(const SyncRequest& request) {
  DeltaSyncOptions d;
  d.name = "diloco";
  d.outer = true;
  return read_periodic(request, d);
}

DeltaSync::DeltaSync(const StrategyContext& context, const StrategyOptions& options,
                     const DeltaSyncOptions& delta)
    : ctx_(context),
      options_(options),
      delta_(delta),
      bucketer_(variables_of(context.params), context.world, context.reducer, options.buckets),
      overlapped_(delta.period == 1 && options.clip_grad_norm <= 0 && !options.skip_nonfinite &&
                  !options.loss_scale) {
  ADA_CHECK(delta.period >= 1) << "DeltaSync: period " << delta.period;
  for (size_t i = 0; i < ctx_.params.size(); ++i) {
    anchor_.push_back(ctx_.params[i].var.value().clone());  // the (broadcast) starting point
    slots_.push_back(bucketer_.slot(i));
    const Tensor& w = ctx_.params[i].var.value();
    if (delta.outer) momentum_.push_back(Tensor::zeros(w.shape(), DType::f32, w.device()));
  }
  stepped_.assign(ctx_.params.size(), false);
  if (delta.period == 1 && !overlapped_)
    log_info(
        "model-delta sync runs after backward, not overlapped with it: {} needs every gradient "
        "before the first local step",
        options.clip_grad_norm > 0 ? "train.clip_grad_norm"
        : options.skip_nonfinite   ? "train.on_nonfinite: skip"
                                   : "train.loss_scale (every rank agrees on an overflow first)");
  description_ = delta_.name + "/" + ctx_.reducer.name();
  if (delta_.period > 1) description_ += " every " + std::to_string(delta_.period) + " steps";
  if (delta_.outer)
    description_ += ", outer " + std::string(delta_.nesterov ? "Nesterov" : "momentum") + " lr " +
                    std::to_string(delta_.outer_lr) + " momentum " +
                    std::to_string(delta_.outer_momentum);
  if (delta_.period == 1) description_ += overlapped_ ? " (overlapped)" : " (after backward)";
  overlaps_backward_ = overlapped_;
  local_optimizer_state_ = true;
}

void DeltaSync::begin_step(int64_t step, float lr) {
  step_ = step;
  lr_ = lr;
  bucketer_.begin_step();
  std::fill(stepped_.begin(), stepped_.end(), false);
}

void DeltaSync::local_step(size_t i) {
  Param& p = ctx_.params[i];
  Tensor& w = p.var.mutable_value();
  anchor_[i].copy_from(w);
  ctx_.optimizer.step(p, lr_);
  ops::sub_out(w, anchor_[i], slots_[i]);  // may overwrite the gradient: it is used up
  stepped_[i] = true;
  bucketer_.mark_ready(i);
}

void DeltaSync::on_grad_ready(Variable& param) {
  // The step reads the gradient before the delta overwrites the slot (its memory).
  local_step(bucketer_.index_of(param));
}

void DeltaSync::apply_reduced() {
  TraceSpan span("apply reduced delta", "compute");
  for (size_t i = 0; i < ctx_.params.size(); ++i) {
    Tensor& w = ctx_.params[i].var.mutable_value();
    if (!delta_.outer) {
      ops::add_out(anchor_[i], slots_[i], w);  // w = anchor + reduced delta
    } else {
      // Outer gradient g = anchor - combined model = -(reduced delta); SGD with momentum on it:
      // m = mu m + g; anchor -= lr (g + mu m) (Nesterov) or lr m.
      Tensor& m = momentum_[i];
      ops::axpby_(-1.f, slots_[i], static_cast<float>(delta_.outer_momentum), m);
      const float lr = static_cast<float>(delta_.outer_lr),
                  mu = static_cast<float>(delta_.outer_momentum);
      if (delta_.nesterov) {
        ops::axpby_(lr, slots_[i], 1.f, anchor_[i]);  // anchor -= lr g  (g = -slot)
        ops::axpby_(-lr * mu, m, 1.f, anchor_[i]);    // anchor -= lr mu m
      } else {
        ops::axpby_(-lr, m, 1.f, anchor_[i]);
      }
      w.copy_from(anchor_[i]);
    }
  }
  if (delta_.period > 1 && !delta_.outer)
    for (size_t i = 0; i < ctx_.params.size(); ++i)
      anchor_[i].copy_from(ctx_.params[i].var.value());
}

double DeltaSync::synchronise() {
  for (size_t i = 0; i < ctx_.params.size(); ++i) {
    ops::sub_out(ctx_.params[i].var.value(), anchor_[i], slots_[i]);
    bucketer_.mark_ready(i);  // buckets go out as they fill
  }
  const Stopwatch wait;
  {
    TraceSpan span("wait for reductions", "comm");
    bucketer_.wait();
  }
  return wait.seconds();
}

StepResult DeltaSync::end_step(double local_loss) {
  StepResult r;
  const Stopwatch step;
  if (overlapped_) {
    {
      TraceSpan span("optimizer (unreported parameters)", "compute");
      for (size_t i = 0; i < stepped_.size(); ++i)
        if (!stepped_[i]) local_step(i);  // unused by the last backward: stepped with what it has
    }
    Stopwatch comm;
    {
      TraceSpan span("wait for reductions", "comm");
      bucketer_.wait();
    }
    r.exposed_seconds = comm.seconds();
    // The reduced deltas are identical on every rank: a NaN anywhere shows everywhere.
    comm.restart();
    const Agreement a = agree(ctx_.world, local_loss, any_nonfinite(slots_));
    r.comm_seconds = r.exposed_seconds + comm.seconds();
    if (a.nonfinite) on_nonfinite_step(step_, local_loss, /*skip=*/false, ctx_.params);  // throws
    apply_reduced();
    synced_ = true;
    return r;
  }
  const bool sync_now = (step_ + 1) % delta_.period == 0;
  // Every step of period 1 agrees across ranks (the check comes before any local step, so a
  // skipped step changes nothing anywhere). Between the synchronisations of longer periods each
  // rank decides alone: a world collective every step would be the barrier local SGD avoids.
  // With loss scaling, so does each rank's scale between synchronisations.
  bool bad = !std::isfinite(local_loss) || any_nonfinite_grad(ctx_.params);
  if (delta_.period == 1) bad = agree(ctx_.world, local_loss, bad).nonfinite;
  const double agree_s = step.seconds();
  if (!settle_step(step_, local_loss, bad, options_, ctx_.params)) {  // throws unless skipping
    r.applied = false;
  } else {
    TraceSpan span("optimizer", "compute");
    if (options_.clip_grad_norm > 0) optim::clip_grad_norm(ctx_.params, options_.clip_grad_norm);
    if (delta_.period == 1)
      for (size_t i = 0; i < ctx_.params.size(); ++i)
        anchor_[i].copy_from(ctx_.params[i].var.value());
    ctx_.optimizer.step(ctx_.params, lr_);
  }
  if (!sync_now) {
    synced_ = false;
    r.comm_seconds = agree_s;
    return r;
  }
  if (delta_.period == 1 && bad) {  // skipped everywhere: nothing to reduce
    r.comm_seconds = agree_s;
    return r;
  }
  r.exposed_seconds = synchronise();
  r.comm_seconds = agree_s + r.exposed_seconds;
  if (any_nonfinite(slots_))
    on_nonfinite_step(step_, local_loss, /*skip=*/false, ctx_.params);  // same on every rank
  apply_reduced();
  synced_ = true;
  return r;
}

NamedTensors DeltaSync::state() const {
  NamedTensors s;
  if (delta_.period == 1 && !delta_.outer) return s;  // nothing outlives a step
  s.tensors.emplace_back("synced", Tensor::from_vector<int64_t>({synced_ ? 1 : 0}, {}));
  for (size_t i = 0; i < ctx_.params.size(); ++i) {
    s.tensors.emplace_back("anchor." + ctx_.params[i].name, anchor_[i]);
    if (delta_.outer) s.tensors.emplace_back("outer_momentum." + ctx_.params[i].name, momentum_[i]);
  }
  return s;
}

void DeltaSync::load_state(const NamedTensors& state) {
  std::map<std::string, Tensor> by_name(state.tensors.begin(), state.tensors.end());
  for (size_t i = 0; i < ctx_.params.size(); ++i) {
    const std::string& name = ctx_.params[i].name;
    auto a = by_name.find("anchor." + name);
    if (a != by_name.end())
      anchor_[i].copy_from(a->second);
    else
      anchor_[i].copy_from(ctx_.params[i].var.value());
    if (!delta_.outer) continue;
    auto m = by_name.find("outer_momentum." + name);
    ADA_CHECK_ARG(m != by_name.end() || state.tensors.empty(), IoError)
        << state.source << ": no outer momentum for '" << name << "' (written by another sync?)";
    if (m != by_name.end()) momentum_[i].copy_from(m->second);
  }
  auto f = by_name.find("synced");
  synced_ = f == by_name.end() || f->second.to_vector<int64_t>()[0] != 0;
}

void DeltaSync::with_average_model(const std::function<void()>& fn) {
  if (synced_) return fn();
  with_world_average(ctx_.params, ctx_.world, fn);
}

void DeltaSync::finish() {
  if (synced_) return;
  log_info("end of training mid-period: a last {} synchronisation makes the replicas agree",
           delta_.name);
  bucketer_.begin_step();
  synchronise();
  apply_reduced();
  synced_ = true;
}

}  // namespace ada::sync
