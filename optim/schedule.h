// Schedule: the learning rate as a pure function of the optimizer step, lr_at(step): an optional
// linear warm-up, then constant, step, polynomial, cosine or linear decay. Its only state is the
// step counter that the trainer advances, saved and restored like the optimizer's. Also the LR
// scaling rule that ties the base LR to the reducer and the number of ranks (docs/architecture.md,
// section 5). A new schedule is a Schedule subclass plus one line in register_builtin_schedules().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/config.h"
#include "base/registry.h"
#include "core/serialize.h"

namespace ada::optim {

struct Warmup {
  int64_t steps = 0;          // W: steps 0 .. W-1 warm up (0: no warm-up)
  double start_factor = 0.0;  // f0 in [0, 1]: step 0 runs at f0·base
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;

  // The LR of the optimizer step with 0-based index `step` (the number of steps taken before
  // it). Warm-up, for step < W: base·(f0 + (1 − f0)·step/W), rising linearly from f0·base (as
  // PyTorch's LinearLR and Goyal et al.); from step W on, the decay, which starts from base.
  // Depends only on `step` and the configuration.
  double lr_at(int64_t step) const;

  // The trainer's cursor: lr() is the LR of the next optimizer step; advance() after the step.
  double lr() const { return lr_at(step_); }
  void advance() { ++step_; }
  int64_t step() const { return step_; }

  // {"step": i64 0-d} with metadata {"schedule": name()}. load_state restores the step (the
  // configuration may change between runs, e.g. a longer total_steps); IoError if it is absent.
  NamedTensors state() const;
  void load_state(const NamedTensors& state);

  const std::string& name() const { return name_; }
  double base_lr() const { return base_lr_; }
  const Warmup& warmup() const { return warmup_; }

 protected:
  Schedule(std::string name, double base_lr, Warmup warmup);
  // The LR at `step` >= warmup().steps, before any warm-up is applied.
  virtual double decay_at(int64_t step) const = 0;

 private:
  std::string name_;
  double base_lr_;
  Warmup warmup_;
  int64_t step_ = 0;
};

// Builds a schedule from its config section with `base_lr` (the optimizer's LR after scaled_lr).
// Keys of every schedule: name, warmup_steps (0), warmup_start_factor (0). Then:
//   constant:                 no more keys
//   step:                     milestones (required; absolute, increasing, >= warmup_steps),
//                             gamma (0.1): base·gamma^(number of milestones <= step)
//   polynomial:               total_steps (required, > warmup_steps), power (1), end_lr (0):
//                             end + (base − end)·(1 − p)^power, p = (step − W)/(total − W) in [0,
//                             1]
//   cosine:                   total_steps, end_lr (0): end + (base − end)·(1 + cos(π·p))/2
//   linear:                   total_steps, end_lr (0): polynomial with power 1
// From total_steps on, polynomial, cosine and linear stay at end_lr.
using ScheduleFactory =
    std::function<std::unique_ptr<Schedule>(const Config& section, double base_lr)>;
struct ScheduleKind {
  ScheduleFactory make;
  // Whether the schedule decays to total_steps (the trainer sets it to the run's length when
  // the config leaves it out).
  bool needs_total_steps = false;
};
using ScheduleRegistry = Registry<ScheduleKind>;

// Adds constant, step, polynomial, cosine, linear.
void register_builtin_schedules(ScheduleRegistry& registry);
// The built-in schedules, registered once.
const ScheduleRegistry& builtin_schedules();
// The schedule named by `section`'s `name` key ("unknown schedule" lists the known ones).
std::unique_ptr<Schedule> make_schedule(const ScheduleRegistry& registry, const Config& section,
                                        double base_lr);
// Whether the schedule `section` names decays to total_steps and the section leaves it out.
bool lacks_total_steps(const ScheduleRegistry& registry, const Config& section);
// A schedule written in epochs keeps its shape at any number of ranks and examples per step:
// `warmup_epochs` (a number >= 0) and `milestone_epochs` (increasing numbers > 0) become the
// `warmup_steps` and `milestones` that the schedules read, at `steps_per_epoch` (each rounded to
// the nearest step; a warm-up of more than 0 epochs lasts at least one step). Either form of a
// key may be set, not both (a ConfigError naming the two). Returns what it derived, for the log
// ("warm-up 5 epochs = 95 steps; milestones at epochs 30, 60, 80 = steps 570, 1140, 1520"), or
// an empty string when the section sets neither.
std::string derive_epoch_keys(Config& section, int64_t steps_per_epoch);

// ---- LR scaling with the number of ranks (docs/architecture.md section 5, Horovod's Adasum guide)
// -----------------
enum class LrScalingRule { none, linear, sqrt };
struct LrScaling {
  LrScalingRule rule = LrScalingRule::linear;  // for average and sum
  double adasum_factor = 1.0;                  // for adasum at more than one rank
};
// Reads lr_scaling (linear | sqrt | none) and adasum_lr_factor (> 0; default 1) from `section`
// (the trainer's choice; the schedule section is the natural home). The default rule depends on
// `reducer`: none for sum (sum already hands SGD world x the mean gradient: linear scaling on top
// would make it world^2), linear otherwise. `fixed_examples` (train.examples_per_step given: the
// step's examples do not change with the ranks): none, and linear or sqrt for average or sum is a
// ConfigError (they would change the LR with the ranks at the same examples per step).
LrScaling read_lr_scaling(const Config& section, const std::string& reducer = "",
                          bool fixed_examples = false);
// The base LR for `world` ranks from the single-worker LR `lr`:
//   average, sum: lr·world (linear), lr·√world (sqrt) or lr (none). Note that `sum` hands the
//     optimizer world × the mean gradient: for plain SGD that already is the linear-scaling
//     rule for the gradient term (use none there); adaptive optimizers (Adam, LAMB) ignore the
//     gradient's scale and need the factor.
//   adasum: lr·adasum_factor (no scaling with world; the guide suggests 2–2.5 for CPU Adasum,
//     1 reproduces its examples); at world 1 Adasum is the identity and the LR is lr.
// ConfigError for an unknown reducer; world must be >= 1.
double scaled_lr(double lr, const std::string& reducer, int world, const LrScaling& scaling);
// scaled_lr's value and how it was made, in the config's keys, for the run's log: which key the
// reducer reads (a config may set both, for runs that switch reducer.name), and that Adasum's
// factor is not applied at one rank.
std::string describe_scaled_lr(double lr, const std::string& reducer, int world,
                               const LrScaling& scaling);

}  // namespace ada::optim
