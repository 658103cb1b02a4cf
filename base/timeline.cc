#include "base/timeline.h"

#include <nlohmann/json.hpp>

#include <thread>
#include <unordered_map>

#include "base/error.h"

namespace ada {
Timeline& Timeline::instance() {
  static Timeline t;
  return t;
}

void Timeline::open(const std::string& path, int rank, Clock::time_point epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  out_.open(path, std::ios::trunc);
  ADA_CHECK_ARG(out_.good(), IoError) << "timeline: cannot write " << path
                                      << " (check train.timeline and the folder's permissions)";
  rank_ = rank;
  epoch_ = epoch;
  out_ << "[\n";
  nlohmann::json meta = {{"name", "process_name"},
                         {"ph", "M"},
                         {"pid", rank},
                         {"args", {{"name", "rank " + std::to_string(rank)}}}};
  out_ << meta.dump() << ",\n";
  enabled_ = true;
}

void Timeline::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  enabled_ = false;
  out_.flush();
  out_.close();
}

int Timeline::thread_id() {
  static std::unordered_map<std::thread::id, int> ids;  // guarded by mu_
  auto [it, fresh] = ids.emplace(std::this_thread::get_id(), static_cast<int>(ids.size()));
  return it->second;
}

double Timeline::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - epoch_).count();
}

void Timeline::set_thread_name(const std::string& name) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  nlohmann::json e = {{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank_},
                      {"tid", thread_id()},
                      {"args", {{"name", name}}}};
  out_ << e.dump() << ",\n";
}

void Timeline::span(const std::string& name, const char* category, Clock::time_point t0,
                    Clock::time_point t1, const std::string& args_json) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  nlohmann::json e = {{"name", name},
                      {"cat", category},
                      {"ph", "X"},
                      {"pid", rank_},
                      {"tid", thread_id()},
                      {"ts", micros(t0)},
                      {"dur", micros(t1) - micros(t0)}};
  if (!args_json.empty()) e["args"] = nlohmann::json::parse("{" + args_json + "}");
  out_ << e.dump() << ",\n";
}

void Timeline::merge(const std::vector<std::string>& rank_files, const std::string& out_path) {
  // Line by line, each event copied as its text once it parses: a long run at scale has ~10^8
  // events, far more than one rank's memory holds as parsed JSON.
  std::ofstream out(out_path, std::ios::trunc);
  ADA_CHECK_ARG(out.good(), IoError) << "timeline: cannot write " << out_path;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  for (const auto& f : rank_files) {
    std::ifstream in(f);
    ADA_CHECK_ARG(in.good(), IoError) << "timeline: cannot read " << f;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line == "[" || line == "]") continue;
      if (line.back() == ',') line.pop_back();
      if (!nlohmann::json::accept(line)) break;  // a line cut short by a crash ends that trace
      out << (first ? "\n" : ",\n") << line;
      first = false;
    }
  }
  out << "\n]}\n";
  out.flush();
  ADA_CHECK_ARG(out.good(), IoError) << "timeline: writing " << out_path << " failed (disk full?)";
}

}  // namespace ada
