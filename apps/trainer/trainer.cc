#include "apps/trainer/trainer.h"

#include <sys/resource.h>

#include <cmath>
#include <iostream>
#include <thread>

#include "apps/common/version.h"
#include "apps/trainer/evaluation.h"
#include "apps/trainer/freeze.h"
#include "apps/trainer/run_timeline.h"
#include "base/atomic_file.h"
#include "base/fault.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/stop_signal.h"
#include "base/timeline.h"
#include "comm/agreement.h"
#include "comm/step_comm.h"
#include "comm/watchdog.h"
#include "core/cpu_isa.h"
#include "core/functional.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "nn/init.h"
#include "sync/registry.h"

namespace ada::trainer {

Trainer::Trainer(Args args) : args_(std::move(args)) {}

// ---- building -----------------------------------------------------------------------------------

void Trainer::build() {
  world_ = comm::MpiCommunicator::world();
  // Bounds the agreement below should a rank hang before reading train.comm_timeout_s (its
  // default); the config's value replaces it.
  comm::set_comm_timeout(600);
  // Each rank reads the config, the model and the data alone; a mistake found there (the same
  // on every rank, as a rule) is printed once, by the lowest rank that found it, and all stop.
  comm::stop_together(*world_, "trainer", [&] { build_alone(); });
  if (args_.describe) {  // only the model was read: no data, no optimizer, no finish() check
    if (world_->rank() == 0) std::cout << model_->describe();
    return;
  }
  build_step();
}

void Trainer::build_alone() {
  Config cfg = Config::load_file(args_.config);
  for (const auto& s : args_.sets) cfg.set_override(s);
  s_ = read_run_settings(cfg, args_.config, world_->size(), world_->local_rank());
  comm::set_comm_timeout(s_.comm_timeout);
  if (s_.device.is_cpu())
    set_cpu_matmul_precision(s_.precision);
  else
    set_cuda_matmul_precision(s_.precision);
  set_activation_dtype(s_.activations);
  if (s_.loss_scale) loss_scale_.emplace(*s_.loss_scale);
  const Config t = cfg.child("train");
  if (t.has("straggler")) straggler_.emplace(t.child("straggler"), world_->size());
  // Threads: the node's cores shared among its ranks, unless set.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int share = std::max(1, cores / world_->local_size());
  set_num_threads(s_.threads > 0 ? s_.threads : share);
  if (s_.threads > share && world_->local_rank() == 0)  // said once a node
    log_warn(
        "{}: {} threads on each of this node's {} rank(s) is {} threads on its {} cores: "
        "threads that wait for a core slow every step; 0 (the default) gives each rank {}",
        cfg.where("train.threads"), s_.threads, world_->local_size(),
        int64_t{s_.threads} * world_->local_size(), cores, share);
  set_flush_denormals(s_.flush_denormals);

  const Config red = cfg.child("reducer");
  reducer_ = comm::builtin_reducers().get(red.get<std::string>("name"), red.where("name"))(red);
  build_model(cfg);
  if (args_.describe) return;
  build_data(cfg);
  build_optimization(cfg);
  cfg_.emplace(cfg);
  cfg.finish();  // every key was read by someone: typos stop here, on every rank alike
}

void Trainer::build_model(const Config& cfg) {
  const Config mc = cfg.child("model");
  const auto& make_model = nn::builtin_models().get(mc.get<std::string>("name"), mc.where("name"));
  {
    std::optional<nn::init::ShapesOnly> shapes;  // --describe: no weights drawn
    if (args_.describe) shapes.emplace();
    model_ = make_model(mc, s_.seed);
  }
  if (s_.device.is_cpu() && mc.has("channels_last") && mc.get<bool>("channels_last") &&
      world_->rank() == 0)
    log_warn(
        "{}: on the CPU the convolutions run on NCHW copies of the channels-last activations, "
        "so this only slows the step (it is for cuDNN's NHWC convolutions on a GPU); results are "
        "NCHW's",
        mc.where("channels_last"));
  model_->set_training_metrics(false);  // a training step reads only its loss (evaluation: all)
  model_->rng().set_state(s_.seed * 1000003ull + static_cast<uint64_t>(world_->rank()), 0);
  if (!s_.freeze.empty()) {
    const Frozen f = freeze_parameters(model_->parameters(), s_.freeze, cfg.where("train.freeze"));
    log_info("train.freeze: {} parameter tensors ({} values) kept fixed, not trained", f.tensors,
             f.elements);
  }
  params_ = trainable(model_->parameters());
}

void Trainer::build_data(const Config& cfg) {
  data_ = data::read_datasets(data::builtin_datasets(),
                              {cfg.child("data"), cfg.child("model"), model_->num_classes(),
                               s_.seed, world_->rank(), world_->size()});
  for (const auto& set : {data_.train, data_.eval, data_.validation})
    if (set && set->size() > 0) model_->check_example(set->get(0, 0).fields, set->describe());
  const Config t = cfg.child("train");
  if (s_.stop_at) {
    const bool val = s_.stop_at->metric.rfind("val_", 0) == 0;
    ADA_CHECK_ARG(val ? bool(data_.validation) : bool(data_.eval), ConfigError)
        << t.where("stop_at") << ": " << s_.stop_at->metric << " needs "
        << (val ? "a validation set; set data.validation_size"
                : "an evaluation set (" + data_.no_eval_reason + ")");
    // A misspelt figure is refused now, not at the first evaluation (or never, without one
    // before the budget's end).
    if (const std::vector<std::string> names = model_->figures(); !names.empty()) {
      std::string known;
      bool found = false;
      for (const auto& [prefix, has] :
           {std::pair<std::string, bool>{"val_", bool(data_.validation)},
            {"eval_", bool(data_.eval)}}) {
        if (!has) continue;
        for (const auto& n : names) {
          found = found || s_.stop_at->metric == prefix + n;
          known += (known.empty() ? "" : ", ") + (prefix + n);
        }
      }
      ADA_CHECK_ARG(found, ConfigError) << s_.stop_at->where << ": the evaluations give no figure '"
                                        << s_.stop_at->metric << "'; they give " << known;
    }
  }
  if (!data_.eval && !data_.validation) {
    for (const char* key : {"eval_every", "max_eval_batches"}) {
      ADA_CHECK_ARG(!t.has(key), ConfigError)
          << t.where(key) << ": set, but there is no evaluation set (" << data_.no_eval_reason
          << ") and no validation set (data.validation_size), so nothing would ever be "
          << "evaluated; give the data an evaluation set or remove train." << key;
    }
  }
  // Steps per epoch as the loader will make them (drop_last sharding, whole batches only).
  const int64_t per_rank = data_.train->size() / world_->size();
  steps_per_epoch_ = per_rank / s_.batch / s_.micro;
  ADA_CHECK_ARG(steps_per_epoch_ > 0, ConfigError)
      << "data: " << data_.train->describe() << " gives " << per_rank << " examples per rank on "
      << world_->size()
      << " ranks, fewer than train.batch_per_rank x train.micro_batches = " << s_.batch * s_.micro
      << (s_.examples_per_step > 0
              ? " (from train.examples_per_step " + std::to_string(s_.examples_per_step) + ")"
              : std::string())
      << "; lower them or use fewer ranks";
  total_steps_ = s_.steps > 0 ? s_.steps : s_.epochs * steps_per_epoch_;
}

void Trainer::build_optimization(Config& cfg) {
  optimizer_ = optim::make_optimizer(optim::builtin_optimizers(), cfg.child("optimizer"));
  const optim::ScheduleRegistry& schedules = optim::builtin_schedules();
  if (cfg.has("schedule")) {  // warmup_epochs, milestone_epochs: in steps of this run
    Config sc = cfg.child("schedule");
    const std::string derived = optim::derive_epoch_keys(sc, steps_per_epoch_);
    if (!derived.empty()) log_info("schedule: {} ({} steps per epoch)", derived, steps_per_epoch_);
  }
  // A decaying schedule ends at the run's last step unless the config says otherwise.
  if (cfg.has("schedule") && optim::lacks_total_steps(schedules, cfg.child("schedule")))
    cfg.set_override("schedule.total_steps=" + std::to_string(total_steps_),
                     std::string("derived from ") +
                         (s_.steps > 0 ? "train.steps" : "train.epochs x steps per epoch") + " = " +
                         std::to_string(total_steps_));
  const Config sc =
      cfg.has("schedule") ? cfg.child("schedule") : Config::parse("{name: constant}", "defaults");
  const optim::LrScaling scaling =
      optim::read_lr_scaling(sc, reducer_->name(), s_.examples_per_step > 0);
  const double base_lr =
      optim::scaled_lr(optimizer_->lr(), reducer_->name(), world_->size(), scaling);
  lr_description_ =
      optim::describe_scaled_lr(optimizer_->lr(), reducer_->name(), world_->size(), scaling);
  schedule_ = optim::make_schedule(schedules, sc, base_lr);
  // A warm-up as long as the run never reaches the base LR (a decaying schedule refuses it
  // through total_steps; a constant or step one would warm up for the whole budget).
  const int64_t warmup = sc.get_or<int64_t>("warmup_steps", 0);
  ADA_CHECK_ARG(warmup < total_steps_, ConfigError)
      << sc.where("warmup_steps") << ": a warm-up of " << warmup << " steps in a run of "
      << total_steps_ << " would never reach the base LR; shorten it or lengthen the run";
  if (sc.has("total_steps") && sc.get<int64_t>("total_steps") < total_steps_)
    log_warn(
        "{}: {} is before the run's end ({} steps): the LR stays at schedule.end_lr from "
        "there on",
        sc.where("total_steps"), sc.get<int64_t>("total_steps"), total_steps_);
  make_strategy_ =
      sync::read_sync(sync::builtin_syncs(), cfg, *reducer_, world_->size(), s_.device);
}

void Trainer::build_step() {
  // Agreement before any other collective, then rank 0's weights everywhere.
  uint64_t h = cfg_->hash();
  for (const auto& p : params_) h = fnv1a64(p.name + shape_str(p.var.value().shape()), h);
  comm::require_same_on_all_ranks(*world_, h, "the config or the model's parameter names/shapes");
  if (!s_.init_from.empty())
    log_info("model weights initialised from {}",
             init_weights_from(*world_, *model_, s_.init_from, cfg_->where("train.init_from"),
                               data_.vocab_hash));
  broadcast_model_state(*world_, *model_);
  if (!s_.device.is_cpu()) {
    model_->to(s_.device);
    params_ = trainable(model_->parameters());
    uploader_ = std::make_unique<cuda::BatchUploader>(s_.device.index);
    log_info("device {} ({})", s_.device.str(), cuda::device_name(s_.device.index));
  }
  device_comm_ =
      comm::make_step_communicator(*world_, s_.device, s_.comm, cfg_->where("train.comm"));
  sync::StrategyOptions so{s_.clip, s_.skip_nonfinite, loss_scale_ ? &*loss_scale_ : nullptr,
                           s_.buckets};
  comm::Communicator& step_comm = device_comm_ ? *device_comm_ : *world_;
  strategy_ = make_strategy_({params_, *optimizer_, step_comm, *reducer_}, so);
  if (s_.cuda_graphs) {
    ADA_CHECK_ARG(strategy_->hooks_optional(), ConfigError)
        << cfg_->where("train.cuda_graphs") << ": the strategy (" << strategy_->describe()
        << ") steps parameters during backward, on the host, which a CUDA graph cannot replay; "
        << "set cuda_graphs: false, or a strategy that works after backward (gradient sync does)";
    graph_ = std::make_unique<StepGraph>(*model_, s_.device.index);
  }

  data::SamplerOptions sampler{world_->rank(), world_->size(), s_.seed, true, true};
  data::LoaderOptions lo;
  lo.batch_size = s_.batch;
  lo.num_workers = s_.workers;
  lo.prefetch = s_.prefetch;
  lo.drop_last_batch = true;
  loader_ = std::make_unique<data::DataLoader>(
      data_.train, data::DistributedSampler(data_.train->size(), sampler), lo);
  ADA_CHECK(loader_->batches_per_epoch() / s_.micro == steps_per_epoch_)
      << "loader makes " << loader_->batches_per_epoch() << " batches per epoch";
  checkpoints_ = std::make_unique<RunCheckpoints>(
      s_.ckpt_dir, s_.ckpt_keep, s_.ckpt_overwrite, *world_,
      TrainingState{*model_, params_, *optimizer_, *strategy_, *schedule_,
                    loss_scale_ ? &*loss_scale_ : nullptr, *loader_, s_.batch, s_.micro,
                    s_.examples_per_step > 0, reducer_->name(), data_.vocab_hash},
      cfg_->hash(), cfg_->dump());

  log_ = std::make_unique<RunLog>(s_.out_dir, world_->rank() == 0, s_.log_every, s_.tensorboard);
  log_info("trainer built from commit {} (trainer version {})", build_commit(), build_version());
  log_info(
      "{} ranks, {} threads each (cpu kernels {}); precision {}{}{}; model {} ({} parameters); "
      "sync {}; {} steps of {} x {} examples per rank ({} a step{}); data: {}",
      world_->size(), num_threads(), cpu::isa_description(), precision_name(s_.precision),
      s_.activations == DType::f32 ? ""
                                   : std::string(", activations ") + dtype_name(s_.activations),
      loss_scale_ ? ", loss scale " + loss_scale_->describe() : std::string(), model_->type_name(),
      model_->parameter_count(), strategy_->describe(), total_steps_, s_.micro, s_.batch,
      s_.micro * s_.batch * world_->size(),
      s_.examples_per_step > 0 ? ": train.examples_per_step" : "", data_.train->describe());
  log_info("{}", lr_description_);
  if (data_.validation)
    log_info("validation set (val_* figures): {}", data_.validation->describe());
  if (straggler_) log_info("straggler: {}", straggler_->describe());
}

// ---- the step loop ------------------------------------------------------------------------------

int Trainer::run() {
  build();
  if (args_.describe) return 0;
  // One run at a time in a folder (rank 0 holds the locks until it ends; a second run writing
  // there would remove the first's temporaries and mix their metrics and checkpoints). The
  // checkpoint folder is made here too, so that an unusable checkpoint.dir stops the run before
  // its first step, not at its first checkpoint.
  comm::decide_on_rank0(*world_, [&] {
    const auto inside = [](const std::string& dir, const std::string& parent) {
      const auto d = std::filesystem::weakly_canonical(dir).string(),
                 p = std::filesystem::weakly_canonical(parent).string();
      return d == p || d.rfind(p + "/", 0) == 0;
    };
    folder_locks_.emplace_back(s_.out_dir, cfg_->where("output.dir"));
    if (!inside(s_.ckpt_dir, s_.out_dir))
      folder_locks_.emplace_back(s_.ckpt_dir, cfg_->where("checkpoint.dir"));
    std::error_code ec;
    std::filesystem::create_directories(s_.ckpt_dir, ec);
    ADA_CHECK_ARG(!ec, IoError) << cfg_->where("checkpoint.dir") << ": cannot create the "
                                << "checkpoint folder " << s_.ckpt_dir << " (" << ec.message()
                                << "); choose a writable checkpoint.dir (default: output.dir"
                                << "/checkpoints)";
    return std::string();
  });
  if (!args_.resume.empty())
    resumed_ = checkpoints_->resume(args_.resume);
  else
    checkpoints_->start_fresh();
  // The settings of this run, once it is known to run here (a refused resume leaves the earlier
  // run's config.yaml as it was).
  comm::decide_on_rank0(*world_, [&] {
    if (resumed_.step == 0)
      if (const std::string aside = set_aside_earlier_run(s_.out_dir); !aside.empty())
        log_info(
            "output.dir {} held an earlier run's metrics; moved them, its config.yaml and "
            "summary.json to {}",
            s_.out_dir, aside);
    write_file_atomically(s_.out_dir + "/config.yaml", cfg_->dump());
    return std::string();
  });
  step_ = resumed_.step;
  epoch_ = resumed_.epoch;
  if (const auto& p = resumed_.progress; p.contains("stop_at_best_step")) {
    stop_best_ = p.at("stop_at_best");
    stop_best_step_ = static_cast<int64_t>(p.at("stop_at_best_step"));
    stop_since_best_ = static_cast<int64_t>(p.at("stop_at_since_best"));
  }
  resume_log_window(resumed_.log_window);
  log_due_ = resumed_.progress.contains("log_due");
  checksum_due_ = resumed_.progress.contains("checksum_due");
  eval_due_ = resumed_.progress.contains("eval_due");
  // A run resumed at its end (finished, or stopped in its final evaluation) evaluates again: the
  // kept evaluation line of that step goes, so that it is not there twice.
  log_->open(step_, /*evaluates_again=*/(step_ > 0 && step_ >= total_steps_) || eval_due_);
  if (step_ == 0) loader_->start_epoch(0);
  std::optional<RunTimeline> timeline;
  if (!s_.timeline.empty()) timeline.emplace(*world_, s_.timeline, cfg_->where("train.timeline"));
  clock_.restart();
  log_->start(step_);
  // Replicas identical at the start (unless resumed between a decentralised sync's averages).
  if (strategy_->replicas_identical()) checksum_due_ = true;
  flush_due(schedule_->lr());
  {
    const StopSignals signals;  // SIGTERM, SIGINT, SIGUSR1: stop at the next agreed step
    int stop_signal = 0;
    bool ended = false;
    if (eval_due_) {  // the evaluation a signal abandoned at the step this run resumes from
      if (evaluate_now())
        ended = stop_at_ends_run();
      else  // abandoned again: stop here again (its checkpoint is the one resumed from)
        stop_signal = agreed_stop_signal();
    }
    while (!ended && stop_signal == 0 && step_ < total_steps_) {
      train_step();
      const bool epoch_end = step_ % steps_per_epoch_ == 0;
      if ((s_.eval_every > 0 && step_ % s_.eval_every == 0) || (s_.eval_every == 0 && epoch_end)) {
        log_->break_line();  // keep the progress line
        if (evaluate_now() && stop_at_ends_run()) break;
      }
      if (step_ < total_steps_ && (stop_signal = agreed_stop_signal()) != 0) break;
      if ((s_.ckpt_every > 0 && step_ % s_.ckpt_every == 0) || (s_.ckpt_every == 0 && epoch_end))
        save_checkpoint();
    }
    // The handlers stay while the ranks stop: a rank that the launcher signals after the others
    // agreed would otherwise die of its first signal, without the stop checkpoint.
    if (stop_signal != 0) {
      stop_for_signal(stop_signal);
      if (timeline) timeline->close();
      return 128 + stop_signal;
    }
    // The run ended. The handlers stay until its final checkpoint is written: a signal in the
    // last synchronisation or the write stops the run after it (it killed the run mid-write,
    // losing every step of a run without an earlier checkpoint).
    const bool between_syncs = !strategy_->replicas_identical();  // finish() adds one more
    strategy_->finish();
    if (between_syncs) {
      last_eval_step_ = -1;  // the model changed: evaluate and save it again
      checkpoints_->model_changed();
    }
    flush_due(lr_of_last_step());
    // The final checkpoint before the final evaluation (which may take long): a run killed or
    // preempted during that evaluation loses no step, and --resume auto only evaluates again.
    save_checkpoint();
    if ((stop_signal = agreed_stop_signal()) != 0) {
      log_->break_line();
      log_info(
          "stopped by {} after the final checkpoint (step {}): the final evaluation is left for "
          "--resume auto (exit status {})",
          signal_name(stop_signal), step_, 128 + stop_signal);
      flush_log();
      world_->barrier();
      if (timeline) timeline->close();
      return 128 + stop_signal;
    }
  }
  // Signals have their default effect again.
  evaluate_now();  // the final model's figures (skipped if this step was just evaluated)
  write_summary();
  // Last: rank 0 merges the ranks' traces alone (minutes for a long run at scale), with no
  // collective after it that the other ranks would wait in.
  if (timeline) timeline->close();
  return 0;
}

void Trainer::train_step() {
  fault_point("step");
  const Stopwatch step_time;
  if (!graph_) model_->zero_grad();  // (a graph's step zeroes them itself)
  double loss_sum = 0;
  micro_losses_.clear();
  const double lr = schedule_->lr();
  last_lr_ = lr;
  strategy_->begin_step(step_, static_cast<float>(lr));
  if (straggler_) {
    TraceSpan span("straggler delay", "compute");
    straggler_->wait(step_, world_->rank());
  }
  for (int64_t m = 0; m < s_.micro; ++m) {
    std::optional<data::Batch> batch;
    {
      TraceSpan span("data wait", "data");
      batch = loader_->next();
      if (!batch) {  // epoch boundary
        loader_->start_epoch(++epoch_);
        batch = loader_->next();
        ADA_CHECK_ARG(batch.has_value(), Error) << "data: an epoch produced no batch";
      }
    }
    // Fields the model would otherwise read back from the device (BERT's masked positions).
    model_->prepare_batch(batch->fields);
    if (uploader_) {
      TraceSpan span("copy batch to device", "data");
      batch->fields = uploader_->upload(batch->fields);
    }
    if (graph_) {  // one micro-batch, no backward hooks (checked when built)
      TraceSpan span("forward and backward (train.cuda_graphs)", "compute");
      micro_losses_.push_back(graph_->run(batch->fields, loss_scale_ ? loss_scale_->scale() : 1.0));
      continue;
    }
    nn::ModelOutput out;
    {
      TraceSpan span("forward", "compute");
      out = model_->forward(batch->fields);
    }
    // Read after backward is queued: reading it here would make a GPU host wait for forward.
    micro_losses_.push_back(out.loss.value());
    Variable loss =
        s_.micro > 1 ? fn::scale(out.loss, 1.f / static_cast<float>(s_.micro)) : out.loss;
    TraceSpan span("backward", "compute");
    // Loss scaling: backward starts from S instead of 1; the strategy unscales (settle_step).
    Tensor seed;
    if (loss_scale_)
      seed = Tensor::full(loss.value().shape(), static_cast<float>(loss_scale_->scale()),
                          DType::f32, loss.value().device());
    // The strategy sees each final gradient of the last micro-batch (earlier ones accumulate).
    if (strategy_->overlaps_backward() && m == s_.micro - 1)
      backward(loss, seed, [&](Variable& p) {
        fault_point("backward");
        strategy_->on_grad_ready(p);
      });
    else
      backward(loss, seed);
  }
  for (const Tensor& l : micro_losses_) loss_sum += l.item();
  const double loss = loss_sum / static_cast<double>(s_.micro);
  const sync::StepResult res = strategy_->end_step(loss);
  schedule_->advance();
  ++step_;
  const double step_s = step_time.seconds();
  // (Skipped steps are not timed; the bookkeeping below goes on: whether a collective runs must
  // not depend on it.)
  if (res.applied) {
    meter_.add(loss, step_s, res.comm_seconds, res.exposed_seconds);
    skipped_in_a_row_ = 0;
  } else {
    ++skipped_;
    // A model an update has broken (weights NaN, or so large that every forward overflows)
    // skips every later step: end the run instead of skipping to the budget's end.
    ADA_CHECK_ARG(++skipped_in_a_row_ < kMostSkippedInARow, Error)
        << "steps " << step_ - skipped_in_a_row_ + 1 << " to " << step_ << " were all skipped "
        << "(non-finite loss or gradient): the model no longer trains (an update before step "
        << step_ - skipped_in_a_row_ + 1 << " made its weights NaN/Inf or too large); lower "
        << "the learning rate or enable train.clip_grad_norm, and resume from a checkpoint "
        << "written before then";
  }
  if (step_ % s_.log_every == 0 || step_ == total_steps_) log_due_ = true;
  if (s_.checksum_every > 0 && step_ % s_.checksum_every == 0) checksum_due_ = true;
  flush_due(lr);
  log_->progress(step_, total_steps_, epoch_, last_mean_loss_, lr,
                 static_cast<double>(s_.batch * s_.micro * world_->size()) / step_s, false);
}

double Trainer::lr_of_last_step() const {
  return std::isnan(last_lr_) ? schedule_->lr() : last_lr_;
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
    const StepMeter::Totals& w = meter_.window();
    std::vector<double> agg = {w.loss, static_cast<double>(w.steps)};
    for (const auto& [sum, count] : stats) agg.insert(agg.end(), {sum, count});
    world_->allreduce(agg.data(), static_cast<int64_t>(agg.size()));
    last_mean_loss_ = agg[1] > 0 ? agg[0] / agg[1] : 0.0;
    if (w.steps > 0) {
      Json rec = window_record(step_, epoch_, lr, last_mean_loss_, w,
                               s_.batch * s_.micro * world_->size(), wall_seconds());
      for (size_t i = 0; i < stat_names.size(); ++i)
        if (agg[3 + 2 * i] > 0) rec[stat_names[i]] = agg[2 + 2 * i] / agg[3 + 2 * i];
      if (loss_scale_) rec["loss_scale"] = loss_scale_->scale();  // rank 0's
      log_->write(rec);
    }
    meter_.reset_window();
  }
  if (checksum_due_) {
    checksum_due_ = false;
    double c = 0;
    for (const auto& p : params_)
      c += ops::sum_all(p.var.value()) + 0.5 * ops::norm2_sq(p.var.value());
    const std::string differ = comm::ranks_differing(*world_, c);
    ADA_CHECK_ARG(differ.empty(), Error)
        << "step " << step_ << ": parameters on rank(s) " << differ
        << " differ from rank 0's (checksum " << c << " on rank " << world_->rank()
        << "); the replicas diverged — a reducer or a non-deterministic op is at fault";
  }
}

