#include "apps/trainer/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "apps/common/cli.h"
#include "apps/common/version.h"
#include "apps/trainer/checkpoint.h"
#include "apps/trainer/datasets.h"
#include "apps/trainer/straggler.h"
#include "base/atomic_file.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/timeline.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_communicator.h"
#include "core/backend/cuda_runtime.h"
#include "core/cpu_isa.h"
#include "core/functional.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "data/data_loader.h"
#include "nn/init.h"
#include "nn/model.h"
#include "optim/checkpoint.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "sync/strategy.h"

namespace ada::trainer {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string config;
  std::vector<std::string> sets;
  std::string resume;
  bool describe = false;
};

// Parsed arguments, or nullopt after --help or --version.
std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
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
                       std::string("trainer (Adatrain) built from commit ") + build_commit(),
                       "print the commit this trainer was built from, then exit");
  if (!cli::parse_command_line(
          app, argc, argv,
          "trainer --config FILE [--set key.path=value ...] [--resume auto|PATH] [--describe]"))
    return std::nullopt;
  return a;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = static_cast<long>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

// FNV-1a over strings, for the start-up agreement check.
uint64_t fnv(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Fails unless every rank holds the same value; names the ranks that differ.
void require_same_on_all_ranks(comm::Communicator& comm, uint64_t value, const std::string& what) {
  std::vector<double> all(comm.size());
  const double mine = static_cast<double>(value >> 11);  // exact in a double
  comm.allgather(&mine, 1, all.data());
  std::string differ;
  for (int r = 1; r < comm.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  ADA_CHECK_ARG(differ.empty(), ConfigError)
      << what << " differs between rank 0 and rank(s) " << differ
      << "; every rank must run the same config and code (check --set arguments and binaries)";
}

// Runs `decide` on rank 0 only and hands its result to every rank. If it throws, rank 0 rethrows
// and every other rank throws the same message, so all stop together (none waits for the others).
std::string decide_on_rank0(comm::Communicator& comm, const std::function<std::string()>& decide) {
  std::string text;
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      text = decide();
    } catch (const std::exception& e) {
      error = std::current_exception();
      text = e.what();
    }
  }
  double failed = error ? 1.0 : 0.0;
  comm.allreduce(&failed, 1, comm::ReduceOp::max);
  text = comm::broadcast_string(comm, text, 0);
  if (error) std::rethrow_exception(error);
  ADA_CHECK_ARG(failed == 0.0, Error) << "rank 0 stopped the run: " << text;
  return text;
}

struct Settings {
  int64_t epochs = 0, steps = 0, batch = 32, micro = 1, eval_every = 0, log_every = 50;
  int64_t checksum_every = 100, ckpt_every = 0, max_eval_batches = 0;
  uint64_t seed = 1;
  int threads = 0, ckpt_keep = 3;
  bool skip_nonfinite = false, ckpt_overwrite = false;
  double clip = 0;
  std::string out_dir, ckpt_dir, timeline;
  Device device;  // train.device: where the model, its optimizer state and the batches live
  Precision precision = Precision::fp32;  // train.precision (core/precision.h)
  std::string comm = "auto", comm_where;  // train.comm: the step's communicator
};

// train.device: "cpu", "cuda" (this rank's node-local index modulo the visible GPUs) or
// "cuda:N". A GPU that cannot be used is a ConfigError naming the key and why.
Device read_device(const Config& t, int local_rank) {
  const std::string s = t.get_or<std::string>("device", "cpu");
  if (s == "cpu") return Device::cpu();
  int index = -1;
  if (s == "cuda") {
    index = cuda::device_count() > 0 ? local_rank % cuda::device_count() : 0;
  } else if (s.rfind("cuda:", 0) == 0 && s.size() > 5 &&
             s.find_first_not_of("0123456789", 5) == std::string::npos && s.size() < 9) {
    index = std::stoi(s.substr(5));
  } else {
    ADA_THROW(ConfigError) << t.where("device") << ": unknown device '" << s
                           << "'; known: cpu, cuda, cuda:N (N a GPU index)";
  }
  try {
    cuda::require_device(index);
  } catch (const DeviceError& e) {
    ADA_THROW(ConfigError) << t.where("device") << ": " << e.what()
                           << "; train on the CPU with train.device: cpu";
  }
  return Device::cuda(index);
}

// train.precision: fp32 (default), bf16 or fp16: the matrix products (linear layers, attention,
// convolutions) take bf16/fp16 inputs and accumulate in fp32, everything else stays fp32
// (core/precision.h; on a GPU cuBLAS's bf16/fp16 products, TF32 or fp16 convolutions). fp16 is
// CUDA only.
Precision read_precision(const Config& t, const Device& device) {
  const std::string s = t.get_or<std::string>("precision", "fp32");
  if (s == "fp32") return Precision::fp32;
  ADA_CHECK_ARG(s == "bf16" || s == "fp16", ConfigError)
      << t.where("precision") << ": unknown precision '" << s << "'; known: fp32, bf16, fp16";
  if (!device.is_cpu()) return s == "bf16" ? Precision::bf16 : Precision::fp16;
  ADA_CHECK_ARG(s == "bf16", ConfigError)
      << t.where("precision")
      << ": fp16 is not supported on the CPU (no fp16 dot products); "
         "use bf16 on a CPU with AVX512_BF16, or fp32";
  std::string why;
  ADA_CHECK_ARG(cpu::bf16_available(&why), ConfigError)
      << t.where("precision") << ": bf16 needs the CPU's bf16 dot products, but " << why
      << "; use precision: fp32 on this machine";
  return Precision::bf16;
}

