#include "data/distributed_sampler.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "core/random.h"

namespace ada::data {

namespace {
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size), opt_(options) {
  ADA_CHECK_ARG(opt_.world >= 1, ConfigError)
      << "DistributedSampler: world size " << opt_.world << " must be at least 1";
  ADA_CHECK_ARG(opt_.rank >= 0 && opt_.rank < opt_.world, ConfigError)
      << "DistributedSampler: rank " << opt_.rank << " outside [0, " << opt_.world << ")";
  ADA_CHECK_ARG(size_ >= 0, ConfigError) << "DistributedSampler: negative dataset size " << size_;
  if (opt_.drop_last)
    per_rank_ = size_ / opt_.world;
  else
    per_rank_ = (size_ + opt_.world - 1) / opt_.world;
  ADA_CHECK_ARG(per_rank_ > 0 || size_ == 0, ConfigError)
      << "DistributedSampler: drop_last with " << size_ << " examples and " << opt_.world
      << " ranks leaves no example per rank; use fewer ranks or drop_last: false";
  build();
}

std::vector<int64_t> DistributedSampler::permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  const uint64_t key = mix64(seed ^ mix64(static_cast<uint64_t>(epoch) ^ 0x5A3D1E5ull));
  // Fisher-Yates from the top; step i draws j uniform in [0, i] from counter i (64 random
  // bits, multiply-shift: bias below 2^-40 for any n we can hold in memory).
  for (int64_t i = n - 1; i > 0; --i) {
    auto r = philox4x32(static_cast<uint64_t>(i), 0x5A3B1E00ull, key);
    uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

void DistributedSampler::build() {
  std::vector<int64_t> all;
  if (opt_.shuffle) {
    all = permutation(size_, opt_.seed, epoch_);
  } else {
    all.resize(static_cast<size_t>(size_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t total = per_rank_ * opt_.world;
  // Pad by repeating from the start (several times over if world > size).
  for (int64_t k = 0; static_cast<int64_t>(all.size()) < total; ++k) all.push_back(all[k]);
  all.resize(static_cast<size_t>(total));
  indices_.clear();
  indices_.reserve(static_cast<size_t>(per_rank_));
  for (int64_t pos = opt_.rank; pos < total; pos += opt_.world) indices_.push_back(all[pos]);
}

void DistributedSampler::set_epoch(int64_t epoch) {
  ADA_CHECK_ARG(epoch >= 0, ConfigError) << "DistributedSampler: negative epoch " << epoch;
  if (epoch != epoch_) {
    epoch_ = epoch;
    build();
  }
  position_ = 0;
}

void DistributedSampler::restore(const SamplerState& state) {
  ADA_CHECK_ARG(state.position >= 0 && state.position <= per_rank_, ConfigError)
      << "DistributedSampler: cannot resume at position " << state.position << " of epoch "
      << state.epoch << ": this rank has " << per_rank_
      << " examples per epoch (was the checkpoint written with another dataset size or world "
         "size?)";
  set_epoch(state.epoch);
  position_ = state.position;
}

std::vector<int64_t> DistributedSampler::next(int64_t n) {
  ADA_CHECK_ARG(n > 0, ConfigError)
      << "DistributedSampler::next: count " << n << " must be positive";
  int64_t take = std::min(n, remaining());
  std::vector<int64_t> out(indices_.begin() + position_, indices_.begin() + position_ + take);
  position_ += take;
  return out;
}

}  // namespace ada::data
