// The built-in LR schedules (warm-up in the base class, one small class per decay), their
// registry, and the LR scaling rule.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "optim/schedule.h"

namespace ada::optim {

Schedule::Schedule(std::string name, double base_lr, Warmup warmup)
    : name_(std::move(name)), base_lr_(base_lr), warmup_(warmup) {
  ADA_CHECK(base_lr > 0 && warmup.steps >= 0 && warmup.start_factor >= 0 &&
            warmup.start_factor <= 1)
      << "schedule '" << name_ << "': base_lr " << base_lr << ", warm-up " << warmup.steps
      << " steps from " << warmup.start_factor;
}

double Schedule::lr_at(int64_t step) const {
  ADA_CHECK(step >= 0) << "schedule '" << name_ << "': lr_at(" << step << ")";
  if (step < warmup_.steps) {
    const double f0 = warmup_.start_factor;
    return base_lr_ *
           (f0 + (1.0 - f0) * static_cast<double>(step) / static_cast<double>(warmup_.steps));
  }
  return decay_at(step);
}

NamedTensors Schedule::state() const {
  NamedTensors out;
  out.metadata["schedule"] = name_;
  out.tensors.emplace_back("step", Tensor::from_vector<int64_t>({step_}, {}));
  return out;
}

void Schedule::load_state(const NamedTensors& state) {
  const std::string src =
      state.source.empty() ? std::string("schedule state") : "schedule state " + state.source;
  ADA_CHECK_ARG(state.contains("step"), IoError)
      << src << ": no 'step' entry; it was not written by Schedule::state()";
  const Tensor& t = state.at("step");
  ADA_CHECK_ARG(t.dtype() == DType::i64 && t.numel() == 1, IoError)
      << src << ": 'step' must be one i64 value, got " << t.str();
  const int64_t s = t.to_vector<int64_t>()[0];
  ADA_CHECK_ARG(s >= 0, IoError) << src << ": 'step' is " << s << "; it must be >= 0";
  step_ = s;
}

namespace {

class ConstantSchedule : public Schedule {
 public:
  ConstantSchedule(double base, Warmup w) : Schedule("constant", base, w) {}

 protected:
  double decay_at(int64_t) const override { return base_lr(); }
};

class StepSchedule : public Schedule {
 public:
  StepSchedule(double base, Warmup w, std::vector<int64_t> milestones, double gamma)
      : Schedule("step", base, w), milestones_(std::move(milestones)), gamma_(gamma) {}

 protected:
  double decay_at(int64_t step) const override {
    const auto k = std::upper_bound(milestones_.begin(), milestones_.end(), step) -
                   milestones_.begin();  // milestones <= step
    return base_lr() * std::pow(gamma_, static_cast<double>(k));
  }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// Polynomial, cosine and linear: a shape over p = (step − W)/(total − W) from base to end_lr.
class AnnealSchedule : public Schedule {
 public:
  enum class Shape { polynomial, cosine };
  AnnealSchedule(std::string name, double base, Warmup w, int64_t total, double end_lr, Shape shape,
                 double power)
      : Schedule(std::move(name), base, w),
        total_(total),
        end_(end_lr),
        shape_(shape),
        power_(power) {
    ADA_CHECK(total > w.steps) << "total_steps " << total << " <= warmup_steps " << w.steps;
  }

 protected:
  double decay_at(int64_t step) const override {
    if (step >= total_) return end_;
    const double w = static_cast<double>(warmup().steps);
    const double p = (static_cast<double>(step) - w) / (static_cast<double>(total_) - w);
    const double f = shape_ == Shape::cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * p))
                                             : std::pow(1.0 - p, power_);
    return end_ + (base_lr() - end_) * f;
  }

