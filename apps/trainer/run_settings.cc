#include "apps/trainer/run_settings.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "base/log.h"
#include "comm/shared_gpu.h"
#include "comm/step_comm.h"
#include "core/backend/cuda_runtime.h"
#include "core/cpu_isa.h"

namespace ada::trainer {

// train.device: "cpu", "cuda" (this rank's node-local index modulo the visible GPUs) or
// "cuda:N". A GPU that cannot be used is a ConfigError naming the key and why.
Device read_device(const Config& t, int local_rank) {
  const std::string s = t.get_or<std::string>("device", "cpu");
  if (s == "cpu") return Device::cpu();
  int index = -1;
  if (s == "cuda") {
    index = comm::gpu_for_local_rank(local_rank, cuda::device_count());
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

namespace {

// train.precision: fp32 (default), bf16 or fp16: the matrix products (linear layers, attention,
// convolutions) take bf16/fp16 inputs and accumulate in fp32, everything else stays fp32
// (core/precision.h). fp16 is CUDA only.
Precision read_precision(const Config& t, const Device& device) {
  const std::string s = t.get_or<std::string>("precision", "fp32");
  if (s == "fp32") return Precision::fp32;
  ADA_CHECK_ARG(s == "bf16" || s == "fp16", ConfigError)
      << t.where("precision") << ": unknown precision '" << s << "'; known: fp32, bf16, fp16";
  if (!device.is_cpu()) return s == "bf16" ? Precision::bf16 : Precision::fp16;
  ADA_CHECK_ARG(s == "bf16", ConfigError)
      << t.where("precision") << ": fp16 is not supported on the CPU (no fp16 dot products); "
      << "use bf16 on a CPU with AVX512_BF16, or fp32";
  std::string why;
  ADA_CHECK_ARG(cpu::bf16_available(&why), ConfigError)
      << t.where("precision") << ": bf16 needs the CPU's bf16 dot products, but " << why
      << "; use precision: fp32 on this machine";
  return Precision::bf16;
}

// train.activations: fp32 (default) or 16bit: activations and their gradients stored in the
// 16-bit type of a bf16/fp16 train.precision (core/precision.h's activation_dtype).
DType read_activations(const Config& t, Precision precision) {
  const std::string s = t.get_or<std::string>("activations", "fp32");
  if (s == "fp32") return DType::f32;
  ADA_CHECK_ARG(s == "16bit", ConfigError)
      << t.where("activations") << ": unknown value '" << s << "'; known: fp32, 16bit";
  ADA_CHECK_ARG(precision != Precision::fp32, ConfigError)
      << t.where("activations") << ": 16bit stores activations in train.precision's 16-bit type, "
      << "but train.precision is fp32; set precision: bf16 (or fp16 on a GPU), or activations: "
         "fp32";
  return precision_dtype(precision);
}

// train.loss_scale: none, dynamic or a positive number (a static scale); absent: dynamic with
// precision fp16, none otherwise. loss_scale_init (dynamic's start) and
// loss_scale_growth_interval tune the dynamic rule (optim/loss_scale.h).
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
    o.init = t.get_in_or<double>("loss_scale_init", o.init, Range::closed(1, optim::kMaxLossScale),
                                 "up to 2^64; powers of two keep the scaling exact");
    o.growth_interval = t.get_in_or<int64_t>("loss_scale_growth_interval", o.growth_interval,
                                             Range::at_least(1), "good steps before S doubles");
    return o;
  }
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  ADA_CHECK_ARG(
      end != s.c_str() && *end == '\0' && std::isfinite(v) && v > 0 && v <= optim::kMaxLossScale,
      ConfigError)
      << t.where("loss_scale") << ": must be none, dynamic or a positive number up to 2^64 (a "
      << "static scale), got '" << s << "'";
  o.dynamic = false;
  o.init = v;
  return o;
}

// train.stop_at (absent: none); see StopAt.
std::optional<StopAt> read_stop_at(const Config& t) {
  if (!t.has("stop_at")) return std::nullopt;
  const Config c = t.child("stop_at");
  StopAt s;
  s.where = t.where("stop_at");
  s.metric = c.get<std::string>("metric");
  ADA_CHECK_ARG(s.metric.rfind("val_", 0) == 0 || s.metric.rfind("eval_", 0) == 0, ConfigError)
      << c.where("metric") << ": '" << s.metric
      << "' is not an evaluation figure; name one as metrics.jsonl does, val_* (the validation "
         "set, data.validation_size) or eval_* (the test set), e.g. val_mlm_loss or eval_top1";
  ADA_CHECK_ARG(c.has("below") != c.has("above"), ConfigError)
      << s.where
      << ": give exactly one bound, below: X (stop once the figure is <= X, e.g. a loss) "
      << "or above: X (>= X, e.g. an accuracy)";
  s.below = c.has("below");
  s.value = c.get_in<double>(s.below ? "below" : "above", Range{},
                             "the bound an evaluation figure must reach");
  s.give_up_after = c.get_in_or<int64_t>("give_up_after", 0, Range::at_least(0),
                                         "evaluations in a row without a new best figure; 0 never "
                                         "gives up");
  s.give_up_at_step = c.get_in_or<int64_t>("give_up_at_step", 0, Range::at_least(0),
                                           "the step by which the bound must be reached; 0: no "
                                           "deadline");
  return s;
}

// A bucket size given in MiB (reducer.bucket_mb, reducer.first_bucket_mb) as bytes: from 1 byte
// to 1 TiB, checked before the conversion (a double beyond int64 has no defined cast).
int64_t read_bucket_bytes(const Config& red, const std::string& key, double fallback_mb,
                          const std::string& hint) {
  constexpr double kMiB = 1 << 20;
  const double mb = red.get_or<double>(key, fallback_mb);
  if (!(std::isfinite(mb) && mb * kMiB >= 1 && mb <= kMiB)) {
    char got[32];  // shortest exact form: 1048576.5 must not read 1.04858e+06
    const auto end = std::to_chars(got, got + sizeof got, mb).ptr;
    ADA_THROW(ConfigError) << red.where(key)
                           << ": must be from 1 byte to 1 TiB, a number of MiB in "
                           << "[9.5367431640625e-07, 1048576] (1/1048576 MiB is a byte), got "
                           << std::string(got, end) << "; " << hint;
  }
  return static_cast<int64_t>(mb * kMiB);
}

// A section that may be absent (all defaults).
Config section_or_empty(const Config& root, const std::string& key) {
  return root.has(key) ? root.child(key) : Config::parse("{}", "defaults");
}

// train.examples_per_step: N > 0 sets the examples of a step on all ranks together, whatever
// their number: train.micro_batches becomes N / (world x train.batch_per_rank), which must be a
// whole number. 0 or absent: micro_batches as given. Returns N (0: not given).
int64_t read_examples_per_step(const Config& t, int world, int64_t batch) {
  const int64_t n = t.get_in_or<int64_t>("examples_per_step", 0, Range::at_least(0),
                                         "0 takes train.micro_batches as given");
  if (n == 0) return 0;
  const std::string file = "config " + t.source() + ": ";
  const auto named = [&](const char* key) {
    std::string w = t.where(key);
    return w.rfind(file, 0) == 0 ? w.substr(file.size()) : w;
  };
  ADA_CHECK_ARG(!t.has("micro_batches"), ConfigError)
      << file << named("examples_per_step") << " is " << n << " and " << named("micro_batches")
      << " is " << t.get<int64_t>("micro_batches") << ": set one of them (examples_per_step "
      << "derives micro_batches from the number of ranks): --set train.micro_batches=null keeps "
      << "examples_per_step, --set train.examples_per_step=0 keeps micro_batches";
  const int64_t unit = world * batch;  // the examples of one micro-batch on every rank
  if (n % unit == 0) return n;
  std::string fix = n > unit ? fmt::format("the nearest they can make are {} and {}",
                                           n / unit * unit, (n / unit + 1) * unit)
                             : fmt::format("the smallest they can make is {}", unit);
  if (n % world == 0) {  // a smaller batch_per_rank that divides each rank's share keeps N
    int64_t b = std::min(batch, n / world);
    while ((n / world) % b != 0) --b;
    const int64_t micro = n / world / b;
    fix += fmt::format("; or keep {} with train.batch_per_rank: {} ({} micro-batch{} a step)", n, b,
                       micro, micro == 1 ? "" : "es");
  }
  ADA_THROW(ConfigError) << file << named("examples_per_step") << " is " << n << ", which " << world
                         << " ranks x train.batch_per_rank " << batch << " (" << unit
                         << " examples a micro-batch) cannot make in whole micro-batches: " << fix;
}

}  // namespace

std::string StopAt::describe() const {
  return metric + (below ? " <= " : " >= ") + fmt::format("{:g}", value);
}

bool StopAt::better(double v, double best) const {
  return std::isnan(best) ? !std::isnan(v) : (below ? v < best : v > best);
}

RunSettings read_run_settings(const Config& root, const std::string& config_path, int world,
                              int local_rank) {
  RunSettings s;
  const Config t = root.child("train");
  s.epochs = t.get_or<int64_t>("epochs", 0);
  s.steps = t.get_or<int64_t>("steps", 0);
  if ((s.epochs > 0) == (s.steps > 0)) {
    // Both given (e.g. a config's epochs and a --set train.steps for a short run), or neither:
    // name each as written, with where it came from, and the setting that fixes it.
    const std::string file = "config " + t.source() + ": ";
    const auto named = [&](const char* key, int64_t v) {
      std::string w = t.where(key);
      if (w.rfind(file, 0) == 0) w = w.substr(file.size());
      return t.has(key) ? fmt::format("{} is {}", w, v) : w;
    };
    ADA_THROW(ConfigError) << file << named("epochs", s.epochs) << " and "
                           << named("steps", s.steps)
                           << ": set exactly one of train.epochs or train.steps to a positive "
                           << "number (the other 0 or absent; e.g. a run by steps on a config "
                           << "with epochs: --set train.epochs=0 --set train.steps=N)";
  }
  s.batch = t.get_in_or<int64_t>("batch_per_rank", s.batch, Range::above(0));
  s.micro = t.get_in_or<int64_t>("micro_batches", s.micro, Range::above(0));
  s.examples_per_step = read_examples_per_step(t, world, s.batch);
  if (s.examples_per_step > 0) s.micro = s.examples_per_step / (world * s.batch);
  s.eval_every = t.get_in_or<int64_t>("eval_every", s.eval_every, Range::at_least(0),
                                      "0 evaluates at each epoch's end");
  s.max_eval_batches = t.get_in_or<int64_t>("max_eval_batches", s.max_eval_batches,
                                            Range::at_least(0), "0 evaluates the whole set");
  s.log_every =
      t.get_in_or<int64_t>("log_every", s.log_every, Range::at_least(1), "steps per metrics line");
  s.seed = static_cast<uint64_t>(t.get_in_or<int64_t>("seed", 1, Range::at_least(0)));
  s.flush_denormals = t.get_or<bool>("flush_denormals", s.flush_denormals);
  s.threads = t.get_in_or<int>("threads", s.threads, Range::at_least(0),
                               "0 shares the node's cores among its ranks");
  s.checksum_every = t.get_in_or<int64_t>("checksum_every", s.checksum_every, Range::at_least(0),
                                          "0 turns the check off");
  s.clip = t.get_in_or<double>("clip_grad_norm", s.clip, Range::at_least(0), "0 turns it off");
  s.init_from = t.get_path_or("init_from", "");
  s.freeze = t.get_or<std::vector<std::string>>("freeze", {});
  s.timeline = t.get_path_or("timeline", "");
  s.tensorboard = t.get_path_or("tensorboard", "");
  s.device = read_device(t, local_rank);
  s.precision = read_precision(t, s.device);
  s.loss_scale = read_loss_scale(t, s.precision);
  s.activations = read_activations(t, s.precision);
  s.cuda_graphs = t.get_or<bool>("cuda_graphs", false);
  // BERT's fine-tuning heads check each batch's labels on the host in the forward pass, which a
  // graph cannot hold: refused here, not at the capture after two steps.
  if (const std::string head = root.get_or<std::string>("model.head", "");
      s.cuda_graphs && (head == "classification" || head == "question_answering"))
    ADA_THROW(ConfigError) << t.where("cuda_graphs") << ": the " << head << " head (model.head) "
                           << "reads each batch's labels on the host in its forward pass, which "
                           << "a CUDA graph cannot replay; set cuda_graphs: false to fine-tune";
  ADA_CHECK_ARG(!s.cuda_graphs || !s.device.is_cpu(), ConfigError)
      << t.where("cuda_graphs") << ": CUDA graphs need train.device: cuda; set cuda_graphs: false "
      << "on the CPU";
  ADA_CHECK_ARG(!s.cuda_graphs || s.micro == 1, ConfigError)
      << t.where("cuda_graphs") << ": a graph holds one forward and backward pass, but a step has "
      << s.micro << " micro-batches here (train.micro_batches or train.examples_per_step); set "
      << "cuda_graphs: false, or one micro-batch a step";
  s.comm = t.get_or<std::string>("comm", s.comm);
  comm::check_step_comm_choice(s.comm, s.device, t.where("comm"));
  s.comm_timeout =
      t.get_in_or<double>("comm_timeout_s", s.comm_timeout, Range::at_least(0).with_infinity(),
                          "0 or inf waits for ever; a hung peer then hangs the job");
  const std::string nonfinite = t.get_or<std::string>("on_nonfinite", "stop");
  ADA_CHECK_ARG(nonfinite == "stop" || nonfinite == "skip", ConfigError)
      << t.where("on_nonfinite") << ": must be 'stop' or 'skip', got '" << nonfinite << "'";
  s.skip_nonfinite = nonfinite == "skip";
  s.stop_at = read_stop_at(t);

  const Config d = root.child("data");
  s.workers = d.get_in_or<int>("workers", s.workers, Range::closed(0, 1024),
                               "threads per rank; 0 loads on the training thread");
  s.prefetch = d.get_in_or<int>("prefetch", s.prefetch, Range::at_least(0), "0: 2 x workers");

  const Config out = section_or_empty(root, "output");
  const std::string stem = std::filesystem::path(config_path).stem().string();
  s.out_dir = out.get_path_or("dir", "runs/" + stem + "-np" + std::to_string(world));
  const Config ck = section_or_empty(root, "checkpoint");
  s.ckpt_dir = ck.get_path_or("dir", s.out_dir + "/checkpoints");
  s.ckpt_every = ck.get_in_or<int64_t>("every", s.ckpt_every, Range::at_least(0),
                                       "0 saves at the end of every epoch");
  s.ckpt_keep = ck.get_in_or<int>("keep", s.ckpt_keep, Range::at_least(1),
                                  "the newest valid checkpoint is always kept");
  s.ckpt_overwrite = ck.get_or<bool>("overwrite", false);

  const Config red = root.child("reducer");
  s.buckets.bucket_bytes =
      read_bucket_bytes(red, "bucket_mb", 25.0, "MiB per gradient bucket (25, as PyTorch DDP)");
  s.buckets.first_bucket_bytes =
      read_bucket_bytes(red, "first_bucket_mb", 1.0, "MiB of the first, small bucket");
  return s;
}

}  // namespace ada::trainer
