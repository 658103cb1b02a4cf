#include "sync/wagma_sync.h"

#include <cmath>

#include "base/log.h"
#include "base/stopwatch.h"
#include "base/timeline.h"
#include "optim/clip.h"
#include "sync/step_guard.h"

namespace ada::sync {

StrategyMaker read_wagma(const SyncRequest& r) {
  check_averaging_sync(r, "wagma", {"average"}, "averages models within groups");
  const Config& s = r.section;
  WagmaOptions w;
  w.group_size = s.get_or<int>("group_size", default_wagma_group_size(r.world_size));
  w.global_every = s.get_in_or<int64_t>("global_every", w.global_every, Range::at_least(1),
                                        "tau, the steps between world averages");
  w.wait_avoiding = s.get_or<bool>("wait_avoiding", w.wait_avoiding);
  ADA_CHECK_ARG(
      w.group_size >= 1 && (w.group_size & (w.group_size - 1)) == 0 && w.group_size <= r.world_size,
      ConfigError)
      << s.where("group_size") << ": must be a power of two no larger than the " << r.world_size
      << " ranks, got " << w.group_size << "; leave it out for the default "
      << default_wagma_group_size(r.world_size);
  try {
    WagmaSchedule check(r.world_size, w.group_size, w.global_every);
  } catch (const ConfigError& e) {
    ADA_THROW(ConfigError) << s.where() << ": " << e.what();
  }
  return [w](const StrategyContext& c, const StrategyOptions& o) {
    return std::make_unique<WagmaSync>(c, o, w);
  };
}

int default_wagma_group_size(int ranks) {
  int k = 0;
  while ((1 << k) < ranks) ++k;
  return 1 << ((k + 1) / 2);
}

WagmaSync::WagmaSync(const StrategyContext& context, const StrategyOptions& options,
                     const WagmaOptions& wagma)
    : ctx_(context), options_(options), wagma_(wagma), flat_(context.params, Device::cpu()) {
  if (wagma_.group_size == 0) wagma_.group_size = default_wagma_group_size(ctx_.world.size());
  WagmaSchedule schedule(ctx_.world.size(), wagma_.group_size, wagma_.global_every);
  agent_ = std::make_unique<WagmaAgent>(ctx_.world, schedule, flat_.buffer(), wagma_.wait_avoiding);
  description_ = "wagma (group " + std::to_string(wagma_.group_size) + ", global every " +
                 std::to_string(wagma_.global_every) +
                 (wagma_.wait_avoiding ? ", wait-avoiding)" : ", synchronous)");
  local_optimizer_state_ = true;
}

void WagmaSync::begin_step(int64_t step, float lr) {
  if (!started_ && step > 0) {  // a resumed run: the averages continue at this iteration
    flat_.pack(ctx_.params);
    agent_->start_at(step, flat_.buffer());
  }
  started_ = true;
  step_ = step;
  lr_ = lr;
}

StepResult WagmaSync::end_step(double local_loss) {
  StepResult r;
  // Each rank decides alone (a world collective every step is the barrier WAGMA avoids).
  // With dynamic loss scaling each rank's scale moves on its own overflows.
  const bool bad = !std::isfinite(local_loss) || any_nonfinite_grad(ctx_.params);
  if (!settle_step(step_, local_loss, bad, options_, ctx_.params)) {  // throws unless skipping
    r.applied = false;
  } else {
    TraceSpan span("optimizer", "compute");
    if (options_.clip_grad_norm > 0) optim::clip_grad_norm(ctx_.params, options_.clip_grad_norm);
    ctx_.optimizer.step(ctx_.params, lr_);
  }
  // Even a skipped step takes part in the averages: the others count on this rank's model.
  const Stopwatch comm;
  flat_.pack(ctx_.params);
  agent_->step(step_, flat_.buffer());
  flat_.unpack(ctx_.params);
  r.comm_seconds = r.exposed_seconds = comm.seconds();
  synced_ = agent_->schedule().is_global(step_);
  return r;
}

NamedTensors WagmaSync::state() const {
  NamedTensors s;
  s.tensors.emplace_back("synced", Tensor::from_vector<int64_t>({synced_ ? 1 : 0}, {}));
  // The summary's counters go on from here in a resumed run.
  s.tensors.emplace_back("group_steps", Tensor::from_vector<int64_t>({agent_->group_steps()}, {}));
  s.tensors.emplace_back("late_group_steps",
                         Tensor::from_vector<int64_t>({agent_->late_steps()}, {}));
  return s;
}

void WagmaSync::load_state(const NamedTensors& state) {
  int64_t group_steps = 0, late = 0;  // (0 from checkpoints written before they were kept)
  for (const auto& [name, t] : state.tensors) {
    if (name == "synced") synced_ = t.to_vector<int64_t>()[0] != 0;
    if (name == "group_steps") group_steps = t.to_vector<int64_t>()[0];
    if (name == "late_group_steps") late = t.to_vector<int64_t>()[0];
  }
  agent_->restore_counters(late, group_steps);
}

void WagmaSync::with_average_model(const std::function<void()>& fn) {
  if (synced_) return fn();
  with_world_average(ctx_.params, ctx_.world, fn);
}

void WagmaSync::finish() {
  if (finished_) return;
  finished_ = true;
  agent_->finish();
  log_info("WAGMA: this rank contributed a stale model in {} of {} group averages",
           agent_->late_steps(), agent_->group_steps());
  if (synced_) return;
  log_info(
      "end of training between global averages: a last world average makes the replicas agree");
  average_parameters(ctx_.params, ctx_.world);
  synced_ = true;
}

}  // namespace ada::sync