 private:
  int64_t total_;
  double end_;
  Shape shape_;
  double power_;
};

Warmup read_warmup(const Config& c) {
  Warmup w;
  w.steps = c.get_in_or<int64_t>("warmup_steps", 0, Range::at_least(0), "0 turns warm-up off");
  w.start_factor = c.get_in_or<double>("warmup_start_factor", 0.0, Range::closed(0, 1),
                                       "the fraction of the base LR that step 0 runs at");
  return w;
}

int64_t read_total_steps(const Config& c, const Warmup& w) {
  return c.get_in<int64_t>("total_steps", Range::above(double(w.steps)),
                           "it must exceed warmup_steps (" + std::to_string(w.steps) +
                               "): it is the step at which the LR reaches end_lr");
}

double read_end_lr(const Config& c, double base) {
  return c.get_in_or<double>("end_lr", 0.0, Range::closed(0, base),
                             "the LR at total_steps, at most the base LR");
}

std::unique_ptr<Schedule> make_step(const Config& c, double base) {
  const Warmup w = read_warmup(c);
  const std::vector<int64_t> ms = c.get<std::vector<int64_t>>("milestones");
  for (size_t i = 0; i < ms.size(); ++i) {
    if (ms[i] < w.steps || ms[i] < 1 || (i > 0 && ms[i] <= ms[i - 1])) {
      std::ostringstream os;
      os << c.where("milestones") << ": milestones must be increasing absolute step numbers, "
         << "each >= 1 and >= warmup_steps (" << w.steps << "); got " << ms[i] << " at position "
         << i;
      throw ConfigError(os.str());
    }
  }
  const double gamma = c.get_in_or<double>("gamma", 0.1, Range::above(0), "typical: 0.1");
  return std::make_unique<StepSchedule>(base, w, ms, gamma);
}

std::unique_ptr<Schedule> make_anneal(const Config& c, double base, const std::string& name) {
  const Warmup w = read_warmup(c);
  const int64_t total = read_total_steps(c, w);
  const double end = read_end_lr(c, base);
  if (name == "cosine")
    return std::make_unique<AnnealSchedule>(name, base, w, total, end,
                                            AnnealSchedule::Shape::cosine, 1.0);
  double power = 1.0;
  if (name == "polynomial")
    power = c.get_in_or<double>("power", 1.0, Range::above(0), "typical: 1 (linear) or 0.5");
  return std::make_unique<AnnealSchedule>(name, base, w, total, end,
                                          AnnealSchedule::Shape::polynomial, power);
}

}  // namespace

void register_builtin_schedules(ScheduleRegistry& r) {
  r.add("constant", {[](const Config& c, double base) {
          return std::make_unique<ConstantSchedule>(base, read_warmup(c));
        }});
  r.add("step", {make_step});
  for (const char* name : {"polynomial", "cosine", "linear"})
    r.add(name, {[name](const Config& c, double b) { return make_anneal(c, b, name); }, true});
}

std::unique_ptr<Schedule> make_schedule(const ScheduleRegistry& registry, const Config& section,
                                        double base_lr) {
  const std::string name = section.get<std::string>("name");
  const ScheduleFactory& f = registry.get(name, section.where("name")).make;
  ADA_CHECK_ARG(base_lr > 0 && std::isfinite(base_lr), ConfigError)
      << section.where() << ": the base LR must be a positive number, got " << base_lr;
  return f(section, base_lr);
}

bool lacks_total_steps(const ScheduleRegistry& registry, const Config& section) {
  const std::string name = section.get_or<std::string>("name", "constant");
  return !section.has("total_steps") && registry.get(name, section.where("name")).needs_total_steps;
}