bool Trainer::evaluate_now() {
  if ((!data_.eval && !data_.validation) || last_eval_step_ == step_) return true;
  broadcast_model_state(*world_, *model_, /*buffers_only=*/true);
  TraceSpan span("evaluation", "eval");
  // A signal abandons it where the ranks stop right after, at this step (their replicas agree).
  const EvalOptions eo{s_.batch, loader_->options().num_workers, s_.max_eval_batches, s_.device,
                       /*stop_on_signal=*/strategy_->replicas_identical()};
  std::optional<nn::Metrics> val, test;
  strategy_->with_average_model([&] {  // decentralised: the average model
    // The validation set (held out of the training set: what choices are made on), then the
    // test set; the same model for both.
    if (data_.validation) val = evaluate(*model_, data_.validation, *world_, eo);
    if (data_.eval && (val || !data_.validation)) test = evaluate(*model_, data_.eval, *world_, eo);
  });
  if ((data_.validation && !val) || (data_.eval && !test)) {
    eval_due_ = true;
    log_info(
        "the evaluation at step {} was stopped by a signal: it runs first when the run "
        "resumes from this step",
        step_);
    return false;
  }
  eval_due_ = false;
  last_eval_step_ = step_;
  if (val) last_val_ = *val;
  if (test) last_eval_ = *test;
  Json rec = {{"step", step_}, {"epoch", epoch_}};
  add_figures(rec, last_val_, "val_");
  add_figures(rec, last_eval_);
  rec["wall_s"] = wall_seconds();
  log_->write(rec);
  if (data_.validation) log_info("validation at step {}: {}", step_, describe_figures(last_val_));
  if (data_.eval) log_info("eval at step {}: {}", step_, describe_figures(last_eval_));
  return true;
}

