// Fuzz target: the YAML config loader (base/config.h) and its `--set` overrides.
// Input: YAML text, then optionally a NUL byte and override lines ("a.b=value"), one per line.
// Exercises parse, set_override, every typed read of every key (recursively), where(), dump(),
// hash() and finish(); and checks that a dumped config parses back to the same hash.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/config.h"
#include "fuzz_util.h"

namespace {

using ada::Config;
using ada::fuzz::expect_clean;

void walk_child(const Config& c, const std::string& k, int depth);

void read_all(const Config& c, int depth) {
  if (depth > 70) return;  // the loader refuses nesting deeper than 64 anyway
  for (const std::string& k : c.keys()) {
    if (k.empty() || k.find('.') != std::string::npos) {
      // A key that dotted access cannot name: reading it must fail cleanly, not crash.
      expect_clean([&] { (void)c.has(k); });
      continue;
    }
    expect_clean([&] { (void)c.where(k); });
    expect_clean([&] { (void)c.has(k); });
    expect_clean([&] { walk_child(c, k, depth); });
    expect_clean([&] { (void)c.get<bool>(k); });
    expect_clean([&] { (void)c.get<int>(k); });
    expect_clean([&] { (void)c.get<int64_t>(k); });
    expect_clean([&] { (void)c.get<double>(k); });
    expect_clean([&] { (void)c.get<float>(k); });
    expect_clean([&] { (void)c.get<std::string>(k); });
    expect_clean([&] { (void)c.get<std::vector<int>>(k); });
    expect_clean([&] { (void)c.get<std::vector<int64_t>>(k); });
    expect_clean([&] { (void)c.get<std::vector<double>>(k); });
    expect_clean([&] { (void)c.get<std::vector<std::string>>(k); });
    expect_clean([&] { (void)c.get_or<int64_t>(k + ".missing", 3); });
  }
}

void walk_child(const Config& c, const std::string& k, int depth) {
  const Config sub = c.child(k);
  read_all(sub, depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> sets;
  if (nul != std::string::npos) {
    size_t pos = nul + 1;
    while (pos <= input.size() && sets.size() < 16) {
      size_t nl = input.find('\n', pos);
      if (nl == std::string::npos) nl = input.size();
      sets.push_back(input.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }
  expect_clean([&] {
    Config c = Config::parse(yaml, "fuzz.yaml");
    for (const std::string& s : sets) expect_clean([&] { c.set_override(s); });
    read_all(c, 0);
    const std::string text = c.dump();
    const uint64_t h = c.hash();
    expect_clean([&] { c.finish(); });
    // What dump() writes (the run folder's config.yaml) must load again, to the same hash.
    Config again = Config::parse(text, "dumped.yaml");
    if (again.hash() != h) {
      std::fprintf(stderr, "fuzz: dump() does not round-trip:\n%s\n", text.c_str());
      std::abort();
    }
  });
  return 0;
}