namespace {

template <class T>
std::string join_numbers(const std::vector<T>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

std::string dotted(const Config& c, const std::string& key) {
  return c.path().empty() ? key : c.path() + "." + key;
}

// The key in steps must be left unset where its epoch form is set.
void check_one_form(const Config& c, const std::string& epochs_key, const std::string& steps_key,
                    int64_t steps_per_epoch) {
  ADA_CHECK_ARG(!c.has(steps_key), ConfigError)
      << c.where(epochs_key) << " and " << c.where(steps_key)
      << " are both set; keep one: " << epochs_key
      << " keeps the schedule's shape at any ranks and examples per step (" << steps_per_epoch
      << " steps per epoch here), " << steps_key << " counts steps: --set " << dotted(c, steps_key)
      << "=null uses the epochs, --set " << dotted(c, epochs_key) << "=null the steps";
}

}  // namespace

std::string derive_epoch_keys(Config& c, int64_t steps_per_epoch) {
  ADA_CHECK(steps_per_epoch > 0) << "derive_epoch_keys: steps_per_epoch " << steps_per_epoch;
  const auto steps_of = [&](const char* key, double epochs) {
    const double steps = epochs * static_cast<double>(steps_per_epoch);
    ADA_CHECK_ARG(std::isfinite(steps) && steps < 1e15, ConfigError)
        << c.where(key) << ": " << epochs << " epochs at " << steps_per_epoch
        << " steps per epoch is no step a run reaches; give a number of epochs the run can have";
    return static_cast<int64_t>(std::llround(steps));
  };
  const std::string per = " x " + std::to_string(steps_per_epoch) + " steps per epoch";
  std::ostringstream log;
  if (c.has("warmup_epochs")) {
    check_one_form(c, "warmup_epochs", "warmup_steps", steps_per_epoch);
    const double e = c.get_in<double>("warmup_epochs", Range::at_least(0), "0 turns warm-up off");
    const int64_t w = e > 0 ? std::max<int64_t>(1, steps_of("warmup_epochs", e)) : 0;
    c.set_override("warmup_steps=" + std::to_string(w),
                   "derived from " + dotted(c, "warmup_epochs") + per);
    log << "warm-up " << e << " epochs = " << w << (w == 1 ? " step" : " steps");
  }
  if (c.has("milestone_epochs")) {
    check_one_form(c, "milestone_epochs", "milestones", steps_per_epoch);
    const std::vector<double> es = c.get<std::vector<double>>("milestone_epochs");
    std::vector<int64_t> ms;
    for (double e : es) ms.push_back(steps_of("milestone_epochs", e));
    const std::string list = join_numbers(ms);
    for (size_t i = 0; i < ms.size(); ++i) {
      ADA_CHECK_ARG(es[i] > 0 && ms[i] >= 1 && (i == 0 || ms[i] > ms[i - 1]), ConfigError)
          << c.where("milestone_epochs") << ": epochs [" << join_numbers(es) << "] are steps ["
          << list << "] at " << steps_per_epoch << " steps per epoch; each must be at least "
          << "step 1 and later than the one before (position " << i << ", epoch " << es[i]
          << "): give increasing epochs, further apart than one step";
    }
    c.set_override("milestones=[" + list + "]",
                   "derived from " + dotted(c, "milestone_epochs") + per);
    log << (log.tellp() > 0 ? "; " : "") << "milestones at epochs " << join_numbers(es)
        << " = steps " << list;
  }
  return log.str();
}

LrScaling read_lr_scaling(const Config& c, const std::string& reducer, bool fixed_examples) {
  LrScaling s;
  const std::string rule =
      c.get_or("lr_scaling", reducer == "sum" || fixed_examples ? "none" : "linear");
  if (rule == "linear") {
    s.rule = LrScalingRule::linear;
  } else if (rule == "sqrt") {
    s.rule = LrScalingRule::sqrt;
  } else if (rule == "none") {
    s.rule = LrScalingRule::none;
  } else {
    throw ConfigError(c.where("lr_scaling") + ": unknown lr_scaling '" + rule +
                      "'; known: linear, none, sqrt");
  }
  ADA_CHECK_ARG(!fixed_examples || rule == "none" || (reducer != "average" && reducer != "sum"),
                ConfigError)
      << c.where("lr_scaling") << ": '" << rule << "' scales the LR with the number of ranks, but "
      << "train.examples_per_step fixes the examples of a step whatever their number, so the LR "
      << "would change with the ranks at the same examples per step: set lr_scaling: none and "
      << "optimizer.lr to the LR for train.examples_per_step examples (or set "
      << "train.micro_batches in place of train.examples_per_step)";
  s.adasum_factor = c.get_in_or<double>("adasum_lr_factor", 1.0, Range::above(0),
                                        "Horovod's guide suggests 2-2.5 for CPU Adasum");
  return s;
}

double scaled_lr(double lr, const std::string& reducer, int world, const LrScaling& s) {
  ADA_CHECK(world >= 1) << "scaled_lr: world " << world;
  if (reducer == "adasum") return world > 1 ? lr * s.adasum_factor : lr;
  if (reducer == "average" || reducer == "sum") {
    switch (s.rule) {
      case LrScalingRule::linear:
        return lr * world;
      case LrScalingRule::sqrt:
        return lr * std::sqrt(static_cast<double>(world));
      case LrScalingRule::none:
        return lr;
    }
  }
  throw ConfigError("scaled_lr: no LR scaling rule for reducer '" + reducer +
                    "'; known: adasum, average, sum (add the new reducer's rule to scaled_lr)");
}

std::string describe_scaled_lr(double lr, const std::string& reducer, int world,
                               const LrScaling& s) {
  std::ostringstream o;
  o << "base LR " << scaled_lr(lr, reducer, world, s) << " = optimizer.lr " << lr;
  if (reducer == "adasum") {
    if (world > 1)
      o << " x schedule.adasum_lr_factor " << s.adasum_factor;
    else if (s.adasum_factor != 1.0)
      o << " (Adasum at one rank combines nothing: schedule.adasum_lr_factor " << s.adasum_factor
        << " applies from two ranks)";
    o << "; schedule.lr_scaling is for sum and average";
    return o.str();
  }
  const char* rule = s.rule == LrScalingRule::linear ? "linear"
                     : s.rule == LrScalingRule::sqrt ? "sqrt"
                                                     : "none";
  if (s.rule == LrScalingRule::linear) o << " x " << world << " ranks";
  if (s.rule == LrScalingRule::sqrt) o << " x sqrt(" << world << " ranks)";
  o << " (schedule.lr_scaling: " << rule << ")";
  if (s.adasum_factor != 1.0) o << "; schedule.adasum_lr_factor is for adasum";
  return o.str();
}

const ScheduleRegistry& builtin_schedules() {
  return builtin_registry<ScheduleRegistry>("schedule", register_builtin_schedules);
}

}  // namespace ada::optim
