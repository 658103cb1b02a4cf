// bench_allreduce: our reducers against raw MPI_Allreduce, in one run, under mpirun.
//   mpirun -np 4 bench_allreduce [--min-log2 10] [--max-log2 26] [--sets resnet50,bert_large]
//                                [--reps N] [--json]
// Single tensors of 2^10 .. 2^26 floats: raw MPI_Allreduce in place vs reducer.reduce() on the
// same buffer. Parameter sets (ResNet-50: 161 tensors, 25,557,032 floats; BERT-Large with MLM
// and NSP heads): raw MPI_Allreduce on one fused buffer vs the GradBucketer (25 MB buckets,
// grads as bucket views, launched in backward order) with each reducer. Every figure is the
// median over repetitions of the slowest rank's time; ratios are ours / MPI_Allreduce.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/bucketer.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/log.h"
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
      for (auto sh : std::vector<Shape>{{width, in, 1, 1}, {width}, {width}, {width, width, 3, 3},
                                        {width}, {width}, {out, width, 1, 1}, {out}, {out}})
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
    for (auto sh : std::vector<Shape>{{h, h}, {h}, {h, h}, {h}, {h, h}, {h}, {h, h}, {h}, {h}, {h},
                                      {ffn, h}, {ffn}, {h, ffn}, {h}, {h}, {h}})
      s.push_back(sh);
  for (auto sh : std::vector<Shape>{{h, h}, {h}, {h, h}, {h}, {h}, {h}, {vocab}, {2, h}, {2}})
    s.push_back(sh);  // pooler, MLM transform + LayerNorm + decoder bias (weight tied), NSP
  return s;
}

struct Row {
  std::string name;
  int64_t floats;
  double mpi, sum, average, adasum;  // seconds
  double mpi_buckets = -1;           // raw MPI_Allreduce per bucket of the same layout (sets)
};

class Bench {
 public:
  Bench(MpiCommunicator& world, int reps_override) : world_(world), reps_override_(reps_override) {
    ReducerRegistry reg("reducer");
    register_builtin_reducers(reg);
    for (const char* n : {"sum", "average", "adasum"}) reducers_.push_back(reg.get(n)());
  }

  // Median over reps of the slowest rank's time of f(); prepare() runs untimed before each rep.
  template <class P, class F>
  double time(int reps, P prepare, F f) {
    std::vector<double> ts;
    for (int i = 0; i < reps + 1; ++i) {  // first run is a warm-up
      prepare();
      world_.barrier();
      double t0 = MPI_Wtime();
      f();
      double t = MPI_Wtime() - t0;
      world_.allreduce(&t, 1, ReduceOp::max);
      if (i > 0) ts.push_back(t);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }

  int reps_for(int64_t floats) const {
    if (reps_override_ > 0) return reps_override_;
    return floats <= (1 << 16) ? 50 : floats <= (1 << 22) ? 10 : 5;
  }

  Row single(int64_t n) {
    Generator g(world_.rank() + 1);
    Tensor pristine = Tensor::uniform({n}, g, -1.f, 1.f), buf = Tensor::empty({n});
    auto refill = [&] { buf.copy_from(pristine); };
    Row row{"2^" + std::to_string(static_cast<int>(std::log2(double(n)))) + " floats", n, 0, 0, 0, 0};
    const int reps = reps_for(n);
    row.mpi = time(reps, refill, [&] {
      MPI_Allreduce(MPI_IN_PLACE, buf.raw_data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, world_.handle());
    });
    std::vector<TensorSpan> spans{{0, n}};
    double* out[3] = {&row.sum, &row.average, &row.adasum};
    for (int k = 0; k < 3; ++k) *out[k] = time(reps, refill, [&] { reducers_[k]->reduce(buf, spans, world_); });
    return row;
  }

  Row set(const std::string& name, const std::vector<Shape>& shapes) {
    int64_t total = 0;
    for (const auto& s : shapes) total += shape_numel(s);
    Row row{name + " (" + std::to_string(shapes.size()) + " tensors)", total, 0, 0, 0, 0};
    const int reps = reps_for(total) > 5 ? 5 : reps_for(total);
    {
      Generator g(world_.rank() + 1);
      Tensor buf = Tensor::uniform({total}, g, -1.f, 1.f);
      // MPI counts are int: a set above 2^31 floats would need chunks (BERT-Large is 3.4e8).
      row.mpi = time(reps, [] {}, [&] {
        MPI_Allreduce(MPI_IN_PLACE, buf.raw_data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM,
                      world_.handle());
      });
      // The like-for-like baseline: one MPI_Allreduce per bucket of the bucketer's layout.
      std::vector<int64_t> numels;
      for (size_t i = shapes.size(); i-- > 0;) numels.push_back(shape_numel(shapes[i]));
      std::vector<int64_t> sizes;
      for (const auto& b : assign_buckets(numels, BucketOptions{})) {
        int64_t n = 0;
        for (size_t k : b) n += numels[k];
        sizes.push_back(n);
      }
      row.mpi_buckets = time(reps, [] {}, [&] {
        float* p = buf.data<float>();
        for (int64_t n : sizes) {
          MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, world_.handle());
          p += n;
        }
      });
    }
    double* out[3] = {&row.sum, &row.average, &row.adasum};
    for (int k = 0; k < 3; ++k) {
      std::vector<Variable> params;
      for (size_t i = 0; i < shapes.size(); ++i)  // values are never read: left uninitialised
        params.emplace_back(Tensor::empty(shapes[i]), true, std::string("p") + std::to_string(i));
      GradBucketer bucketer(params, world_, *reducers_[k]);
      Generator g(world_.rank() + 7);
      for (auto& p : params) p.grad().copy_from(Tensor::uniform(p.value().shape(), g, -1.f, 1.f));
      *out[k] = time(reps, [] {}, [&] {
        bucketer.begin_step();
        for (size_t i = params.size(); i-- > 0;) bucketer.on_grad_ready(params[i]);  // backward order
        bucketer.finish();
      });
    }
    return row;
  }

