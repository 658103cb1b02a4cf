// bench_step: training-step throughput (forward + backward + optimizer step) and peak memory
// of one model, against PyTorch measured in the same run by tools/bench_step_torch.py.
//   bench_step --model resnet50|bert_large|bert_base|bert_mini|bert_tiny|resnet20_mnist|lenet5
//   [--batch B]
//              [--threads T] [--steps N] [--rounds R] [--seq 128] [--device cpu|cuda]
//              [--python /usr/bin/python3] [--no-torch] [--profile] [--precision fp32|bf16|fp16]
//              [--twins eager,channels_last,...] [--attention composed|fused]
//              [--recompute attention_dropout,gelu]
//              [--activations fp32|16bit] [--channels-last] [--graphs]
// Optimizers: Momentum-SGD for the CNNs, AdamW for bert_large and bert_base, LAMB for bert_mini
// (PyTorch has no LAMB: its twin runs AdamW). Synthetic inputs; images 224x224 (28x28 for the
// MNIST models). The median step time gives samples/s.
// --device cpu (default): one warm-up step; peak memory is each process's maximum resident set
// (getrusage), so run one case per process. The twin runs twice, one process each: as installed
// ("default": NCHW, glibc malloc, whatever libblas.so.3 Debian's alternatives give), then tuned,
// PyTorch's best CPU runtime: --tuned (channels-last model and batch for the CNNs), tcmalloc
// preloaded and the OpenMP OpenBLAS first on LD_LIBRARY_PATH, on that command only (see
// apps/common/torch_twin.h). The first line's ratios are against the tuned run; the two twin
// lines below give each run's samples/s, peak RSS and the runtime it reported from inside
// (memory format, allocator, the BLAS its GEMMs call, from libtorch_cpu and /proc/self/maps),
// the default one with its own ratios, labelled "vs default". A tuned run that lacks tcmalloc or
// the OpenMP OpenBLAS is labelled "PARTLY tuned" with a note naming the Debian package
// (tools/setup.sh --bench). Its stderr goes to $TMPDIR (or /tmp)/bench_step_torch{,_tuned}.PID.err.
// --rounds R (cpu, default 1): ours and the tuned twin are timed R times in turn (ours, twin,
// ours, twin, ...), so that a slow spell of a shared machine falls on both; the first line gives
// the medians of each side and the median ratio with its range over the rounds, e.g.
// "throughput x0.88 (median of 5 rounds in turn, x0.85-0.91)". The default twin runs once.
// --device cuda: model and the fixed batch live on cuda:0; three warm-up steps, then each timed
// step is bracketed by a device synchronize. Peak memory is the caching allocator's
// peak_allocated and peak_reserved over the whole run (parameters, optimizer state, batch and
// activations), against torch.cuda.max_memory_allocated / max_memory_reserved. Both sides run
// fp32 without TF32, unless ADA_CUDA_TF32=1 is set: then our cuBLAS/cuDNN may use TF32 and the
// twin gets --tf32, so the comparison is always fp32-vs-fp32 or tf32-vs-tf32.
// --profile (cpu): after the timed steps, `steps` more steps with every op timed by the wall clock
// (core/backend/cpu/op_profile.h); prints milliseconds per step per op, then the host tensors'
// peak live and held bytes against the process's peak RSS.
// --profile (cuda): after the timed steps, `steps` more steps with every op bracketed by CUDA
// events; prints GPU milliseconds per op (an op that calls another is counted in both); then
// `steps` more steps under CUPTI, printing every kernel's GPU time under the op that launched it
// (cuda::set_kernel_tracing; CUPTI from ADA_CUPTI_LIBRARY or libcupti.so.13).
// --precision bf16|fp16: our matrix products with bf16 (fp16: cuda only) inputs and fp32
// accumulation (train.precision, core/precision.h; bf16 on the CPU needs AVX512_BF16; on a GPU
// cuBLAS on operands cast to bf16/fp16, TF32/fp16 convolutions). The same model is timed in fp32
// first, in the same process, and the mixed/fp32 ratio printed; the twins run their forward under
// torch.autocast(device, torch.bfloat16 or torch.float16), PyTorch's mixed precision. Neither
// side scales the loss here. --activations 16bit (with --precision bf16|fp16): the mixed step
// also stores activations in that 16-bit type (train.activations: 16bit).
// --graphs (cuda): after the warm-up the step is timed eagerly, then its forward and backward
// passes are captured once as a CUDA graph (cuda::Graph, dropout drawing from the model's
// generator) and the reported step is a replay plus the optimizer's step run eagerly (a few
// multi-tensor launches; Adam's and LAMB's bias corrections change every step), the ratio
// against the eager step printed. Peak memory then adds the graph pool's peak to the device
// pool's (an upper bound of the peak).
// The twin runs under --python (default /usr/bin/python3; e.g. --python python3 for a pip torch).
// On cuda PyTorch's best is several twins, one process each (bench_step_torch.py --variant):
// CNNs eager (NCHW, as installed), channels_last (+ fused SGD) and compile (channels_last under
// torch.compile); BERT eager (nn.TransformerEncoder), sdpa (F.scaled_dot_product_attention +
// fused AdamW), sdpa_compile and hf_sdpa (transformers' BertForPreTraining with SDPA attention).
// The first line's ratios are against the fastest twin that ran; one line per twin follows with
// ours against it; a twin this torch cannot run says why and is skipped. --twins a,b picks some.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "apps/common/cli.h"
#include "apps/common/torch_twin.h"
#include "base/config.h"
#include "core/backend/cpu/op_profile.h"
#include "core/backend/cuda_runtime.h"
#include "core/cpu_isa.h"
#include "core/host_memory.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "nn/model.h"
#include "optim/optimizer.h"

