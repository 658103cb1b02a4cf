// The `sync` section of a run config -> a strategy. A sync is one file holding its Strategy and
// a reader of its section, plus one line in register_builtin_syncs() (sync/registry.cc):
//   none (default)  gradient or model-delta sync every step (reducer.target), sync/strategy.cc
//   local_sgd, diloco  model deltas every sync.period steps (DiLoCo: an outer optimizer),
//                   sync/delta_sync.cc
//   wagma           group model averages, a world average every sync.global_every steps,
//                   sync/wagma_sync.cc
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/config.h"
#include "base/registry.h"
#include "comm/reducer.h"
#include "core/tensor.h"
#include "sync/strategy.h"

namespace ada::sync {

// What a reader gets: its own section and what it may check its settings against.
struct SyncRequest {
  Config section;          // `sync` (absent for none: then the reader must not read it)
  Config reducer_section;  // `reducer`
  const comm::Reducer& reducer;
  std::string optimizer;  // optimizer.name
  int world_size = 1;
  Device device;  // train.device: where the parameters live
};

// Builds the strategy once rank 0's weights have reached every rank (some keep a copy).
using StrategyMaker =
    std::function<std::unique_ptr<Strategy>(const StrategyContext&, const StrategyOptions&)>;
// Reads and checks a sync's settings (ConfigError naming the key) before anything is built, so
// that Config::finish() sees every key read.
using SyncReader = std::function<StrategyMaker(const SyncRequest&)>;
using SyncRegistry = Registry<SyncReader>;

void register_builtin_syncs(SyncRegistry& registry);
// The built-in syncs, registered once.
const SyncRegistry& builtin_syncs();

// The strategy `root`'s sync section asks for (sync.name; none when the section is absent).
StrategyMaker read_sync(const SyncRegistry& registry, const Config& root,
                        const comm::Reducer& reducer, int world_size, const Device& device);

// Checks shared by the model-averaging syncs: reducer.target is not set (they choose what
// they reduce) and the reducer is one of `reducers`.
void check_averaging_sync(const SyncRequest& request, const std::string& name,
                          const std::vector<std::string>& reducers, const std::string& why);

}  // namespace ada::sync
