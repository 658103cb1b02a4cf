// Hierarchical Adasum under mpiexec, on both schedules (distributed and gathered), for every
// local_size L dividing the world (so 2 nodes of 2 and of 4 ranks at 4 and 8 ranks, 3 nodes of
// 2 at 6 ranks, one node at every count): against (1/L) * the sequential tree over node sums,
// computed here; one node = average; differs from flat Adasum; tensors straddling slice
// boundaries, sizes not divisible by L, buckets smaller than a node; bit-identical on every
// rank; bad options are ConfigErrors on every rank.
#include <gtest/gtest.h>

#include "comm/node_layout.h"
#include "reducer_test_util.h"

namespace ada::comm {
namespace {
using namespace testing;

// Every test but the options one runs on both schedules: the distributed one (gather_below: 0)
// and the latency path (gather, then the same definition on every rank).
class AdasumHierarchical : public ::testing::TestWithParam<int64_t> {
 protected:
  std::string gather() const { return "gather_below: " + std::to_string(GetParam()); }
  std::string options_for(int local_size) const {
    return "{hierarchical: true, local_size: " + std::to_string(local_size) + ", " + gather() + "}";
  }
};
INSTANTIATE_TEST_SUITE_P(Schedules, AdasumHierarchical, ::testing::Values(0, 1000000000),
                         [](const auto& info) {
                           return info.index == 0 ? "Distributed" : "Gathered";
                         });

std::string hierarchical_options(int local_size) {
  return "{hierarchical: true, local_size: " + std::to_string(local_size) + "}";
}

// Divisors L >= 2 of p: every simulated node layout this world allows.
std::vector<int> local_sizes(int p) {
  std::vector<int> ls;
  for (int l = 2; l <= p; ++l)
    if (p % l == 0) ls.push_back(l);
  return ls;
}

// The reference: (1/L) * tree over the N node sums, in double.
std::vector<double> hierarchical_reference(const std::vector<std::vector<float>>& all,
                                           int local_size, const std::vector<int64_t>& sizes) {
  const int nodes = static_cast<int>(all.size()) / local_size;
  const size_t n = all[0].size();
  std::vector<std::vector<double>> sums(nodes, std::vector<double>(n, 0.0));
  for (int k = 0; k < nodes; ++k)
    for (int j = 0; j < local_size; ++j)
      for (size_t i = 0; i < n; ++i) sums[k][i] += all[k * local_size + j][i];
  auto r = tree_reference(sums, sizes);
  for (auto& v : r) v /= local_size;
  return r;
}

void expect_per_tensor(const std::vector<float>& got, const std::vector<double>& want,
                       const std::vector<int64_t>& sizes, double tol, const std::string& what) {
  int64_t off = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<float> g(got.begin() + off, got.begin() + off + sizes[t]);
    std::vector<double> w(want.begin() + off, want.begin() + off + sizes[t]);
    expect_near_rel(g, w, tol, what + ", tensor " + std::to_string(t));
    off += sizes[t];
  }
}

// Correlated random inputs (non-trivial dot products) with a per-rank scale.
std::vector<float> inputs(int64_t n, int rank) {
  auto v = random_vec(n, 300 + rank);
  for (int64_t i = 0; i < n; ++i) v[i] = (1.f + 0.25f * rank) * (v[i] + 0.4f * std::sin(0.1f * i));
  return v;
}

TEST_P(AdasumHierarchical, MatchesTreeOverNodeSums) {
  const int p = world().size(), r = world().rank();
  for (int l : local_sizes(p)) {
    auto sizes = bucket_sizes(p);
    if (total(sizes) % l == 0) sizes.push_back(1);  // slices of unequal length
    ASSERT_NE(total(sizes) % l, 0);
    const auto mine = inputs(total(sizes), r);
    auto got = reduce_with("adasum", mine, sizes, world(), options_for(l));
    auto want = hierarchical_reference(gather_all(mine), l, sizes);
    const std::string what =
        "hierarchical, " + std::to_string(p / l) + " nodes of " + std::to_string(l);
    expect_per_tensor(got, want, sizes, 1e-6, what);
    expect_same_on_every_rank(got, what);
  }
}

TEST_P(AdasumHierarchical, OneTensorAcrossAllSlicesAndBucketsSmallerThanANode) {
  // One tensor spread over every slice: its coefficients need partial sums from all local ranks.
  const int p = world().size(), r = world().rank();
  for (int l : local_sizes(p)) {
    for (const std::vector<int64_t>& sizes :
         {std::vector<int64_t>{97}, std::vector<int64_t>{1}, std::vector<int64_t>{0, 1, 0}}) {
      const auto mine = inputs(total(sizes), r);
      auto got = reduce_with("adasum", mine, sizes, world(), options_for(l));
      auto want = hierarchical_reference(gather_all(mine), l, sizes);
      const std::string what =
          "L=" + std::to_string(l) + ", " + std::to_string(total(sizes)) + " elements";
      expect_per_tensor(got, want, sizes, 1e-6, what);
      expect_same_on_every_rank(got, what);
    }
  }
}

TEST_P(AdasumHierarchical, OneNodeIsTheAverage) {
  const int p = world().size(), r = world().rank();
  const auto sizes = bucket_sizes(p);
  const auto mine = inputs(total(sizes), r);
  auto all = gather_all(mine);
  std::vector<double> mean(mine.size(), 0.0);
  for (const auto& v : all)
    for (size_t i = 0; i < v.size(); ++i) mean[i] += double(v[i]) / p;
  // An explicit local_size of the world, and the nodes MPI reports (all ranks here are local).
  for (const std::string& opts : {options_for(p), "{hierarchical: true, " + gather() + "}"}) {
    auto got = reduce_with("adasum", mine, sizes, world(), opts);
    expect_per_tensor(got, mean, sizes, 1e-6, "one node " + opts);
    expect_same_on_every_rank(got, "one node " + opts);
  }
}

TEST_P(AdasumHierarchical, DiffersFromFlatAdasum) {
  // Nodes of 2 where the world allows at least two of them, else one node (the average).
  const int p = world().size(), r = world().rank();
  const int l = p >= 4 && p % 2 == 0 ? 2 : p;
  const auto sizes = bucket_sizes(p);
  const auto mine = inputs(total(sizes), r);
  auto flat = reduce_with("adasum", mine, sizes, world(), "{" + gather() + "}");
  auto hier = reduce_with("adasum", mine, sizes, world(), options_for(l));
  double diff = 0, norm = 0;
  for (size_t i = 0; i < flat.size(); ++i) {
    diff = std::max(diff, double(std::fabs(flat[i] - hier[i])));
    norm = std::max(norm, double(std::fabs(flat[i])));
  }
  if (p == 1)
    EXPECT_EQ(diff, 0.0);  // one rank: both are the identity
  else
    EXPECT_GT(diff, 1e-3 * norm) << "nodes of " << l;
}

TEST(AdasumHierarchicalOptions, BadOptionsAreConfigErrorsOnEveryRank) {
  const int p = world().size();
  std::vector<float> v(10, 1.f);
  // Not a divisor of the world size: the message names the setting and the sizes.
  try {
    reduce_with("adasum", v, {10}, world(), hierarchical_options(p + 1));
    ADD_FAILURE() << "local_size " << p + 1 << " accepted at " << p << " ranks";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("config test: local_size"), std::string::npos) << m;
    EXPECT_NE(m.find("is not a multiple of local_size " + std::to_string(p + 1)), std::string::npos)
        << m;
  }
  EXPECT_THROW(make_reducer("adasum", "{hierarchical: true, local_size: -2}"), ConfigError);
  EXPECT_THROW(make_reducer("adasum", "{local_size: 2}"), ConfigError);  // needs hierarchical
  EXPECT_THROW(make_reducer("adasum", "{gather_below: -1}"), ConfigError);
  world().barrier();  // every rank got here: nobody hangs in a collective
}

