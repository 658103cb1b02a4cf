// LR schedules at their boundary steps (warm-up start and end, milestones, total_steps and
// beyond), their saved step, config errors, and the LR scaling rule for the reducers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "optim/checkpoint.h"
#include "optim_test_util.h"
#include "util/temp_dir.h"

namespace ada::optim::testing {
namespace {

constexpr double kBase = 0.4;
// LRs agree to rounding (the formulas are evaluated in double in another order here).
#define EXPECT_LR(got, want) EXPECT_NEAR(got, want, 1e-14)

TEST(Schedule, ConstantWithoutWarmup) {
  auto s = build_schedule("name: constant\n", kBase);
  EXPECT_EQ(s->name(), "constant");
  EXPECT_LR(s->lr_at(0), kBase);
  EXPECT_LR(s->lr_at(123456789), kBase);
}

TEST(Schedule, LinearWarmupBoundaries) {
  auto s = build_schedule("name: constant\nwarmup_steps: 10\n", kBase);
  EXPECT_LR(s->lr_at(0), 0.0);  // warm-up start: f0·base with f0 = 0
  EXPECT_LR(s->lr_at(1), 0.1 * kBase);
  EXPECT_LR(s->lr_at(5), 0.5 * kBase);
  EXPECT_LR(s->lr_at(9), 0.9 * kBase);  // last warm-up step
  EXPECT_LR(s->lr_at(10), kBase);       // warm-up end: the decay starts from base
  auto f = build_schedule("name: constant\nwarmup_steps: 4\nwarmup_start_factor: 0.2\n", kBase);
  EXPECT_LR(f->lr_at(0), 0.2 * kBase);
  EXPECT_LR(f->lr_at(2), (0.2 + 0.8 * 0.5) * kBase);
  EXPECT_LR(f->lr_at(4), kBase);
}

TEST(Schedule, StepAtMilestones) {
  auto s =
      build_schedule("name: step\nwarmup_steps: 5\nmilestones: [30, 60, 80]\ngamma: 0.1\n", kBase);
  EXPECT_LR(s->lr_at(0), 0.0);
  EXPECT_LR(s->lr_at(5), kBase);
  EXPECT_LR(s->lr_at(29), kBase);
  EXPECT_LR(s->lr_at(30), kBase * 0.1);
  EXPECT_LR(s->lr_at(59), kBase * 0.1);
  EXPECT_LR(s->lr_at(60), kBase * std::pow(0.1, 2));
  EXPECT_LR(s->lr_at(80), kBase * std::pow(0.1, 3));
  EXPECT_LR(s->lr_at(100000), kBase * std::pow(0.1, 3));
  auto d = build_schedule("name: step\nmilestones: [2]\n", kBase);  // gamma defaults to 0.1
  EXPECT_LR(d->lr_at(1), kBase);
  EXPECT_LR(d->lr_at(2), kBase * 0.1);
}

// A schedule in epochs becomes the same schedule in steps at the run's steps per epoch:
// ResNet-50's 5 warm-up epochs and milestones at 30, 60, 80 at 19 steps per epoch (1.28M images
// at 64K a step) are what warmup_steps 95 and milestones [570, 1140, 1520] give.
TEST(Schedule, EpochKeysBecomeSteps) {
  const auto derived = [](const std::string& body, int64_t steps_per_epoch, std::string* log) {
    ScheduleRegistry reg("schedule");
    register_builtin_schedules(reg);
    Config c = Config::parse(nest("schedule", body), "test.yaml");
    Config sc = c.child("schedule");
    *log = derive_epoch_keys(sc, steps_per_epoch);
    auto s = make_schedule(reg, sc, kBase);
    c.finish();  // the epoch keys count as read
    return s;
  };
  std::string log;
  auto e = derived("name: step\nwarmup_epochs: 5\nmilestone_epochs: [30, 60, 80]\n", 19, &log);
  auto s = build_schedule("name: step\nwarmup_steps: 95\nmilestones: [570, 1140, 1520]\n", kBase);
  for (int64_t step : {0, 1, 94, 95, 569, 570, 1139, 1140, 1519, 1520, 5000})
    EXPECT_EQ(e->lr_at(step), s->lr_at(step)) << "step " << step;  // bit for bit
  EXPECT_EQ(log,
            "warm-up 5 epochs = 95 steps; milestones at epochs 30, 60, 80 = steps 570, 1140, "
            "1520");
  // Fractions round to the nearest step; a warm-up of more than 0 epochs lasts a step at least.
  auto f = derived("name: constant\nwarmup_epochs: 0.01\n", 19, &log);
  EXPECT_EQ(log, "warm-up 0.01 epochs = 1 step");
  EXPECT_LR(f->lr_at(0), 0.0);
  EXPECT_LR(f->lr_at(1), kBase);
  derived("name: step\nmilestone_epochs: [0.5, 2.5]\n", 3, &log);
  EXPECT_EQ(log, "milestones at epochs 0.5, 2.5 = steps 2, 8");
  // Neither key: nothing derived, the section left as it was.
  auto n = derived("name: step\nwarmup_steps: 2\nmilestones: [4]\n", 19, &log);
  EXPECT_EQ(log, "");
  EXPECT_LR(n->lr_at(4), kBase * 0.1);
}

TEST(Schedule, EpochKeyErrorsNameTheKeys) {
  const auto error = [](const std::string& body, int64_t steps_per_epoch) {
    return error_of<ConfigError>([&] {
      Config c = Config::parse(nest("schedule", body), "test.yaml");
      Config sc = c.child("schedule");
      derive_epoch_keys(sc, steps_per_epoch);
    });
  };
  auto msg = error("name: constant\nwarmup_epochs: 5\nwarmup_steps: 100\n", 19);
  EXPECT_NE(msg.find("schedule.warmup_epochs (line 3, column 18) and config test.yaml: "
                     "schedule.warmup_steps (line 4, column 17) are both set; keep one"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("(19 steps per epoch here)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--set schedule.warmup_steps=null"), std::string::npos) << msg;
  msg = error("name: step\nmilestone_epochs: [30]\nmilestones: [100]\n", 19);
  EXPECT_NE(msg.find("schedule.milestone_epochs (line 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--set schedule.milestones=null uses the epochs, --set "
                     "schedule.milestone_epochs=null the steps"),
            std::string::npos)
      << msg;
  msg = error("name: constant\nwarmup_epochs: -1\n", 19);
  EXPECT_NE(msg.find("schedule.warmup_epochs (line 3, column 18): must be >= 0, got -1"),
            std::string::npos)
      << msg;
  // Two epochs that land on one step at this many steps per epoch.
  msg = error("name: step\nmilestone_epochs: [1, 1.2]\n", 2);
  EXPECT_NE(msg.find("schedule.milestone_epochs (line 3, column 3): epochs [1, 1.2] are steps "
                     "[2, 2] at 2 steps per epoch; each must be at least step 1 and later than "
                     "the one before (position 1, epoch 1.2)"),
            std::string::npos)
      << msg;
  msg = error("name: constant\nwarmup_epochs: .inf\n", 19);
  EXPECT_NE(msg.find("schedule.warmup_epochs (line 3, column 18): must be a finite number >= 0, "
                     "got inf"),
            std::string::npos)
      << msg;
  msg = error("name: constant\nwarmup_epochs: 1e300\n", 19);
  EXPECT_NE(msg.find("schedule.warmup_epochs (line 3, column 18): 1e+300 epochs at 19 steps per "
                     "epoch is no step a run reaches"),
            std::string::npos)
      << msg;
  msg = error("name: step\nmilestone_epochs: [1, 1e300]\n", 2);
  EXPECT_NE(msg.find("schedule.milestone_epochs (line 3, column 3): 1e+300 epochs"),
            std::string::npos)
      << msg;
  msg = error("name: step\nmilestone_epochs: [0, 3]\n", 2);
  EXPECT_NE(msg.find("(position 0, epoch 0)"), std::string::npos) << msg;
}

TEST(Schedule, PolynomialBoundaries) {
  auto s = build_schedule(
      "name: polynomial\nwarmup_steps: 10\ntotal_steps: 110\npower: 2\nend_lr: 0.001\n", kBase);
  const double end = 0.001;
  EXPECT_LR(s->lr_at(9), 0.9 * kBase);
  EXPECT_LR(s->lr_at(10), kBase);
  EXPECT_LR(s->lr_at(60), end + (kBase - end) * 0.25);
  EXPECT_LR(s->lr_at(109), end + (kBase - end) * 0.01 * 0.01);  // last decaying step
  EXPECT_LR(s->lr_at(110), end);                                // total_steps
  EXPECT_LR(s->lr_at(5000), end);
}

TEST(Schedule, CosineBoundaries) {
  auto s =
      build_schedule("name: cosine\nwarmup_steps: 10\ntotal_steps: 110\nend_lr: 0.004\n", kBase);
  const double end = 0.004;
  EXPECT_LR(s->lr_at(10), kBase);
  EXPECT_LR(s->lr_at(35), end + (kBase - end) * 0.5 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_NEAR(s->lr_at(60), (kBase + end) / 2, 1e-15);
  EXPECT_GT(s->lr_at(109), end);
  EXPECT_LR(s->lr_at(110), end);
  EXPECT_LR(s->lr_at(111), end);
  auto z = build_schedule("name: cosine\ntotal_steps: 4\n", kBase);  // end_lr defaults to 0
  EXPECT_LR(z->lr_at(0), kBase);
  EXPECT_NEAR(z->lr_at(2), kBase / 2, 1e-15);
  EXPECT_LR(z->lr_at(4), 0.0);
}

TEST(Schedule, LinearDecayBoundaries) {
  auto s = build_schedule("name: linear\nwarmup_steps: 2\ntotal_steps: 12\n", kBase);
  EXPECT_LR(s->lr_at(1), 0.5 * kBase);
  EXPECT_LR(s->lr_at(2), kBase);
  EXPECT_LR(s->lr_at(7), 0.5 * kBase);
  EXPECT_LR(s->lr_at(11), 0.1 * kBase);
  EXPECT_LR(s->lr_at(12), 0.0);
}

TEST(Schedule, CursorStateSavesAndRestores) {
  const std::string cfg = "name: cosine\nwarmup_steps: 3\ntotal_steps: 20\n";
  auto s = build_schedule(cfg, kBase);
  std::vector<double> unbroken;
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(s->lr(), s->lr_at(i));
    s->advance();
  }
  EXPECT_EQ(s->step(), 7);
  ada::testing::TempDir tmp("ada_schedule_state");
  const std::string path = tmp / "sched.safetensors";
  NamedTensors ckpt;
  add_prefixed(ckpt, s->state(), "sched.");
  save_safetensors(path, ckpt.tensors, ckpt.metadata);
  auto r = build_schedule(cfg, kBase);
  r->load_state(take_prefixed(load_safetensors(path), "sched."));
  std::filesystem::remove(path);
  EXPECT_EQ(r->step(), 7);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(r->lr(), s->lr());  // bit for bit
    r->advance();
    s->advance();
  }
  NamedTensors empty;
  EXPECT_NE(error_of<IoError>([&] { r->load_state(empty); }).find("no 'step' entry"),
            std::string::npos);
}

TEST(Schedule, ConfigErrorsNameTheKey) {
  auto msg = error_of<ConfigError>([] { build_schedule("name: cosin\ntotal_steps: 5\n", kBase); });
  EXPECT_NE(msg.find("schedule.name (line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown schedule 'cosin'; known: constant, cosine, linear, polynomial, step"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("did you mean 'cosine'"), std::string::npos) << msg;

  msg = error_of<ConfigError>(
      [] { build_schedule("name: cosine\nwarmup_steps: 10\ntotal_steps: 10\n", kBase); });
  EXPECT_NE(msg.find("schedule.total_steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be > 10, got 10; it must exceed warmup_steps (10)"), std::string::npos)
      << msg;

  msg = error_of<ConfigError>([] { build_schedule("name: linear\n", kBase); });
  EXPECT_NE(msg.find("total_steps"), std::string::npos) << msg;

  msg = error_of<ConfigError>([] { build_schedule("name: step\nmilestones: [30, 20]\n", kBase); });
  EXPECT_NE(msg.find("schedule.milestones"), std::string::npos) << msg;
  EXPECT_NE(msg.find("increasing"), std::string::npos) << msg;

  msg = error_of<ConfigError>([] { build_schedule("name: constant\nwarmup_steps: -1\n", kBase); });
  EXPECT_NE(msg.find("schedule.warmup_steps"), std::string::npos) << msg;

  msg = error_of<ConfigError>(
      [] { build_schedule("name: constant\nwarmup_start_factor: 1.5\n", kBase); });
  EXPECT_NE(msg.find("schedule.warmup_start_factor (line "), std::string::npos) << msg;
  EXPECT_NE(msg.find("): must be in [0, 1], got 1.5"), std::string::npos) << msg;

  msg = error_of<ConfigError>(
      [] { build_schedule("name: cosine\ntotal_steps: 10\nend_lr: 0.5\n", kBase); });
  EXPECT_NE(msg.find("schedule.end_lr"), std::string::npos) << msg;

  msg = error_of<ConfigError>(
      [] { build_schedule("name: polynomial\ntotal_steps: 10\npower: 0\n", kBase); });
  EXPECT_NE(msg.find("schedule.power (line "), std::string::npos) << msg;
  EXPECT_NE(msg.find("): must be > 0, got 0"), std::string::npos) << msg;

  // A key that no schedule reads is a typo that Config::finish() reports.
  msg = error_of<ConfigError>([] { build_schedule("name: cosine\ntotal_step: 10\n", kBase); });
  EXPECT_NE(msg.find("total_step"), std::string::npos) << msg;

  // Keys of another schedule are unread, hence typos too (power belongs to polynomial).
  msg = error_of<ConfigError>(
      [] { build_schedule("name: cosine\ntotal_steps: 10\npower: 2\n", kBase); });
  EXPECT_NE(msg.find("power"), std::string::npos) << msg;
}

TEST(LrScaling, FollowsTheReducer) {
  LrScaling lin;
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "average", 8, lin), 0.8);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "sum", 8, lin), 0.8);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "average", 1, lin), 0.1);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "adasum", 64, lin), 0.1);  // no scaling with world
  LrScaling sq{LrScalingRule::sqrt, 2.5};
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "average", 16, sq), 0.4);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "adasum", 16, sq), 0.25);  // the optional factor
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "adasum", 1, sq), 0.1);    // one rank: Adasum is the identity
  LrScaling none{LrScalingRule::none, 1.0};
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "sum", 8, none), 0.1);
  const auto msg = error_of<ConfigError>([&] { scaled_lr(0.1, "adasumm", 2, lin); });
  EXPECT_NE(msg.find("'adasumm'; known: adasum, average, sum"), std::string::npos) << msg;
}

