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

// What a spec does at its call: throw an Error (no action given), or :kill, :hang, :wait, :term,
// :usr1, :pause (base/fault.h).
enum class Action { kThrow, kKill, kHang, kWait, kTerm, kUsr1, kPause };

struct Spec {
  std::string point;
  int rank = 0;
  long nth = 1;
  Action action = Action::kThrow;
};

std::vector<Spec> parse(const char* env) {
  static const std::map<std::string, Action> actions = {
      {"kill", Action::kKill}, {"hang", Action::kHang}, {"wait", Action::kWait},
      {"term", Action::kTerm}, {"usr1", Action::kUsr1}, {"pause", Action::kPause}};
  std::vector<Spec> specs;
  std::stringstream all(env);
  for (std::string item; std::getline(all, item, ',');) {
    if (item.empty()) continue;
    Spec s;
    const auto colon = item.find(':');
    if (colon != std::string::npos) {
      const auto it = actions.find(item.substr(colon + 1));
      ADA_CHECK_ARG(it != actions.end(), ConfigError)
          << "ADA_FAULT: '" << item
          << "': the action must be ':kill', ':hang', ':wait', ':term', ':usr1' or ':pause'";
      s.action = it->second;
      item = item.substr(0, colon);
    }
    const auto at = item.find('@');
    ADA_CHECK_ARG(at != std::string::npos && at > 0, ConfigError)
        << "ADA_FAULT: '" << item
        << "' must read <point>@<rank>[#<n>][:kill|:hang|:wait|:term|:usr1|:pause]";
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
  std::vector<Action> due;  // acted on after the lock: a waiting rank blocks no other thread
  {
    std::lock_guard<std::mutex> lock(mu);
    const long n = ++calls[point];
    for (const auto& s : specs)
      if (s.point == point && s.rank == process_rank() && s.nth == n) due.push_back(s.action);
  }
  for (const Action a : due) {
    switch (a) {
      case Action::kKill:
        std::raise(SIGKILL);
        break;
      // Delivered before raise returns; the run goes on as a signalled one would.
      case Action::kTerm:
      case Action::kUsr1:
        std::raise(a == Action::kTerm ? SIGTERM : SIGUSR1);
        break;
      // A run that is still going when its operator interrupts it, however fast it is.
      case Action::kWait:
        while (StopSignals::received() == 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        break;
      // A slow disk or a huge checkpoint: longer than the watchdog's stop rule (5 s).
      case Action::kPause:
        std::this_thread::sleep_for(std::chrono::seconds(8));
        break;
      // A rank stuck for good (in a loop, a deadlock): only a watchdog ends this.
      case Action::kHang:
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      case Action::kThrow:
        ADA_THROW(Error) << "injected fault at " << point << " on rank " << process_rank()
                         << " (ADA_FAULT=" << env << ")";
    }
  }
}

}  // namespace ada