bool Trainer::stop_at_ends_run() {
  if (!s_.stop_at) return false;
  Json figures;
  add_figures(figures, last_val_, "val_");
  add_figures(figures, last_eval_);
  const StopAt& s = *s_.stop_at;
  if (!figures.contains(s.metric)) {
    std::string known;
    for (const auto& [k, v] : figures.items()) known += (known.empty() ? "" : ", ") + k;
    ADA_THROW(ConfigError) << s.where << ": the evaluations give no figure '" << s.metric
                           << "'; they give " << known;
  }
  const double v = figures[s.metric].get<double>();
  if (s.better(v, stop_best_)) {
    stop_best_ = v;
    stop_best_step_ = step_;
    stop_since_best_ = 0;
  } else {
    ++stop_since_best_;
  }
  // Every rank decides alike (the figures are reduced over ranks; a max makes it certain).
  double due[3] = {(s.below ? v <= s.value : v >= s.value) ? 1.0 : 0.0,
                   s.give_up_after > 0 && stop_since_best_ >= s.give_up_after ? 1.0 : 0.0,
                   s.give_up_at_step > 0 && step_ >= s.give_up_at_step ? 1.0 : 0.0};
  world_->allreduce(due, 3, comm::ReduceOp::max);
  if (due[0] != 0.0) {
    stopped_at_ = step_;
    log_info("train.stop_at: {} is {:g} at step {} ({}): the run ends here", s.metric, v, step_,
             s.describe());
    return true;
  }
  if (due[1] == 0.0 && due[2] == 0.0) return false;
  gave_up_at_ = step_;
  if (due[1] != 0.0)
    log_info(
        "train.stop_at: {} has not bettered its best, {:g} at step {}, in {} evaluations "
        "(give_up_after): the run ends at step {} without reaching {}",
        s.metric, stop_best_, stop_best_step_, stop_since_best_, step_, s.describe());
  else
    log_info(
        "train.stop_at: {} has not reached {} by step {} (give_up_at_step; its best {:g} at step "
        "{}): the run ends at step {}",
        s.metric, s.describe(), s.give_up_at_step, stop_best_, stop_best_step_, step_);
  return true;
}

