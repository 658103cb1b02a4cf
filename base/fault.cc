#include "base/fault.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/stop_signal.h"

namespace ada {
namespace {

struct Spec {
  std::string point;
  int rank = 0;
  long nth = 1;
  bool kill = false;
  bool hang = false;
  bool wait = false;  // :wait: until this process has a stop signal, then go on
  int signo = 0;      // :term, :usr1: send itself this signal and go on
};

std::vector<Spec> parse(const char* env) {
  std::vector<Spec> specs;
  std::stringstream all(env);
  for (std::string item; std::getline(all, item, ',');) {
    if (item.empty()) continue;
    Spec s;
    const auto colon = item.find(':');
    if (colon != std::string::npos) {
      const std::string action = item.substr(colon + 1);
      ADA_CHECK_ARG(action == "kill" || action == "hang" || action == "wait" || action == "term" ||
                        action == "usr1",
                    ConfigError)
          << "ADA_FAULT: '" << item
          << "': the action must be ':kill', ':hang', ':wait', ':term' or ':usr1'";
      s.kill = action == "kill";
      s.hang = action == "hang";
      s.wait = action == "wait";
      s.signo = action == "term" ? SIGTERM : action == "usr1" ? SIGUSR1 : 0;
      item = item.substr(0, colon);
    }
    const auto at = item.find('@');
    ADA_CHECK_ARG(at != std::string::npos && at > 0, ConfigError)
        << "ADA_FAULT: '" << item
        << "' must read <point>@<rank>[#<n>][:kill|:hang|:wait|:term|:usr1]";
    s.point = item.substr(0, at);
    const std::string rest = item.substr(at + 1);
    const auto hash = rest.find('#');
    try {
      s.rank = std::stoi(rest.substr(0, hash));
      if (hash != std::string::npos) s.nth = std::stol(rest.substr(hash + 1));
    } catch (const std::exception&) {
      ADA_THROW(ConfigError) << "ADA_FAULT: '" << item << "': rank and count must be integers";
    }
    specs.push_back(s);
  }
  return specs;
}

}  // namespace

void fault_point(const char* point) {
  static const char* env = std::getenv("ADA_FAULT");
  if (env == nullptr || *env == '\0') return;
  static std::mutex mu;
  static const std::vector<Spec> specs = parse(env);
  static std::map<std::string, long> calls;
  std::lock_guard<std::mutex> lock(mu);
  const long n = ++calls[point];
  for (const auto& s : specs) {
    if (s.point != point || s.rank != process_rank() || s.nth != n) continue;
    if (s.kill) std::raise(SIGKILL);
    if (s.signo != 0) {  // delivered before raise returns; the run goes on as a signalled one would
      std::raise(s.signo);
      continue;
    }
    if (s.wait) {  // a run that is still going when its operator interrupts it, however fast it is
      while (StopSignals::received() == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (s.hang)  // a rank stuck for good (in a loop, a deadlock): only a watchdog ends this
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    ADA_THROW(Error) << "injected fault at " << point << " on rank " << process_rank()
                     << " (ADA_FAULT=" << env << ")";
  }
}

}  // namespace ada