// train.loss_scale: none, dynamic or a positive number (a static scale); absent: dynamic with
// precision fp16, none otherwise. train.loss_scale_init (dynamic's start, default 65536) and
// train.loss_scale_growth_interval (default 2000) tune the dynamic rule (optim/loss_scale.h).
std::optional<optim::LossScaleOptions> read_loss_scale(const Config& t, Precision precision) {
  const std::string s =
      t.get_or<std::string>("loss_scale", precision == Precision::fp16 ? "dynamic" : "none");
  const bool tuned = t.has("loss_scale_init") || t.has("loss_scale_growth_interval");
  ADA_CHECK_ARG(s == "dynamic" || !tuned, ConfigError)
      << t.where(t.has("loss_scale_init") ? "loss_scale_init" : "loss_scale_growth_interval")
      << ": tunes dynamic loss scaling, but train.loss_scale is '" << s
      << "'; set loss_scale: dynamic or drop it";
  if (s == "none") {
    if (precision == Precision::fp16)
      log_warn(
          "{}: fp16 without loss scaling: small gradients may flush to zero in the fp16 products; "
          "loss_scale: dynamic is the usual choice",
          t.where("loss_scale"));
    return std::nullopt;
  }
  optim::LossScaleOptions o;
  if (s == "dynamic") {
    o.init = t.get_or<double>("loss_scale_init", o.init);
    o.growth_interval = t.get_or<int64_t>("loss_scale_growth_interval", o.growth_interval);
    ADA_CHECK_ARG(std::isfinite(o.init) && o.init >= 1 && o.init <= optim::kMaxLossScale,
                  ConfigError)
        << t.where("loss_scale_init")
        << ": must be a number from 1 to 2^64 (powers of two keep the "
        << "scaling exact), got " << o.init;
    ADA_CHECK_ARG(o.growth_interval >= 1, ConfigError)
        << t.where("loss_scale_growth_interval") << ": must be >= 1 step, got "
        << o.growth_interval;
    return o;
  }
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  ADA_CHECK_ARG(
      end != s.c_str() && *end == '\0' && std::isfinite(v) && v > 0 && v <= optim::kMaxLossScale,
      ConfigError)
      << t.where("loss_scale")
      << ": must be none, dynamic or a positive number up to 2^64 (a static "
      << "scale), got '" << s << "'";
  o.dynamic = false;
  o.init = v;
  return o;
}

class Trainer {
 public:
  Trainer(const Args& args, comm::MpiRuntime& mpi) : args_(args), mpi_(mpi) {}
  int run();

 private:
  void setup();
  void train_step();
  void flush_due(double lr);
  std::map<std::string, double> evaluate();
  void save_checkpoint();
  void add_step_state(NamedTensors& st) const;
  void load_step_state(const NamedTensors& st);
  void resume(const std::string& path);
  // A fresh run: refuses a checkpoint folder holding another run's checkpoints (unless
  // checkpoint.overwrite), removes a crash's leftover temporaries, gives the run its id.
  void start_fresh();
  void log_metrics(const nlohmann::ordered_json& record);
  void progress(double loss, double lr, double samples_per_s, bool force);
  double params_checksum() const;
  // The model's parameters, listed once after it is built (the list never changes).
  const std::vector<Param>& params() const { return params_; }
  // Rank 0's parameters and buffers (or only buffers: BN running statistics) to every rank.
  void broadcast_state(bool buffers_only = false);
  // train.comm: the communicator of the step's reductions (collective: every rank agrees).
  comm::Communicator& step_comm();
  // train.timeline: each rank records into PATH.rank<r>; rank 0 merges them into PATH at the end.
  void open_timeline();
  void close_timeline();
  std::string timeline_rank_file(int rank) const {
    return s_.timeline + ".rank" + std::to_string(rank);
  }

  Args args_;
  comm::MpiRuntime& mpi_;
  std::unique_ptr<comm::MpiCommunicator> world_;
  std::unique_ptr<comm::Communicator> device_comm_;  // NCCL over world_'s ranks (train.comm)
  std::optional<Config> cfg_;
  Settings s_;
  std::unique_ptr<nn::Model> model_;
  std::vector<Param> params_;
  DataSets data_;
  std::unique_ptr<data::DataLoader> train_loader_;
  // train.device cuda: batches go through pinned memory on a copy stream, overlapping the
  // previous step's tail on the GPU (core/backend/cuda_runtime.h).
  std::unique_ptr<cuda::BatchUploader> uploader_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<comm::Reducer> reducer_;
  std::unique_ptr<sync::Strategy> strategy_;
  std::optional<Straggler> straggler_;           // train.straggler: injected delays
  std::optional<optim::LossScaler> loss_scale_;  // train.loss_scale (absent: off)
  std::unique_ptr<Checkpointer> ckpt_;
  std::string reducer_name_;
  int64_t step_ = 0, total_steps_ = 0, steps_per_epoch_ = 0, epoch_ = 0;
  double wall_offset_ = 0;
  Clock::time_point start_;
  double comm_seconds_ = 0, compute_seconds_ = 0, exposed_seconds_ = 0;
  std::ofstream metrics_;
  bool tty_ = false;
  Clock::time_point last_progress_{};
  int64_t skipped_ = 0;
  int64_t start_step_ = 0;  // step at which this process started (after a resume)
  int64_t last_ckpt_step_ = -1;
  std::string init_from_;  // checkpoint (file or folder) whose model weights start a fresh run
  double window_loss_ = 0, window_seconds_ = 0, window_comm_ = 0,
         window_exposed_ = 0;  // since the last metrics line
  int64_t window_steps_ = 0;
  double last_mean_loss_ = 0;
  bool log_due_ = false, checksum_due_ = false;  // waiting for a step where replicas agree
  sync::StrategySpec spec_;
};

