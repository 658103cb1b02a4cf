// trainer's main: MPI start-up, the command line, one top-level catch, MPI_Abort on error so no
// rank hangs.
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "apps/common/cli.h"
#include "apps/common/version.h"
#include "apps/trainer/trainer.h"
#include "base/log.h"
#include "comm/agreement.h"
#include "comm/mpi_runtime.h"

namespace {

// The arguments, or nullopt after --help or --version.
std::optional<ada::trainer::Args> parse_args(int argc, char** argv) {
  ada::trainer::Args a;
  CLI::App app(
      "Adatrain: data-parallel training from one YAML config (configs/README.md lists every key)",
      "trainer");
  app.add_option("--config", a.config, "the run's YAML config")->required();
  app.add_option("--set", a.sets,
                 "override a config value, e.g. --set optimizer.lr=0.1 (repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  app.add_option("--resume", a.resume,
                 "auto (the newest valid checkpoint of the run) or a checkpoint path");
  app.add_flag("--describe", a.describe, "print the model's layers and parameter count, then exit");
  app.set_version_flag("--version",
                       std::string("trainer (Adatrain) built from commit ") + ada::build_commit() +
                           "\ntrainer version " + ada::build_version() +
                           " (the newest commit changing its sources, +changes.<hash> when "
                           "they had uncommitted changes)",
                       "print the commit this trainer was built from and its version, then exit");
  if (!ada::cli::parse_command_line(
          app, argc, argv,
          "trainer --config FILE [--set key.path=value ...] [--resume auto|PATH] [--describe]"))
    return std::nullopt;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  ada::comm::MpiRuntime mpi(&argc, &argv);
  ada::init_logging(mpi.rank(), mpi.size());
  try {
    const auto args = parse_args(argc, argv);
    if (!args) return 0;  // --help or --version
    // Not destroyed when run() throws: its destructors would wait for communication that the
    // other ranks may never complete. Every rank is aborted below instead.
    auto* trainer = new ada::trainer::Trainer(*args);
    const int rc = trainer->run();
    delete trainer;
    return rc;
  } catch (const ada::comm::StoppedTogether&) {  // reported once, by the rank that found it
    if (mpi.size() == 1) return 1;
    // Rank 0's MPI_Abort ends them all; many at once make mpirun print its notice garbled.
    if (mpi.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(10));
    ada::comm::MpiRuntime::abort(1);
  } catch (const std::exception& e) {
    ada::log_error(std::string("trainer: ") + e.what());
    if (mpi.size() == 1) {
      ada::drain_output();
      return 1;
    }
    ada::comm::MpiRuntime::abort(1);
  }
}