#ifndef ADA_SOURCE_DIR
#define ADA_SOURCE_DIR "."
#endif

namespace {
using namespace ada;

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

struct Case {
  std::string model_yaml, optimizer_yaml;
  bool bert = false;
  int64_t image = 224, channels = 3, classes = 1000;
};

Case case_for(const std::string& name) {
  if (name == "resnet50")
    return {"{name: resnet50}", "{name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 1.0e-4}"};
  if (name == "resnet20_mnist")
    return {"{name: resnet20_mnist}",
            "{name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 1.0e-4}",
            false,
            28,
            1,
            10};
  if (name == "lenet5")
    return {"{name: lenet5}", "{name: sgd, lr: 0.1, momentum: 0.9}", false, 28, 1, 10};
  if (name == "bert_large")
    return {"{name: bert, preset: large}", "{name: adamw, lr: 1.0e-4, weight_decay: 0.01}", true};
  if (name == "bert_base")
    return {"{name: bert, preset: base}", "{name: adamw, lr: 1.0e-4, weight_decay: 0.01}", true};
  if (name == "bert_tiny")  // the scaling studies' model (studies/bases/bert_tiny_mlm.yaml)
    return {"{name: bert, preset: tiny}", "{name: lamb, lr: 5.0e-3, weight_decay: 0.01}", true};
  if (name == "bert_mini")
    return {"{name: bert, preset: mini}", "{name: lamb, lr: 1.0e-3, weight_decay: 0.01}", true};
  ADA_THROW(ConfigError)
      << "unknown --model '" << name
      << "'; known: bert_base, bert_large, bert_mini, bert_tiny, lenet5, resnet20_mnist, resnet50";
  return {};
}

// A fixed synthetic batch: images + labels, or BERT ids with 15% of positions as MLM targets.
nn::TensorMap make_batch(const Case& c, int64_t batch, int64_t seq) {
  Generator g(11);
  nn::TensorMap b;
  if (!c.bert) {
    b["image"] = Tensor::randn({batch, c.channels, c.image, c.image}, g);
    Tensor labels = Tensor::empty({batch}, DType::i64);
    for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = (i * 7919) % c.classes;
    b["label"] = labels;
    return b;
  }
  Tensor ids = Tensor::empty({batch, seq}, DType::i64),
         labels = Tensor::empty({batch, seq}, DType::i64);
  for (int64_t i = 0; i < batch * seq; ++i) {
    ids.data<int64_t>()[i] = 1000 + (i * 7919) % 29000;
    labels.data<int64_t>()[i] = i % 7 == 3 ? ids.data<int64_t>()[i] : -100;  // ~14% masked
  }
  b["input_ids"] = ids;
  b["labels"] = labels;
  b["segment_ids"] = Tensor::zeros({batch, seq}, DType::i64);
  b["attention_mask"] = Tensor::ones({batch, seq}, DType::i64);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "resnet20_mnist";
  int64_t batch = 0, steps = 5, seq = 128, rounds = 1;
  int threads = 1;
  bool torch = true, profile = false, channels_last = false, graphs = false;
  std::string device = "cpu", python = "/usr/bin/python3", precision = "fp32", twins_arg, attention,
              recompute;
  std::string activations = "fp32";
  const std::string usage =
      "usage: bench_step --model NAME [--batch B] [--threads T] [--steps N] [--rounds R] [--seq L] "
      "[--device cpu|cuda] [--python PATH] [--no-torch] [--profile] [--precision fp32|bf16|fp16] "
      "[--twins LIST] [--attention composed|fused] [--recompute attention_dropout,gelu] "
      "[--activations fp32|16bit] [--channels-last] [--graphs]";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        ADA_CHECK_ARG(i + 1 < argc, ConfigError) << a << " needs a value";
        return argv[++i];
      };
      auto integer = [&](int64_t lo, int64_t hi) { return cli::integer_arg(a, value(), lo, hi); };
      if (a == "--model")
        model = value();
      else if (a == "--batch")
        batch = integer(1, 1 << 20);
      else if (a == "--threads")
        threads = static_cast<int>(integer(1, 1024));
      else if (a == "--steps")
        steps = integer(1, 1000000);
      else if (a == "--rounds")
        rounds = integer(1, 1000);
      else if (a == "--seq")
        seq = integer(1, 512);  // the BERT presets' max_positions
      else if (a == "--device")
        device = value();
      else if (a == "--python")
        python = value();
      else if (a == "--no-torch")
        torch = false;
      else if (a == "--profile")
        profile = true;
      else if (a == "--precision")
        precision = value();
      else if (a == "--twins")
        twins_arg = value();
      else if (a == "--attention")
        attention = value();
      else if (a == "--recompute")
        recompute = value();
      else if (a == "--activations")
        activations = value();
      else if (a == "--channels-last")
        channels_last = true;
      else if (a == "--graphs")
        graphs = true;
      else if (a == "-h" || a == "--help") {
        std::cout << usage
                  << "\n  --model: resnet50, bert_large, bert_base, bert_mini, bert_tiny, "
                     "resnet20_mnist, lenet5 (default resnet20_mnist)\n"
                     "  --batch 1 to 1048576 (default by model), --threads 1 to 1024 (default 1),\n"
                     "  --steps 1 to 1000000 (default 5), --rounds 1 to 1000 (default 1),\n"
                     "  --seq 1 to 512 (BERT; default 128). The comment atop apps/bench_step.cc "
                     "says more.\n";
        return 0;
      } else
        ADA_THROW(ConfigError) << "unknown option '" << a << "'; " << usage;
    }
    ADA_CHECK_ARG(device == "cpu" || device == "cuda", ConfigError)
        << "--device must be cpu or cuda, not '" << device << "'";
    ADA_CHECK_ARG(rounds == 1 || (device == "cpu" && torch), ConfigError)
        << "--rounds " << rounds
        << " times ours and the tuned PyTorch twin in turn on the CPU: it needs --device cpu "
           "and the twin (drop --no-torch)";
    ADA_CHECK_ARG(!graphs || device == "cuda", ConfigError)
        << "--graphs needs --device cuda (CUDA graphs)";
    ADA_CHECK_ARG(!graphs || !profile, ConfigError)
        << "--graphs and --profile exclude each other (a replayed graph has no per-op events); "
           "profile the eager step without --graphs";
    ADA_CHECK_ARG(precision == "fp32" || precision == "bf16" || precision == "fp16", ConfigError)
        << "--precision must be fp32, bf16 or fp16, not '" << precision << "'";
    const bool mixed = precision != "fp32";
    const Precision mixed_precision = precision == "fp16" ? Precision::fp16 : Precision::bf16;
    const bool on_cuda = device == "cuda";
    ADA_CHECK_ARG(activations == "fp32" || (activations == "16bit" && mixed), ConfigError)
        << "--activations must be fp32, or 16bit with --precision bf16|fp16 (got '" << activations
        << "' with --precision " << precision << ")";
    // The mixed step's label: its precision, and its activations when 16-bit.
    const std::string mode = precision + (activations == "16bit" ? "+act16" : "");
    ADA_CHECK_ARG(precision != "fp16" || on_cuda, ConfigError)
        << "--precision fp16 needs --device cuda (the CPU has no fp16 dot products; use bf16)";
    const char* tf32_env = std::getenv("ADA_CUDA_TF32");
    const bool tf32 = on_cuda && tf32_env && std::string(tf32_env) == "1";
    std::string device_name;
    if (on_cuda) {
      const std::string why = cuda::unavailable_reason();
      ADA_CHECK_ARG(why.empty(), DeviceError) << "--device cuda: " << why;
      device_name = cuda::device_name(0);
    }
    const Case c = case_for(model);
    const std::vector<std::string> known_twins =
        c.bert ? std::vector<std::string>{"eager", "sdpa", "sdpa_compile", "hf_sdpa"}
               : std::vector<std::string>{"eager", "channels_last", "compile"};
    std::vector<std::string> twins = known_twins;
    if (!twins_arg.empty()) {
      ADA_CHECK_ARG(on_cuda, ConfigError)
          << "--twins is for --device cuda (on the CPU the twin runs as installed and tuned)";
      twins.clear();
      for (size_t at = 0; at <= twins_arg.size();) {
        const size_t end = std::min(twins_arg.find(',', at), twins_arg.size());
        const std::string t = twins_arg.substr(at, end - at);
        if (std::find(known_twins.begin(), known_twins.end(), t) == known_twins.end()) {
          std::string known;
          for (const auto& k : known_twins) known += (known.empty() ? "" : ", ") + k;
          ADA_THROW(ConfigError) << "--twins " << twins_arg << ": '" << t
                                 << "' is not a twin of --model " << model << "; known: " << known;
        }
        twins.push_back(t);
        at = end + 1;
      }
    }
    if (batch <= 0)
      batch = model == "resnet50"     ? 32
              : model == "bert_base"  ? 8
              : model == "bert_large" ? 4
              : model == "bert_mini"  ? 32
                                      : 64;
    set_num_threads(threads);
    std::string model_yaml = c.model_yaml;
    if (!attention.empty()) {  // BERT's model.attention
      ADA_CHECK_ARG(c.bert && (attention == "composed" || attention == "fused"), ConfigError)
          << "--attention " << attention << ": composed or fused, for the BERT models only";
      model_yaml.insert(model_yaml.size() - 1, ", attention: " + attention);
    }
    if (!recompute.empty()) {  // BERT's model.recompute (the model checks the names)
      ADA_CHECK_ARG(c.bert, ConfigError)
          << "--recompute " << recompute << ": for the BERT models only (model.recompute)";
      model_yaml.insert(model_yaml.size() - 1, ", recompute: [" + recompute + "]");
    }
    if (channels_last) {  // the ResNets' model.channels_last (NHWC activations)
      ADA_CHECK_ARG(model.rfind("resnet", 0) == 0, ConfigError)
          << "--channels-last is for the ResNets (model.channels_last), not " << model;
      model_yaml.insert(model_yaml.size() - 1, ", channels_last: true");
    }
    Config mc = Config::parse(model_yaml, "bench");
    const std::string label = (attention.empty() ? model : model + "/" + attention) +
                              (channels_last ? "/channels_last" : "") +
                              (recompute.empty() ? "" : "/recompute");
    auto net = nn::builtin_models().get(mc.get<std::string>("name"))(mc, 1);
    net->set_training_metrics(false);       // as the trainer's step
    if (on_cuda) net->to(Device::cuda(0));  // before the optimizer sees the parameters
    auto opt = optim::make_optimizer(optim::builtin_optimizers(),
                                     Config::parse(c.optimizer_yaml, "bench"));
    auto batch_map = make_batch(c, batch, seq);
    net->prepare_batch(batch_map);  // as the trainer: BERT's masked positions made on the host
    if (on_cuda)
      for (auto& kv : batch_map) kv.second = kv.second.to(Device::cuda(0));
    auto params = net->parameters();
    auto forward_backward = [&] {
      net->zero_grad();
      auto out = net->forward(batch_map);
      backward(out.loss);
    };
    auto one_step = [&] {
      forward_backward();
      opt->step(params, 1e-4f);
    };
    const int warmup = on_cuda ? 3 : 1;           // the twin uses the same counts
    for (int w = 0; w < warmup; ++w) one_step();  // warm-up (allocations, first-touch, cuDNN plans)
    auto median_step = [&](const std::function<void()>& step) {
      std::vector<double> t;
      for (int64_t s = 0; s < steps; ++s) {
        if (on_cuda) cuda::synchronize(0);
        auto a = std::chrono::steady_clock::now();
        step();
        if (on_cuda) cuda::synchronize(0);
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      }
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    double fp32_step_s = 0;
    if (mixed) {  // our fp32 step first, then bf16/fp16 from a warm-up step on
      fp32_step_s = median_step(one_step);
      if (on_cuda)
        set_cuda_matmul_precision(mixed_precision);
      else
        set_cpu_matmul_precision(mixed_precision);
      if (activations == "16bit") set_activation_dtype(precision_dtype(mixed_precision));
      // The peaks printed below are the mixed steps' own (the fp32 steps' are usually larger).
      if (on_cuda)
        cuda::reset_peak(0);
      else
        host::reset_peak();
      one_step();
    }
    // --graphs: the eager step timed (and its 16-bit copies counted: a replay runs no host code),
    // then the same step captured and replayed.
    const int64_t copies_before = ops::sixteen_bit_copies();
    int64_t copies_after = -1;
    double eager_step_s = 0;
    cuda::Graph graph;
    auto run_step = [&] {
      if (!graphs) return one_step();
      graph.replay();
      opt->step(params, 1e-4f);
    };
    if (graphs) {
      eager_step_s = median_step(one_step);
      copies_after = ops::sixteen_bit_copies();
      cuda::synchronize(0);
      cuda::empty_cache(0);  // the eager steps' cached blocks: the graph's pool holds its own
      cuda::reset_peak(0);
      graph.capture(0, forward_backward, &net->rng());  // DeviceError names what refused
      std::printf("graph: %lld nodes captured, its pool %.0f MB\n",
                  static_cast<long long>(graph.nodes()),
                  static_cast<double>(graph.pool_bytes()) / (1024.0 * 1024.0));
      run_step();  // the first replay uploads the graph
      cuda::synchronize(0);
    }
    const double step_s = median_step(run_step);
    double ours_sps = batch / step_s;
    if (copies_after < 0) copies_after = ops::sixteen_bit_copies();
    // f32 copies of 16-bit inputs per step (ops without a 16-bit kernel; 0 without 16-bit
    // activations).
    const double copies_per_step =
        static_cast<double>(copies_after - copies_before) / static_cast<double>(steps);
    if (profile && on_cuda) {  // after the timed steps, so the events do not disturb them
      cuda::set_profiling(true);
      for (int64_t s = 0; s < steps; ++s) one_step();
      cuda::synchronize(0);
      cuda::set_profiling(false);
      std::printf("profile: %lld steps of %s, median step %.2f ms (wall)\n%s",
                  static_cast<long long>(steps), model.c_str(), 1e3 * step_s,
                  cuda::profile_report().c_str());
      cuda::set_kernel_tracing(true);  // its own steps: tracing slows the host
      for (int64_t s = 0; s < steps; ++s) one_step();
      cuda::synchronize(0);
      cuda::set_kernel_tracing(false);
      std::printf("kernels: %lld more steps\n%s", static_cast<long long>(steps),
                  cuda::kernel_trace_report().c_str());
    } else if (profile) {
      cpu::set_profiling(true);
      for (int64_t s = 0; s < steps; ++s) one_step();
      cpu::set_profiling(false);
      std::printf(
          "profile: %lld steps of %s (%s), median step %.2f ms (wall); ops nested in "
          "others count in both\n%s",
          static_cast<long long>(steps), model.c_str(), mode.c_str(), 1e3 * step_s,
          cpu::profile_report(steps).c_str());
      if (!on_cuda) {
        const MemoryStats hs = host::memory_stats();
        std::printf(
            "host tensors over the run: peak %.0f MB live, peak %.0f MB held by the caching "
            "allocator (live + cached); process peak RSS %.0f MB\n",
            static_cast<double>(hs.peak_allocated) / (1024.0 * 1024.0),
            static_cast<double>(hs.peak_reserved) / (1024.0 * 1024.0), peak_rss_mb());
      }
    }
    double ours_mb = 0, ours_reserved_mb = 0;
    if (on_cuda) {
      const cuda::MemoryStats ms = cuda::memory_stats(0);
      ours_mb = static_cast<double>(ms.peak_allocated) / (1024.0 * 1024.0);
      ours_reserved_mb = static_cast<double>(ms.peak_reserved) / (1024.0 * 1024.0);
      std::printf("%s\n", cuda::epilogue_report().c_str());
    } else {
      ours_mb = peak_rss_mb();
    }

    // The PyTorch twin, one process per run: on cuda once, as installed; on the CPU twice, as
    // installed ("default") and then with the tuned runtime (twin::tuned_env()).
    struct TwinRun {
      bool ok = false;
      double sps = -1, mb = -1, reserved_mb = -1;
      std::string optimizer, unavailable;  // unavailable: the twin's own reason, exit status 3
      YAML::Node runtime;
    };
    auto run_twin = [&](bool tuned, const std::string& env_prefix,
                        const std::string& variant = "eager") {
      TwinRun t;
      const std::string err_path =
          twin::stderr_path(std::string("bench_step_torch") + (tuned ? "_tuned" : "") +
                            (variant == "eager" ? "" : "_" + variant));
      std::string cmd = env_prefix + python + " " + ADA_SOURCE_DIR +
                        "/tools/bench_step_torch.py --model " + model + " --batch " +
                        std::to_string(batch) + " --threads " + std::to_string(threads) +
                        " --steps " + std::to_string(steps) + " --seq " + std::to_string(seq);
      if (on_cuda) cmd += std::string(" --device cuda") + (tf32 ? " --tf32" : "");
      if (tuned) cmd += " --tuned";
      if (mixed) cmd += " --precision " + precision;
      if (variant != "eager") cmd += " --variant " + variant;
      cmd += " 2>" + err_path;
      const twin::Output o = twin::run(cmd);
      if (o.rc == 3) {  // bench_step_torch.py's unavailable(): this torch lacks what it needs
        t.unavailable = twin::file_tail(err_path, 300);
        while (!t.unavailable.empty() && t.unavailable.back() == '\n') t.unavailable.pop_back();
        return t;
      }
      if (o.rc != 0) {
        std::cerr << "bench_step: the PyTorch twin" << (tuned ? " (tuned)" : "") << " failed (exit "
                  << o.rc << ", ran: " << cmd << "); its stderr is in " << err_path
                  << (on_cuda ? "" : "; install PyTorch with tools/setup.sh --bench") << "\n"
                  << twin::file_tail(err_path, on_cuda ? 3000 : 1000);
        return t;
      }
      try {
        YAML::Node r = YAML::Load(o.out);
        if (on_cuda) {
          t.mb = r["peak_allocated_mb"].as<double>();
          t.reserved_mb = r["peak_reserved_mb"].as<double>();
        } else {
          t.mb = r["peak_rss_mb"].as<double>();
        }
        t.optimizer = r["optimizer"].as<std::string>();
        t.sps = r["samples_per_s"].as<double>();
        t.runtime = r["runtime"];
        t.ok = true;
      } catch (const std::exception& e) {
        std::cerr << "bench_step: cannot read the PyTorch twin's output (" << e.what()
                  << "): " << o.out << "\n";
      }
      return t;
    };

    if (on_cuda) {
      std::vector<TwinRun> runs(twins.size());
      size_t best = twins.size();
      for (size_t i = 0; torch && i < twins.size(); ++i) {
        runs[i] = run_twin(false, "", twins[i]);
        if (runs[i].ok && (best == twins.size() || runs[i].sps > runs[best].sps)) best = i;
      }
      const std::string seq_note = c.bert ? " seq " + std::to_string(seq) : "";
      std::printf(
          "%-15s batch %-3lld%s cuda:0 (%s) %s | ours %8.2f samples/s (%.3f steps/s), "
          "peak alloc %7.0f MB, reserved %7.0f MB",
          label.c_str(), static_cast<long long>(batch), seq_note.c_str(), device_name.c_str(),
          mixed  ? mode.c_str()
          : tf32 ? "tf32"
                 : "fp32",
          ours_sps, 1.0 / step_s, ours_mb, ours_reserved_mb);
      if (mixed)
        std::printf(" | %s/fp32 x%.2f (our fp32 %.2f samples/s)", mode.c_str(),
                    fp32_step_s / step_s, batch / fp32_step_s);
      if (activations == "16bit") std::printf(" | %.0f 16-bit copies/step", copies_per_step);
      if (graphs)
        std::printf(" | CUDA graph replay/eager x%.2f (eager %.2f samples/s)",
                    eager_step_s / step_s, batch / eager_step_s);
      if (best < twins.size())
        std::printf(" | vs the fastest PyTorch twin (%s): throughput x%.2f, memory (alloc) x%.2f\n",
                    twins[best].c_str(), ours_sps / runs[best].sps, ours_mb / runs[best].mb);
      else
        std::printf("%s\n", torch ? " | no PyTorch twin ran" : "");
      for (size_t i = 0; torch && i < twins.size(); ++i) {
        const TwinRun& tw = runs[i];
        if (!tw.unavailable.empty())
          std::printf("  PyTorch %-13s n/a: %s\n", twins[i].c_str(), tw.unavailable.c_str());
        else if (!tw.ok)
          std::printf("  PyTorch %-13s failed (see stderr)\n", twins[i].c_str());
        else
          std::printf(
              "  PyTorch %-13s (%s) %8.2f samples/s, peak alloc %7.0f MB, reserved %7.0f MB"
              " | ours: throughput x%.2f, memory (alloc) x%.2f, (reserved) x%.2f\n",
              twins[i].c_str(), tw.optimizer.c_str(), tw.sps, tw.mb, tw.reserved_mb,
              ours_sps / tw.sps, ours_mb / tw.mb, ours_reserved_mb / tw.reserved_mb);
      }
      return 0;
    }
    TwinRun def, tuned;
    const twin::TunedEnv env = twin::tuned_env();
    if (torch) {
      def = run_twin(false, "");
      tuned = run_twin(true, env.prefix);
    }
    // --rounds: ours and the tuned twin again, in turn, so that a slow spell of the machine
    // (another tenant on a shared host) falls on both; the medians are reported, and the ratio's
    // median with its range over the rounds.
    std::vector<double> ratios;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    if (rounds > 1 && tuned.ok) {
      std::vector<double> ours_r{ours_sps}, tuned_r{tuned.sps};
      ratios.push_back(ours_sps / tuned.sps);
      for (int64_t r = 1; r < rounds; ++r) {
        const double o = batch / median_step(run_step);
        const TwinRun t = run_twin(true, env.prefix);
        if (!t.ok) break;
        ours_r.push_back(o);
        tuned_r.push_back(t.sps);
        ratios.push_back(o / t.sps);
      }
      ours_sps = median(ours_r);
      tuned.sps = median(tuned_r);
      std::sort(ratios.begin(), ratios.end());
    }
    std::printf(
        "%-15s batch %-3lld threads %d %s | ours %7.2f samples/s (%.3f steps/s), peak %7.0f MB",
        label.c_str(), static_cast<long long>(batch), threads, mode.c_str(), ours_sps,
        ours_sps / static_cast<double>(batch), ours_mb);
    if (mixed)
      std::printf(" | %s/fp32 x%.2f (our fp32 %.2f samples/s, kernels %s)", mode.c_str(),
                  fp32_step_s / step_s, batch / fp32_step_s, cpu::isa_description().c_str());
    if (activations == "16bit") std::printf(" | %.0f 16-bit copies/step", copies_per_step);
    if (!torch) {
      std::printf("\n");
      return 0;
    }
    const std::vector<std::string> lacks = twin::shortfalls(tuned.runtime, env);
    const std::string tuned_label = lacks.empty() ? "tuned" : "PARTLY tuned";
    if (tuned.ok && ratios.size() > 1) {
      std::printf(
          " | vs PyTorch %s: throughput x%.2f (median of %zu rounds in turn, x%.2f-%.2f), "
          "memory x%.2f\n",
          tuned_label.c_str(), median(ratios), ratios.size(), ratios.front(), ratios.back(),
          ours_mb / tuned.mb);
    } else if (tuned.ok) {
      std::printf(" | vs PyTorch %s: throughput x%.2f, memory x%.2f\n", tuned_label.c_str(),
                  ours_sps / tuned.sps, ours_mb / tuned.mb);
    } else
      std::printf(" | vs PyTorch tuned: n/a (the tuned twin failed: %s)\n",
                  twin::stderr_path("bench_step_torch_tuned").c_str());
    auto twin_line = [&](const char* label, const TwinRun& t, bool ratio) {
      if (!t.ok) {
        std::printf("  PyTorch %-12s failed (see stderr)\n", label);
        return;
      }
      std::printf("  PyTorch %-12s (%s) %7.2f samples/s, peak %7.0f MB | %s", label,
                  t.optimizer.c_str(), t.sps, t.mb, twin::describe_runtime(t.runtime).c_str());
      if (ratio)
        std::printf(" | vs default: throughput x%.2f, memory x%.2f", ours_sps / t.sps,
                    ours_mb / t.mb);
      std::printf("\n");
    };
    twin_line(tuned_label.c_str(), tuned, false);
    twin_line("default", def, true);
    for (const auto& s : lacks) std::printf("  note: the tuned PyTorch run lacks: %s\n", s.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_step: " << e.what() << "\n";
    return 1;
  }
}