void Trainer::setup() {
  world_ = comm::MpiCommunicator::world();
  const int rank = world_->rank(), world = world_->size();
  Config cfg = Config::load_file(args_.config);
  for (const auto& s : args_.sets) cfg.set_override(s);

  // ---- train / output / checkpoint settings -------------------------------------------------
  Config t = cfg.child("train");
  s_.epochs = t.get_or<int64_t>("epochs", 0);
  s_.steps = t.get_or<int64_t>("steps", 0);
  ADA_CHECK_ARG((s_.epochs > 0) != (s_.steps > 0), ConfigError)
      << t.where() << ": set exactly one of train.epochs or train.steps to a positive number";
  s_.batch = t.get_or<int64_t>("batch_per_rank", 32);
  ADA_CHECK_ARG(s_.batch > 0, ConfigError)
      << t.where("batch_per_rank") << ": must be positive, got " << s_.batch;
  s_.micro = t.get_or<int64_t>("micro_batches", 1);
  ADA_CHECK_ARG(s_.micro > 0, ConfigError)
      << t.where("micro_batches") << ": must be positive, got " << s_.micro;
  s_.eval_every = t.get_or<int64_t>("eval_every", 0);
  ADA_CHECK_ARG(s_.eval_every >= 0, ConfigError)
      << t.where("eval_every") << ": must be >= 0 (0: each epoch's end), got " << s_.eval_every;
  s_.max_eval_batches = t.get_or<int64_t>("max_eval_batches", 0);
  ADA_CHECK_ARG(s_.max_eval_batches >= 0, ConfigError)
      << t.where("max_eval_batches") << ": must be >= 0 (0: all), got " << s_.max_eval_batches;
  s_.log_every = t.get_or<int64_t>("log_every", 50);
  ADA_CHECK_ARG(s_.log_every >= 1, ConfigError)
      << t.where("log_every") << ": must be at least 1 (steps per log line), got " << s_.log_every;
  s_.seed = static_cast<uint64_t>(t.get_or<int64_t>("seed", 1));
  s_.threads = t.get_or<int>("threads", 0);
  s_.checksum_every = t.get_or<int64_t>("checksum_every", 100);
  s_.clip = t.get_or<double>("clip_grad_norm", 0.0);
  ADA_CHECK_ARG(s_.threads >= 0, ConfigError)
      << t.where("threads") << ": must be >= 0 (0: the node's cores shared among its ranks), got "
      << s_.threads;
  ADA_CHECK_ARG(s_.checksum_every >= 0, ConfigError)
      << t.where("checksum_every") << ": must be >= 0 (0: off), got " << s_.checksum_every;
  ADA_CHECK_ARG(s_.clip >= 0, ConfigError)
      << t.where("clip_grad_norm") << ": must be >= 0 (0: off), got " << s_.clip;
  init_from_ = t.get_or<std::string>("init_from", "");
  s_.timeline = t.get_or<std::string>("timeline", "");
  s_.device = read_device(t, world_->local_rank());
  s_.precision = read_precision(t, s_.device);
  if (auto o = read_loss_scale(t, s_.precision)) loss_scale_.emplace(*o);
  s_.comm = t.get_or<std::string>("comm", "auto");
  s_.comm_where = t.where("comm");
  ADA_CHECK_ARG(s_.comm == "auto" || s_.comm == "mpi" || s_.comm == "nccl", ConfigError)
      << s_.comm_where << ": unknown communicator '" << s_.comm
      << "'; known: auto (NCCL for a CUDA run with a GPU per rank, else MPI), mpi, nccl";
  ADA_CHECK_ARG(s_.comm != "nccl" || !s_.device.is_cpu(), ConfigError)
      << s_.comm_where
      << ": nccl reduces CUDA device buffers; set train.device: cuda, or comm: mpi";
  if (s_.device.is_cpu())
    set_cpu_matmul_precision(s_.precision);
  else
    set_cuda_matmul_precision(s_.precision);
  if (t.has("straggler")) straggler_.emplace(t.child("straggler"), world);
  const std::string nonfinite = t.get_or<std::string>("on_nonfinite", "stop");
  ADA_CHECK_ARG(nonfinite == "stop" || nonfinite == "skip", ConfigError)
      << t.where("on_nonfinite") << ": must be 'stop' or 'skip', got '" << nonfinite << "'";
  s_.skip_nonfinite = nonfinite == "skip";

  Config red = cfg.child("reducer");
  reducer_name_ = red.get<std::string>("name");
  const std::string stem = fs::path(args_.config).stem().string();
  Config out = cfg.has("output") ? cfg.child("output") : Config::parse("{}", "defaults");
  s_.out_dir = out.get_or<std::string>("dir", "runs/" + stem + "-np" + std::to_string(world));
  Config ck = cfg.has("checkpoint") ? cfg.child("checkpoint") : Config::parse("{}", "defaults");
  s_.ckpt_dir = ck.get_or<std::string>("dir", s_.out_dir + "/checkpoints");
  s_.ckpt_every = ck.get_or<int64_t>("every", 0);
  ADA_CHECK_ARG(s_.ckpt_every >= 0, ConfigError)
      << ck.where("every") << ": must be >= 0 (0: at the end of every epoch), got "
      << s_.ckpt_every;
  s_.ckpt_keep = ck.get_or<int>("keep", 3);
  ADA_CHECK_ARG(s_.ckpt_keep >= 1, ConfigError)
      << ck.where("keep")
      << ": must be at least 1 (the newest valid checkpoint is always kept), got " << s_.ckpt_keep;
  s_.ckpt_overwrite = ck.get_or<bool>("overwrite", false);
  ckpt_ = std::make_unique<Checkpointer>(s_.ckpt_dir, s_.ckpt_keep);

  // Threads: the node's cores shared among its ranks, unless set.
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set_num_threads(s_.threads > 0 ? s_.threads : std::max(1, hw / world_->local_size()));

  comm::ReducerRegistry reducers("reducer");
  comm::register_builtin_reducers(reducers);
  reducer_ = reducers.get(reducer_name_, red.where("name"))(red);

  // ---- model ---------------------------------------------------------------------------------
  nn::ModelRegistry models("model");
  nn::register_builtin_models(models);
  Config mc = cfg.child("model");
  const auto& make_model = models.get(mc.get<std::string>("name"), mc.where("name"));
  {
    std::optional<nn::init::ShapesOnly> shapes;
    if (args_.describe) shapes.emplace();
    model_ = make_model(mc, s_.seed);
  }
  model_->rng().set_state(s_.seed * 1000003ull + static_cast<uint64_t>(rank), 0);
  params_ = model_->parameters();

  // ---- data ----------------------------------------------------------------------------------
  Config dc = cfg.child("data");
  const int workers = dc.get_or<int>("workers", 1);
  const int prefetch = dc.get_or<int>("prefetch", 0);
  ADA_CHECK_ARG(workers >= 0, ConfigError)
      << dc.where("workers") << ": must be >= 0 (0: load on the training thread), got " << workers;
  ADA_CHECK_ARG(prefetch >= 0, ConfigError)
      << dc.where("prefetch") << ": must be >= 0 (0: 2 x workers), got " << prefetch;
  if (!args_.describe) data_ = make_datasets(dc, mc, s_.seed);
  if (!args_.describe) check_eval_keys(data_, t);

  // ---- optimizer, schedule, reducer -----------------------------------------------------------
  optim::OptimizerRegistry optimizers("optimizer");
  optim::register_builtin_optimizers(optimizers);
  optimizer_ = optim::make_optimizer(optimizers, cfg.child("optimizer"));
  if (!args_.describe) {
    // Steps per epoch as the loader will make them (drop_last sharding, whole batches only).
    const int64_t per_rank = data_.train->size() / world;
    steps_per_epoch_ = per_rank / s_.batch / s_.micro;
    ADA_CHECK_ARG(steps_per_epoch_ > 0, ConfigError)
        << "data: " << data_.train->describe() << " gives " << per_rank << " examples per rank on "
        << world
        << " ranks, fewer than train.batch_per_rank x train.micro_batches = " << s_.batch * s_.micro
        << "; lower them or use fewer ranks";
    total_steps_ = s_.steps > 0 ? s_.steps : s_.epochs * steps_per_epoch_;
    // Decaying schedules end at the run's last step unless the config says otherwise.
    if (cfg.has("schedule") && !cfg.has("schedule.total_steps")) {
      const std::string sn = cfg.child("schedule").get_or<std::string>("name", "constant");
      if (sn == "cosine" || sn == "polynomial" || sn == "linear")
        cfg.set_override(
            "schedule.total_steps=" + std::to_string(total_steps_),
            "derived from " +
                std::string(s_.steps > 0 ? "train.steps" : "train.epochs x steps per epoch") +
                " = " + std::to_string(total_steps_));
    }
  }
  Config sc =
      cfg.has("schedule") ? cfg.child("schedule") : Config::parse("{name: constant}", "defaults");
  const double base_lr = optim::scaled_lr(optimizer_->lr(), reducer_name_, world,
                                          optim::read_lr_scaling(sc, reducer_name_));
  optim::ScheduleRegistry schedules("schedule");
  optim::register_builtin_schedules(schedules);
  schedule_ = optim::make_schedule(schedules, sc, base_lr);
  spec_ = sync::read_strategy_spec(cfg, *reducer_, world);
  if (!s_.device.is_cpu()) {
    // The decentralised syncs keep flat host copies of the model (sync/model_average.h): not on
    // a GPU yet.
    ADA_CHECK_ARG(spec_.sync == "none", ConfigError)
        << cfg.where("sync.name") << ": sync '" << spec_.sync << "' on " << s_.device.str()
        << " is not supported yet; use sync: none or train.device: cpu";
    if (world == 1 && spec_.target == comm::ReduceTarget::model_delta) {
      log_info(
          "one rank on {}: the model-delta target is the optimizer's own step there; "
          "gradients are used (same update)",
          s_.device.str());
      spec_.target = comm::ReduceTarget::gradients;
    }
  }
  comm::BucketOptions bo;
  bo.bucket_bytes = static_cast<int64_t>(red.get_or<double>("bucket_mb", 25.0) * (1 << 20));
  bo.first_bucket_bytes =
      static_cast<int64_t>(red.get_or<double>("first_bucket_mb", 1.0) * (1 << 20));
  cfg_.emplace(cfg);
  if (args_.describe) {  // the data section is not read: no finish() check
    if (rank == 0) std::cout << model_->describe();
    return;
  }
  cfg.finish();  // every key was read by someone: typos stop here, on every rank alike

  // ---- agreement before any other collective, then rank 0's weights everywhere ---------------
  uint64_t h = cfg.hash();
  for (const auto& p : params()) h = fnv(h, p.name + shape_str(p.var.value().shape()));
  require_same_on_all_ranks(*world_, h, "the config or the model's parameter names/shapes");
  if (!init_from_.empty()) {  // e.g. BERT phase 2 from phase 1: weights only, fresh optimizer
    const std::string where = cfg.where("train.init_from");
    const std::string path = decide_on_rank0(*world_, [&] {
      std::string p = init_from_;
      if (fs::is_directory(p)) {
        auto choice = Checkpointer(p, 1).choose();
        std::string why;
        for (const auto& r : choice.rejected) why += "\n  rejected " + r.path + ": " + r.reason;
        ADA_CHECK_ARG(choice.path.has_value(), IoError)
            << where << ": no valid checkpoint in " << p << why;
        p = *choice.path;
      } else {
        Checkpointer::validate(p);
      }
      // Rank 0's weights go to every rank with the broadcast below.
      model_->load_state(optim::take_prefixed(Checkpointer::read_tensors(p), "model."));
      return p;
    });
    log_info("model weights initialised from {}", path);
  }
  broadcast_state();
  if (!s_.device.is_cpu()) {
    model_->to(s_.device);
    params_ = model_->parameters();
    uploader_ = std::make_unique<cuda::BatchUploader>(s_.device.index);
    log_info("device {} ({})", s_.device.str(), cuda::device_name(s_.device.index));
  }
  sync::StrategyOptions so_;
  so_.clip_grad_norm = s_.clip;
  so_.skip_nonfinite = s_.skip_nonfinite;
  so_.loss_scale = loss_scale_ ? &*loss_scale_ : nullptr;
  so_.buckets = bo;
  strategy_ = sync::make_strategy(spec_, {params_, *optimizer_, step_comm(), *reducer_}, so_);

  data::SamplerOptions so;
  so.rank = rank;
  so.world = world;
  so.seed = s_.seed;
  so.shuffle = true;
  so.drop_last = true;
  data::LoaderOptions lo;
  lo.batch_size = s_.batch;
  lo.num_workers = workers;
  lo.prefetch = prefetch;
  lo.drop_last_batch = true;
  train_loader_ = std::make_unique<data::DataLoader>(
      data_.train, data::DistributedSampler(data_.train->size(), so), lo);
  ADA_CHECK(train_loader_->batches_per_epoch() / s_.micro == steps_per_epoch_)
      << "loader makes " << train_loader_->batches_per_epoch() << " batches per epoch";

  decide_on_rank0(*world_, [&] {
    std::error_code ec;
    fs::create_directories(s_.out_dir, ec);
    ADA_CHECK_ARG(!ec, IoError) << cfg.where("output.dir") << ": cannot create the run folder "
                                << s_.out_dir << " (" << ec.message()
                                << "); choose a writable output.dir";
    write_file_atomically(s_.out_dir + "/config.yaml", cfg.dump());
    return std::string();
  });
  tty_ = isatty(STDERR_FILENO);
  log_info("trainer built from commit {}", build_commit());
  log_info(
      "{} ranks, {} threads each (cpu kernels {}); precision {}{}; model {} ({} parameters); "
      "sync {}; {} steps of {} x {} examples per rank; data: {}",
      world, num_threads(), cpu::isa_description(), precision_name(s_.precision),
      loss_scale_ ? ", loss scale " + loss_scale_->describe() : std::string(), model_->type_name(),
      model_->parameter_count(), strategy_->describe(), total_steps_, s_.micro, s_.batch,
      data_.train->describe());
  if (straggler_) log_info("straggler: {}", straggler_->describe());
}