// A collective where replicas are in step (as flush_due's): every step for gradient and delta
// sync, at world synchronisations for local SGD, DiLoCo and WAGMA. The largest signal number any
// rank received, so that every rank stops at this step with the same exit status.
int Trainer::agreed_stop_signal() {
  if (!strategy_->replicas_identical()) return 0;
  double signo = StopSignals::received();
  world_->allreduce(&signo, 1, comm::ReduceOp::max);
  if (signo != 0) StopSignals::stop_agreed();  // the watchdog's stop rule is off from here
  return static_cast<int>(signo);
}

void Trainer::stop_for_signal(int signo) {
  strategy_->finish();  // the replicas agree here: the model stays as it is
  flush_due(lr_of_last_step());
  // The steps since the last metrics line are not logged here: the checkpoint carries them, and
  // the resumed run's next line covers them as an unbroken run's would.
  save_checkpoint();
  log_->break_line();
  log_info(
      "stopped by {} at step {} of {}: checkpoint at step {} written; to go on, run the same "
      "command with --resume auto (exit status {})",
      signal_name(signo), step_, total_steps_, step_, 128 + signo);
  flush_log();
  // No rank exits before every rank is done: mpirun and srun -K stop the others at the first
  // non-zero exit.
  world_->barrier();
}

void Trainer::save_checkpoint() {
  std::map<std::string, double> progress;
  if (stop_best_step_ >= 0)
    progress = {{"stop_at_best", stop_best_},
                {"stop_at_best_step", static_cast<double>(stop_best_step_)},
                {"stop_at_since_best", static_cast<double>(stop_since_best_)}};
  // A metrics line or checksum that fell due after the last synchronisation of a decentralised
  // sync waits for the next one, in the resumed run too.
  if (log_due_) progress["log_due"] = 1;
  if (checksum_due_) progress["checksum_due"] = 1;
  if (eval_due_) progress["eval_due"] = 1;
  // The metrics window still open (steps since the last line: this rank's sums and the
  // reducer's diagnostics, given back to it at once), for a resumed run to finish that line as
  // this run would have (resume_log_window).
  const StepMeter::Totals& w = meter_.window();
  LogWindow window{{static_cast<double>(w.steps), w.loss}, {w.seconds, w.comm, w.exposed}};
  const auto stats = reducer_->take_stats();
  reducer_->add_stats(stats);
  for (const auto& [sum, count] : stats) window.values.insert(window.values.end(), {sum, count});
  checkpoints_->save(step_, wall_seconds(), progress, window);
}

