// bench_ops: throughput of the CPU (or CUDA) kernels against PyTorch, measured in the same run.
// Cases: fp32 GEMM 2048^3, and forward + backward-data + backward-filter of every convolution
// of ResNet-50 (batch 32, 224x224, weighted by how often each shape occurs), or with --convs
// resnet20_mnist of ResNet-20 on 28x28 MNIST. For each thread
// count the PyTorch twin (tools/bench_ops_torch.py, run with --python, default /usr/bin/python3)
// times the same shapes; the bench prints GFLOP/s for both and the ratio ours/PyTorch.
//   bench_ops [--threads 1,2] [--repeats 3] [--batch 32] [--gemm 2048] [--convs resnet50] [--json]
//             [--no-torch] [--verbose] [--device cpu|cuda] [--precision fp32|bf16]
//             [--python /usr/bin/python3] [--bn]
// On the CPU the twin runs twice per thread count, one process each: as installed ("default":
// NCHW, glibc malloc, whatever libblas.so.3 Debian's alternatives give), then tuned, PyTorch's
// best CPU runtime: --tuned (channels-last input, weight and output gradient for the
// convolutions), tcmalloc preloaded and the OpenMP OpenBLAS first on LD_LIBRARY_PATH, on that
// command only (see apps/common/torch_twin.h). Above the table, one line per run says what it
// reported it ran with (memory format, allocator, the BLAS its GEMMs call, from libtorch_cpu and
// /proc/self/maps). "ratio" is ours/tuned; the default figure and "vs default" (ours/default)
// follow. A tuned run that lacks tcmalloc or the OpenMP OpenBLAS has its figure marked "*" and a
// note naming the Debian package (tools/setup.sh --bench); --json gives per row torch_run
// ("tuned" / "PARTLY tuned"), torch_gflops and ratio (the tuned run), torch_default_gflops and
// ratio_default, and the notes on stderr. The twins' stderr: $TMPDIR (or
// /tmp)/bench_ops_torch{,_tuned}.PID.err.
// --device cuda: tensors on cuda:0, one pass (--threads is ignored), GEMM 4096^3 and 8192^3
// unless --gemm says otherwise (a list there, e.g. --gemm 4096,8192; on cpu only the first
// size counts), and the convolutions' forward, backward-data and backward-filter timed and
// reported separately (plus their sum). Each timed sample is 10 calls between two device
// synchronizes; the median of --repeats samples counts. fp32 without
// TF32 on both sides, unless ADA_CUDA_TF32=1: then our cuBLAS/cuDNN may use TF32 and the twin
// gets --tf32 (fp32-vs-fp32 or tf32-vs-tf32, never mixed). The twin runs once there, as
// installed (the tuned runtime is a CPU matter; torch_run "default" in --json).
// --bn (cuda only): also ResNet's batch-norm + ReLU, forward and backward, NCHW and channels-last,
// f32 and bf16, in GB/s against eager PyTorch's (see bench_bn); under ADA_CUDA_BN_CUDNN=1 the
// channels-last cases time cuDNN's batch norm (ops::cudnn_batch_norm_*) in place of ours.
// --precision bf16 (cpu only): our GEMMs and convolutions in the bf16 mode (core/precision.h;
// the header names the bf16 kernel), the twin's under torch.autocast("cpu", torch.bfloat16);
// refused with the reason on a CPU without AVX512_BF16.
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

#include "apps/common/torch_twin.h"
#include "core/backend/cpu/sgemm.h"
#include "core/backend/cuda_runtime.h"
#include "core/cpu_isa.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/precision.h"

#ifndef ADA_SOURCE_DIR
#define ADA_SOURCE_DIR "."
#endif

