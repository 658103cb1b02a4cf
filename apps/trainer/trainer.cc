#include "apps/trainer/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "apps/trainer/checkpoint.h"
#include "apps/trainer/datasets.h"
#include "comm/bucketer.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/log.h"
#include "core/functional.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "data/data_loader.h"
#include "nn/init.h"
#include "nn/model.h"
#include "optim/checkpoint.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace ada::trainer {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: trainer --config FILE [--set key.path=value ...] [--resume auto|PATH] [--describe]";

struct Args {
  std::string config;
  std::vector<std::string> sets;
  std::string resume;
  bool describe = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      ADA_CHECK_ARG(i + 1 < argc, ConfigError) << "command line: " << arg << " needs a value; " << kUsage;
      return argv[++i];
    };
    if (arg == "--config") a.config = value();
    else if (arg == "--set") a.sets.push_back(value());
    else if (arg.rfind("--set=", 0) == 0) a.sets.push_back(arg.substr(6));
    else if (arg == "--resume") a.resume = value();
    else if (arg == "--describe") a.describe = true;
    else ADA_THROW(ConfigError) << "command line: unknown argument '" << arg << "'; " << kUsage;
  }
  ADA_CHECK_ARG(!a.config.empty(), ConfigError) << "command line: --config FILE is required; " << kUsage;
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

struct Settings {
  int64_t epochs = 0, steps = 0, batch = 32, micro = 1, eval_every = 0, log_every = 50;
  int64_t checksum_every = 100, ckpt_every = 0, max_eval_batches = 0;
  uint64_t seed = 1;
  int threads = 0, ckpt_keep = 3;
  bool skip_nonfinite = false;
  double clip = 0;
  std::string out_dir, ckpt_dir;
};

class Trainer {
 public:
  Trainer(const Args& args, comm::MpiRuntime& mpi) : args_(args), mpi_(mpi) {}
  int run();

 private:
  void setup();
  void train_step();
  std::map<std::string, double> evaluate();
  void save_checkpoint();
  void resume(const std::string& path);
  void log_metrics(const std::string& json_line);
  void progress(double loss, double lr, double samples_per_s, bool force);
  double params_checksum() const;
  // The model's parameters, listed once after it is built (the list never changes).
  const std::vector<Param>& params() const { return params_; }
  // Rank 0's parameters and buffers (or only buffers: BN running statistics) to every rank.
  void broadcast_state(bool buffers_only = false);

  Args args_;
  comm::MpiRuntime& mpi_;
  std::unique_ptr<comm::MpiCommunicator> world_;
  std::optional<Config> cfg_;
  Settings s_;
  std::unique_ptr<nn::Model> model_;
  std::vector<Param> params_;
  DataSets data_;
  std::unique_ptr<data::DataLoader> train_loader_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<comm::Reducer> reducer_;
  comm::ReduceTarget target_ = comm::ReduceTarget::gradients;
  std::unique_ptr<comm::GradBucketer> bucketer_;
  std::unique_ptr<Checkpointer> ckpt_;
  std::string reducer_name_;
  int64_t step_ = 0, total_steps_ = 0, steps_per_epoch_ = 0, epoch_ = 0;
  double wall_offset_ = 0;
  Clock::time_point start_;
  double comm_seconds_ = 0, compute_seconds_ = 0;
  std::ofstream metrics_;
  bool tty_ = false;
  Clock::time_point last_progress_{};
  int64_t skipped_ = 0;
  int64_t start_step_ = 0;  // step at which this process started (after a resume)
  int64_t last_ckpt_step_ = -1;
  std::string init_from_;  // checkpoint (file or folder) whose model weights start a fresh run
  double window_loss_ = 0, window_seconds_ = 0, window_comm_ = 0;  // since the last metrics line
  int64_t window_steps_ = 0;
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
  ADA_CHECK_ARG(s_.batch > 0, ConfigError) << t.where("batch_per_rank") << ": must be positive, got " << s_.batch;
  s_.micro = t.get_or<int64_t>("micro_batches", 1);
  ADA_CHECK_ARG(s_.micro > 0, ConfigError) << t.where("micro_batches") << ": must be positive, got " << s_.micro;
  s_.eval_every = t.get_or<int64_t>("eval_every", 0);
  ADA_CHECK_ARG(s_.eval_every >= 0, ConfigError) << t.where("eval_every") << ": must be >= 0 (0: each epoch's end), got " << s_.eval_every;
  s_.max_eval_batches = t.get_or<int64_t>("max_eval_batches", 0);
  ADA_CHECK_ARG(s_.max_eval_batches >= 0, ConfigError) << t.where("max_eval_batches") << ": must be >= 0 (0: all), got " << s_.max_eval_batches;
  s_.log_every = t.get_or<int64_t>("log_every", 50);
  ADA_CHECK_ARG(s_.log_every >= 1, ConfigError) << t.where("log_every") << ": must be at least 1 (steps per log line), got " << s_.log_every;
  s_.seed = static_cast<uint64_t>(t.get_or<int64_t>("seed", 1));
  s_.threads = t.get_or<int>("threads", 0);
  s_.checksum_every = t.get_or<int64_t>("checksum_every", 100);
  s_.clip = t.get_or<double>("clip_grad_norm", 0.0);
  init_from_ = t.get_or<std::string>("init_from", "");
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
  s_.ckpt_keep = ck.get_or<int>("keep", 3);
  ckpt_ = std::make_unique<Checkpointer>(s_.ckpt_dir, s_.ckpt_keep);

