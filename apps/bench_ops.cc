// bench_ops: throughput of the CPU kernels against PyTorch, measured in the same run.
// Cases: fp32 GEMM 2048^3, and forward + backward-data + backward-filter of every convolution
// of ResNet-50 (batch 32, 224x224, weighted by how often each shape occurs). For each thread
// count the PyTorch twin (tools/bench_ops_torch.py, run with /usr/bin/python3) times the same
// shapes; the bench prints GFLOP/s for both and the ratio ours/PyTorch.
//   bench_ops [--threads 1,2] [--repeats 3] [--batch 32] [--json] [--no-torch] [--verbose]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/ops.h"
#include "core/parallel.h"

#ifndef ADA_SOURCE_DIR
#define ADA_SOURCE_DIR "."
#endif

namespace {
using namespace ada;

struct ConvShape {
  int64_t c, k, hw, r, stride, count;  // in channels, out channels, input size, kernel, stride, uses
};

// The 53 convolutions of ResNet-50 v1.5 at 224x224, grouped by shape.
std::vector<ConvShape> resnet50_convs() {
  return {
      {3, 64, 224, 7, 2, 1},                                                      // stem
      {64, 64, 56, 1, 1, 1},    {64, 64, 56, 3, 1, 3},    {64, 256, 56, 1, 1, 4},  // layer1
      {256, 64, 56, 1, 1, 2},
      {256, 128, 56, 1, 1, 1},  {128, 128, 56, 3, 2, 1},  {128, 512, 28, 1, 1, 4},  // layer2
      {256, 512, 56, 1, 2, 1},  {512, 128, 28, 1, 1, 3},  {128, 128, 28, 3, 1, 3},
      {512, 256, 28, 1, 1, 1},  {256, 256, 28, 3, 2, 1},  {256, 1024, 14, 1, 1, 6}, // layer3
      {512, 1024, 28, 1, 2, 1}, {1024, 256, 14, 1, 1, 5}, {256, 256, 14, 3, 1, 5},
      {1024, 512, 14, 1, 1, 1}, {512, 512, 14, 3, 2, 1},  {512, 2048, 7, 1, 1, 3},  // layer4
      {1024, 2048, 14, 1, 2, 1}, {2048, 512, 7, 1, 1, 2}, {512, 512, 7, 3, 1, 2},
  };
}

int64_t out_size(const ConvShape& s) { return (s.hw + 2 * (s.r / 2) - s.r) / s.stride + 1; }
// Multiply-adds x2 for one pass (forward, backward-data or backward-filter) over the batch.
double conv_flops(const ConvShape& s, int64_t batch) {
  int64_t o = out_size(s);
  return 2.0 * batch * s.k * s.c * s.r * s.r * o * o;
}

template <class F>
double median_seconds(int repeats, F f) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Result {
  std::string name;
  int threads;
  double ours_gflops, torch_gflops;  // torch < 0: not measured
};

// Our timings: gemm GFLOP/s and per-conv-shape seconds (fwd+bwd).
double bench_gemm(int64_t n, int repeats) {
  Generator g(1);
  Tensor a = Tensor::randn({n, n}, g), b = Tensor::randn({n, n}, g), c = Tensor::empty({n, n});
  double s = median_seconds(repeats, [&] { ops::gemm(a, b, c); });
  return 2.0 * n * n * n / s / 1e9;
}

double bench_conv(const ConvShape& cs, int64_t batch, int repeats) {
  Generator g(2);
  ops::Conv2dParams p{int(cs.stride), int(cs.stride), int(cs.r / 2), int(cs.r / 2), 1, 1};
  Tensor x = Tensor::randn({batch, cs.c, cs.hw, cs.hw}, g);
  Tensor w = Tensor::randn({cs.k, cs.c, cs.r, cs.r}, g, 0.f, 0.05f);
  int64_t o = out_size(cs);
  Tensor dy = Tensor::randn({batch, cs.k, o, o}, g);
  return median_seconds(repeats, [&] {
    Tensor y = ops::conv2d_forward(x, w, p);
    Tensor dx = ops::conv2d_backward_data(dy, w, x.shape(), p);
    Tensor dw = ops::conv2d_backward_filter(dy, x, w.shape(), p);
  });
}

// Runs the PyTorch twin; returns its YAML/JSON answer or an empty node with a note on stderr.
YAML::Node run_torch(int threads, int64_t batch, int repeats, int64_t gemm_n) {
  std::string script = std::string(ADA_SOURCE_DIR) + "/tools/bench_ops_torch.py";
  std::ostringstream cmd;
  cmd << "/usr/bin/python3 " << script << " --threads " << threads << " --batch " << batch
      << " --repeats " << repeats << " --gemm " << gemm_n << " 2>/tmp/bench_ops_torch.err";
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) {
    std::cerr << "bench_ops: the PyTorch twin failed (exit " << rc
              << "); see /tmp/bench_ops_torch.err. Install it with: tools/setup.sh --bench\n";
    return {};
  }
  try {
    return YAML::Load(out);
  } catch (const std::exception& e) {
    std::cerr << "bench_ops: cannot parse the PyTorch twin's output: " << e.what() << "\n";
    return {};
  }
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int repeats = 3;
  int64_t batch = 32, gemm_n = 2048;
  bool json = false, torch = true, verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "bench_ops: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--threads") threads = parse_list(next());
      else if (a == "--repeats") repeats = std::stoi(next());
      else if (a == "--batch") batch = std::stoll(next());
      else if (a == "--gemm") gemm_n = std::stoll(next());
      else if (a == "--json") json = true;
      else if (a == "--no-torch") torch = false;
      else if (a == "--verbose") verbose = true;
      else {
        std::cerr << "bench_ops: unknown option '" << a
                  << "'; usage: bench_ops [--threads 1,2] [--repeats 3] [--batch 32] [--gemm 2048] "
                     "[--json] [--no-torch] [--verbose]\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "bench_ops: bad value for " << a << "\n";
      return 2;
    }
  }
  const auto convs = resnet50_convs();
  std::vector<Result> results;
  for (int t : threads) {
    set_num_threads(t);
    double gemm = bench_gemm(gemm_n, repeats);
    double conv_time = 0, conv_flop = 0;
    std::vector<double> per;
    for (const auto& cs : convs) {
      double s = bench_conv(cs, batch, repeats);
      per.push_back(s);
      conv_time += s * cs.count;
      conv_flop += 3 * conv_flops(cs, batch) * cs.count;
    }
    YAML::Node tr = torch ? run_torch(t, batch, repeats, gemm_n) : YAML::Node();
    double tgemm = tr["gemm_gflops"] ? tr["gemm_gflops"].as<double>() : -1;
    double tconv = -1;
    if (tr["conv_seconds"] && tr["conv_seconds"].size() == convs.size()) {
      double tt = 0;
      for (size_t i = 0; i < convs.size(); ++i) tt += tr["conv_seconds"][i].as<double>() * convs[i].count;
      tconv = conv_flop / tt / 1e9;
    }
    results.push_back({"gemm " + std::to_string(gemm_n) + "^3", t, gemm, tgemm});
    results.push_back({"resnet50 conv fwd+bwd b" + std::to_string(batch), t, conv_flop / conv_time / 1e9, tconv});
    if (verbose) {
      for (size_t i = 0; i < convs.size(); ++i) {
        const auto& cs = convs[i];
        double ours = 3 * conv_flops(cs, batch) / per[i] / 1e9;
        double th = tr["conv_seconds"] ? 3 * conv_flops(cs, batch) / tr["conv_seconds"][i].as<double>() / 1e9 : -1;
        char name[128];
        std::snprintf(name, sizeof name, "  conv %lldx%lld/%lld %lld->%lld @%lld (x%lld)", (long long)cs.r,
                      (long long)cs.r, (long long)cs.stride, (long long)cs.c, (long long)cs.k,
                      (long long)cs.hw, (long long)cs.count);
        results.push_back({name, t, ours, th});
      }
    }
  }
  if (json) {
    std::cout << "[";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      std::cout << (i ? ",\n " : "") << "{\"case\": \"" << r.name << "\", \"threads\": " << r.threads
                << ", \"ours_gflops\": " << r.ours_gflops << ", \"torch_gflops\": "
                << (r.torch_gflops > 0 ? std::to_string(r.torch_gflops) : "null")
                << ", \"ratio\": "
                << (r.torch_gflops > 0 ? std::to_string(r.ours_gflops / r.torch_gflops) : "null") << "}";
    }
    std::cout << "]\n";
    return 0;
  }
  std::printf("%-44s %7s %12s %14s %7s\n", "case", "threads", "ours GF/s", "PyTorch GF/s", "ratio");
  for (const auto& r : results) {
    if (r.torch_gflops > 0)
      std::printf("%-44s %7d %12.1f %14.1f %7.2f\n", r.name.c_str(), r.threads, r.ours_gflops,
                  r.torch_gflops, r.ours_gflops / r.torch_gflops);
    else
      std::printf("%-44s %7d %12.1f %14s %7s\n", r.name.c_str(), r.threads, r.ours_gflops, "n/a", "n/a");
  }
  return 0;
}