comm::Communicator& Trainer::step_comm() {
  if (s_.device.is_cpu() || s_.comm == "mpi") return *world_;
  // NCCL when every rank can use it: the build has it, the library loads, and no two ranks of a
  // node share a GPU (NCCL refuses that). Decided together, so that all ranks agree.
  std::string why = comm::nccl_unavailable_reason();
  if (why.empty() && world_->local_size() > cuda::device_count())
    why = std::to_string(world_->local_size()) + " ranks share this node's " +
          std::to_string(cuda::device_count()) + " GPU(s), and NCCL needs one GPU per rank";
  double usable = why.empty() ? 1 : 0;
  world_->allreduce(&usable, 1, comm::ReduceOp::min);
  if (usable == 0 && why.empty()) why = "another rank cannot use NCCL (see its log)";
  if (!why.empty()) {
    ADA_CHECK_ARG(s_.comm != "nccl", ConfigError)
        << s_.comm_where << ": nccl is not usable: " << why
        << "; use comm: mpi (or auto), which stages device buffers through host memory";
    log_info("train.comm: MPI, staging the device buffers through host memory ({})", why);
    return *world_;
  }
  // Non-owning: device_comm_ is declared after world_, so it goes first.
  device_comm_ = comm::make_nccl_communicator(
      std::shared_ptr<comm::Communicator>(world_.get(), [](comm::Communicator*) {}),
      s_.device.index);
  log_info("train.comm: NCCL on {}", s_.device.str());
  return *device_comm_;
}