  // Threads: the node's cores shared among its ranks, unless set.
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set_num_threads(s_.threads > 0 ? s_.threads : std::max(1, hw / world_->local_size()));

  comm::ReducerRegistry reducers("reducer");
  comm::register_builtin_reducers(reducers);
  reducer_ = reducers.get(reducer_name_, red.where("name"))();

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
        << "data: " << data_.train->describe() << " gives " << per_rank << " examples per rank on " << world
        << " ranks, fewer than train.batch_per_rank x train.micro_batches = " << s_.batch * s_.micro
        << "; lower them or use fewer ranks";
    total_steps_ = s_.steps > 0 ? s_.steps : s_.epochs * steps_per_epoch_;
    // Decaying schedules end at the run's last step unless the config says otherwise.
    if (cfg.has("schedule") && !cfg.has("schedule.total_steps")) {
      const std::string sn = cfg.child("schedule").get_or<std::string>("name", "constant");
      if (sn == "cosine" || sn == "polynomial" || sn == "linear")
        cfg.set_override("schedule.total_steps=" + std::to_string(total_steps_));
    }
  }
  Config sc = cfg.has("schedule") ? cfg.child("schedule") : Config::parse("{name: constant}", "defaults");
  const double base_lr = optim::scaled_lr(optimizer_->lr(), reducer_name_, world, optim::read_lr_scaling(sc));
  optim::ScheduleRegistry schedules("schedule");
  optim::register_builtin_schedules(schedules);
  schedule_ = optim::make_schedule(schedules, sc, base_lr);
  target_ = red.has("target") ? comm::target_from_name(red.get<std::string>("target"), red.where("target"))
                              : reducer_->default_target();
  comm::BucketOptions bo;
  bo.bucket_bytes = static_cast<int64_t>(red.get_or<double>("bucket_mb", 25.0) * (1 << 20));
  bo.first_bucket_bytes = static_cast<int64_t>(red.get_or<double>("first_bucket_mb", 1.0) * (1 << 20));
  cfg_.emplace(cfg);
  if (args_.describe) {  // the data section is not read: no finish() check
    if (rank == 0) std::cout << model_->describe();
    return;
  }
  cfg.finish();  // every key was read by someone: typos stop here, on every rank alike

  if (!init_from_.empty()) {  // e.g. BERT phase 2 from phase 1: weights only, fresh optimizer
    std::string path = init_from_;
    if (fs::is_directory(path)) {
      auto latest = Checkpointer(path, 1).latest();
      ADA_CHECK_ARG(latest.has_value(), IoError)
          << cfg.where("train.init_from") << ": no complete checkpoint in " << path;
      path = *latest;
    }
    model_->load_state(optim::take_prefixed(Checkpointer::read_tensors(path), "model."));
    log_info("model weights initialised from {}", path);
  }

  // ---- agreement before any other collective, then rank 0's weights everywhere ---------------
  uint64_t h = cfg.hash();
  for (const auto& p : params()) h = fnv(h, p.name + shape_str(p.var.value().shape()));
  require_same_on_all_ranks(*world_, h, "the config or the model's parameter names/shapes");
  broadcast_state();
  {
    std::vector<Variable> vars;
    for (auto& p : params()) vars.push_back(p.var);
    bucketer_ = std::make_unique<comm::GradBucketer>(std::move(vars), *world_, *reducer_, bo);
  }

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
  train_loader_ = std::make_unique<data::DataLoader>(data_.train, data::DistributedSampler(data_.train->size(), so), lo);
  ADA_CHECK(train_loader_->batches_per_epoch() / s_.micro == steps_per_epoch_)
      << "loader makes " << train_loader_->batches_per_epoch() << " batches per epoch";

  if (rank == 0) {
    fs::create_directories(s_.out_dir);
    std::ofstream(s_.out_dir + "/config.yaml") << cfg.dump();
  }
  tty_ = isatty(STDERR_FILENO);
  log_info("{} ranks, {} threads each; model {} ({} parameters); reducer {} on {}; {} steps of {} x {} "
           "examples per rank; data: {}",
           world, num_threads(), model_->type_name(), model_->parameter_count(), reducer_name_,
           comm::target_name(target_), total_steps_, s_.micro, s_.batch, data_.train->describe());
}