// The log line says the LR and which key made it, so that a key the reducer does not read (a
// config may set both, to switch reducer.name) is visible as not applied.
TEST(LrScaling, DescribesTheBaseLrInTheConfigsKeys) {
  const LrScaling lin{LrScalingRule::linear, 2.0}, sq{LrScalingRule::sqrt, 1.0};
  EXPECT_EQ(describe_scaled_lr(0.1, "average", 8, lin),
            "base LR 0.8 = optimizer.lr 0.1 x 8 ranks (schedule.lr_scaling: linear); "
            "schedule.adasum_lr_factor is for adasum");
  EXPECT_EQ(describe_scaled_lr(0.1, "average", 16, sq),
            "base LR 0.4 = optimizer.lr 0.1 x sqrt(16 ranks) (schedule.lr_scaling: sqrt)");
  EXPECT_EQ(describe_scaled_lr(0.1, "sum", 4, LrScaling{LrScalingRule::none, 1.0}),
            "base LR 0.1 = optimizer.lr 0.1 (schedule.lr_scaling: none)");
  EXPECT_EQ(describe_scaled_lr(0.1, "adasum", 4, lin),
            "base LR 0.2 = optimizer.lr 0.1 x schedule.adasum_lr_factor 2; schedule.lr_scaling "
            "is for sum and average");
  EXPECT_EQ(describe_scaled_lr(0.1, "adasum", 1, lin),
            "base LR 0.1 = optimizer.lr 0.1 (Adasum at one rank combines nothing: "
            "schedule.adasum_lr_factor 2 applies from two ranks); schedule.lr_scaling is for sum "
            "and average");
}

