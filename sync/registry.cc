#include "sync/registry.h"

#include "base/log.h"
#include "sync/delta_sync.h"
#include "sync/wagma_sync.h"

namespace ada::sync {
namespace {

// sync: none (or no sync section): every step, what reducer.target says.
StrategyMaker read_every_step(const SyncRequest& r) {
  comm::ReduceTarget target = read_target(r.reducer_section, r.reducer, r.optimizer);
  if (!r.device.is_cpu() && r.world_size == 1 && target == comm::ReduceTarget::model_delta) {
    log_info(
        "one rank on {}: the model-delta target is the optimizer's own step there; "
        "gradients are used (same update)",
        r.device.str());
    target = comm::ReduceTarget::gradients;
  }
  return [target](const StrategyContext& c, const StrategyOptions& o) {
    return make_strategy(target, c, o);
  };
}

}  // namespace

void register_builtin_syncs(SyncRegistry& r) {
  r.add("none", read_every_step);
  r.add("local_sgd", read_local_sgd);
  r.add("diloco", read_diloco);
  r.add("wagma", read_wagma);
}

StrategyMaker read_sync(const SyncRegistry& registry, const Config& root,
                        const comm::Reducer& reducer, int world_size, const Device& device) {
  const bool has_section = root.has("sync");
  const Config section = has_section ? root.child("sync") : Config::parse("{}", "defaults");
  const std::string name = section.get_or<std::string>("name", "none");
  const std::string optimizer =
      root.has("optimizer") ? root.child("optimizer").get_or<std::string>("name", "") : "";
  const SyncRequest request{section, root.child("reducer"), reducer, optimizer, world_size, device};
  return registry.get(name, section.where("name"))(request);
}

void check_averaging_sync(const SyncRequest& r, const std::string& name,
                          const std::vector<std::string>& reducers, const std::string& why) {
  const Config& red = r.reducer_section;
  ADA_CHECK_ARG(!red.has("target"), ConfigError)
      << red.where("target") << ": applies only with sync.name: none; sync " << name
      << (name == "wagma" ? " averages models" : " reduces the model delta of its local steps")
      << "; remove it";
  bool known = false;
  std::string list;
  for (const auto& n : reducers) {
    known = known || n == r.reducer.name();
    list += (list.empty() ? "" : " or ") + n;
  }
  ADA_CHECK_ARG(known, ConfigError)
      << red.where("name") << ": sync " << name << " " << why << "; set reducer.name: " << list
      << ", not '" << r.reducer.name() << "'";
}

const SyncRegistry& builtin_syncs() {
  return builtin_registry<SyncRegistry>("sync", register_builtin_syncs);
}

}  // namespace ada::sync