void Trainer::broadcast_state(bool buffers_only) {
  if (world_->size() == 1) return;
  for (auto& [name, t] : buffers_only ? model_->buffers() : model_->state())
    world_->broadcast(t, 0);
}

void Trainer::open_timeline() {
  // One time base for all ranks: rank 0's clock reading (steady_clock is system-wide on a node;
  // across nodes the spans are aligned only as well as the clocks are).
  double epoch = static_cast<double>(Clock::now().time_since_epoch().count());
  world_->allreduce(&epoch, 1, comm::ReduceOp::max);
  decide_on_rank0(*world_, [&] {
    const auto dir = fs::path(s_.timeline).parent_path();
    std::error_code ec;
    if (!dir.empty()) fs::create_directories(dir, ec);
    ADA_CHECK_ARG(!ec, IoError) << cfg_->where("train.timeline") << ": cannot create the folder "
                                << dir.string() << " (" << ec.message() << ")";
    return std::string();
  });
  Timeline::instance().open(timeline_rank_file(world_->rank()), world_->rank(),
                            Clock::time_point(Clock::duration(static_cast<Clock::rep>(epoch))));
  Timeline::instance().set_thread_name("main");
  world_->run_async([] { Timeline::instance().set_thread_name("communication"); })->wait();
}

void Trainer::close_timeline() {
  Timeline::instance().close();
  world_->barrier();
  if (world_->rank() != 0) return;
  std::vector<std::string> files;
  for (int r = 0; r < world_->size(); ++r) files.push_back(timeline_rank_file(r));
  Timeline::merge(files, s_.timeline);
  for (const auto& f : files) fs::remove(f);
}

double Trainer::params_checksum() const {
  double s = 0;
  for (const auto& p : params())
    s += ops::sum_all(p.var.value()) + 0.5 * ops::norm2_sq(p.var.value());
  return s;
}

void Trainer::progress(double loss, double lr, double sps, bool force) {
  if (world_->rank() != 0) return;
  const double elapsed = seconds_since(start_);
  const int64_t done = step_ - start_step_;
  const double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - step_)
               : -1;
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.1f samples/s  ETA %s",
                static_cast<long long>(step_), static_cast<long long>(total_steps_),
                static_cast<long long>(epoch_), loss, lr, sps, fmt_duration(eta).c_str());
  if (tty_) {
    if (!force && seconds_since(last_progress_) < 0.25) return;
    last_progress_ = Clock::now();
    std::fprintf(stderr, "\r%-100s%s", line, force ? "\n" : "");
    std::fflush(stderr);
  } else if (force || step_ % s_.log_every == 0) {
    log_info("{}", line);  // one line per log_every steps: logs stay readable
  }
}

void Trainer::log_metrics(const nlohmann::ordered_json& record) {
  if (world_->rank() != 0) return;
  metrics_ << record.dump() << "\n";
  metrics_.flush();
}

std::map<std::string, double> Trainer::evaluate() {
  std::map<std::string, double> sums;
  if (!data_.eval) return sums;
  NoGradGuard ng;
  model_->train(false);
  data::SamplerOptions so;
  so.rank = world_->rank();
  so.world = world_->size();
  so.shuffle = false;
  so.drop_last = false;
  data::LoaderOptions lo;
  lo.batch_size = s_.batch;
  lo.num_workers = train_loader_->options().num_workers;
  data::DistributedSampler sampler(data_.eval->size(), so);
  // Padding repeats examples to even the shards: count each index once.
  const int64_t n = data_.eval->size();
  data::DataLoader loader(data_.eval, sampler, lo);
  loader.start_epoch(0);
  double loss_sum = 0;
  int64_t batches = 0, seen = 0;
  const int64_t mine = (n - world_->rank() + world_->size() - 1) / world_->size();
  while (auto batch = loader.next()) {
    if (s_.max_eval_batches > 0 && batches >= s_.max_eval_batches) break;
    // Drop the padded tail beyond this rank's real share.
    int64_t keep = std::min<int64_t>(batch->size(), mine - seen);
    if (keep <= 0) break;
    nn::TensorMap fields;
    for (auto& [k, v] : batch->fields)
      fields[k] = (keep < batch->size() ? v.narrow(0, keep) : v).to(s_.device);
    seen += keep;
    fault_point("eval");
    auto out = model_->forward(fields);
    const double weight =
        out.metrics.count("count") ? out.metrics.at("count") : out.metrics["mlm_count"];
    loss_sum += out.loss.value().item() * weight;
    for (const auto& [k, v] : out.metrics) sums[k] += v;
    ++batches;
  }
  model_->train(true);
  std::vector<std::string> keys;
  std::vector<double> vals;
  for (const auto& [k, v] : sums) {
    keys.push_back(k);
    vals.push_back(v);
  }
  keys.push_back("loss_sum");
  vals.push_back(loss_sum);
  world_->allreduce(vals.data(), static_cast<int64_t>(vals.size()));
  std::map<std::string, double> r;
  for (size_t i = 0; i < keys.size(); ++i) r[keys[i]] = vals[i];
  return r;
}

// What the step carries from one step to the next besides the model: the optimizer's state, the
// strategy's and the loss scaler's (each rank's own where optimizer state is local).
void Trainer::add_step_state(NamedTensors& st) const {
  optim::add_prefixed(st, optimizer_->state(), "optim.");
  optim::add_prefixed(st, strategy_->state(), "sync.");
  if (loss_scale_) optim::add_prefixed(st, loss_scale_->state(), "loss_scale.");
}

void Trainer::load_step_state(const NamedTensors& st) {
  optimizer_->load_state(optim::take_prefixed(st, "optim."), params());
  strategy_->load_state(optim::take_prefixed(st, "sync."));
  if (loss_scale_) loss_scale_->load_state(optim::take_prefixed(st, "loss_scale."));
}