TEST(NodeLayout, SimulatedNodesAreConsecutiveRanks) {
  const int p = world().size(), r = world().rank();
  for (int l : local_sizes(p)) {
    NodeLayout nl = make_node_layout(world(), l, "test");
    EXPECT_EQ(nl.local_size, l);
    EXPECT_EQ(nl.nodes, p / l);
    EXPECT_EQ(nl.node, r / l);
    EXPECT_EQ(nl.local_rank, r % l);
    EXPECT_EQ(nl.node_comm->size(), l);
    EXPECT_EQ(nl.node_comm->rank(), r % l);
    EXPECT_EQ(nl.cross_comm->size(), p / l);
    EXPECT_EQ(nl.cross_comm->rank(), r / l);
    // The node communicator holds exactly ranks node*l .. node*l+l-1.
    double mine = r;
    std::vector<double> got(l);
    nl.node_comm->allgather(&mine, 1, got.data());
    for (int j = 0; j < l; ++j) EXPECT_EQ(got[j], double(r / l * l + j));
  }
  NodeLayout mpi = make_node_layout(world(), 0, "test");  // one machine: one node of p ranks
  EXPECT_EQ(mpi.local_size, p);
  EXPECT_EQ(mpi.nodes, 1);
}

}  // namespace
}  // namespace ada::comm
