// The PyTorch twins of bench_step and bench_ops (tools/bench_step_torch.py,
// tools/bench_ops_torch.py): starting one and reading its JSON, and the environment of the tuned
// CPU run. On the CPU each benchmark runs its twin twice, one process each: as installed
// ("default"), then with PyTorch's best CPU runtime ("tuned": the twin's --tuned puts the CNNs in
// channels-last, and the command gets tcmalloc preloaded and the OpenMP OpenBLAS first on the
// library path, on that command only; system alternatives are not touched). Ratios are taken
// against the tuned run; a tuned run that lacks a piece says so (its "shortfalls") and is labelled
// "partly tuned", never plain "tuned".
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace ada::twin {

// Debian's multiarch directory of this build's architecture.
inline std::string lib_dir() {
#if defined(__x86_64__)
  return "/usr/lib/x86_64-linux-gnu";
#elif defined(__aarch64__)
  return "/usr/lib/aarch64-linux-gnu";
#else
  return "/usr/lib";
#endif
}
// tcmalloc from libtcmalloc-minimal4, and the directory of libopenblas0-openmp's libblas.so.3 and
// liblapack.so.3 (Debian's torch links libblas.so.3 and liblapack.so.3 by soname, with no RPATH,
// so LD_LIBRARY_PATH picks them whatever /etc/alternatives points to).
inline std::string tcmalloc_path() {
  return lib_dir() + "/libtcmalloc_minimal.so.4";
}
inline std::string openblas_openmp_dir() {
  return lib_dir() + "/openblas-openmp";
}

struct TunedEnv {
  std::string prefix;                // shell assignments put in front of the tuned twin's command
  std::vector<std::string> missing;  // what it has to go without, naming the package
};

inline TunedEnv tuned_env() {
  TunedEnv e;
  const std::string tc = tcmalloc_path(), blas = openblas_openmp_dir();
  if (access(tc.c_str(), R_OK) == 0)
    e.prefix += "LD_PRELOAD=\"" + tc + "${LD_PRELOAD:+:$LD_PRELOAD}\" ";
  else
    e.missing.push_back("tcmalloc is missing (" + tc +
                        " not found; Debian package libtcmalloc-minimal4: tools/setup.sh --bench)");
  if (access((blas + "/libblas.so.3").c_str(), R_OK) == 0)
    e.prefix += "LD_LIBRARY_PATH=\"" + blas + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\" ";
  else
    e.missing.push_back("the OpenMP OpenBLAS is missing (" + blas +
                        "/libblas.so.3 not found; Debian package libopenblas0-openmp: "
                        "tools/setup.sh --bench)");
  return e;
}

struct Output {
  int rc = -1;
  std::string out;  // stdout
};

// Runs `cmd` through the shell (popen) and collects its stdout.
inline Output run(const std::string& cmd) {
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  o.rc = pclose(p);
  return o;
}

// Where a twin's stderr goes: $TMPDIR (or /tmp)/NAME.PID.err, this process's own, so that two
// benchmarks at once (a test beside a user's run) do not write or read each other's.
inline std::string stderr_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/" + name + "." + std::to_string(getpid()) +
         ".err";
}

// The last `max` characters of a file (a failed twin's stderr), or "".
inline std::string file_tail(const std::string& path, size_t max = 3000) {
  std::string s;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
  }
  return s.size() > max ? s.substr(s.size() - max) : s;
}

// What a twin reported it ran with (its JSON's "runtime"), in a few words.
inline std::string describe_runtime(const YAML::Node& rt) {
  if (!rt || !rt.IsMap()) return "runtime not reported";
  auto str = [&](const char* k) {
    return rt[k] && !rt[k].IsNull() ? rt[k].as<std::string>() : std::string();
  };
  const std::string fmt = str("memory_format"), tc = str("tcmalloc"), blas = str("blas_library"),
                    threading = str("blas_threading");
  std::string s = fmt.empty() ? "" : fmt + ", ";
  s += tc.empty() ? "glibc malloc" : "tcmalloc";
  s += ", BLAS " + (blas.empty() ? std::string("unknown") : blas) + " (" +
       (threading.empty() ? std::string("not OpenBLAS") : "OpenBLAS " + threading) + ")";
  return s;
}

// A tuned run's shortfalls: the twin's own list when it reported one, else what the launcher
// found missing before starting it.
inline std::vector<std::string> shortfalls(const YAML::Node& rt, const TunedEnv& env) {
  if (!rt || !rt["shortfalls"]) return env.missing;
  std::vector<std::string> v;
  for (const auto& s : rt["shortfalls"]) v.push_back(s.as<std::string>());
  return v;
}

}  // namespace ada::twin