void Trainer::save_checkpoint() {
  if (last_ckpt_step_ == step_) return;  // already written at this step
  TraceSpan span("checkpoint", "checkpoint");
  last_ckpt_step_ = step_;
  broadcast_state(
      true);  // BN running stats: rank 0's, so the checkpoint is the model every rank has
  CheckpointMeta m;
  m.step = step_;
  auto st = train_loader_->state();
  m.epoch = st.epoch;
  m.position = st.position;
  m.world_size = world_->size();
  m.config_hash = cfg_->hash();
  m.wall_seconds = wall_offset_ + seconds_since(start_);
  std::vector<double> seeds(world_->size()), offsets(world_->size());
  const double my_seed = static_cast<double>(model_->rng().seed()),
               my_off = static_cast<double>(model_->rng().offset());
  world_->allgather(&my_seed, 1, seeds.data());
  world_->allgather(&my_off, 1, offsets.data());
  for (int r = 0; r < world_->size(); ++r) {
    m.rng_seed.push_back(static_cast<uint64_t>(seeds[r]));
    m.rng_offset.push_back(static_cast<uint64_t>(offsets[r]));
  }
  // Where optimizer state is local (model-delta, local SGD, DiLoCo, WAGMA) each rank writes its
  // own file before rank 0 completes the checkpoint with the JSON: its optimizer state, the
  // strategy's state and, between synchronisations, its own weights. The shared file then holds
  // the world-average model.
  const bool local_state = strategy_->optimizer_state_is_local() && world_->size() > 1;
  m.local_optimizer_state = local_state;
  if (local_state) {
    if (world_->rank() == 0) fs::create_directories(ckpt_->dir());
    world_->barrier();
    NamedTensors st;
    add_step_state(st);
    if (!strategy_->replicas_identical())
      for (auto& [k, v] : model_->state()) st.tensors.emplace_back("model." + k, v);
    const std::string mine = ckpt_->rank_file(step_, world_->rank());
    save_safetensors(mine, st.tensors, st.metadata);
    const FileRecord rec = Checkpointer::record_of(mine);
    const double sent[2] = {static_cast<double>(rec.bytes), static_cast<double>(rec.crc32)};
    std::vector<double> all(2 * world_->size());
    world_->allgather(sent, 2, all.data());
    for (int r = 0; r < world_->size(); ++r)
      m.files.push_back({fs::path(ckpt_->rank_file(step_, r)).filename().string(),
                         static_cast<uint64_t>(all[2 * r]), static_cast<uint32_t>(all[2 * r + 1])});
  }
  fault_point("checkpoint");  // every rank, between its own files and the shared ones
  world_->barrier();
  strategy_->with_average_model([&] {
    if (world_->rank() != 0) return;
    NamedTensors all;
    for (auto& [k, v] : model_->state()) all.tensors.emplace_back("model." + k, v);
    if (!local_state) add_step_state(all);
    optim::add_prefixed(all, schedule_->state(), "sched.");
    ckpt_->save(all.tensors, all.metadata, m);
    log_info("checkpoint at step {} written to {}", step_, ckpt_->dir());
  });
  world_->barrier();
}

void Trainer::start_fresh() {
  const std::string id = decide_on_rank0(*world_, [&] {
    for (const auto& t : remove_stale_temporaries(ckpt_->dir()))
      log_info("removed {} (left by a crash)", t);
    const auto existing = ckpt_->list();
    if (!existing.empty()) {
      ADA_CHECK_ARG(s_.ckpt_overwrite, ConfigError)
          << "checkpoint folder " << ckpt_->dir() << " already holds " << existing.size()
          << " checkpoint(s) of an earlier run (newest " << existing.front()
          << "); continue that run with --resume auto, or write this one elsewhere (output.dir or "
             "checkpoint.dir), or set checkpoint.overwrite: true to delete them";
      for (const auto& j : existing) Checkpointer::remove(j);
      log_info("checkpoint.overwrite: removed {} checkpoint(s) of an earlier run from {}",
               existing.size(), ckpt_->dir());
    }
    return new_run_id();
  });
  ckpt_->set_run_id(id);
}

void Trainer::resume(const std::string& which) {
  // Rank 0 chooses (validating every file of the checkpoint) and tells the others.
  const std::string path = decide_on_rank0(*world_, [&]() -> std::string {
    for (const auto& t : remove_stale_temporaries(ckpt_->dir()))
      log_info("removed {} (left by a crash)", t);
    if (which != "auto") {
      Checkpointer::validate(which);
      return which;
    }
    const auto choice = ckpt_->choose();
    std::string why;
    for (const auto& r : choice.rejected) why += "\n  rejected " + r.path + ": " + r.reason;
    if (!choice.path) {
      ADA_CHECK_ARG(choice.rejected.empty(), IoError)
          << "--resume auto: no valid checkpoint in " << ckpt_->dir() << why
          << "\nresume from a checkpoint you trust with --resume PATH, or start afresh without "
             "--resume "
             "(checkpoint.overwrite: true discards these)";
      return "";
    }
    if (!choice.rejected.empty()) log_warn("--resume auto: newer checkpoints are damaged:{}", why);
    return *choice.path;
  });
  if (path.empty()) {
    log_info("--resume auto: {} holds no checkpoint yet; starting fresh", ckpt_->dir());
    start_fresh();
    return;
  }
  CheckpointMeta m = Checkpointer::read_meta(path);
  ADA_CHECK_ARG(m.world_size == world_->size(), ConfigError)
      << path << ": written by a run on " << m.world_size << " ranks, this run has "
      << world_->size() << "; resume with the same number of ranks";
  ADA_CHECK_ARG(!m.local_optimizer_state || strategy_->optimizer_state_is_local(), ConfigError)
      << path
      << ": holds each rank's own optimizer state (written with a model-delta or decentralised "
      << "strategy), but this run keeps one shared optimizer state; resume with the same "
         "reducer.target";
  if (m.config_hash != cfg_->hash())
    log_warn(
        "{}: the config differs from the one that wrote this checkpoint; continuing with the new "
        "one",
        path);
  ckpt_->set_run_id(m.run_id);
  NamedTensors t = Checkpointer::read_tensors(path);
  model_->load_state(optim::take_prefixed(t, "model."));
  last_ckpt_step_ = m.step;
  if (m.local_optimizer_state) {  // this rank's own optimizer and strategy state (and weights)
    const NamedTensors mine = load_safetensors(Checkpointer::rank_file_of(path, world_->rank()));
    load_step_state(mine);
    const NamedTensors own = optim::take_prefixed(mine, "model.");
    if (!own.tensors.empty()) model_->load_state(own);
  } else {
    load_step_state(t);
  }
  schedule_->load_state(optim::take_prefixed(t, "sched."));
  const int r = world_->rank();
  if (r < static_cast<int>(m.rng_seed.size()))
    model_->rng().set_state(m.rng_seed[r], m.rng_offset[r]);
  step_ = m.step;
  epoch_ = m.epoch;
  wall_offset_ = m.wall_seconds;
  train_loader_->restore({m.epoch, m.position});
  log_info("resumed from {} (step {}, epoch {}, position {})", path, m.step, m.epoch, m.position);
}

