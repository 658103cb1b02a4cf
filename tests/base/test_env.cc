// env_switch: the environment's on/off switches, unset or empty meaning the default, and a clear
// error naming the variable and its value for anything else.
#include "base/env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/error.h"
#include "util/error_of.h"

namespace ada {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

constexpr const char* kVar = "ADA_TEST_ENV_SWITCH";

TEST(EnvSwitch, DefaultOnAndOffWordsAndAClearErrorOtherwise) {
  unsetenv(kVar);
  EXPECT_TRUE(env_switch(kVar, true, "1 or 0"));
  EXPECT_FALSE(env_switch(kVar, false, "1 or 0"));
  setenv(kVar, "", 1);
  EXPECT_FALSE(env_switch(kVar, false, "1 or 0"));
  for (const char* on : {"1", "on"}) {
    setenv(kVar, on, 1);
    EXPECT_TRUE(env_switch(kVar, false, "1 or 0")) << on;
  }
  for (const char* off : {"0", "off"}) {
    setenv(kVar, off, 1);
    EXPECT_FALSE(env_switch(kVar, true, "1 or 0")) << off;
  }
  setenv(kVar, "yes", 1);
  EXPECT_THAT(error_of<ConfigError>([] { env_switch(kVar, true, "1 (on) or 0 (off)"); }),
              HasSubstr("environment variable ADA_TEST_ENV_SWITCH='yes': use 1 (on) or 0 (off)"));
  unsetenv(kVar);
}

}  // namespace
}  // namespace ada
