// bench_allreduce: our reducers against raw MPI_Allreduce, in one run, under mpirun.
//   mpirun -np 4 bench_allreduce [--min-log2 10] [--max-log2 26] [--sets resnet50,bert_large]
//                                [--reducers sum,average,adasum] [--hierarchical N]
//                                [--adasum KEY=VALUE ...] [--precision fp32|bf16|fp16] [--reps N]
//                                [--device cpu|cuda] [--json]
// Single tensors of 2^10 .. 2^26 floats: raw MPI_Allreduce in place vs reducer.reduce() on the
// same buffer. Parameter sets (ResNet-50: 161 tensors, 25,557,032 floats; BERT-Large with MLM
// and NSP heads): raw MPI_Allreduce on one fused buffer and per bucket of the bucketer's layout,
// vs the GradBucketer (25 MB buckets, grads as bucket views, launched in backward order) with
// each reducer. --hierarchical N adds hierarchical Adasum with nodes of N ranks (0: the nodes
// MPI reports); --adasum KEY=VALUE sets an option of both Adasum columns (e.g. gather_below=0);
// --precision bf16|fp16 puts every reducer on a 16-bit wire (reducer.precision; the raw
// MPI_Allreduce baseline stays f32, so (x) shows what halving the bytes buys). Each repetition
// times the per-bucket baseline and every reducer back to back on
// the same buffers (one bucketer; the machine's load then changes alike for all), after one
// warm-up repetition. Figures: the median over repetitions of the slowest rank's time; (x) is
// ours / raw MPI_Allreduce of the same layout (per bucket for the sets); X/sum is the median
// over repetitions of each Adasum's time over our sum reducer's.
// --device cuda: every buffer on this rank's GPU, the reducers through an NCCL communicator over
// the ranks, and the baseline NCCL's allreduce (ncclAllReduce through that communicator) instead
// of MPI_Allreduce. On one GPU shared by several ranks (ADA_NCCL_SHARED_GPU=1) NCCL moves the
// data through sockets on loopback: the ratios compare like with like, the times are not NVLink's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/common/cli.h"
#include "base/config.h"
#include "base/log.h"
#include "comm/bucketer.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_communicator.h"
#include "comm/shared_gpu.h"
#include "core/backend/cuda_runtime.h"
#include "core/parallel.h"
#include "core/random.h"

namespace {
using namespace ada;
using namespace ada::comm;

std::vector<Shape> resnet50_shapes() {
  std::vector<Shape> s = {{64, 3, 7, 7}, {64}, {64}};
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = 64 << stage, out = width * 4;
    for (int b = 0; b < blocks[stage]; ++b) {
      for (auto sh : std::vector<Shape>{{width, in, 1, 1},
                                        {width},
                                        {width},
                                        {width, width, 3, 3},
                                        {width},
                                        {width},
                                        {out, width, 1, 1},
                                        {out},
                                        {out}})
        s.push_back(sh);
      if (b == 0)
        for (auto sh : std::vector<Shape>{{out, in, 1, 1}, {out}, {out}}) s.push_back(sh);
      in = out;
    }
  }
  s.push_back({1000, 2048});
  s.push_back({1000});
  return s;
}

std::vector<Shape> bert_large_shapes() {
  const int64_t h = 1024, ffn = 4096, vocab = 30522;
  std::vector<Shape> s = {{vocab, h}, {512, h}, {2, h}, {h}, {h}};
  for (int l = 0; l < 24; ++l)
    for (auto sh : std::vector<Shape>{{h, h},
                                      {h},
                                      {h, h},
                                      {h},
                                      {h, h},
                                      {h},
                                      {h, h},
                                      {h},
                                      {h},
                                      {h},
                                      {ffn, h},
                                      {ffn},
                                      {h, ffn},
                                      {h},
                                      {h},
                                      {h}})
      s.push_back(sh);
  for (auto sh : std::vector<Shape>{{h, h}, {h}, {h, h}, {h}, {h}, {h}, {vocab}, {2, h}, {2}})
    s.push_back(sh);  // pooler, MLM transform + LayerNorm + decoder bias (weight tied), NSP
  return s;
}