void Trainer::resume_log_window(const LogWindow& window) {
  const size_t stats = reducer_->stat_names().size();
  const auto& v = window.values;
  if (v.size() != 2 + 2 * stats || window.seconds.size() != 3) return;  // none, or other stats
  meter_.set_window(
      {static_cast<int64_t>(v[0]), v[1], window.seconds[0], window.seconds[1], window.seconds[2]});
  std::vector<std::pair<double, double>> pairs;
  for (size_t i = 0; i < stats; ++i) pairs.emplace_back(v[2 + 2 * i], v[3 + 2 * i]);
  reducer_->add_stats(pairs);
}

void Trainer::write_summary() {
  // The strategy's counters, summed over ranks; the largest peak resident memory of any rank.
  std::map<std::string, double> stats = strategy_->stats();
  for (auto& [k, v] : stats) world_->allreduce(&v, 1);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double peak_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  world_->allreduce(&peak_mb, 1, comm::ReduceOp::max);
  if (world_->rank() != 0) return;
  const StepMeter::Totals& run = meter_.run();
  Json sum = {{"steps", step_},
              {"world_size", world_->size()},
              {"commit", build_commit()},
              {"trainer_version", build_version()},
              {"reducer", reducer_->name()},
              {"sync", strategy_->describe()},
              {"model", model_->type_name()},
              {"wall_seconds", wall_seconds()},
              {"compute_seconds", run.seconds - run.comm},
              {"comm_seconds", run.comm},
              {"exposed_comm_seconds", run.exposed},
              {"skipped_steps", skipped_},
              {"peak_rss_mb_max_rank", peak_mb},
              {"device", s_.device.str()},
              {"comm", device_comm_ ? device_comm_->backend() : world_->backend()},
              {"precision", precision_name(s_.precision)},
              {"activations", dtype_name(s_.activations)},
              {"flush_denormals", s_.flush_denormals},
              {"cpu_isa", cpu::isa_name(cpu::isa())},
              {"build_march", cpu::build_march()}};
  if (!s_.device.is_cpu())
    sum["gpu_peak_allocated_mb"] =
        static_cast<double>(cuda::memory_stats(s_.device.index).peak_allocated) / (1 << 20);
  if (loss_scale_) {  // rank 0's (each rank's own where strategies decide alone)
    sum["loss_scale"] = loss_scale_->scale();
    sum["loss_scale_overflows"] = loss_scale_->overflows();
  }
  if (graph_) {  // rank 0's
    sum["cuda_graph_replays"] = graph_->replays();
    sum["cuda_graph_eager_steps"] = graph_->eager_steps();
    log_info("train.cuda_graphs: {}", graph_->describe());
  }
  add_figures(sum, last_val_, "val_");
  add_figures(sum, last_eval_);
  if (stopped_at_ >= 0) {
    sum["stopped_at_step"] = stopped_at_;
    sum["stop_at"] = s_.stop_at->describe();
  }
  if (gave_up_at_ >= 0) {
    sum["gave_up_at_step"] = gave_up_at_;
    sum["stop_at"] = s_.stop_at->describe();
    sum["stop_at_best"] = stop_best_;
    sum["stop_at_best_step"] = stop_best_step_;
  }
  for (const auto& [k, v] : stats) sum[k] = v;
  log_->write_summary(sum);
  log_->break_line();
  log_info("done: {} steps in {}; metrics in {}/metrics.jsonl, summary in {}/summary.json", step_,
           format_duration(wall_seconds()), s_.out_dir, s_.out_dir);
  if (!s_.timeline.empty())
    log_info("timeline (Chrome trace; open in ui.perfetto.dev): {}", s_.timeline);
  if (!last_val_.empty()) log_info("final validation: {}", describe_figures(last_val_));
  if (!last_eval_.empty()) log_info("final evaluation: {}", describe_figures(last_eval_));
}

}  // namespace ada::trainer