 private:
  MpiCommunicator& world_;
  int reps_override_;
  std::vector<std::unique_ptr<Reducer>> reducers_;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) if (!item.empty()) v.push_back(item);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  ada::comm::MpiRuntime mpi(&argc, &argv);
  ada::init_logging(mpi.rank(), mpi.size());
  try {
    int min_log2 = 10, max_log2 = 26, reps = 0;
    bool json = false;
    std::vector<std::string> sets = {"resnet50", "bert_large"};
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) ADA_THROW(ConfigError) << a << " needs a value";
        return argv[++i];
      };
      if (a == "--min-log2") min_log2 = std::stoi(value());
      else if (a == "--max-log2") max_log2 = std::stoi(value());
      else if (a == "--reps") reps = std::stoi(value());
      else if (a == "--sets") sets = split_list(value());
      else if (a == "--json") json = true;
      else
        ADA_THROW(ConfigError) << "unknown option '" << a
                               << "'; usage: bench_allreduce [--min-log2 10] [--max-log2 26] "
                                  "[--sets resnet50,bert_large] [--reps N] [--json]";
    }
    auto world = MpiCommunicator::world();
    // The node's cores shared among its ranks: oversubscribed OpenMP teams would spin.
    ada::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world->local_size()));
    Bench bench(*world, reps);
    std::vector<Row> rows;
    for (int k = min_log2; k <= max_log2; k += 2) rows.push_back(bench.single(int64_t(1) << k));
    for (const auto& s : sets) {
      if (s == "resnet50") rows.push_back(bench.set("resnet50", resnet50_shapes()));
      else if (s == "bert_large") rows.push_back(bench.set("bert_large", bert_large_shapes()));
      else ADA_THROW(ConfigError) << "--sets: unknown set '" << s << "'; known: resnet50, bert_large";
    }
    if (mpi.rank() == 0) {
      if (json) {
        std::cout << "{\"ranks\": " << mpi.size() << ", \"rows\": [";
        for (size_t i = 0; i < rows.size(); ++i) {
          const Row& r = rows[i];
          std::cout << (i ? ",\n  " : "") << "{\"case\": \"" << r.name << "\", \"floats\": " << r.floats
                    << ", \"mpi_allreduce_s\": " << r.mpi << ", \"sum_s\": " << r.sum
                    << ", \"average_s\": " << r.average << ", \"adasum_s\": " << r.adasum
                    << ", \"sum_ratio\": " << r.sum / r.mpi << ", \"average_ratio\": " << r.average / r.mpi
                    << ", \"adasum_ratio\": " << r.adasum / r.mpi;
          if (r.mpi_buckets > 0) std::cout << ", \"mpi_per_bucket_s\": " << r.mpi_buckets;
          std::cout << "}";
        }
        std::cout << "]}\n";
      } else {
        std::printf("bench_allreduce: %d ranks; median of the slowest rank; ratio = ours / MPI_Allreduce\n", mpi.size());
        std::printf("%-26s %12s %12s %16s %16s %16s\n", "case", "floats", "MPI ms", "sum ms (x)",
                    "average ms (x)", "adasum ms (x)");
        for (const auto& r : rows)
          std::printf("%-26s %12lld %12.3f %9.3f (%4.2f) %9.3f (%4.2f) %9.3f (%4.2f)\n", r.name.c_str(),
                      static_cast<long long>(r.floats), r.mpi * 1e3, r.sum * 1e3, r.sum / r.mpi,
                      r.average * 1e3, r.average / r.mpi, r.adasum * 1e3, r.adasum / r.mpi);
        for (const auto& r : rows)
          if (r.mpi_buckets > 0)
            std::printf("%s: raw MPI_Allreduce per 25 MB bucket %.3f ms; against it sum x%.2f, average x%.2f, "
                        "adasum x%.2f; adasum / sum x%.2f\n",
                        r.name.c_str(), r.mpi_buckets * 1e3, r.sum / r.mpi_buckets, r.average / r.mpi_buckets,
                        r.adasum / r.mpi_buckets, r.adasum / r.sum);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    ada::log_error(std::string("bench_allreduce: ") + e.what());
    ada::flush_log();
    ada::comm::MpiRuntime::abort(1);
  }
}