struct Row {
  std::string name;
  int64_t floats = 0;
  double mpi = 0;                // raw MPI_Allreduce on the whole buffer, seconds
  double mpi_buckets = -1;       // raw MPI_Allreduce per bucket of the same layout (sets)
  std::vector<double> reducers;  // one per Bench column, seconds
  std::vector<double> over_sum;  // per column: median over repetitions of (column / sum)
  double baseline() const { return mpi_buckets > 0 ? mpi_buckets : mpi; }
};

struct Column {
  std::string label;
  std::unique_ptr<Reducer> reducer;
};

// Forwards to the reducer of the column being timed, so that one bucketer (one set of bucket
// buffers) serves every column and the columns can be timed back to back in each repetition.
class SwitchReducer : public Reducer {
 public:
  Reducer* current = nullptr;
  std::string name() const override { return current->name(); }
  void reduce(Tensor& buffer, const std::vector<TensorSpan>& spans, Communicator& comm) override {
    current->reduce(buffer, spans, comm);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class Bench {
 public:
  // `comm` carries the reducers: `world` itself on the CPU, an NCCL communicator over it on a GPU.
  Bench(MpiCommunicator& world, Communicator& comm, Device device, int reps_override,
        std::vector<Column> columns, int sum_column)
      : world_(world),
        comm_(comm),
        device_(device),
        reps_override_(reps_override),
        columns_(std::move(columns)),
        sum_column_(sum_column) {}

  // The slowest rank's time of one call of f(); prepare() runs untimed before it.
  template <class P, class F>
  double once(P prepare, F f) {
    prepare();
    world_.barrier();
    double t0 = MPI_Wtime();
    f();
    double t = MPI_Wtime() - t0;
    world_.allreduce(&t, 1, ReduceOp::max);
    return t;
  }

  int reps_for(int64_t floats) const {
    if (reps_override_ > 0) return reps_override_;
    return floats <= (1 << 16) ? 50 : floats <= (1 << 22) ? 10 : 5;
  }

  // Repetitions of: the baseline, then every column, back to back (the machine's load changes
  // alike for all of them); the first repetition is a warm-up. Fills the medians into `row`.
  template <class P, class B, class C>
  void measure(Row& row, int reps, P prepare, B baseline, C column, double& baseline_out) {
    std::vector<double> tb;
    std::vector<std::vector<double>> tc(columns_.size()), ratio(columns_.size());
    for (int i = 0; i < reps + 1; ++i) {
      const double b = once(prepare, baseline);
      std::vector<double> t(columns_.size());
      for (size_t k = 0; k < columns_.size(); ++k) t[k] = once(prepare, [&] { column(k); });
      if (i == 0) continue;
      tb.push_back(b);
      for (size_t k = 0; k < columns_.size(); ++k) {
        tc[k].push_back(t[k]);
        if (sum_column_ >= 0) ratio[k].push_back(t[k] / t[sum_column_]);
      }
    }
    baseline_out = median(tb);
    for (size_t k = 0; k < columns_.size(); ++k) {
      row.reducers.push_back(median(tc[k]));
      row.over_sum.push_back(sum_column_ >= 0 ? median(ratio[k]) : 0.0);
    }
  }

  // The baseline: raw MPI_Allreduce in place on a CPU buffer, NCCL's allreduce on a device one.
  void raw_allreduce(Tensor& t) {
    if (!device_.is_cpu()) return comm_.allreduce(t);
    // MPI counts are int: a set above 2^31 floats would need chunks (BERT-Large is 3.4e8).
    MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM,
                  world_.handle());
  }

  Row single(int64_t n) {
    Generator g(world_.rank() + 1);
    Tensor pristine = Tensor::uniform({n}, g, -1.f, 1.f).to(device_),
           buf = Tensor::empty({n}, DType::f32, device_);
    auto refill = [&] { buf.copy_from(pristine); };
    Row row;
    row.name = "2^" + std::to_string(static_cast<int>(std::log2(double(n)))) + " floats";
    row.floats = n;
    std::vector<TensorSpan> spans{{0, n}};
    measure(
        row, reps_for(n), refill, [&] { raw_allreduce(buf); },
        [&](size_t k) { columns_[k].reducer->reduce(buf, spans, comm_); }, row.mpi);
    return row;
  }

  Row set(const std::string& name, const std::vector<Shape>& shapes) {
    int64_t total = 0;
    for (const auto& s : shapes) total += shape_numel(s);
    Row row;
    row.name = name + " (" + std::to_string(shapes.size()) + " tensors)";
    row.floats = total;
    const int reps = reps_override_ > 0 ? reps_override_ : std::min(5, reps_for(total));
    {
      Generator g(world_.rank() + 1);
      Tensor buf = Tensor::uniform({total}, g, -1.f, 1.f).to(device_);
      std::vector<double> ts;
      for (int i = 0; i < reps + 1; ++i) {
        const double t = once([] {}, [&] { raw_allreduce(buf); });
        if (i > 0) ts.push_back(t);
      }
      row.mpi = median(ts);
    }
    std::vector<Variable> params;
    for (size_t i = 0; i < shapes.size(); ++i)  // values are never read: left uninitialised
      params.emplace_back(Tensor::empty(shapes[i], DType::f32, device_), true,
                          std::string("p") + std::to_string(i));
    SwitchReducer reducer;
    reducer.current = columns_.empty() ? nullptr : columns_[0].reducer.get();
    GradBucketer bucketer(params, comm_, reducer);
    Generator g(world_.rank() + 7);
    for (auto& p : params) p.grad().copy_from(Tensor::uniform(p.value().shape(), g, -1.f, 1.f));
    // The like-for-like baseline: one allreduce per bucket of the bucketer's layout. On the CPU
    // on the bucketer's own buffers (a bucket starts at the gradient of its first parameter in
    // backward order); on a GPU on buffers of the same sizes.
    std::vector<int64_t> numels;
    for (size_t i = shapes.size(); i-- > 0;) numels.push_back(shape_numel(shapes[i]));
    std::vector<std::pair<float*, int64_t>> buckets;
    std::vector<Tensor> device_buckets;
    for (const auto& b : assign_buckets(numels, BucketOptions{})) {
      int64_t n = 0;
      for (size_t k : b) n += numels[k];
      if (device_.is_cpu())
        buckets.emplace_back(params[shapes.size() - 1 - b.front()].grad().data<float>(), n);
      else
        device_buckets.push_back(Tensor::zeros({n}, DType::f32, device_));
    }
    measure(
        row, reps, [] {},
        [&] {
          for (auto [p, n] : buckets)
            MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                          world_.handle());
          for (Tensor& t : device_buckets) raw_allreduce(t);
        },
        [&](size_t k) {
          reducer.current = columns_[k].reducer.get();
          bucketer.begin_step();
          for (size_t i = params.size(); i-- > 0;)
            bucketer.on_grad_ready(params[i]);  // backward order
          bucketer.finish();
        },
        row.mpi_buckets);
    return row;
  }

