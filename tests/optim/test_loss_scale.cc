// The loss scaler's rule (optim/loss_scale.h), rank-independent: growth after a run of good
// steps, backoff and skip on overflow, the floor at 1, static scales, and its checkpoint state.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "optim/loss_scale.h"

namespace ada::optim {
namespace {

using Outcome = LossScaler::Outcome;

TEST(LossScaler, DoublesAfterGrowthIntervalGoodStepsAndHalvesOnOverflow) {
  LossScaler s({true, 1024, 3});
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.update(true), Outcome::overflow);  // resets the run of good steps
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.overflows(), 1);
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.scale(), 2048);
}

TEST(LossScaler, NeverGoesBelowOneAndAnOverflowThereIsNonFinite) {
  LossScaler s({true, 4, 2000});
  EXPECT_EQ(s.update(true), Outcome::overflow);
  EXPECT_EQ(s.update(true), Outcome::overflow);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_EQ(s.update(true), Outcome::nonfinite);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_EQ(s.overflows(), 2);
  LossScaler odd({true, 3, 2000});
  EXPECT_EQ(odd.update(true), Outcome::overflow);
  EXPECT_EQ(odd.scale(), 1.5);
  EXPECT_EQ(odd.update(true), Outcome::overflow);
  EXPECT_EQ(odd.scale(), 1);
}

TEST(LossScaler, StaticScaleNeverMoves) {
  LossScaler s({false, 128, 1});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.update(false), Outcome::apply);
  EXPECT_EQ(s.update(true), Outcome::nonfinite);
  EXPECT_EQ(s.scale(), 128);
  EXPECT_EQ(s.overflows(), 0);
}

TEST(LossScaler, StopsGrowingAt2To64) {
  LossScaler s({true, kMaxLossScale / 2, 1});
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), kMaxLossScale);
}

TEST(LossScaler, StateRoundTripsAndAStaticScaleKeepsTheConfiguredValue) {
  LossScaler a({true, 1024, 2});
  a.update(false);
  a.update(false);
  a.update(true);
  a.update(false);  // scale 1024, one good step, one overflow
  LossScaler b({true, 65536, 2});
  b.load_state(a.state());
  EXPECT_EQ(b.scale(), 1024);
  EXPECT_EQ(b.overflows(), 1);
  b.update(false);
  EXPECT_EQ(b.scale(), 2048) << "the good-step count came back too";
  LossScaler fixed({false, 8, 2000});
  fixed.load_state(a.state());
  EXPECT_EQ(fixed.scale(), 8);
  LossScaler fresh({true, 512, 2});
  fresh.load_state({});  // a checkpoint without loss scaling
  EXPECT_EQ(fresh.scale(), 512);
}

TEST(LossScaler, RejectsScalesOutsideItsRange) {
  EXPECT_THROW(LossScaler({true, 0, 10}), ConfigError);
  EXPECT_THROW(LossScaler({true, -1, 10}), ConfigError);
  EXPECT_THROW(LossScaler({true, INFINITY, 10}), ConfigError);
  EXPECT_THROW(LossScaler({true, kMaxLossScale * 2, 10}), ConfigError);
  EXPECT_THROW(LossScaler({true, 1024, 0}), ConfigError);
}

}  // namespace
}  // namespace ada::optim
