// The WAGMA-SGD averaging of one flat model buffer (Li et al., TPDS 2021, Algorithm 2): group
// averages over the ranks WagmaSchedule gives, a blocking world average every tau iterations;
// wait-avoiding (a late member contributes its previous model, mixes its fresh one in later) or
// synchronous. The mechanism and why: docs/architecture.md, section 4.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "comm/communicator.h"
#include "sync/wagma_schedule.h"

namespace ada::sync {

class WagmaAgent {
 public:
  // `initial` (flat, numel elements) is what this rank contributes until its first publish.
  // Collective over `world` (creates the group communicators).
  WagmaAgent(comm::Communicator& world, WagmaSchedule schedule, const Tensor& initial,
             bool wait_avoiding);
  ~WagmaAgent();
  WagmaAgent(const WagmaAgent&) = delete;
  WagmaAgent& operator=(const WagmaAgent&) = delete;

  // Iteration t (each t once, increasing): `model` holds this rank's fresh model W'_t and is
  // replaced by the averaged one. Returns true when this rank was late (its stale model went
  // into the group sum and the fresh one was mixed in afterwards).
  bool step(int64_t t, Tensor& model);
  // Stops the communication thread's participation after making sure no rank still needs it
  // (collective; call once every rank has taken its last step).
  void finish();
  // Continues at iteration t (a resumed run) with `model` as the published one. Before any step.
  void start_at(int64_t t, const Tensor& model);
  // Tests: blocks until this rank has executed iteration t (possibly passively).
  void wait_executed(int64_t t);

  const WagmaSchedule& schedule() const { return schedule_; }
  int64_t late_steps() const { return late_; }
  int64_t group_steps() const { return group_steps_; }
  // A resumed run's counters so far (from its checkpoint). On the compute thread, before any step.
  void restore_counters(int64_t late_steps, int64_t group_steps) {
    late_ = late_steps;
    group_steps_ = group_steps;
  }

 private:
  struct Result {
    Tensor sum;
    bool fresh = false;
  };
  void progress();          // communication thread: drain signals, run what can run
  void execute(int64_t v);  // communication thread: iteration v's collective
  Tensor take_buffer();

  comm::Communicator& world_;
  WagmaSchedule schedule_;
  bool wait_avoiding_;
  int64_t numel_;
  std::vector<std::unique_ptr<comm::Communicator>> groups_;  // one per bit set
  std::unique_ptr<comm::Communicator> signals_;              // activations travel here

  std::mutex mu_;
  std::condition_variable cv_;
  Tensor snapshot_;                // the model this rank last published
  int64_t snapshot_version_ = -1;  // its iteration (-1: the initial model)
  int64_t arrived_ = -1;           // the latest iteration this rank's compute thread reached
  int64_t next_ = 0;               // iterations < next_ have executed here
  std::set<int64_t> activated_;    // activations received for iterations not yet executed
  std::map<int64_t, Result> results_;
  std::vector<Tensor> pool_;  // result buffers to reuse
  bool finished_ = false;
  int64_t late_ = 0, group_steps_ = 0;
};

}  // namespace ada::sync