void Trainer::broadcast_state(bool buffers_only) {
  for (auto& [name, t] : buffers_only ? model_->buffers() : model_->state()) world_->broadcast(t, 0);
}

double Trainer::params_checksum() const {
  double s = 0;
  for (const auto& p : params()) s += ops::sum_all(p.var.value()) + 0.5 * ops::norm2_sq(p.var.value());
  return s;
}

void Trainer::progress(double loss, double lr, double sps, bool force) {
  if (world_->rank() != 0) return;
  const double elapsed = seconds_since(start_);
  const int64_t done = step_ - start_step_;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - step_) : -1;
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.1f samples/s  ETA %s",
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

void Trainer::log_metrics(const std::string& line) {
  if (world_->rank() != 0) return;
  metrics_ << line << "\n";
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
    for (auto& [k, v] : batch->fields) fields[k] = keep < batch->size() ? v.narrow(0, keep) : v;
    seen += keep;
    auto out = model_->forward(fields);
    const double weight = out.metrics.count("count") ? out.metrics.at("count") : out.metrics["mlm_count"];
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

void Trainer::save_checkpoint() {
  if (last_ckpt_step_ == step_) return;  // already written at this step
  last_ckpt_step_ = step_;
  broadcast_state(true);  // BN running stats: rank 0's, so the checkpoint is the model every rank has
  CheckpointMeta m;
  m.step = step_;
  auto st = train_loader_->state();
  m.epoch = st.epoch;
  m.position = st.position;
  m.world_size = world_->size();
  m.config_hash = cfg_->hash();
  m.wall_seconds = wall_offset_ + seconds_since(start_);
  std::vector<double> seeds(world_->size()), offsets(world_->size());
  const double my_seed = static_cast<double>(model_->rng().seed()), my_off = static_cast<double>(model_->rng().offset());
  world_->allgather(&my_seed, 1, seeds.data());
  world_->allgather(&my_off, 1, offsets.data());
  for (int r = 0; r < world_->size(); ++r) {
    m.rng_seed.push_back(static_cast<uint64_t>(seeds[r]));
    m.rng_offset.push_back(static_cast<uint64_t>(offsets[r]));
  }
  // In model-delta mode optimizer state is local and differs per rank: each rank writes its
  // own, before rank 0 completes the checkpoint with the JSON.
  const bool local_state = target_ == comm::ReduceTarget::model_delta && world_->size() > 1;
  if (local_state) {
    fs::create_directories(ckpt_->dir());
    const NamedTensors st = optimizer_->state();
    save_safetensors(ckpt_->rank_file(step_, world_->rank()), st.tensors, st.metadata);
  }
  world_->barrier();
  if (world_->rank() == 0) {
    NamedTensors all;
    for (auto& [k, v] : model_->state()) all.tensors.emplace_back("model." + k, v);
    if (!local_state) optim::add_prefixed(all, optimizer_->state(), "optim.");
    optim::add_prefixed(all, schedule_->state(), "sched.");
    ckpt_->save(all.tensors, all.metadata, m);
    log_info("checkpoint at step {} written to {}", step_, ckpt_->dir());
  }
  world_->barrier();
}

void Trainer::resume(const std::string& which) {
  std::string path = which;
  if (which == "auto") {
    auto latest = ckpt_->latest();
    if (!latest) {
      log_info("--resume auto: no checkpoint in {}, starting fresh", ckpt_->dir());
      return;
    }
    path = *latest;
  }
  CheckpointMeta m = Checkpointer::read_meta(path);
  ADA_CHECK_ARG(m.world_size == world_->size(), ConfigError)
      << path << ": written by a run on " << m.world_size << " ranks, this run has " << world_->size()
      << "; resume with the same number of ranks";
  if (m.config_hash != cfg_->hash())
    log_warn("{}: the config differs from the one that wrote this checkpoint; continuing with the new one", path);
  NamedTensors t = Checkpointer::read_tensors(path);
  model_->load_state(optim::take_prefixed(t, "model."));
  last_ckpt_step_ = m.step;
  const std::string rank_state = Checkpointer::rank_file_of(path, world_->rank());
  if (fs::exists(rank_state))  // model-delta mode: this rank's own optimizer state
    optimizer_->load_state(load_safetensors(rank_state), params());
  else
    optimizer_->load_state(optim::take_prefixed(t, "optim."), params());
  schedule_->load_state(optim::take_prefixed(t, "sched."));
  const int r = world_->rank();
  if (r < static_cast<int>(m.rng_seed.size())) model_->rng().set_state(m.rng_seed[r], m.rng_offset[r]);
  step_ = m.step;
  epoch_ = m.epoch;
  wall_offset_ = m.wall_seconds;
  train_loader_->restore({m.epoch, m.position});
  log_info("resumed from {} (step {}, epoch {}, position {})", path, m.step, m.epoch, m.position);
}

void Trainer::train_step() {
  const auto t0 = Clock::now();
  model_->zero_grad();
  double loss_sum = 0;
  std::map<std::string, double> metric_sums;
  const bool overlap = target_ == comm::ReduceTarget::gradients;
  if (overlap) bucketer_->begin_step();
  for (int64_t m = 0; m < s_.micro; ++m) {
    auto batch = train_loader_->next();
    if (!batch) {  // epoch boundary
      train_loader_->start_epoch(++epoch_);
      batch = train_loader_->next();
      ADA_CHECK_ARG(batch.has_value(), Error) << "data: an epoch produced no batch";
    }
    auto out = model_->forward(batch->fields);
    loss_sum += out.loss.value().item();
    for (const auto& [k, v] : out.metrics) metric_sums[k] += v;
    Variable loss = s_.micro > 1 ? fn::scale(out.loss, 1.f / static_cast<float>(s_.micro)) : out.loss;
    // Buckets go out during the last micro-batch's backward (earlier ones only accumulate).
    if (overlap && m == s_.micro - 1)
      backward(loss, {}, [&](Variable& p) { bucketer_->on_grad_ready(p); });
    else
      backward(loss);
  }
  const double loss = loss_sum / static_cast<double>(s_.micro);
  const auto t1 = Clock::now();
  if (overlap) bucketer_->finish();  // waits for the buckets still in flight
  // Non-finite guard, on the gradients the optimizer will use (reduced ones in gradient mode,
  // where a NaN on one rank reaches all); every rank learns whether any rank saw NaN/Inf.
  double bad = std::isfinite(loss) ? 0.0 : 1.0;
  for (const auto& p : params())
    if (bad == 0.0 && p.var.grad().defined() && !ops::all_finite(p.var.grad())) bad = 1.0;
  world_->allreduce(&bad, 1, comm::ReduceOp::max);
  double comm_s = std::chrono::duration<double>(Clock::now() - t1).count();  // waiting on reduction
  if (bad > 0) {
    ADA_CHECK_ARG(s_.skip_nonfinite, Error)
        << "step " << step_ << ": the loss or a gradient is NaN/Inf on at least one rank (loss here "
        << loss << "); lower the learning rate, enable train.clip_grad_norm, or set "
        << "train.on_nonfinite: skip";
    ++skipped_;
    log_warn("step {}: non-finite loss or gradient, step skipped ({} so far)", step_, skipped_);
    schedule_->advance();
    ++step_;
    return;
  }
  const float lr = static_cast<float>(schedule_->lr());
  std::vector<Param>& ps = params_;
  if (s_.clip > 0) optim::clip_grad_norm(ps, s_.clip);
  if (target_ == comm::ReduceTarget::model_delta) {
    std::vector<Tensor> before;
    for (auto& p : ps) before.push_back(p.var.value().clone());
    optimizer_->step(ps, lr);
    std::vector<Tensor> delta;
    for (size_t i = 0; i < ps.size(); ++i) delta.push_back(ops::sub(ps[i].var.value(), before[i]));
    const auto c0 = Clock::now();
    bucketer_->reduce(delta);
    comm_s += seconds_since(c0);
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor& w = ps[i].var.mutable_value();
      w.copy_from(before[i]);
      ops::add_(w, delta[i]);
    }
  } else {
    optimizer_->step(ps, lr);
  }
  schedule_->advance();
  ++step_;
  const double step_s = seconds_since(t0);
  comm_seconds_ += comm_s;
  compute_seconds_ += step_s - comm_s;

  // Loss averaged over ranks, for the log and metrics.
  double agg[2] = {loss, 1.0};
  world_->allreduce(agg, 2);
  const double mean_loss = agg[0] / agg[1];
  const double sps = static_cast<double>(s_.batch * s_.micro * world_->size()) / step_s;
  window_loss_ += mean_loss;
  window_steps_ += 1;
  window_seconds_ += step_s;
  window_comm_ += comm_s;
  if (step_ % s_.log_every == 0 || step_ == total_steps_) {
    // Averages over the steps since the last line: smooth curves, every step counted.
    const double wl = window_loss_ / window_steps_;
    const double wsps = static_cast<double>(s_.batch * s_.micro * world_->size()) * window_steps_ / window_seconds_;
    const double per_step = window_seconds_ / window_steps_, comm_per_step = window_comm_ / window_steps_;
    window_loss_ = window_seconds_ = window_comm_ = 0;
    window_steps_ = 0;
    std::ostringstream js;
    js.precision(8);
    js << "{\"step\": " << step_ << ", \"epoch\": " << epoch_ << ", \"lr\": " << lr << ", \"loss\": " << wl
       << ", \"samples_per_s\": " << wsps << ", \"compute_s\": " << per_step - comm_per_step << ", \"comm_s\": " << comm_per_step
       << ", \"wall_s\": " << wall_offset_ + seconds_since(start_) << "}";
    log_metrics(js.str());
  }
  progress(mean_loss, lr, sps, false);
  if (s_.checksum_every > 0 && step_ % s_.checksum_every == 0) {
    const double c = params_checksum();
    std::vector<double> all(world_->size());
    world_->allgather(&c, 1, all.data());
    std::string differ;
    for (int r = 1; r < world_->size(); ++r)
      if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    ADA_CHECK_ARG(differ.empty(), Error)
        << "step " << step_ << ": parameters on rank(s) " << differ << " differ from rank 0's (checksum "
        << all[0] << "); the replicas diverged — a reducer or a non-deterministic op is at fault";
  }
}

