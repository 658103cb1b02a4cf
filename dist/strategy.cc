// The built-in strategies, chosen by the reduce target.
#include "dist/strategy.h"

#include "dist/delta_sync.h"
#include "dist/gradient_sync.h"

namespace ada::dist {

std::unique_ptr<Strategy> make_strategy(comm::ReduceTarget target, const StrategyContext& context,
                                        const StrategyOptions& options) {
  if (target == comm::ReduceTarget::model_delta) return std::make_unique<DeltaSync>(context, options);
  return std::make_unique<GradientSync>(context, options);
}

}  // namespace ada::dist
