// The fuzz targets without libFuzzer (any compiler): replays a corpus as a regression test and,
// with --mutate N, runs N inputs mutated from it (a small fallback fuzzer: bit flips, byte
// edits, interesting values, chunk copies and splices; seeded, so a run is reproducible).
//   fuzz_replay_TARGET [--mutate N] [--seed S] [--save-crash DIR] PATH...
// PATH: input files or folders (walked recursively). Exit 0 when every input ran; a bug in the
// code under test aborts (see fuzz_util.h), and with --save-crash the input that was running
// is written to DIR first (a SIGABRT/SIGSEGV handler dumps it).
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> g_current;
std::string g_crash_dir;

void on_fatal(int sig) {
  if (!g_crash_dir.empty()) {
    const std::string p = g_crash_dir + "/crash-" + std::to_string(::getpid());
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      if (::write(fd, g_current.data(), g_current.size()) < 0) {
      }
      ::close(fd);
      const char msg[] = "fuzz_replay: crashing input saved under --save-crash\n";
      if (::write(2, msg, sizeof msg - 1) < 0) {
      }
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void run_one(const std::vector<uint8_t>& in) {
  g_current = in;
  LLVMFuzzerTestOneInput(in.empty() ? nullptr : in.data(), in.size());
}

struct Rng {  // splitmix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

std::vector<uint8_t> mutate(std::vector<uint8_t> v, const std::vector<std::vector<uint8_t>>& all,
                            Rng& r) {
  static const uint64_t interesting[] = {0,          1,          0x7f,       0x80,
                                         0xff,       0x7fff,     0x8000,     0xffff,
                                         0x7fffffff, 0x80000000, 0xffffffff, 0xffffffffffffffffull,
                                         1ull << 40, 1ull << 62, 1ull << 61, 65536};
  const int edits = 1 + static_cast<int>(r.below(4));
  for (int e = 0; e < edits; ++e) {
    switch (r.below(8)) {
      case 0:  // flip a bit
        if (!v.empty()) v[r.below(v.size())] ^= static_cast<uint8_t>(1u << r.below(8));
        break;
      case 1:  // set a byte
        if (!v.empty()) v[r.below(v.size())] = static_cast<uint8_t>(r.next());
        break;
      case 2:  // insert bytes
        v.insert(v.begin() + static_cast<std::ptrdiff_t>(r.below(v.size() + 1)), 1 + r.below(8),
                 static_cast<uint8_t>(r.next()));
        break;
      case 3:  // erase bytes
        if (!v.empty()) {
          const size_t at = r.below(v.size());
          const size_t n = std::min(v.size() - at, 1 + r.below(16));
          v.erase(v.begin() + static_cast<std::ptrdiff_t>(at),
                  v.begin() + static_cast<std::ptrdiff_t>(at + n));
        }
        break;
      case 4: {  // an interesting value, little- or big-endian, 1-8 bytes wide
        if (v.empty()) break;
        const uint64_t x = interesting[r.below(std::size(interesting))];
        const size_t w = size_t{1} << r.below(4);
        const size_t at = r.below(v.size());
        const bool big = r.below(2) != 0;
        for (size_t i = 0; i < w && at + i < v.size(); ++i)
          v[at + i] = static_cast<uint8_t>(x >> (8 * (big ? w - 1 - i : i)));
        break;
      }
      case 5: {  // copy a chunk of this input elsewhere
        if (v.size() < 2) break;
        const size_t from = r.below(v.size()),
                     n = 1 + r.below(std::min<size_t>(64, v.size() - from));
        std::vector<uint8_t> chunk(v.begin() + static_cast<std::ptrdiff_t>(from),
                                   v.begin() + static_cast<std::ptrdiff_t>(from + n));
        v.insert(v.begin() + static_cast<std::ptrdiff_t>(r.below(v.size() + 1)), chunk.begin(),
                 chunk.end());
        break;
      }
      case 6: {  // splice with another corpus input
        const auto& o = all[r.below(all.size())];
        const size_t cut = r.below(v.size() + 1), ocut = r.below(o.size() + 1);
        v.resize(cut);
        v.insert(v.end(), o.begin() + static_cast<std::ptrdiff_t>(ocut), o.end());
        break;
      }
      default:  // truncate
        v.resize(r.below(v.size() + 1));
    }
  }
  if (v.size() > (1u << 20)) v.resize(1u << 20);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mutations = 0, seed = 1;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--mutate" || a == "--seed" || a == "--save-crash") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--mutate")
        mutations = std::stoull(v);
      else if (a == "--seed")
        seed = std::stoull(v);
      else
        g_crash_dir = v;
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: %s [--mutate N] [--seed S] [--save-crash DIR] PATH...\n",
                   argv[0]);
      return 2;
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(a)) {
      files.push_back(a);
    } else {
      std::fprintf(stderr, "fuzz_replay: %s is neither a file nor a folder\n", a.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no inputs given (pass the corpus folder)\n");
    return 2;
  }
  std::signal(SIGABRT, on_fatal);
  std::signal(SIGSEGV, on_fatal);
  std::signal(SIGBUS, on_fatal);
  std::signal(SIGFPE, on_fatal);
  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& f : files) {
    corpus.push_back(slurp(f));
    run_one(corpus.back());
  }
  Rng r{seed};
  for (uint64_t k = 0; k < mutations; ++k)
    run_one(mutate(corpus[r.below(corpus.size())], corpus, r));
  std::printf("fuzz_replay: %zu corpus inputs replayed, %llu mutated inputs run (seed %llu)\n",
              corpus.size(), static_cast<unsigned long long>(mutations),
              static_cast<unsigned long long>(seed));
  return 0;
}