int Trainer::run() {
  setup();
  if (args_.describe) return 0;
  if (!args_.resume.empty()) resume(args_.resume);
  if (world_->rank() == 0) {
    // On resume keep the metric lines up to the resumed step, so curves have no duplicates.
    const std::string path = s_.out_dir + "/metrics.jsonl";
    std::vector<std::string> kept;
    if (step_ > 0) {
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);) {
        auto pos = line.find("\"step\": ");
        if (pos != std::string::npos && std::stoll(line.substr(pos + 8)) <= step_) kept.push_back(line);
      }
    }
    metrics_.open(path, std::ios::trunc);
    for (const auto& l : kept) metrics_ << l << "\n";
  }
  if (step_ == 0) train_loader_->start_epoch(0);
  start_ = Clock::now();
  start_step_ = step_;
  const double c0 = params_checksum();  // replicas identical at the start
  {
    std::vector<double> all(world_->size());
    world_->allgather(&c0, 1, all.data());
    for (int r = 1; r < world_->size(); ++r)
      ADA_CHECK_ARG(all[r] == all[0], Error) << "rank " << r << "'s parameters differ from rank 0's after the broadcast";
  }
  std::map<std::string, double> last_eval;
  int64_t last_eval_step = -1;
  auto run_eval = [&] {
    if (!data_.eval || last_eval_step == step_) return;
    last_eval_step = step_;
    broadcast_state(true);
    auto e = evaluate();
    std::ostringstream js;
    js.precision(8);
    js << "{\"step\": " << step_ << ", \"epoch\": " << epoch_;
    if (e.count("count") && e["count"] > 0) {
      js << ", \"eval_loss\": " << e["loss_sum"] / e["count"] << ", \"eval_top1\": " << e["correct"] / e["count"];
      log_info("eval at step {}: top-1 {:.4f} ({:.0f}/{:.0f}), loss {:.4f}", step_, e["correct"] / e["count"],
               e["correct"], e["count"], e["loss_sum"] / e["count"]);
    }
    if (e.count("mlm_count") && e["mlm_count"] > 0) {
      // The MLM loss alone (the model's loss also holds NSP's when enabled).
      js << ", \"eval_mlm_loss\": " << e["mlm_loss_sum"] / e["mlm_count"]
         << ", \"eval_mlm_accuracy\": " << e["mlm_correct"] / e["mlm_count"];
      log_info("eval at step {}: MLM accuracy {:.4f}, MLM loss {:.4f}", step_, e["mlm_correct"] / e["mlm_count"],
               e["mlm_loss_sum"] / e["mlm_count"]);
      if (e.count("nsp_count") && e["nsp_count"] > 0) js << ", \"eval_nsp_accuracy\": " << e["nsp_correct"] / e["nsp_count"];
    }
    js << ", \"wall_s\": " << wall_offset_ + seconds_since(start_) << "}";
    log_metrics(js.str());
    last_eval = e;
  };
  while (step_ < total_steps_) {
    train_step();
    const bool epoch_end = step_ % steps_per_epoch_ == 0;
    if ((s_.eval_every > 0 && step_ % s_.eval_every == 0) || (s_.eval_every == 0 && epoch_end)) {
      if (tty_ && world_->rank() == 0) std::fprintf(stderr, "\n");  // keep the progress line
      run_eval();
    }
    if ((s_.ckpt_every > 0 && step_ % s_.ckpt_every == 0) || (s_.ckpt_every == 0 && epoch_end)) save_checkpoint();
  }
  run_eval();  // the final model's figures (skipped if this step was just evaluated)
  save_checkpoint();
  const double wall = wall_offset_ + seconds_since(start_);
  if (world_->rank() == 0) {
    std::ostringstream js;
    js.precision(8);
    js << "{\"steps\": " << step_ << ", \"world_size\": " << world_->size() << ", \"reducer\": \"" << reducer_name_
       << "\", \"target\": \"" << comm::target_name(target_) << "\", \"model\": \"" << model_->type_name()
       << "\", \"wall_seconds\": " << wall << ", \"compute_seconds\": " << compute_seconds_
       << ", \"comm_seconds\": " << comm_seconds_ << ", \"skipped_steps\": " << skipped_;
    if (last_eval.count("count") && last_eval["count"] > 0)
      js << ", \"eval_top1\": " << last_eval["correct"] / last_eval["count"];
    if (last_eval.count("mlm_count") && last_eval["mlm_count"] > 0)
      js << ", \"eval_mlm_accuracy\": " << last_eval["mlm_correct"] / last_eval["mlm_count"];
    js << "}";
    std::ofstream(s_.out_dir + "/summary.json") << js.str() << "\n";
    if (tty_) std::fprintf(stderr, "\n");
    log_info("done: {} steps in {}; metrics in {}/metrics.jsonl, summary in {}/summary.json", step_,
             fmt_duration(wall), s_.out_dir, s_.out_dir);
    if (last_eval.count("count") && last_eval["count"] > 0)
      std::printf("test accuracy: %.2f%% (%.0f/%.0f)\n", 100.0 * last_eval["correct"] / last_eval["count"],
                  last_eval["correct"], last_eval["count"]);
  }
  return 0;
}

}  // namespace

int run(int argc, char** argv, comm::MpiRuntime& mpi) {
  Args args = parse_args(argc, argv);
  Trainer t(args, mpi);
  return t.run();
}

}  // namespace ada::trainer
