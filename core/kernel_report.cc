#include "core/kernel_report.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>

namespace ada {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The demangled name up to its argument list: the '(' at template depth 0 that is not part of
// "(anonymous namespace)".
std::string without_arguments(const std::string& s) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && s.compare(i, 21, "(anonymous namespace)") != 0)
      return s.substr(0, i);
  }
  return s;
}

}  // namespace

std::string readable_kernel_name(const std::string& mangled, size_t width) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  std::string s = status == 0 && d ? without_arguments(d.get()) : mangled;
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);  // a kernel's return type
  for (const char* ns : {"(anonymous namespace)::", "ada::cuda::", "ada::"}) replace_all(s, ns, "");
  replace_all(s, "__nv_bfloat16", "bf16");
  replace_all(s, "__half", "f16");
  if (width >= 4 && s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

std::string kernel_report(const std::vector<KernelRecord>& records, size_t max_lines) {
  struct Sum {
    int64_t calls = 0;
    uint64_t ns = 0;
  };
  struct Op {
    Sum total;
    std::map<std::string, Sum> kernels;
  };
  std::map<std::string, Op> ops;
  uint64_t all_ns = 0;
  for (const auto& r : records) {
    Op& op = ops[r.op.empty() ? "(outside ops)" : r.op];
    Sum& k = op.kernels[readable_kernel_name(r.name)];
    k.calls += 1;
    k.ns += r.ns;
    op.total.calls += 1;
    op.total.ns += r.ns;
    all_ns += r.ns;
  }
  auto larger = [](const auto& a, const auto& b) {
    return a.second.ns != b.second.ns ? a.second.ns > b.second.ns : a.first < b.first;
  };
  std::vector<std::pair<std::string, Sum>> op_rows;
  for (const auto& [name, op] : ops) op_rows.emplace_back(name, op.total);
  std::sort(op_rows.begin(), op_rows.end(), larger);

  std::ostringstream os;
  char line[256];
  auto row = [&](const std::string& name, const Sum& s, bool kernel) {
    const double ms = 1e-6 * static_cast<double>(s.ns);
    std::snprintf(line, sizeof line, "%-64s %7lld %9.2f %5.1f%% %9.1f\n",
                  ((kernel ? "  " : "") + name).c_str(), static_cast<long long>(s.calls), ms,
                  all_ns ? 100.0 * static_cast<double>(s.ns) / static_cast<double>(all_ns) : 0.0,
                  s.calls ? 1e3 * ms / static_cast<double>(s.calls) : 0.0);
    os << line;
  };
  std::snprintf(line, sizeof line, "%-64s %7s %9s %6s %9s\n", "op / kernel (GPU time, CUPTI)",
                "calls", "GPU ms", "share", "us/call");
  os << line;
  size_t lines = 0, left = 0;
  for (const auto& [name, total] : op_rows) {
    const Op& op = ops.at(name);
    std::vector<std::pair<std::string, Sum>> ks(op.kernels.begin(), op.kernels.end());
    std::sort(ks.begin(), ks.end(), larger);
    if (lines + 1 > max_lines) {
      left += 1 + ks.size();
      continue;
    }
    row(name, total, false);
    ++lines;
    for (const auto& [k, s] : ks) {
      if (lines + 1 > max_lines) {
        ++left;
        continue;
      }
      row(k, s, true);
      ++lines;
    }
  }
  if (left) os << "(" << left << " more lines, smaller)\n";
  std::snprintf(line, sizeof line, "%-64s %7zu %9.2f\n", "all kernels", records.size(),
                1e-6 * static_cast<double>(all_ns));
  os << line;
  return os.str();
}

}  // namespace ada