namespace {
using namespace ada;

struct ConvShape {
  int64_t c, k, hw, r, stride,
      count;  // in channels, out channels, input size, kernel, stride, uses
};

// The 53 convolutions of ResNet-50 v1.5 at 224x224, grouped by shape.
std::vector<ConvShape> resnet50_convs() {
  return {
      {3, 64, 224, 7, 2, 1},                                                        // stem
      {64, 64, 56, 1, 1, 1},     {64, 64, 56, 3, 1, 3},    {64, 256, 56, 1, 1, 4},  // layer1
      {256, 64, 56, 1, 1, 2},    {256, 128, 56, 1, 1, 1},  {128, 128, 56, 3, 2, 1},
      {128, 512, 28, 1, 1, 4},  // layer2
      {256, 512, 56, 1, 2, 1},   {512, 128, 28, 1, 1, 3},  {128, 128, 28, 3, 1, 3},
      {512, 256, 28, 1, 1, 1},   {256, 256, 28, 3, 2, 1},  {256, 1024, 14, 1, 1, 6},  // layer3
      {512, 1024, 28, 1, 2, 1},  {1024, 256, 14, 1, 1, 5}, {256, 256, 14, 3, 1, 5},
      {1024, 512, 14, 1, 1, 1},  {512, 512, 14, 3, 2, 1},  {512, 2048, 7, 1, 1, 3},  // layer4
      {1024, 2048, 14, 1, 2, 1}, {2048, 512, 7, 1, 1, 2},  {512, 512, 7, 3, 1, 2},
  };
}

// ResNet-20 for MNIST (28x28, 16/32/64 channels): the 3x3 stride-1 convolutions take the
// direct kernels (core/backend/cpu/conv_direct.h), the strided ones and the 1x1 projections
// im2col + GEMM.
std::vector<ConvShape> resnet20_mnist_convs() {
  return {
      {1, 16, 28, 3, 1, 1},                                                 // stem
      {16, 16, 28, 3, 1, 6},                                                // stage 1
      {16, 32, 28, 3, 2, 1}, {16, 32, 28, 1, 2, 1}, {32, 32, 14, 3, 1, 5},  // stage 2
      {32, 64, 14, 3, 2, 1}, {32, 64, 14, 1, 2, 1}, {64, 64, 7, 3, 1, 5},   // stage 3
  };
}

// The set named by --convs, and its name for the result rows.
std::vector<ConvShape> g_convs = resnet50_convs();
std::string g_conv_set = "resnet50";

// The shapes as the twin's --convs takes them: "c,k,hw,r,stride,count;...".
std::string convs_arg() {
  std::string out;
  for (const auto& c : g_convs)
    out += (out.empty() ? "" : ";") + std::to_string(c.c) + "," + std::to_string(c.k) + "," +
           std::to_string(c.hw) + "," + std::to_string(c.r) + "," + std::to_string(c.stride) + "," +
           std::to_string(c.count);
  return out;
}

int64_t out_size(const ConvShape& s) {
  return (s.hw + 2 * (s.r / 2) - s.r) / s.stride + 1;
}
// Multiply-adds x2 for one pass (forward, backward-data or backward-filter) over the batch.
double conv_flops(const ConvShape& s, int64_t batch) {
  int64_t o = out_size(s);
  return 2.0 * batch * s.k * s.c * s.r * s.r * o * o;
}

// --device cuda: where tensors live, and how many calls one timed sample makes.
Device g_device = Device::cpu();
int g_inner = 1;
void sync() {
  if (!g_device.is_cpu()) cuda::synchronize(g_device.index);
}

template <class F>
double median_seconds(int repeats, F f) {
  f();  // warm-up
  sync();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto a = std::chrono::steady_clock::now();
    for (int j = 0; j < g_inner; ++j) f();
    sync();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count() /
                g_inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Result {
  std::string name;
  int threads;
  double ours_gflops;
  double torch_gflops;                // < 0: not measured; on the CPU, the tuned twin's figure
  double torch_default_gflops = -1;   // the CPU's default twin (< 0: not measured, or cuda)
  std::string torch_run = "default";  // what torch_gflops is: "tuned", "PARTLY tuned", "default"
};

// Our timings: gemm GFLOP/s and per-conv-shape seconds (fwd+bwd).
double bench_gemm(int64_t n, int repeats) {
  Generator g(1);
  Tensor a = Tensor::randn({n, n}, g), b = Tensor::randn({n, n}, g), c = Tensor::empty({n, n});
  if (!g_device.is_cpu()) a = a.to(g_device), b = b.to(g_device), c = c.to(g_device);
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

// --device cuda: the three passes timed one by one (seconds each).
struct ConvTimes {
  double fwd, bwd_data, bwd_filter;
};
ConvTimes bench_conv_passes(const ConvShape& cs, int64_t batch, int repeats) {
  Generator g(2);
  ops::Conv2dParams p{int(cs.stride), int(cs.stride), int(cs.r / 2), int(cs.r / 2), 1, 1};
  Tensor x = Tensor::randn({batch, cs.c, cs.hw, cs.hw}, g).to(g_device);
  Tensor w = Tensor::randn({cs.k, cs.c, cs.r, cs.r}, g, 0.f, 0.05f).to(g_device);
  int64_t o = out_size(cs);
  Tensor dy = Tensor::randn({batch, cs.k, o, o}, g).to(g_device);
  ConvTimes t{};
  t.fwd = median_seconds(repeats, [&] { Tensor y = ops::conv2d_forward(x, w, p); });
  t.bwd_data =
      median_seconds(repeats, [&] { Tensor dx = ops::conv2d_backward_data(dy, w, x.shape(), p); });
  t.bwd_filter = median_seconds(
      repeats, [&] { Tensor dw = ops::conv2d_backward_filter(dy, x, w.shape(), p); });
  return t;
}

// --bn (cuda): the batch-norm after each convolution of the --convs set (its output channels at
// its output size, weighted by use), with the ReLU fused as ResNet's blocks run it: training
// forward (batch_norm_relu_train) and backward (batch_norm_relu_backward), in NCHW and
// channels-last ([N*H*W, C], as the CNN path hands it over), with f32 and bf16 activations.
// Reported as GB/s of the least traffic each pass needs (forward: x read for the statistics and
// again to normalise, y written; backward: dy, x and y read for the sums and again for dx, dx
// written), so ours and the twin's (relu(F.batch_norm) in eager PyTorch through autograd, the same
// memory format and dtype) are compared per byte; the ratio is that of the times.
struct BnCase {
  bool channels_last;
  DType dtype;
  const char* key;  // the twin's JSON key prefix
};
const BnCase kBnCases[] = {{false, DType::f32, "nchw_f32"},
                           {true, DType::f32, "nhwc_f32"},
                           {false, DType::bf16, "nchw_bf16"},
                           {true, DType::bf16, "nhwc_bf16"}};
constexpr double kBnFwdPasses = 3, kBnBwdPasses = 7;  // tensor-sized reads and writes a pass

struct BnTimes {
  double fwd, bwd;
  bool cudnn;  // timed on cuDNN's batch norm
};
// Whether a case runs on cuDNN's batch norm (ops::cudnn_batch_norm_*): channels-last cases under
// ADA_CUDA_BN_CUDNN=1, as the trainer then does.
bool cudnn_bn(const BnCase& bc) {
  return bc.channels_last && ops::cudnn_batch_norm_on();
}
BnTimes bench_bn(const ConvShape& cs, const BnCase& bc, int64_t batch, int repeats) {
  Generator g(3);
  const int64_t o = out_size(cs), c = cs.k;
  const Shape shape = bc.channels_last ? Shape{batch * o * o, c} : Shape{batch, c, o, o};
  auto act = [&](float sd) {
    return ops::to_dtype(Tensor::randn(shape, g, 0.f, sd).to(g_device), bc.dtype);
  };
  const Tensor x = act(1.f), dy = act(0.1f);
  const Tensor gamma = Tensor::ones({c}).to(g_device), beta = Tensor::zeros({c}).to(g_device);
  Tensor rm = Tensor::zeros({c}).to(g_device), rv = Tensor::ones({c}).to(g_device), mean, invstd;
  BnTimes t{};
  // ADA_CUDA_BN_CUDNN=1: cuDNN's NHWC batch norm + ReLU instead of ours, where cuDNN takes x
  t.cudnn = cudnn_bn(bc) && ops::cudnn_batch_norm_fits(x, 1e-5f);
  if (t.cudnn) {
    t.fwd = median_seconds(repeats, [&] {
      ops::CudnnBatchNorm f =
          ops::cudnn_batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, true);
    });
    const ops::CudnnBatchNorm f =
        ops::cudnn_batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, true);
    t.bwd = median_seconds(repeats, [&] {
      ops::CudnnBatchNormGrads gr = ops::cudnn_batch_norm_backward(dy, x, gamma, beta, f, 1e-5f);
    });
    return t;
  }
  t.fwd = median_seconds(repeats, [&] {
    Tensor y = ops::batch_norm_relu_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, mean, invstd);
  });
  const Tensor y = ops::batch_norm_relu_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, mean, invstd);
  t.bwd = median_seconds(repeats, [&] {
    ops::BatchNormGrads gr = ops::batch_norm_relu_backward(dy, y, x, gamma, mean, invstd);
  });
  return t;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// Runs the PyTorch twin (with `env` in front of its command, `extra` after its options); returns
