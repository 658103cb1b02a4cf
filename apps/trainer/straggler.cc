#include "apps/trainer/straggler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "core/random.h"

namespace ada::trainer {

Straggler::Straggler(const Config& c, int world_size) {
  if (c.has("ranks")) {
    ranks_ = c.get<std::vector<int>>("ranks");
    for (int r : ranks_)
      ADA_CHECK_ARG(r >= 0 && r < world_size, ConfigError)
          << c.where("ranks") << ": rank " << r << " does not exist in a world of " << world_size;
    std::sort(ranks_.begin(), ranks_.end());
    ranks_.erase(std::unique(ranks_.begin(), ranks_.end()), ranks_.end());
  } else {
    ranks_.resize(static_cast<size_t>(world_size));
    std::iota(ranks_.begin(), ranks_.end(), 0);
  }
  count_ = c.get_in_or<int>("count", static_cast<int>(ranks_.size()),
                            Range::closed(0, static_cast<double>(ranks_.size())),
                            "at most the ranks that may be slow");
  ADA_CHECK_ARG(c.has("delay_ms"), ConfigError)
      << c.where("delay_ms") << ": train.straggler needs delay_ms";
  delay_ms_ =
      c.get_in<double>("delay_ms", Range::half_open(0, 3.6e6), "milliseconds, under an hour");
  distribution_ = c.get_or<std::string>("distribution", "fixed");
  ADA_CHECK_ARG(distribution_ == "fixed" || distribution_ == "uniform" ||
                    distribution_ == "exponential" || distribution_ == "lognormal",
                ConfigError)
      << c.where("distribution") << ": unknown distribution '" << distribution_
      << "'; known: exponential, fixed, lognormal, uniform";
  sigma_ = c.get_in_or<double>("sigma", 1.0, Range::above(0), "lognormal's shape");
  seed_ = static_cast<uint64_t>(c.get_in_or<int64_t>("seed", 1, Range::at_least(0)));
}

double Straggler::delay_ms(int64_t step, int rank) const {
  if (count_ == 0 || !std::binary_search(ranks_.begin(), ranks_.end(), rank)) return 0;
  const uint64_t s = static_cast<uint64_t>(step);
  if (count_ < static_cast<int>(ranks_.size())) {
    // The same `count_` ranks on every rank: sort the candidates by a per-step random key.
    std::vector<std::pair<float, int>> keyed;
    for (int r : ranks_)
      keyed.emplace_back(Generator::uniform_at(seed_, s * 1000003ull, static_cast<uint64_t>(r)), r);
    std::sort(keyed.begin(), keyed.end());
    bool chosen = false;
    for (int i = 0; i < count_; ++i)
      chosen = chosen || keyed[static_cast<size_t>(i)].second == rank;
    if (!chosen) return 0;
  }
  const float u = Generator::uniform_at(seed_ + 1, s * 1000003ull, static_cast<uint64_t>(rank));
  if (distribution_ == "fixed") return delay_ms_;
  if (distribution_ == "uniform") return 2.0 * delay_ms_ * u;
  if (distribution_ == "exponential") return -delay_ms_ * std::log1p(-static_cast<double>(u));
  const float z = Generator::normal_at(seed_ + 2, s * 1000003ull, static_cast<uint64_t>(rank));
  return delay_ms_ * std::exp(sigma_ * z);  // lognormal with median delay_ms
}

void Straggler::wait(int64_t step, int rank) const {
  const double ms = delay_ms(step, rank);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

std::string Straggler::describe() const {
  std::ostringstream os;
  os << (count_ < static_cast<int>(ranks_.size()) ? std::to_string(count_) + " random rank(s) of "
                                                  : "ranks ")
     << "[";
  for (size_t i = 0; i < ranks_.size(); ++i) os << (i ? "," : "") << ranks_[i];
  os << "] delayed " << distribution_ << " " << delay_ms_ << " ms per step";
  return os.str();
}

}  // namespace ada::trainer
