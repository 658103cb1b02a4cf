// bench_loader: data-loader throughput (examples/s) per workload and worker count, printed beside
// a stated training rate so it is plain whether the loader keeps up.
// Workloads: jpeg224 (ImageFolderDataset, train transform: decode + random-resized-crop 224 +
// flip + normalise; JPEGs generated in a temporary folder unless --jpeg-dir), mnist (IDX from
// data/mnist, or generated IDX files of the same shape), mlm128 and mlm128-nsp (MlmDataset, BERT
// pre-training sequences of 128 tokens, packed or as NSP pairs, with fresh 15% masking; shards
// from --mlm-shards, data/mlm, or generated). A workload is one entry in workloads():
// add one there (e.g. MLM sequences) and it gets the same measurement and table. jpeg224-full
// (no DCT downscale / region decode) runs only when named in --only.
//   bench_loader [--workers 1,2] [--seconds 2] [--repeats 3] [--only jpeg224,mnist]
//                [--jpeg-dir DIR] [--jpeg-count 64] [--mnist-dir DIR] [--mlm-shards PATH]
//                [--train-rate NAME=SAMPLES_PER_S ...]   e.g. --train-rate jpeg224=4.8
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "apps/common/cli.h"
#include "base/error.h"
#include "core/random.h"
#include "data/data_loader.h"
#include "data/idx.h"
#include "data/image_folder_dataset.h"
#include "data/jpeg.h"
#include "data/mlm_dataset.h"
#include "data/mnist_dataset.h"

#ifndef ADA_SOURCE_DIR
#define ADA_SOURCE_DIR "."
#endif

