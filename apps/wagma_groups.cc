// wagma_groups: prints the WAGMA-SGD group schedule, one line per step, e.g.
//   $ wagma_groups --ranks 8 --group 4 --steps 3
//   step 0: {0,1,2,3} {4,5,6,7}
//   step 1: {0,1,4,5} {2,3,6,7}
//   step 2: {0,2,4,6} {1,3,5,7}
// With --global-every TAU, every TAU-th step reads "global" (the blocking world average).
#include <cstdio>
#include <exception>

#include "apps/common/cli.h"
#include "sync/wagma_schedule.h"

int main(int argc, char** argv) {
  int ranks = 0, group = 0;
  int64_t steps = 0, tau = 0;
  CLI::App app("Prints the WAGMA-SGD group schedule (sync/wagma_schedule.h), one line per step",
               "wagma_groups");
  app.add_option("--ranks", ranks, "P, a power of two")->required();
  app.add_option("--group", group, "S, a power of two <= P")->required();
  app.add_option("--steps", steps, "how many steps to print")->required();
  app.add_option("--global-every", tau, "tau: every tau-th step is a global average (0: none)");
  try {
    if (!ada::cli::parse_command_line(
            app, argc, argv, "wagma_groups --ranks P --group S --steps T [--global-every TAU]"))
      return 0;
    ADA_CHECK_ARG(steps >= 0, ConfigError) << "--steps must be >= 0, got " << steps;
    ADA_CHECK_ARG(tau >= 0, ConfigError) << "--global-every must be >= 0, got " << tau;
    const auto pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
    ADA_CHECK_ARG(pow2(ranks), ConfigError)
        << "--ranks must be a power of two (WAGMA's butterfly groups), got " << ranks;
    ADA_CHECK_ARG(pow2(group) && group <= ranks, ConfigError)
        << "--group must be a power of two no larger than --ranks " << ranks << ", got " << group;
    ada::sync::WagmaSchedule s(ranks, group, tau > 0 ? tau : int64_t{1} << 30);
    for (int64_t t = 0; t < steps; ++t)
      std::printf("step %lld: %s\n", static_cast<long long>(t), s.describe(t).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wagma_groups: %s\n", e.what());
    return 2;
  }
}
