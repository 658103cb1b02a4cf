// bench_step: training-step throughput (forward + backward + optimizer step) and peak resident
// memory of one model, against PyTorch measured in the same run by tools/bench_step_torch.py.
//   bench_step --model resnet50|bert_base|bert_mini|resnet20_mnist|lenet5 [--batch B]
//              [--threads T] [--steps N] [--seq 128] [--no-torch]
// Optimizers: Momentum-SGD for the CNNs, AdamW for bert_base, LAMB for bert_mini (PyTorch has
// no LAMB: its twin runs AdamW). Synthetic inputs; images 224x224 (28x28 for the MNIST models).
// Peak memory is each process's maximum resident set (getrusage), so run one case per process.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/config.h"
#include "core/parallel.h"
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
  if (name == "resnet50") return {"name: resnet50", "{name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 1.0e-4}"};
  if (name == "resnet20_mnist")
    return {"name: resnet20_mnist", "{name: sgd, lr: 0.1, momentum: 0.9, weight_decay: 1.0e-4}", false, 28, 1, 10};
  if (name == "lenet5") return {"name: lenet5", "{name: sgd, lr: 0.1, momentum: 0.9}", false, 28, 1, 10};
  if (name == "bert_base")
    return {"{name: bert, preset: base}", "{name: adamw, lr: 1.0e-4, weight_decay: 0.01}", true};
  if (name == "bert_mini")
    return {"{name: bert, preset: mini}", "{name: lamb, lr: 1.0e-3, weight_decay: 0.01}", true};
  ADA_THROW(ConfigError) << "bench_step: unknown --model '" << name
                         << "'; known: bert_base, bert_mini, lenet5, resnet20_mnist, resnet50";
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
  Tensor ids = Tensor::empty({batch, seq}, DType::i64), labels = Tensor::empty({batch, seq}, DType::i64);
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
  int64_t batch = 0, steps = 5, seq = 128;
  int threads = 1;
  bool torch = true;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        ADA_CHECK_ARG(i + 1 < argc, ConfigError) << a << " needs a value";
        return argv[++i];
      };
      if (a == "--model") model = value();
      else if (a == "--batch") batch = std::stoll(value());
      else if (a == "--threads") threads = std::stoi(value());
      else if (a == "--steps") steps = std::stoll(value());
      else if (a == "--seq") seq = std::stoll(value());
      else if (a == "--no-torch") torch = false;
      else
        ADA_THROW(ConfigError) << "unknown option '" << a
                               << "'; usage: bench_step --model NAME [--batch B] [--threads T] [--steps N] "
                                  "[--seq L] [--no-torch]";
    }
    const Case c = case_for(model);
    if (batch <= 0) batch = model == "resnet50" ? 32 : model == "bert_base" ? 8 : model == "bert_mini" ? 32 : 64;
    set_num_threads(threads);
    nn::ModelRegistry models("model");
    nn::register_builtin_models(models);
    Config mc = Config::parse(c.model_yaml, "bench");
    auto net = models.get(mc.get<std::string>("name"))(mc, 1);
    optim::OptimizerRegistry optimizers("optimizer");
    optim::register_builtin_optimizers(optimizers);
    auto opt = optim::make_optimizer(optimizers, Config::parse(c.optimizer_yaml, "bench"));
    const auto batch_map = make_batch(c, batch, seq);
    auto params = net->parameters();
    auto one_step = [&] {
      net->zero_grad();
      auto out = net->forward(batch_map);
      backward(out.loss);
      opt->step(params, 1e-4f);
    };
    one_step();  // warm-up (allocations, first-touch)
    std::vector<double> t;
    for (int64_t s = 0; s < steps; ++s) {
      auto a = std::chrono::steady_clock::now();
      one_step();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(t.begin(), t.end());
    const double step_s = t[t.size() / 2], ours_sps = batch / step_s, ours_mb = peak_rss_mb();

    double torch_sps = -1, torch_mb = -1;
    std::string torch_note;
    if (torch) {
      const std::string cmd = std::string("/usr/bin/python3 ") + ADA_SOURCE_DIR + "/tools/bench_step_torch.py --model " +
                              model + " --batch " + std::to_string(batch) + " --threads " + std::to_string(threads) +
                              " --steps " + std::to_string(steps) + " --seq " + std::to_string(seq) +
                              " 2>/tmp/bench_step_torch.err";
      FILE* p = popen(cmd.c_str(), "r");
      std::string outs;
      char buf[4096];
      size_t n;
      while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) outs.append(buf, n);
      const int rc = p ? pclose(p) : -1;
      if (rc == 0) {
        YAML::Node r = YAML::Load(outs);
        torch_sps = r["samples_per_s"].as<double>();
        torch_mb = r["peak_rss_mb"].as<double>();
        torch_note = r["optimizer"].as<std::string>();
      } else {
        std::cerr << "bench_step: the PyTorch twin failed (see /tmp/bench_step_torch.err); "
                     "install it with tools/setup.sh --bench\n";
      }
    }
    std::printf("%-15s batch %-3lld threads %d | ours %7.2f samples/s (%.3f steps/s), peak %7.0f MB",
                model.c_str(), static_cast<long long>(batch), threads, ours_sps, 1.0 / step_s, ours_mb);
    if (torch_sps > 0)
      std::printf(" | PyTorch (%s) %7.2f samples/s, peak %7.0f MB | throughput x%.2f, memory x%.2f\n",
                  torch_note.c_str(), torch_sps, torch_mb, ours_sps / torch_sps, ours_mb / torch_mb);
    else
      std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_step: " << e.what() << "\n";
    return 1;
  }
}