void Trainer::train_step() {
  fault_point("step");
  const auto t0 = Clock::now();
  model_->zero_grad();
  double loss_sum = 0;
  const double lr = schedule_->lr();
  strategy_->begin_step(step_, static_cast<float>(lr));
  if (straggler_) {
    TraceSpan span("straggler delay", "compute");
    straggler_->wait(step_, world_->rank());
  }
  for (int64_t m = 0; m < s_.micro; ++m) {
    std::optional<data::Batch> batch;
    {
      TraceSpan span("data wait", "data");
      batch = train_loader_->next();
      if (!batch) {  // epoch boundary
        train_loader_->start_epoch(++epoch_);
        batch = train_loader_->next();
        ADA_CHECK_ARG(batch.has_value(), Error) << "data: an epoch produced no batch";
      }
    }
    if (uploader_) {
      TraceSpan span("copy batch to device", "data");
      batch->fields = uploader_->upload(batch->fields);
    }
    nn::ModelOutput out;
    {
      TraceSpan span("forward", "compute");
      out = model_->forward(batch->fields);
    }
    loss_sum += out.loss.value().item();
    Variable loss =
        s_.micro > 1 ? fn::scale(out.loss, 1.f / static_cast<float>(s_.micro)) : out.loss;
    TraceSpan span("backward", "compute");
    // Loss scaling: backward starts from S instead of 1; the strategy unscales (settle_step).
    Tensor seed;
    if (loss_scale_)
      seed = Tensor::full(loss.value().shape(), static_cast<float>(loss_scale_->scale()),
                          DType::f32, loss.value().device());
    // The strategy sees each final gradient of the last micro-batch (earlier ones accumulate).
    if (strategy_->wants_grad_hook() && m == s_.micro - 1)
      backward(loss, seed, [&](Variable& p) {
        fault_point("backward");
        strategy_->on_grad_ready(p);
      });
    else
      backward(loss, seed);
  }
  const double loss = loss_sum / static_cast<double>(s_.micro);
  const sync::StepResult res = strategy_->end_step(loss);
  schedule_->advance();
  ++step_;
  const double step_s = seconds_since(t0);
  const double comm_s = res.comm_seconds;
  const double sps = static_cast<double>(s_.batch * s_.micro * world_->size()) / step_s;
  if (res.applied) {
    comm_seconds_ += comm_s;
    exposed_seconds_ += res.exposed_seconds;
    compute_seconds_ += step_s - comm_s;
    window_loss_ += loss;
    window_steps_ += 1;
    window_seconds_ += step_s;
    window_comm_ += comm_s;
    window_exposed_ += res.exposed_seconds;
  } else {
    ++skipped_;  // (the bookkeeping below goes on: whether a collective runs must not depend on it)
  }
  if (step_ % s_.log_every == 0 || step_ == total_steps_) log_due_ = true;
  if (s_.checksum_every > 0 && step_ % s_.checksum_every == 0) checksum_due_ = true;
  flush_due(lr);
  progress(last_mean_loss_, lr, sps, false);
}

// Collectives of our own only where the strategy's replicas are in step (every step for gradient
// and delta sync; at world synchronisations for local SGD and WAGMA, which must not get an extra
// barrier): the metrics line and the replica checksum that became due.
void Trainer::flush_due(double lr) {
  if (!strategy_->replicas_identical()) return;
  if (log_due_) {
    log_due_ = false;
    // The loss averaged over ranks and over the steps since the last line, with the reducer's
    // diagnostics (sums and counts over ranks) in the same allreduce; times are rank 0's.
    const std::vector<std::string> stat_names = reducer_->stat_names();
    const auto stats = reducer_->take_stats();
    ADA_CHECK(stats.size() == stat_names.size())
        << "reducer " << reducer_->name() << ": " << stats.size() << " stats for "
        << stat_names.size() << " names";
    std::vector<double> agg = {window_loss_, static_cast<double>(window_steps_)};
    for (const auto& [sum, count] : stats) agg.insert(agg.end(), {sum, count});
    world_->allreduce(agg.data(), static_cast<int64_t>(agg.size()));
    last_mean_loss_ = agg[1] > 0 ? agg[0] / agg[1] : 0.0;
    if (window_steps_ > 0) {
      const double n = static_cast<double>(window_steps_);
      const double wsps =
          static_cast<double>(s_.batch * s_.micro * world_->size()) * n / window_seconds_;
      const double per_step = window_seconds_ / n, comm_per_step = window_comm_ / n;
      nlohmann::ordered_json rec = {{"step", step_},
                                    {"epoch", epoch_},
                                    {"lr", lr},
                                    {"loss", last_mean_loss_},
                                    {"samples_per_s", wsps},
                                    {"compute_s", per_step - comm_per_step},
                                    {"comm_s", comm_per_step},
                                    {"exposed_comm_s", window_exposed_ / n},
                                    {"wall_s", wall_offset_ + seconds_since(start_)}};
      for (size_t i = 0; i < stat_names.size(); ++i)
        if (agg[3 + 2 * i] > 0) rec[stat_names[i]] = agg[2 + 2 * i] / agg[3 + 2 * i];
      log_metrics(rec);
    }
    window_loss_ = window_seconds_ = window_comm_ = window_exposed_ = 0;
    window_steps_ = 0;
  }
  if (checksum_due_) {
    checksum_due_ = false;
    const double c = params_checksum();
    std::vector<double> all(world_->size());
    world_->allgather(&c, 1, all.data());
    std::string differ;
    for (int r = 1; r < world_->size(); ++r)
      if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    ADA_CHECK_ARG(differ.empty(), Error)
        << "step " << step_ << ": parameters on rank(s) " << differ
        << " differ from rank 0's (checksum " << all[0]
        << "); the replicas diverged — a reducer or a non-deterministic op is at fault";
  }
}

