// Helpers of the reducer tests: the built-in registry, bucket layouts, random inputs, checks
// (bit-identical on every rank, relative L2 error) and the sequential Adasum reference (pair
// operator + the documented tree for any number of inputs), computed in double on one rank.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/adasum_reducer.h"
#include "comm_test_util.h"
#include "core/random.h"

namespace ada::comm::testing {

inline ReducerRegistry& registry() {
  static ReducerRegistry reg = [] {
    ReducerRegistry r("reducer");
    register_builtin_reducers(r);
    return r;
  }();
  return reg;
}

// A reducer with the given options (a YAML mapping, as in the trainer's reducer section).
inline std::unique_ptr<Reducer> make_reducer(const std::string& name,
                                             const std::string& options = "{}") {
  return registry().get(name)(Config::parse(options, "test"));
}

// Tensor sizes of one bucket: odd sizes straddling split points, empty and one-element ones.
inline std::vector<int64_t> bucket_sizes(int p) {
  return {20 * p - 17, 0, 1, 7, 2 * p + 1, 13, p + 2, 33};
}

inline std::vector<TensorSpan> spans_of(const std::vector<int64_t>& sizes) {
  std::vector<TensorSpan> s;
  int64_t off = 0;
  for (int64_t n : sizes) {
    s.push_back({off, n});
    off += n;
  }
  return s;
}

inline int64_t total(const std::vector<int64_t>& sizes) {
  int64_t t = 0;
  for (auto n : sizes) t += n;
  return t;
}

// Runs reducer `name` (with `options`) on this rank's buffer and returns the result.
inline std::vector<float> reduce_with(const std::string& name, const std::vector<float>& mine,
                                      const std::vector<int64_t>& sizes,
                                      Communicator& comm = world(),
                                      const std::string& options = "{}") {
  auto reducer = make_reducer(name, options);
  Tensor buf = Tensor::from_vector<float>(mine, {static_cast<int64_t>(mine.size())});
  reducer->reduce(buf, spans_of(sizes), comm);
  return buf.to_vector<float>();
}

inline std::vector<float> random_vec(int64_t n, uint64_t seed, float scale = 1.f) {
  Generator g(seed);
  return Tensor::randn({n}, g, 0.f, scale).to_vector<float>();
}

inline void expect_same_on_every_rank(const std::vector<float>& v, const std::string& what) {
  auto all = gather_all(v);
  for (size_t r = 1; r < all.size(); ++r)
    EXPECT_EQ(std::memcmp(all[r].data(), all[0].data(), v.size() * sizeof(float)), 0)
        << what << ": rank " << r << " differs from rank 0";
}

inline void expect_near_rel(const std::vector<float>& got, const std::vector<double>& want,
                            double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LE(std::sqrt(err), tol * std::max(1e-30, std::sqrt(norm))) << what;
}

// ---- the sequential reference: pair operator + the documented tree for any P -------------
inline void pair_op(std::vector<double>& a, const std::vector<double>& b,
                    const std::vector<int64_t>& sizes, double wa, double wb) {
  int64_t off = 0;
  for (int64_t n : sizes) {
    double d = 0, aa = 0, bb = 0;
    for (int64_t i = off; i < off + n; ++i) {
      d += a[i] * b[i];
      aa += a[i] * a[i];
      bb += b[i] * b[i];
    }
    auto c = adasum_coefficients(d, aa, bb, wa, wb);
    for (int64_t i = off; i < off + n; ++i) a[i] = c.ca * a[i] + c.cb * b[i];
    off += n;
  }
}

// The flat reducer's result for inputs x[0..P), computed sequentially in double.
inline std::vector<double> tree_reference(const std::vector<std::vector<double>>& x,
                                          const std::vector<int64_t>& sizes) {
  const int p = static_cast<int>(x.size());
  int q = 1;
  while (q * 2 <= p) q *= 2;
  std::vector<std::vector<double>> node(x.begin(), x.begin() + q);
  std::vector<int> count(q, 1);
  for (int i = q; i < p; ++i) {  // fold the extra ranks into ranks 0..p-q-1
    pair_op(node[i - q], x[i], sizes, 0.5, 0.5);
    count[i - q] = 2;
  }
  for (int width = 1; width < q; width *= 2)  // balanced tree over adjacent blocks
    for (int i = 0; i < q; i += 2 * width) {
      double na = count[i], nb = count[i + width];
      pair_op(node[i], node[i + width], sizes, na / (na + nb), nb / (na + nb));
      count[i] += count[i + width];
    }
  return node[0];
}

inline std::vector<double> tree_reference(const std::vector<std::vector<float>>& x,
                                          const std::vector<int64_t>& sizes) {
  std::vector<std::vector<double>> d;
  for (const auto& v : x) d.emplace_back(v.begin(), v.end());
  return tree_reference(d, sizes);
}

}  // namespace ada::comm::testing