// its JSON answer, or an empty node with a note and the end of its stderr on stderr.
YAML::Node run_torch(const std::string& python, const std::string& env, const std::string& extra,
                     int threads, int64_t batch, int repeats, const std::string& gemm_n,
                     const std::string& err_path) {
  std::ostringstream cmd;
  cmd << env << python << " " << ADA_SOURCE_DIR << "/tools/bench_ops_torch.py --threads " << threads
      << " --batch " << batch << " --repeats " << repeats << " --gemm " << gemm_n << " --convs '"
      << convs_arg() << "'" << extra << " 2>" << err_path;
  const twin::Output o = twin::run(cmd.str());
  if (o.rc != 0) {
    std::cerr << "bench_ops: the PyTorch twin failed (exit " << o.rc << "); see " << err_path
              << ". Install it with: tools/setup.sh --bench\n"
              << "bench_ops: it ran: " << cmd.str() << "\n"
              << twin::file_tail(err_path);
    return {};
  }
  try {
    return YAML::Load(o.out);
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

std::string conv_name(const ConvShape& cs) {
  char name[128];
  std::snprintf(name, sizeof name, "  conv %lldx%lld/%lld %lld->%lld @%lld (x%lld)",
                (long long)cs.r, (long long)cs.r, (long long)cs.stride, (long long)cs.c,
                (long long)cs.k, (long long)cs.hw, (long long)cs.count);
  return name;
}

// --device cuda: GEMMs, then per pass (fwd, bwd-data, bwd-filter, their sum) the --convs set's
// convolutions weighted by use, and with --verbose per shape and pass.
std::vector<Result> run_cuda(const std::string& python, bool torch, bool verbose, bool tf32,
                             bool bn, int64_t batch, int repeats,
                             const std::vector<int64_t>& gemm_sizes) {
  const auto& convs = g_convs;
  std::vector<double> gemm;
  for (int64_t n : gemm_sizes) gemm.push_back(bench_gemm(n, repeats));
  std::vector<ConvTimes> per;
  for (const auto& cs : convs) per.push_back(bench_conv_passes(cs, batch, repeats));
  std::vector<std::vector<BnTimes>> bn_per;  // [case][conv]
  if (bn)
    for (const BnCase& bc : kBnCases) {
      bn_per.emplace_back();
      for (const auto& cs : convs) bn_per.back().push_back(bench_bn(cs, bc, batch, repeats));
    }
  YAML::Node tr;
  if (torch)
    tr = run_torch(python, "",
                   std::string(" --device cuda --inner ") + std::to_string(g_inner) +
                       (tf32 ? " --tf32" : "") + (bn ? " --bn" : ""),
                   1, batch, repeats, join(gemm_sizes), twin::stderr_path("bench_ops_torch"));
  std::vector<Result> results;
  for (size_t i = 0; i < gemm_sizes.size(); ++i) {
    double th = tr["gemm_gflops_all"] && tr["gemm_gflops_all"].size() == gemm_sizes.size()
                    ? tr["gemm_gflops_all"][i].as<double>()
                    : -1;
    results.push_back({"gemm " + std::to_string(gemm_sizes[i]) + "^3", 1, gemm[i], th});
  }
  const char* pass_names[3] = {"fwd", "bwd-data", "bwd-filter"};
  const char* torch_keys[3] = {"conv_fwd_seconds", "conv_bwd_data_seconds",
                               "conv_bwd_filter_seconds"};
  bool have_torch = true;
  for (const char* k : torch_keys) have_torch = have_torch && tr[k] && tr[k].size() == convs.size();
  auto ours_s = [&](size_t i, int pass) {
    return pass == 0 ? per[i].fwd : pass == 1 ? per[i].bwd_data : per[i].bwd_filter;
  };
  auto torch_s = [&](size_t i, int pass) { return tr[torch_keys[pass]][i].as<double>(); };
  const std::string b = " b" + std::to_string(batch);
  double all_ours = 0, all_torch = 0, all_flop = 0;
  for (int pass = 0; pass < 3; ++pass) {
    double to = 0, tt = 0, flop = 0;
    for (size_t i = 0; i < convs.size(); ++i) {
      to += ours_s(i, pass) * convs[i].count;
      if (have_torch) tt += torch_s(i, pass) * convs[i].count;
      flop += conv_flops(convs[i], batch) * convs[i].count;
    }
    all_ours += to, all_torch += tt, all_flop += flop;
    results.push_back({g_conv_set + " conv " + pass_names[pass] + b, 1, flop / to / 1e9,
                       have_torch ? flop / tt / 1e9 : -1});
  }
  results.push_back({g_conv_set + " conv fwd+bwd" + b, 1, all_flop / all_ours / 1e9,
                     have_torch ? all_flop / all_torch / 1e9 : -1});
  for (size_t k = 0; k < bn_per.size(); ++k) {
    const BnCase& bc = kBnCases[k];
    for (int pass = 0; pass < 2; ++pass) {
      const std::string key = std::string(bc.key) + (pass ? "_bwd" : "_fwd");
      const bool have =
          tr["bn_seconds"] && tr["bn_seconds"][key] && tr["bn_seconds"][key].size() == convs.size();
      double to = 0, tt = 0, bytes = 0;
      for (size_t i = 0; i < convs.size(); ++i) {
        const int64_t o = out_size(convs[i]);
        bytes += (pass ? kBnBwdPasses : kBnFwdPasses) * batch * convs[i].k * o * o *
                 dtype_size(bc.dtype) * convs[i].count;
        to += (pass ? bn_per[k][i].bwd : bn_per[k][i].fwd) * convs[i].count;
        if (have) tt += tr["bn_seconds"][key][i].as<double>() * convs[i].count;
      }
      results.push_back(
          {g_conv_set + " bn+relu " + (pass ? "bwd " : "fwd ") +
               (bc.channels_last ? "nhwc " : "nchw ") + (bc.dtype == DType::f32 ? "f32" : "bf16") +
               (!bn_per[k].empty() && bn_per[k][0].cudnn ? " cuDNN" : "") + b + " (GB/s)",
           1, bytes / to / 1e9, have ? bytes / tt / 1e9 : -1});
    }
  }
  if (verbose) {
    for (size_t i = 0; i < convs.size(); ++i) {
      const double f = conv_flops(convs[i], batch);
      for (int pass = 0; pass < 3; ++pass)
        results.push_back({conv_name(convs[i]) + " " + pass_names[pass], 1,
                           f / ours_s(i, pass) / 1e9,
                           have_torch ? f / torch_s(i, pass) / 1e9 : -1});
    }
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int repeats = 3;
  int64_t batch = 32;
  std::vector<int64_t> gemm_sizes;  // default: 2048 (cpu), 4096,8192 (cuda)
  bool json = false, torch = true, verbose = false, bn = false;
  std::string device = "cpu", python = "/usr/bin/python3", precision = "fp32";
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
      if (a == "--threads")
        threads = parse_list(next());
      else if (a == "--repeats")
        repeats = std::stoi(next());
      else if (a == "--batch")
        batch = std::stoll(next());
      else if (a == "--gemm") {
        gemm_sizes.clear();
        for (int v : parse_list(next())) gemm_sizes.push_back(v);
      } else if (a == "--device")
        device = next();
      else if (a == "--precision")
        precision = next();
      else if (a == "--python")
        python = next();
      else if (a == "--json")
        json = true;
      else if (a == "--no-torch")
        torch = false;
      else if (a == "--verbose")
        verbose = true;
      else if (a == "--bn")
        bn = true;
      else if (a == "--convs") {
        g_conv_set = next();
        if (g_conv_set == "resnet50")
          g_convs = resnet50_convs();
        else if (g_conv_set == "resnet20_mnist")
          g_convs = resnet20_mnist_convs();
        else {
          std::cerr << "bench_ops: --convs must be resnet50 or resnet20_mnist, not '" << g_conv_set
                    << "'\n";
          return 2;
        }
      } else {
        std::cerr << "bench_ops: unknown option '" << a
                  << "'; usage: bench_ops [--threads 1,2] [--repeats 3] [--batch 32] "
                     "[--gemm 2048[,4096]] [--convs resnet50|resnet20_mnist] [--json] [--no-torch] "
                     "[--verbose] [--device cpu|cuda] [--precision fp32|bf16] [--python PATH] "
                     "[--bn]\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "bench_ops: bad value for " << a << "\n";
      return 2;
    }
  }
  if (device != "cpu" && device != "cuda") {
    std::cerr << "bench_ops: --device must be cpu or cuda, not '" << device << "'\n";
    return 2;
  }
  if (bn && device != "cuda") {
    std::cerr << "bench_ops: --bn times the GPU's batch-norm kernels: give it with --device cuda\n";
    return 2;
  }
  if (precision != "fp32" && precision != "bf16") {
    std::cerr << "bench_ops: --precision must be fp32 or bf16, not '" << precision << "'\n";
    return 2;
  }
  const bool bf16 = precision == "bf16";
  if (bf16 && device != "cpu") {
    std::cerr << "bench_ops: --precision bf16 is for --device cpu (bench_step --device cuda "
                 "--precision bf16 times the GPU's)\n";
    return 2;
  }
  if (bf16) {
    try {
      set_cpu_matmul_precision(Precision::bf16);
    } catch (const std::exception& e) {
      std::cerr << "bench_ops: --precision bf16: " << e.what() << "\n";
      return 1;
    }
  }
  if (gemm_sizes.empty())
    gemm_sizes = device == "cuda" ? std::vector<int64_t>{4096, 8192} : std::vector<int64_t>{2048};
  if (repeats < 1) {
    std::cerr << "bench_ops: --repeats must be at least 1\n";
    return 2;
  }
  const auto& convs = g_convs;
  std::vector<Result> results;
  std::vector<std::string> notes, runtimes;  // the CPU twins: what tuned lacks, what each ran with
  const twin::TunedEnv tuned_env = twin::tuned_env();
  const bool on_cuda = device == "cuda";
  bool tf32 = false;
  std::string device_name;
  if (on_cuda) {
    const std::string why = cuda::unavailable_reason();
    if (!why.empty()) {
      std::cerr << "bench_ops: --device cuda: " << why << "\n";
      return 1;
    }
    const char* env = std::getenv("ADA_CUDA_TF32");
    tf32 = env && std::string(env) == "1";
    g_device = Device::cuda(0);
    g_inner = 10;
    try {
      device_name = cuda::device_name(0);
      results = run_cuda(python, torch, verbose, tf32, bn, batch, repeats, gemm_sizes);
    } catch (const std::exception& e) {
      std::cerr << "bench_ops: " << e.what() << "\n";
      return 1;
    }
    threads.clear();  // the CPU loop below does not run
  }
  for (int t : threads) {
    set_num_threads(t);
    const int64_t gemm_n = gemm_sizes[0];
    double gemm = bench_gemm(gemm_n, repeats);
    double conv_time = 0, conv_flop = 0;
    std::vector<double> per;
    for (const auto& cs : convs) {
      double s = bench_conv(cs, batch, repeats);
      per.push_back(s);
      conv_time += s * cs.count;
      conv_flop += 3 * conv_flops(cs, batch) * cs.count;
    }
    // The twin twice, one process each: as installed, then tuned (twin::tuned_env()).
    YAML::Node td, tt;
    std::string tuned_label = "tuned";
    if (torch) {
      const std::string twin_bf16 = bf16 ? " --bf16" : "";
      td = run_torch(python, "", twin_bf16, t, batch, repeats, std::to_string(gemm_n),
                     twin::stderr_path("bench_ops_torch"));
      tt = run_torch(python, tuned_env.prefix, " --tuned" + twin_bf16, t, batch, repeats,
                     std::to_string(gemm_n), twin::stderr_path("bench_ops_torch_tuned"));
      const auto lacks = twin::shortfalls(tt["runtime"], tuned_env);
      if (!lacks.empty()) tuned_label = "PARTLY tuned";
      for (const auto& l : lacks)
        if (std::find(notes.begin(), notes.end(), l) == notes.end()) notes.push_back(l);
      runtimes.push_back("PyTorch " + tuned_label + ", threads " + std::to_string(t) + ": " +
                         (tt ? twin::describe_runtime(tt["runtime"]) : std::string("failed")));
      runtimes.push_back("PyTorch default, threads " + std::to_string(t) + ": " +
                         (td ? twin::describe_runtime(td["runtime"]) : std::string("failed")));
    }
    auto gemm_of = [](const YAML::Node& r) {
      return r["gemm_gflops"] ? r["gemm_gflops"].as<double>() : -1;
    };
    auto has_convs = [&](const YAML::Node& r) {
      return r["conv_seconds"] && r["conv_seconds"].size() == convs.size();
    };
    auto conv_of = [&](const YAML::Node& r) {
      if (!has_convs(r)) return -1.0;
      double s = 0;
      for (size_t i = 0; i < convs.size(); ++i)
        s += r["conv_seconds"][i].as<double>() * convs[i].count;
      return conv_flop / s / 1e9;
    };
    auto row = [&](std::string name, double ours, double tuned, double def) {
      Result r{std::move(name), t, ours, tuned};
      r.torch_default_gflops = def;
      r.torch_run = tuned_label;
      results.push_back(r);
    };
    row("gemm " + std::to_string(gemm_n) + "^3", gemm, gemm_of(tt), gemm_of(td));
    row(g_conv_set + " conv fwd+bwd b" + std::to_string(batch), conv_flop / conv_time / 1e9,
        conv_of(tt), conv_of(td));
    if (verbose) {
      for (size_t i = 0; i < convs.size(); ++i) {
        const double f = 3 * conv_flops(convs[i], batch);
        auto of = [&](const YAML::Node& r) {
          return has_convs(r) ? f / r["conv_seconds"][i].as<double>() / 1e9 : -1;
        };
        row(conv_name(convs[i]), f / per[i] / 1e9, of(tt), of(td));
      }
    }
  }
  auto num = [](double v) { return v > 0 ? std::to_string(v) : std::string("null"); };
  if (json) {
    std::cout << "[";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      std::cout << (i ? ",\n " : "") << "{\"case\": \"" << r.name << "\", "
                << (on_cuda ? std::string("\"device\": \"cuda:0 ") + device_name +
                                  "\", \"precision\": \"" + (tf32 ? "tf32" : "fp32") + "\", "
                            : "\"precision\": \"" + precision + "\", ")
                << "\"threads\": " << r.threads << ", \"ours_gflops\": " << r.ours_gflops
                << ", \"torch_run\": \"" << r.torch_run
                << "\", \"torch_gflops\": " << num(r.torch_gflops)
                << ", \"ratio\": " << num(r.torch_gflops > 0 ? r.ours_gflops / r.torch_gflops : -1);
      if (!on_cuda)
        std::cout << ", \"torch_default_gflops\": " << num(r.torch_default_gflops)
                  << ", \"ratio_default\": "
                  << num(r.torch_default_gflops > 0 ? r.ours_gflops / r.torch_default_gflops : -1);
      std::cout << "}";
    }
    std::cout << "]\n";
    for (const auto& n : notes)
      std::cerr << "bench_ops: note: the tuned PyTorch run lacks: " << n << "\n";
    return 0;
  }
  if (on_cuda) {
    std::printf("device cuda:0 (%s), %s, 10 calls per sample\n", device_name.c_str(),
                tf32 ? "tf32" : "fp32");
    std::printf("%-44s %7s %12s %14s %7s\n", "case (GF/s unless it says GB/s)", "threads", "ours",
                "PyTorch", "ratio");
    for (const auto& r : results) {
      if (r.torch_gflops > 0)
        std::printf("%-44s %7d %12.1f %14.1f %7.2f\n", r.name.c_str(), r.threads, r.ours_gflops,
                    r.torch_gflops, r.ours_gflops / r.torch_gflops);
      else
        std::printf("%-44s %7d %12.1f %14s %7s\n", r.name.c_str(), r.threads, r.ours_gflops, "n/a",
                    "n/a");
    }
    return 0;
  }
  // The CPU: "ratio" is against the tuned twin; the default twin's figure and ratio follow.
  std::printf("cpu kernels: %s; %s\n", cpu::isa_description().c_str(),
              bf16 ? (std::string("bf16 mode: ") + cpu::sbgemm_kernel_name() +
                      ", PyTorch under torch.autocast(\"cpu\", torch.bfloat16)")
                         .c_str()
                   : (std::string("fp32: ") + cpu::sgemm_kernel_name()).c_str());
  for (const auto& l : runtimes) std::printf("%s\n", l.c_str());
  std::printf("%-44s %7s %10s %14s  %7s %16s %10s\n", "case", "threads", "ours GF/s",
              "PyTorch tuned", "ratio", "PyTorch default", "vs default");
  auto cell = [](double v, const char* fmt, int width) {
    char b[32];
    if (v > 0)
      std::snprintf(b, sizeof b, fmt, width, v);
    else
      std::snprintf(b, sizeof b, "%*s", width, "n/a");
    return std::string(b);
  };
  for (const auto& r : results) {
    const double tuned = r.torch_gflops, def = r.torch_default_gflops;
    std::printf("%-44s %7d %10.1f %s%s %s %s %s\n", r.name.c_str(), r.threads, r.ours_gflops,
                cell(tuned, "%*.1f", 14).c_str(), r.torch_run == "tuned" || tuned <= 0 ? " " : "*",
                cell(tuned > 0 ? r.ours_gflops / tuned : -1, "%*.2f", 7).c_str(),
                cell(def, "%*.1f", 16).c_str(),
                cell(def > 0 ? r.ours_gflops / def : -1, "%*.2f", 10).c_str());
  }
  for (const auto& n : notes)
    std::printf("note (* PARTLY tuned): the tuned PyTorch run lacks: %s\n", n.c_str());
  return 0;
}