 private:
  MpiCommunicator& world_;
  Communicator& comm_;
  Device device_;
  int reps_override_;
  std::vector<Column> columns_;
  int sum_column_;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(item);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  ada::comm::MpiRuntime mpi(&argc, &argv);
  ada::init_logging(mpi.rank(), mpi.size());
  try {
    int min_log2 = 10, max_log2 = 26, reps = 0, hierarchical = -1;
    bool json = false;
    std::vector<std::string> sets = {"resnet50", "bert_large"};
    std::vector<std::string> names = {"sum", "average", "adasum"}, adasum_options;
    std::string precision = "fp32", device_name = "cpu";
    const char* usage =
        "usage: bench_allreduce [--min-log2 10] [--max-log2 26] [--sets resnet50,bert_large] "
        "[--reducers sum,average,adasum] [--hierarchical N] [--adasum KEY=VALUE ...] [--precision "
        "fp32|bf16|fp16] "
        "[--reps N] [--device cpu|cuda] [--json]";
    const char* ranges =  // --help: the usage, then these
        "  --min-log2, --max-log2  single tensors of 2^min .. 2^max floats, every other power:\n"
        "                          0 <= min <= max <= 30 (an MPI count is an int)\n"
        "  --sets                  parameter sets: resnet50, bert_large (empty: none)\n"
        "  --hierarchical N        adds hierarchical Adasum with nodes of N ranks, 0 to the\n"
        "                          number of ranks (0: the nodes MPI reports)\n"
        "  --reps N                timed repetitions a case, 1 to 1000000 (default: 50 to 5 by\n"
        "                          size)\n";
    const std::vector<std::string> known_sets = {"resnet50", "bert_large"};
    bool help = false;
    try {  // a bad command line is the same on every rank: rank 0 says so, each exits 1
      for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
          if (i + 1 >= argc) ADA_THROW(ConfigError) << a << " needs a value; " << usage;
          return argv[++i];
        };
        auto integer = [&](int64_t lo, int64_t hi) {
          return static_cast<int>(cli::integer_arg(a, value(), lo, hi));
        };
        if (a == "--min-log2")
          min_log2 = integer(0, 30);
        else if (a == "--max-log2")
          max_log2 = integer(0, 30);
        else if (a == "--reps")
          reps = integer(1, 1000000);
        else if (a == "--sets")
          sets = split_list(value());
        else if (a == "--reducers")
          names = split_list(value());
        else if (a == "--hierarchical")
          hierarchical = integer(0, mpi.size());
        else if (a == "--adasum")
          adasum_options.push_back(value());
        else if (a == "--precision")
          precision = value();
        else if (a == "--device")
          device_name = value();
        else if (a == "--json")
          json = true;
        else if (a == "-h" || a == "--help")
          help = true;
        else
          ADA_THROW(ConfigError) << "unknown option '" << a << "'; " << usage;
      }
      ADA_CHECK_ARG(min_log2 <= max_log2, ConfigError)
          << "command line: --min-log2 " << min_log2 << " is above --max-log2 " << max_log2
          << ": no single tensor to time; give --min-log2 <= --max-log2 (e.g. --min-log2 "
          << max_log2 << " --max-log2 " << max_log2 << " for one size)";
      ADA_CHECK_ARG(device_name == "cpu" || device_name == "cuda", ConfigError)
          << "--device: unknown device '" << device_name << "'; known: cpu, cuda";
      for (const auto& s : sets)  // before any timing, not after all of them
        ADA_CHECK_ARG(std::find(known_sets.begin(), known_sets.end(), s) != known_sets.end(),
                      ConfigError)
            << "--sets: unknown set '" << s << "'; known: resnet50, bert_large";
    } catch (const ConfigError& e) {
      if (mpi.rank() == 0) ada::log_error(std::string("bench_allreduce: ") + e.what());
      ada::flush_log();
      return 1;
    }
    if (help) {
      if (mpi.rank() == 0) std::cout << usage << "\n" << ranges;
      return 0;
    }
    std::shared_ptr<MpiCommunicator> world = MpiCommunicator::world();
    const bool gpu = device_name == "cuda";
    const Device device =
        gpu ? Device::cuda(gpu_for_local_rank(world->local_rank(), cuda::device_count()))
            : Device::cpu();
    std::unique_ptr<Communicator> nccl;
    if (gpu) {
      const std::string why = cuda::unavailable_reason();
      ADA_CHECK_ARG(why.empty(), DeviceError) << "--device cuda: " << why;
      nccl = make_nccl_communicator(world, device.index);
    }
    Communicator& comm = gpu ? *nccl : static_cast<Communicator&>(*world);
    const char* base = gpu ? "NCCL" : "MPI";
    // The node's cores shared among its ranks: oversubscribed OpenMP teams would spin.
    ada::set_num_threads(
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world->local_size()));
    // A reducer from its options; options nobody reads are errors, as in the trainer.
    auto make = [&](const std::string& name, const std::string& yaml, bool adasum,
                    int local_size = -1) {
      Config c = Config::parse(yaml, "bench_allreduce");
      c.set_override("precision=" + precision, "--precision");
      if (local_size >= 0)  // a refusal names --hierarchical, not this program's own YAML
        c.set_override("local_size=" + std::to_string(local_size), "--hierarchical");
      if (adasum)
        for (const auto& o : adasum_options) c.set_override(o);
      auto r = builtin_reducers().get(name, "--reducers")(c);
      c.finish();
      return r;
    };
    std::vector<Column> columns;
    for (const auto& n : names) columns.push_back({n, make(n, "{}", n == "adasum")});
    if (hierarchical >= 0)
      columns.push_back({"adasum-h" + std::to_string(hierarchical),
                         make("adasum", "{hierarchical: true}", true, hierarchical)});
    int sum_col = -1;
    for (size_t k = 0; k < columns.size(); ++k)
      if (columns[k].label == "sum") sum_col = static_cast<int>(k);
    Bench bench(*world, comm, device, reps, std::move(columns), sum_col);
    std::vector<Row> rows;
    for (int k = min_log2; k <= max_log2; k += 2) rows.push_back(bench.single(int64_t(1) << k));
    for (const auto& s : sets) {
      if (s == "resnet50")
        rows.push_back(bench.set("resnet50", resnet50_shapes()));
      else if (s == "bert_large")
        rows.push_back(bench.set("bert_large", bert_large_shapes()));
      else
        ADA_THROW(ConfigError) << "--sets: unknown set '" << s << "'; known: resnet50, bert_large";
    }
    if (mpi.rank() == 0) {
      std::vector<std::string> labels;
      for (const auto& n : names) labels.push_back(n);
      if (hierarchical >= 0) labels.push_back("adasum-h" + std::to_string(hierarchical));
      auto is_adasum = [](const std::string& l) { return l.rfind("adasum", 0) == 0; };
      if (json) {
        std::cout << "{\"ranks\": " << mpi.size() << ", \"precision\": \"" << precision
                  << "\", \"device\": \"" << device_name << "\", \"baseline\": \"" << base
                  << "\", \"rows\": [";
        for (size_t i = 0; i < rows.size(); ++i) {
          const Row& r = rows[i];
          std::cout << (i ? ",\n  " : "") << "{\"case\": \"" << r.name
                    << "\", \"floats\": " << r.floats << ", \"mpi_allreduce_s\": " << r.mpi;
          if (r.mpi_buckets > 0) std::cout << ", \"mpi_per_bucket_s\": " << r.mpi_buckets;
          for (size_t k = 0; k < labels.size(); ++k) {
            std::cout << ", \"" << labels[k] << "_s\": " << r.reducers[k] << ", \"" << labels[k]
                      << "_ratio\": " << r.reducers[k] / r.baseline();
            if (sum_col >= 0 && is_adasum(labels[k]))
              std::cout << ", \"" << labels[k] << "_over_sum\": " << r.over_sum[k];
          }
          std::cout << "}";
        }
        std::cout << "]}\n";
      } else {
        std::printf(
            "bench_allreduce: %d ranks (%d per node by MPI) on %s; reducers on a %s wire; times: "
            "median over repetitions of the slowest rank\n(x) = ours / raw f32 %s allreduce of "
            "the same layout (per 25 MB bucket for the sets); X/sum = median over repetitions of "
            "X's time / our sum reducer's, timed back to back\n",
            mpi.size(), world->local_size(), device.str().c_str(), precision.c_str(), base);
        std::printf("%-24s %10s %9s %9s", "case", "floats", (std::string(base) + " ms").c_str(),
                    (std::string(base) + "/bkt").c_str());
        for (const auto& l : labels) std::printf(" %18s", (l + " ms (x)").c_str());
        for (const auto& l : labels)
          if (sum_col >= 0 && is_adasum(l)) std::printf(" %11s", (l + "/sum").c_str());
        std::printf("\n");
        for (const auto& r : rows) {
          std::printf("%-24s %10lld %9.3f", r.name.c_str(), static_cast<long long>(r.floats),
                      r.mpi * 1e3);
          if (r.mpi_buckets > 0)
            std::printf(" %9.3f", r.mpi_buckets * 1e3);
          else
            std::printf(" %9s", "-");
          for (size_t k = 0; k < labels.size(); ++k)
            std::printf(" %11.3f (%4.2f)", r.reducers[k] * 1e3, r.reducers[k] / r.baseline());
          for (size_t k = 0; k < labels.size(); ++k)
            if (sum_col >= 0 && is_adasum(labels[k])) std::printf(" %11.2f", r.over_sum[k]);
          std::printf("\n");
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    ada::log_error(std::string("bench_allreduce: ") + e.what());
    ada::flush_log();
    ada::comm::MpiRuntime::abort(1);
  }
}