namespace {
using namespace ada;
using namespace ada::data;
namespace fs = std::filesystem;

struct Options {
  std::vector<int> workers = {1, 2};
  double seconds = 2.0;
  int repeats = 3;
  std::vector<std::string> only;
  std::string jpeg_dir;
  int jpeg_count = 64;
  // The defaults, where missing data is generated; a path given on the command line must exist.
  std::string mnist_dir = std::string(ADA_SOURCE_DIR) + "/data/mnist";
  std::string mlm_shards = std::string(ADA_SOURCE_DIR) + "/data/mlm";
  bool mnist_dir_given = false, mlm_shards_given = false;
  std::map<std::string, double> train_rate;
};

// A workload: how to build its dataset (once), the batch size, and a line about its inputs.
struct Workload {
  std::string name;
  int64_t batch_size;
  std::function<std::shared_ptr<const Dataset>(std::string* note)> make;
  bool by_default = true;  // false: runs only when named in --only
};

// A scratch folder removed at exit.
struct Scratch {
  fs::path path;
  Scratch() {
    path = fs::temp_directory_path() / ("ada_bench_loader_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Photo-like JPEGs of ImageNet's typical sizes (about 500x375 and 375x500, some larger): smooth
// colour fields plus noise, so the entropy-coded size, hence decode time, is realistic.
void make_jpegs(const fs::path& root, int count) {
  for (int c = 0; c < 2; ++c) fs::create_directories(root / ("class" + std::to_string(c)));
  for (int i = 0; i < count; ++i) {
    auto r = philox4x32(i, 0, 77);
    Image im;
    const int64_t sizes[4][2] = {{375, 500}, {500, 375}, {333, 500}, {600, 800}};
    im.height = sizes[r[0] % 4][0];
    im.width = sizes[r[0] % 4][1];
    im.channels = 3;
    im.pixels.resize(static_cast<size_t>(im.height * im.width * 3));
    for (int64_t y = 0; y < im.height; ++y)
      for (int64_t x = 0; x < im.width; ++x) {
        auto n = philox4x32(static_cast<uint64_t>(y * im.width + x), static_cast<uint64_t>(i), 78);
        uint8_t* p = &im.pixels[static_cast<size_t>((y * im.width + x) * 3)];
        for (int ch = 0; ch < 3; ++ch) {
          double base = 128 + 90 * std::sin(0.013 * (x + 37 * ch + i) + 0.021 * y * (ch + 1));
          p[ch] = static_cast<uint8_t>(
              std::clamp(base + static_cast<int>(n[ch] % 41) - 20.0, 0.0, 255.0));
        }
      }
    write_jpeg(
        (root / ("class" + std::to_string(i % 2)) / ("img" + std::to_string(i) + ".jpg")).string(),
        im, 90);
  }
}

// A generated MLM shard in bert-base-uncased's id space: 400 documents of 60 segments of 8-47
// random ids (about 660k tokens).
void make_mlm_shard(const std::string& path) {
  MlmVocabInfo v;
  v.vocab_size = 30522;
  v.special = {0, 100, 101, 102, 103};  // [PAD] [UNK] [CLS] [SEP] [MASK]
  MlmShardWriter sw(path, v);
  for (uint64_t d = 0; d < 400; ++d) {
    for (uint64_t s = 0; s < 60; ++s) {
      std::vector<int32_t> ids(8 + philox4x32(d * 1000 + s, 5, 79)[0] % 40);
      for (size_t k = 0; k < ids.size(); ++k)
        ids[k] = 1000 + static_cast<int32_t>(philox4x32(k, d * 1000 + s, 80)[0] % 29000);
      sw.add_segment(ids);
    }
    sw.end_document();
  }
  sw.finish();
}

// How many of an MlmDataset's masked-position slots (predictions_per_example() a sequence, the
// same for every batch so that CUDA graphs replay them) are padding, over its first 2,000
// examples: the MLM head's rows that carry no token.
std::string mlm_padding(const MlmDataset& ds) {
  const int64_t n = std::min<int64_t>(ds.size(), 2000), per = ds.predictions_per_example();
  int64_t chosen = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l : ds.get(i, 0).at("mlm_labels").to_vector<int64_t>()) chosen += l != -100;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << per << " masked-position slots a sequence, " << static_cast<double>(chosen) / n
     << " masked on average over " << n << " sequences (padding "
     << (per ? 100.0 * (1.0 - static_cast<double>(chosen) / static_cast<double>(n * per)) : 0.0)
     << "% of the MLM head's rows)";
  return os.str();
}

std::vector<Workload> workloads(const Options& opt, const fs::path& scratch) {
  std::vector<Workload> w;
  // jpeg224: the ImageNet training transform. jpeg224-full: the same without DCT downscaling or
  // region decoding (every pixel decoded at full size), to show what fast_decode saves.
  for (bool fast : {true, false}) {
    w.push_back({fast ? "jpeg224" : "jpeg224-full", 32,
                 [&opt, scratch, fast](std::string* note) {
                   std::string dir = opt.jpeg_dir;
                   if (dir.empty()) {
                     dir = (scratch / "jpeg").string();
                     if (!fs::exists(dir)) make_jpegs(dir, opt.jpeg_count);
                   }
                   ImageTransformOptions t;  // train transform, 224x224
                   t.fast_decode = fast;
                   auto ds = std::make_shared<ImageFolderDataset>(dir, t, 1);
                   uintmax_t bytes = 0;
                   for (int64_t i = 0; i < ds->size(); ++i) bytes += fs::file_size(ds->path(i));
                   std::ostringstream os;
                   os << ds->size() << " JPEGs in " << (opt.jpeg_dir.empty() ? "generated " : "")
                      << dir << ", mean " << bytes / std::max<int64_t>(ds->size(), 1) / 1024
                      << " KiB; train transform: decode"
                      << (fast ? " (DCT-scaled, region)" : " (full size)")
                      << ", random-resized-crop 224, flip, normalise";
                   *note = os.str();
                   return ds;
                 },
                 fast});
  }
  w.push_back({"mnist", 128, [&opt, scratch](std::string* note) {
                 std::string dir = opt.mnist_dir;
                 if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte") &&
                     !fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz")) {
                   dir = (scratch / "mnist").string();
                   fs::create_directories(dir);
                   std::vector<uint8_t> px(60000ull * 784), lb(60000);
                   for (size_t i = 0; i < px.size(); ++i)
                     px[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
                   for (size_t i = 0; i < lb.size(); ++i) lb[i] = static_cast<uint8_t>(i % 10);
                   write_idx(dir + "/train-images-idx3-ubyte", {60000, 28, 28}, px);
                   write_idx(dir + "/train-labels-idx1-ubyte", {60000}, lb);
                   *note =
                       "generated IDX files (60000 x 28 x 28; run tools/fetch_data.sh mnist for "
                       "the real ones)";
                 } else {
                   *note = "MNIST train from " + dir;
                 }
                 return MnistDataset::open(dir, "train");
               }});
  // mlm128 / mlm128-nsp: BERT pre-training examples of 128 tokens (what bert_* configs train on).
  // The note adds the masked-position padding (mlm_padding).
  // Real shards when there are some (prepare_mlm), else a generated corpus of the same shape:
  // the loader's cost (copy, pair, mask, stack) does not depend on which words the ids are.
  for (bool nsp : {false, true}) {
    w.push_back(
        {nsp ? "mlm128-nsp" : "mlm128", 32, [&opt, scratch, nsp](std::string* note) {
           std::string path = opt.mlm_shards;
           if (!fs::exists(path)) {
             path = (scratch / "mlm.mlm").string();
             if (!fs::exists(path)) make_mlm_shard(path);
           }
           MlmOptions m;
           m.seq_len = 128;
           m.nsp = nsp;
           auto ds = MlmDataset::open({path}, m);
           *note = ds->describe() +
                   (path == opt.mlm_shards ? "" : " (generated; prepare_mlm makes real shards)") +
                   "; " + mlm_padding(*ds);
           return ds;
         }});
  }
  return w;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

struct Rate {
  double per_second;      // examples per wall-clock second
  double per_cpu_second;  // examples per CPU-second of this process (all threads)
};

// Medians over `repeats` timed runs of at least `seconds` each (after a warm-up batch).
Rate measure(const std::shared_ptr<const Dataset>& ds, int64_t batch, int workers,
             const Options& opt) {
  DataLoader loader(ds, DistributedSampler(ds->size(), {0, 1, 7, true, false}),
                    {batch, workers, 0, false});
  int64_t epoch = 0;
  loader.start_epoch(epoch);
  auto next = [&]() -> int64_t {
    auto b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    return b->size();
  };
  next();  // warm-up: fills the prefetch queue
  std::vector<double> rates, cpu_rates;
  for (int r = 0; r < opt.repeats; ++r) {
    int64_t n = 0;
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    double dt = 0;
    while (dt < opt.seconds) {
      n += next();
      dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    rates.push_back(static_cast<double>(n) / dt);
    cpu_rates.push_back(static_cast<double>(n) / std::max(cpu_seconds() - c0, 1e-9));
  }
  std::sort(rates.begin(), rates.end());
  std::sort(cpu_rates.begin(), cpu_rates.end());
  return {rates[rates.size() / 2], cpu_rates[cpu_rates.size() / 2]};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}

// The ranges the numbers of the command line must be in (said in --help).
constexpr int64_t kMaxWorkers = 1024;
constexpr double kMaxSeconds = 3600;
constexpr int64_t kMaxRepeats = 1000, kMaxJpegs = 100000;
constexpr double kMinRate = 0.001, kMaxRate = 1e9;  // samples/s

const char* const kUsage =
    "usage: bench_loader [--workers 1,2] [--seconds 2] [--repeats 3]\n"
    "                    [--only jpeg224,jpeg224-full,mnist,mlm128,mlm128-nsp]\n"
    "                    [--jpeg-dir DIR] [--jpeg-count 64] [--mnist-dir DIR]\n"
    "                    [--mlm-shards PATH]   (a shard file or folder; default data/mlm)\n"
    "                    [--train-rate NAME=SAMPLES_PER_S ...]\n"
    "  --workers     loader worker threads, a comma-separated list of 0 (batches built in the\n"
    "                consumer) to 1024\n"
    "  --seconds     each timed run lasts at least this long: 0.01 to 3600\n"
    "  --repeats     timed runs per case (the median is printed): 1 to 1000\n"
    "  --jpeg-count  JPEGs generated when --jpeg-dir is not given: 2 (one per class) to 100000\n"
    "  --train-rate  a training rate to compare with, 0.001 to 1e9 samples/s, e.g. jpeg224=4.8\n";

Options parse(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) ADA_THROW(ConfigError) << argv[i] << " needs a value";
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--workers") {
      const std::string v = value(i);
      o.workers.clear();
      for (auto& s : split(v, ','))
        o.workers.push_back(static_cast<int>(cli::integer_arg("--workers", s, 0, kMaxWorkers)));
      ADA_CHECK_ARG(!o.workers.empty(), ConfigError)
          << "command line: --workers needs one or more worker counts (e.g. 1,2), got '" << v
          << "'";
    } else if (a == "--seconds") {
      o.seconds = cli::number_arg("--seconds", value(i), 0.01, kMaxSeconds);
    } else if (a == "--repeats") {
      o.repeats = static_cast<int>(cli::integer_arg("--repeats", value(i), 1, kMaxRepeats));
    } else if (a == "--only") {
      o.only = split(value(i), ',');
    } else if (a == "--jpeg-dir") {
      o.jpeg_dir = value(i);
    } else if (a == "--jpeg-count") {
      o.jpeg_count = static_cast<int>(cli::integer_arg("--jpeg-count", value(i), 2, kMaxJpegs));
    } else if (a == "--mnist-dir") {
      o.mnist_dir = value(i);
      o.mnist_dir_given = true;
    } else if (a == "--mlm-shards") {
      o.mlm_shards = value(i);
      o.mlm_shards_given = true;
    } else if (a == "--train-rate") {
      std::string v = value(i);
      auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        ADA_THROW(ConfigError) << "--train-rate wants NAME=SAMPLES_PER_S (e.g. jpeg224=4.8), got '"
                               << v << "'";
      const std::string name = v.substr(0, eq);
      o.train_rate[name] =
          cli::number_arg("--train-rate " + name, v.substr(eq + 1), kMinRate, kMaxRate);
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      ADA_THROW(ConfigError) << "unknown option '" << a << "' (see --help)";
    }
  }
  const fs::path mnist(o.mnist_dir);
  ADA_CHECK_ARG(!o.mnist_dir_given || fs::exists(mnist / "train-images-idx3-ubyte") ||
                    fs::exists(mnist / "train-images-idx3-ubyte.gz"),
                ConfigError)
      << "--mnist-dir " << o.mnist_dir << ": no train-images-idx3-ubyte(.gz) there; run "
      << "tools/fetch_data.sh mnist, or leave --mnist-dir out (data/mnist, or generated files)";
  ADA_CHECK_ARG(!o.mlm_shards_given || fs::exists(o.mlm_shards), ConfigError)
      << "--mlm-shards " << o.mlm_shards << ": no such file or folder; prepare_mlm makes shards, "
      << "or leave --mlm-shards out (data/mlm, or a generated shard)";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options opt = parse(argc, argv);
    Scratch scratch;
    std::vector<Workload> all = workloads(opt, scratch.path);
    for (const auto& name : opt.only) {
      bool known =
          std::any_of(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; });
      if (!known) {
        std::string names;
        for (auto& w : all) names += (names.empty() ? "" : ", ") + w.name;
        ADA_THROW(ConfigError) << "unknown workload '" << name << "'; known: " << names;
      }
    }
    for (const auto& entry : opt.train_rate) {
      const std::string& name = entry.first;  // a plain reference: lambdas may capture it (C++17)
      if (std::none_of(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; }))
        ADA_THROW(ConfigError) << "--train-rate for unknown workload '" << name << "'";
    }
    std::printf("# loader throughput: median of %d runs of >= %.1f s; %u hardware threads\n",
                opt.repeats, opt.seconds, std::thread::hardware_concurrency());
    std::printf(
        "# 'per CPU-s' = examples per CPU-second of the loader (all its threads): what one\n"
        "# core buys, unaffected by other jobs on the machine. 'core share' = stated training\n"
        "# rate / per CPU-s: the fraction of one core the loader takes from training at that\n"
        "# rate (loader workers and training threads share the cores).\n");
    std::printf("%-12s %7s %6s %12s %11s %11s %12s %10s  %s\n", "workload", "workers", "batch",
                "examples/s", "per CPU-s", "train rate", "loader/train", "core share", "verdict");
    for (const Workload& w : all) {
      const bool named = std::find(opt.only.begin(), opt.only.end(), w.name) != opt.only.end();
      if (opt.only.empty() ? !w.by_default : !named) continue;
      std::string note;
      auto ds = w.make(&note);
      std::printf("# %s: %s\n", w.name.c_str(), note.c_str());
      for (int workers : opt.workers) {
        const Rate rate = measure(ds, w.batch_size, workers, opt);
        auto tr = opt.train_rate.find(w.name);
        if (tr == opt.train_rate.end()) {
          std::printf("%-12s %7d %6lld %12.1f %11.1f %11s %12s %10s  %s\n", w.name.c_str(), workers,
                      static_cast<long long>(w.batch_size), rate.per_second, rate.per_cpu_second,
                      "-", "-", "-", "(pass --train-rate to compare)");
        } else {
          const double ratio = rate.per_second / tr->second;
          std::printf("%-12s %7d %6lld %12.1f %11.1f %11.2f %11.1fx %9.1f%%  %s\n", w.name.c_str(),
                      workers, static_cast<long long>(w.batch_size), rate.per_second,
                      rate.per_cpu_second, tr->second, ratio,
                      100.0 * tr->second / rate.per_cpu_second,
                      ratio >= 1.0 ? "keeps up" : "DOES NOT keep up");
        }
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const ada::Error& e) {
    std::fprintf(stderr, "bench_loader: %s\n", e.what());
    return 1;
  }
}