TEST(LrScaling, ReadsItsKeys) {
  Config c = Config::parse("schedule:\n  lr_scaling: sqrt\n  adasum_lr_factor: 2\n", "t.yaml");
  const LrScaling s = read_lr_scaling(c.child("schedule"));
  EXPECT_EQ(s.rule, LrScalingRule::sqrt);
  EXPECT_EQ(s.adasum_factor, 2.0);
  c.finish();
  // Without lr_scaling: linear for average, none for sum (which already scales by world).
  Config dflt = Config::parse("schedule:\n  name: constant\n", "t.yaml");
  EXPECT_EQ(read_lr_scaling(dflt.child("schedule"), "average").rule, LrScalingRule::linear);
  EXPECT_EQ(read_lr_scaling(dflt.child("schedule"), "sum").rule, LrScalingRule::none);
  // train.examples_per_step (fixed_examples): none by default, linear / sqrt refused for
  // average and sum, whose LR they would scale with the ranks at the same examples a step.
  EXPECT_EQ(read_lr_scaling(dflt.child("schedule"), "average", true).rule, LrScalingRule::none);
  EXPECT_EQ(read_lr_scaling(dflt.child("schedule"), "sum", true).rule, LrScalingRule::none);
  for (const char* reducer : {"average", "sum"}) {
    const auto fixed = error_of<ConfigError>([&] {
      read_lr_scaling(Config::parse("schedule:\n  lr_scaling: sqrt\n", "t.yaml").child("schedule"),
                      reducer, true);
    });
    EXPECT_NE(fixed.find("schedule.lr_scaling (line 2, column 15): 'sqrt' scales the LR with the "
                         "number of ranks, but train.examples_per_step fixes"),
              std::string::npos)
        << fixed;
    EXPECT_NE(fixed.find("set lr_scaling: none"), std::string::npos) << fixed;
  }
  EXPECT_EQ(read_lr_scaling(
                Config::parse("schedule:\n  lr_scaling: linear\n", "t.yaml").child("schedule"),
                "adasum", true)
                .rule,
            LrScalingRule::linear);  // adasum's LR does not scale with the ranks: nothing to refuse
  Config d = Config::parse("schedule:\n  lr_scaling: linaer\n", "t.yaml");
  const auto msg = error_of<ConfigError>([&] { read_lr_scaling(d.child("schedule")); });
  EXPECT_NE(msg.find("schedule.lr_scaling (line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown lr_scaling 'linaer'; known: linear, none, sqrt"), std::string::npos)
      << msg;
  Config e = Config::parse("schedule:\n  adasum_lr_factor: 0\n", "t.yaml");
  EXPECT_NE(error_of<ConfigError>([&] {
              read_lr_scaling(e.child("schedule"));
            }).find("schedule.adasum_lr_factor (line 2, column 21): must be > 0, got 0"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::optim::testing
