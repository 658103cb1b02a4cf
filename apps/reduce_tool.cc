// reduce_tool: applies a reducer to tensors read from files, one file per rank. For people
// studying reducers, and for tests outside the C++ suite.
//   mpirun -np P reduce_tool --reducer adasum [--set KEY=VALUE ...] --in DIR --out DIR
// --set passes a reducer option as in the trainer's `reducer:` section (hierarchical=true,
// local_size=2); options the reducer does not read are errors.
// Rank r reads DIR/rank{r}.safetensors (f32 tensors), treats them, in file order, as one bucket
// of per-tensor gradients, reduces it and writes OUT/rank{r}.safetensors with the same names.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "base/config.h"
#include "base/hash.h"
#include "base/log.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/reducer.h"
#include "core/serialize.h"

namespace {
using namespace ada;

const char* kUsage =
    "usage: reduce_tool --reducer NAME [--set KEY=VALUE ...] --in DIR --out DIR   (run under "
    "mpirun; "
    "rank r reads DIR/rank{r}.safetensors; --set gives reducer options, e.g. hierarchical=true)";

// FNV-1a of the names, dtypes and shapes, to check that all ranks hold the same layout.
uint64_t layout_hash(const NamedTensors& nt) {
  uint64_t h = kFnv1aBasis;
  for (const auto& [name, t] : nt.tensors) h = fnv1a64(name + ":" + t.str() + ";", h);
  return h;
}

int run(int argc, char** argv, comm::MpiRuntime& mpi) {
  std::string reducer_name, in_dir, out_dir;
  std::vector<std::string> options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) ADA_THROW(ConfigError) << a << " needs a value; " << kUsage;
      return argv[++i];
    };
    if (a == "--reducer")
      reducer_name = value();
    else if (a == "--set")
      options.push_back(value());
    else if (a == "--in")
      in_dir = value();
    else if (a == "--out")
      out_dir = value();
    else if (a == "-h" || a == "--help") {
      if (mpi.rank() == 0) std::cout << kUsage << "\n";
      return 0;
    } else
      ADA_THROW(ConfigError) << "unknown option '" << a << "'; " << kUsage;
  }
  if (reducer_name.empty() || in_dir.empty() || out_dir.empty())
    ADA_THROW(ConfigError) << "--reducer, --in and --out are required; " << kUsage;
  cli::refuse_overwriting("--out", out_dir, {in_dir});

  Config section = Config::parse("{}", "reduce_tool --set");
  for (const auto& o : options) section.set_override(o);
  auto reducer = comm::builtin_reducers().get(reducer_name, "--reducer")(section);
  section.finish();  // an option the reducer did not read is a typo
  auto world = comm::MpiCommunicator::world();

  const std::string in_path = in_dir + "/rank" + std::to_string(mpi.rank()) + ".safetensors";
  NamedTensors nt = load_safetensors(in_path);
  std::vector<comm::TensorSpan> spans;
  int64_t total = 0;
  for (const auto& [name, t] : nt.tensors) {
    ADA_CHECK_ARG(t.dtype() == DType::f32, DTypeError)
        << in_path << ": tensor '" << name << "' is " << dtype_name(t.dtype())
        << "; reduce_tool reduces f32 tensors";
    spans.push_back({total, t.numel()});
    total += t.numel();
  }
  // Same names and shapes on every rank, checked before the reduction so no rank hangs on it.
  double mine = static_cast<double>(layout_hash(nt) >> 11), lo = mine, hi = mine;
  world->allreduce(&lo, 1, comm::ReduceOp::min);
  world->allreduce(&hi, 1, comm::ReduceOp::max);
  if (lo != hi)
    ADA_THROW(ConfigError)
        << in_path << ": its tensor names or shapes differ from another rank's "
        << "file; every rank's file must hold the same tensors in the same order";
  Tensor bucket = Tensor::empty({total});
  for (size_t i = 0; i < spans.size(); ++i)
    bucket.narrow(spans[i].offset, spans[i].numel).copy_from(nt.tensors[i].second);
  reducer->reduce(bucket, spans, *world);
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < spans.size(); ++i)
    out.emplace_back(
        nt.tensors[i].first,
        bucket.narrow(spans[i].offset, spans[i].numel).reshape(nt.tensors[i].second.shape()));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  ADA_CHECK_ARG(!ec, IoError) << "--out " << out_dir << ": cannot create the folder ("
                              << ec.message() << "); give a folder you can write";
  const std::string out_path = out_dir + "/rank" + std::to_string(mpi.rank()) + ".safetensors";
  save_safetensors(out_path, out,
                   {{"reducer", reducer_name}, {"world_size", std::to_string(mpi.size())}});
  world->barrier();
  if (mpi.rank() == 0)
    log_info("reduce_tool: reduced " + std::to_string(spans.size()) + " tensors (" +
             std::to_string(total) + " floats) with '" + reducer_name + "' over " +
             std::to_string(mpi.size()) + " ranks into " + out_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ada::comm::MpiRuntime mpi(&argc, &argv);
  ada::init_logging(mpi.rank(), mpi.size());
  try {
    return run(argc, argv, mpi);
  } catch (const std::exception& e) {
    ada::log_error(std::string("reduce_tool: ") + e.what());
    ada::flush_log();
    ada::comm::MpiRuntime::abort(1);
  }
}
