#include "sync/wagma_agent.h"

#include <chrono>

#include "base/error.h"
#include "base/timeline.h"
#include "comm/comm_thread.h"
#include "core/ops.h"

namespace ada::sync {
namespace {
constexpr int kActivationTag = 7400;
}

WagmaAgent::WagmaAgent(comm::Communicator& world, WagmaSchedule schedule, const Tensor& initial,
                       bool wait_avoiding)
    : world_(world),
      schedule_(std::move(schedule)),
      wait_avoiding_(wait_avoiding),
      numel_(initial.numel()) {
  ADA_CHECK_ARG(schedule_.ranks() == world.size(), ConfigError)
      << "WAGMA schedule for " << schedule_.ranks() << " ranks on a world of " << world.size();
  const int r = world.rank();
  for (int set = 0; set < schedule_.set_count(); ++set)
    groups_.push_back(world.split(schedule_.color(r, set), r));
  snapshot_ = initial.reshape({numel_}).clone();
  if (!wait_avoiding_) return;
  signals_ = world.split(0, r);
  comm::CommThread::instance().set_idle_task([this] { progress(); });
}

WagmaAgent::~WagmaAgent() {
  if (wait_avoiding_) comm::CommThread::instance().set_idle_task({});
}

Tensor WagmaAgent::take_buffer() {
  if (pool_.empty()) return Tensor::empty({numel_});
  Tensor t = pool_.back();
  pool_.pop_back();
  return t;
}

void WagmaAgent::progress() {
  std::unique_lock<std::mutex> lock(mu_);
  if (finished_) return;
  lock.unlock();
  int source = 0;
  int64_t v = 0;
  while (signals_->poll_signal(kActivationTag, &source, &v)) {
    lock.lock();
    if (v >= next_) activated_.insert(v);
    lock.unlock();
  }
  for (;;) {
    lock.lock();
    const int64_t t = next_;
    const bool can = arrived_ >= t || (!schedule_.is_global(t) && activated_.count(t) > 0);
    lock.unlock();
    if (!can) return;
    execute(t);
  }
}

void WagmaAgent::execute(int64_t v) {
  const bool global = schedule_.is_global(v);
  if (!global && wait_avoiding_)  // activate the group (members that already started drop it)
    for (int m : schedule_.members(world_.rank(), v))
      if (m != world_.rank()) signals_->post_signal(m, kActivationTag, v);
  std::unique_lock<std::mutex> lock(mu_);
  Result res;
  res.sum = take_buffer();
  res.sum.copy_from(snapshot_);
  res.fresh = snapshot_version_ == v;
  lock.unlock();
  {
    TraceSpan span(global ? "WAGMA global average" : "WAGMA group average", "comm");
    if (global)
      world_.allreduce(res.sum);
    else
      groups_[schedule_.set_index(v)]->allreduce(res.sum);
  }
  lock.lock();
  results_[v] = std::move(res);
  activated_.erase(v);
  next_ = v + 1;
  lock.unlock();
  cv_.notify_all();
}

bool WagmaAgent::step(int64_t t, Tensor& model) {
  Tensor flat = model.reshape({numel_});
  {
    std::lock_guard<std::mutex> lock(mu_);
    ADA_CHECK(t == arrived_ + 1) << "WAGMA iteration " << t << " after " << arrived_;
    snapshot_.copy_from(flat);
    snapshot_version_ = t;
    arrived_ = t;
  }
  if (wait_avoiding_) {
    world_.run_async([this] { progress(); });  // run it now if the thread is free
    wait_executed(t);
  } else {
    execute(t);  // blocking collectives on this thread (through the communication thread)
  }
  std::unique_lock<std::mutex> lock(mu_);
  Result res = std::move(results_.at(t));
  results_.erase(t);
  lock.unlock();
  const bool global = schedule_.is_global(t);
  if (global) {
    ops::scale_(res.sum, 1.f / static_cast<float>(schedule_.ranks()));
    flat.copy_from(res.sum);
  } else if (res.fresh) {
    ops::scale_(res.sum, 1.f / static_cast<float>(schedule_.group_size()));
    flat.copy_from(res.sum);
  } else {  // late: our stale model is in the sum; mix the fresh one in
    ops::add_(res.sum, flat);
    ops::scale_(res.sum, 1.f / static_cast<float>(schedule_.group_size() + 1));
    flat.copy_from(res.sum);
  }
  if (!global) {
    ++group_steps_;
    if (!res.fresh) ++late_;
  }
  lock.lock();
  pool_.push_back(res.sum);
  return !global && !res.fresh;
}

void WagmaAgent::start_at(int64_t t, const Tensor& model) {
  std::lock_guard<std::mutex> lock(mu_);
  ADA_CHECK(arrived_ == -1 && next_ <= t)
      << "WagmaAgent::start_at(" << t << ") after iteration " << arrived_;
  snapshot_.copy_from(model.reshape({numel_}));
  snapshot_version_ = t - 1;
  arrived_ = t - 1;
  next_ = t;
  for (auto it = activated_.begin(); it != activated_.end();)
    it = *it < t ? activated_.erase(it) : std::next(it);
}

void WagmaAgent::wait_executed(int64_t t) {
  std::unique_lock<std::mutex> lock(mu_);
  while (next_ <= t) {
    // A failed communication thread never executes it: stop instead of waiting forever.
    if (auto error = comm::CommThread::instance().failure()) std::rethrow_exception(error);
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void WagmaAgent::finish() {
  if (!wait_avoiding_) return;
  // Every rank has taken its last step, so every group collective has completed everywhere.
  world_.barrier();
  comm::CommThread::instance().set_idle_task({});
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  // Activations still in flight are for iterations that already ran: receive and drop them.
  world_.barrier();
  int source = 0;
  int64_t v = 0;
  while (signals_->poll_signal(kActivationTag, &source, &v)) {
  }
}

}  // namespace ada::sync