int Trainer::run() {
  setup();
  if (args_.describe) return 0;
  if (!args_.resume.empty())
    resume(args_.resume);
  else
    start_fresh();
  if (world_->rank() == 0) {
    // On resume keep the metric lines up to the resumed step, so curves have no duplicates.
    const std::string path = s_.out_dir + "/metrics.jsonl";
    std::vector<std::string> kept;
    if (step_ > 0) {
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);) {
        // A line cut short by a crash, or after the resumed step, is dropped.
        const auto rec = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (rec.is_object() && rec.contains("step") && rec["step"].is_number_integer() &&
            rec["step"].get<int64_t>() <= step_)
          kept.push_back(line);
      }
    }
    metrics_.open(path, std::ios::trunc);
    for (const auto& l : kept) metrics_ << l << "\n";
  }
  if (step_ == 0) train_loader_->start_epoch(0);
  if (!s_.timeline.empty()) open_timeline();
  start_ = Clock::now();
  start_step_ = step_;
  // Replicas identical at the start (unless resumed between a decentralised sync's averages).
  if (strategy_->replicas_identical()) checksum_due_ = true;
  flush_due(schedule_->lr());
  std::map<std::string, double> last_eval;
  int64_t last_eval_step = -1;
  auto run_eval = [&] {
    if (!data_.eval || last_eval_step == step_) return;
    last_eval_step = step_;
    broadcast_state(true);
    TraceSpan span("evaluation", "eval");
    std::map<std::string, double> e;
    strategy_->with_average_model([&] { e = evaluate(); });  // decentralised: the average model
    nlohmann::ordered_json rec = {{"step", step_}, {"epoch", epoch_}};
    if (e.count("count") && e["count"] > 0) {
      rec["eval_loss"] = e["loss_sum"] / e["count"];
      rec["eval_top1"] = e["correct"] / e["count"];
      log_info("eval at step {}: top-1 {:.4f} ({:.0f}/{:.0f}), loss {:.4f}", step_,
               e["correct"] / e["count"], e["correct"], e["count"], e["loss_sum"] / e["count"]);
    }
    if (e.count("mlm_count") && e["mlm_count"] > 0) {
      // The MLM loss alone (the model's loss also holds NSP's when enabled).
      rec["eval_mlm_loss"] = e["mlm_loss_sum"] / e["mlm_count"];
      rec["eval_mlm_accuracy"] = e["mlm_correct"] / e["mlm_count"];
      log_info("eval at step {}: MLM accuracy {:.4f}, MLM loss {:.4f}", step_,
               e["mlm_correct"] / e["mlm_count"], e["mlm_loss_sum"] / e["mlm_count"]);
      if (e.count("nsp_count") && e["nsp_count"] > 0)
        rec["eval_nsp_accuracy"] = e["nsp_correct"] / e["nsp_count"];
    }
    rec["wall_s"] = wall_offset_ + seconds_since(start_);
    log_metrics(rec);
    last_eval = e;
  };
  while (step_ < total_steps_) {
    train_step();
    const bool epoch_end = step_ % steps_per_epoch_ == 0;
    if ((s_.eval_every > 0 && step_ % s_.eval_every == 0) || (s_.eval_every == 0 && epoch_end)) {
      if (tty_ && world_->rank() == 0) std::fprintf(stderr, "\n");  // keep the progress line
      run_eval();
    }
    if ((s_.ckpt_every > 0 && step_ % s_.ckpt_every == 0) || (s_.ckpt_every == 0 && epoch_end))
      save_checkpoint();
  }
  if (!strategy_->replicas_identical()) {  // stopped between synchronisations: one more
    strategy_->finish();
    last_eval_step = last_ckpt_step_ = -1;  // the model changed: evaluate and save it again
  } else {
    strategy_->finish();
  }
  flush_due(schedule_->lr());
  run_eval();  // the final model's figures (skipped if this step was just evaluated)
  save_checkpoint();
  if (!s_.timeline.empty()) close_timeline();
  const double wall = wall_offset_ + seconds_since(start_);
  // The strategy's counters, summed over ranks; the largest peak resident memory of any rank.
  std::map<std::string, double> stats = strategy_->stats();
  for (auto& [k, v] : stats) world_->allreduce(&v, 1);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double peak_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  world_->allreduce(&peak_mb, 1, comm::ReduceOp::max);
  double gpu_peak_mb = 0;
  if (!s_.device.is_cpu())
    gpu_peak_mb =
        static_cast<double>(cuda::memory_stats(s_.device.index).peak_allocated) / (1 << 20);
  if (world_->rank() == 0) {
    nlohmann::ordered_json sum = {
        {"steps", step_},
        {"world_size", world_->size()},
        {"commit", build_commit()},
        {"reducer", reducer_name_},
        {"sync", strategy_->describe()},
        {"model", model_->type_name()},
        {"wall_seconds", wall},
        {"compute_seconds", compute_seconds_},
        {"comm_seconds", comm_seconds_},
        {"exposed_comm_seconds", exposed_seconds_},
        {"skipped_steps", skipped_},
        {"peak_rss_mb_max_rank", peak_mb},
        {"device", s_.device.str()},
        {"comm", device_comm_ ? device_comm_->backend() : world_->backend()},
        {"precision", precision_name(s_.precision)},
        {"cpu_isa", cpu::isa_name(cpu::isa())}};
    if (!s_.device.is_cpu()) sum["gpu_peak_allocated_mb"] = gpu_peak_mb;
    if (loss_scale_) {  // rank 0's (each rank's own where strategies decide alone)
      sum["loss_scale"] = loss_scale_->scale();
      sum["loss_scale_overflows"] = loss_scale_->overflows();
    }
    if (last_eval.count("count") && last_eval["count"] > 0) {
      sum["eval_top1"] = last_eval["correct"] / last_eval["count"];
      sum["eval_loss"] = last_eval["loss_sum"] / last_eval["count"];
    }
    if (last_eval.count("mlm_count") && last_eval["mlm_count"] > 0) {
      sum["eval_mlm_accuracy"] = last_eval["mlm_correct"] / last_eval["mlm_count"];
      sum["eval_mlm_loss"] = last_eval["mlm_loss_sum"] / last_eval["mlm_count"];
    }
    for (const auto& [k, v] : stats) sum[k] = v;
    std::ofstream(s_.out_dir + "/summary.json") << sum.dump(2) << "\n";
    if (tty_) std::fprintf(stderr, "\n");
    log_info("done: {} steps in {}; metrics in {}/metrics.jsonl, summary in {}/summary.json", step_,
             fmt_duration(wall), s_.out_dir, s_.out_dir);
    if (!s_.timeline.empty())
      log_info("timeline (Chrome trace; open in ui.perfetto.dev): {}", s_.timeline);
    if (last_eval.count("count") && last_eval["count"] > 0)
      std::printf("test accuracy: %.2f%% (%.0f/%.0f)\n",
                  100.0 * last_eval["correct"] / last_eval["count"], last_eval["correct"],
                  last_eval["count"]);
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv, comm::MpiRuntime& mpi) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) return 0;  // --help or --version
  // Not destroyed when run() throws: its destructors would wait for communication that the
  // other ranks may never complete. main() logs the error and aborts every rank instead.
  auto* t = new Trainer(*args, mpi);
  const int rc = t->run();
  delete t;
  return rc;
}

}  // namespace ada::trainer
