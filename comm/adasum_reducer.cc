#include "comm/adasum_reducer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "base/fault.h"
#include "core/ops.h"

namespace ada::comm {
namespace {

constexpr int kTagFold = 7101, kTagUnfold = 7102, kTagLevel = 7200, kTagGather = 7300;
// Elements per piece of a pipelined exchange on the CPU: the piece and the matching part of our
// own data stay in L2 while their partial sums are taken. On a GPU a piece would cost a launch
// and a host sync for no cache benefit: one piece.
constexpr int64_t kPipelineChunk = 1 << 17;
int64_t pipeline_chunk(const Tensor& x) {
  return x.device().is_cpu() ? kPipelineChunk : 0;
}

// The coefficients (ca, cb) of every tensor's pair operator from its summed triples (slot i:
// tensor i), for ops::segment_combine.
std::vector<double> coefficients(const std::vector<double>& triples, double w_a, double w_b) {
  std::vector<double> coef(2 * (triples.size() / 3));
  for (size_t i = 0; i < coef.size() / 2; ++i) {
    const auto c =
        adasum_coefficients(triples[3 * i], triples[3 * i + 1], triples[3 * i + 2], w_a, w_b);
    coef[2 * i] = c.ca;
    coef[2 * i + 1] = c.cb;
  }
  return coef;
}

int floor_pow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// Tensor i's part of [lo, hi) as an offset relative to `base` and a count. An empty part sits
// where the tensor would be (clamped into [lo, hi]), so clipped spans stay in buffer order.
struct Clip {
  int64_t off, n;
};
Clip clip(const TensorSpan& s, int64_t lo, int64_t hi, int64_t base) {
  const int64_t s0 = std::clamp(s.offset, lo, hi), s1 = std::clamp(s.offset + s.numel, lo, hi);
  return {s0 - base, std::max<int64_t>(0, s1 - s0)};
}

// Sums the per-tensor triples `mine` over `group` (null or one rank: nothing to do) in group
// rank order, so every member gets bit-identical totals.
void sum_triples(Communicator* group, std::vector<double>& mine, std::vector<double>& all) {
  if (!group || group->size() == 1) return;
  const size_t k = mine.size();
  all.assign(k * group->size(), 0.0);
  group->allgather(mine.data(), static_cast<int64_t>(k), all.data());
  std::fill(mine.begin(), mine.end(), 0.0);
  for (int g = 0; g < group->size(); ++g)
    for (size_t i = 0; i < k; ++i) mine[i] += all[k * g + i];
}

}  // namespace

AdasumCoefficients adasum_coefficients(double dot, double a2, double b2, double w_a, double w_b) {
  static const double kTiny = std::sqrt(DBL_MIN);
  return {a2 >= kTiny ? 1.0 - w_a * dot / a2 : 1.0, b2 >= kTiny ? 1.0 - w_b * dot / b2 : 1.0};
}

AdasumOptions AdasumOptions::from_config(const Config& section) {
  AdasumOptions o;
  o.hierarchical = section.get_or<bool>("hierarchical", false);
  o.local_size =
      section.get_in_or<int>("local_size", 0, Range::at_least(0), "0 takes the nodes MPI reports");
  o.gather_below = section.get_in_or<int64_t>("gather_below", o.gather_below, Range::at_least(0),
                                              "0 never gathers");
  o.wire = read_wire_dtype(section);
  o.where = section.where("local_size");
  const std::string hier_key =
      section.path().empty() ? "hierarchical" : section.path() + ".hierarchical";
  ADA_CHECK_ARG(o.hierarchical || !section.has("local_size"), ConfigError)
      << o.where << ": only used by the hierarchical form; set " << hier_key
      << ": true, or remove local_size";
  return o;
}

AdasumReducer::AdasumReducer(AdasumOptions options)
    : options_(std::move(options)), wire_(options_.wire) {}

void AdasumReducer::add_pair_cosines(const std::vector<double>& triples) {
  static const double kTiny = std::sqrt(DBL_MIN);
  double sum = 0, count = 0;
  for (size_t i = 0; i + 2 < triples.size(); i += 3) {
    if (triples[i + 1] < kTiny || triples[i + 2] < kTiny) continue;
    sum += triples[i] / std::sqrt(triples[i + 1] * triples[i + 2]);
    count += 1;
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  cos_sum_ += sum;
  cos_count_ += count;
}

std::vector<std::pair<double, double>> AdasumReducer::take_stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  std::vector<std::pair<double, double>> out = {{cos_sum_, cos_count_}};
  cos_sum_ = cos_count_ = 0;
  return out;
}

void AdasumReducer::add_stats(const std::vector<std::pair<double, double>>& stats) {
  if (stats.empty()) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  cos_sum_ += stats[0].first;
  cos_count_ += stats[0].second;
}

Tensor AdasumReducer::scratch(int64_t n, Device device) {
  if (!scratch_.defined() || scratch_.numel() < n || scratch_.device() != device) {
    scratch_ = Tensor();  // free the old one first: peak memory stays one scratch buffer
    scratch_ = Tensor::empty({n}, DType::f32, device);
  }
  return scratch_.narrow(0, n);
}

AdasumReducer::Topology& AdasumReducer::topology_for(Communicator& comm) {
  auto it = topologies_.find(&comm);
  if (it != topologies_.end()) return it->second;
  Topology t;
  int node = comm.rank(), nodes = comm.size();
  if (options_.hierarchical) {
    t.layout =
        std::make_unique<NodeLayout>(make_node_layout(comm, options_.local_size, options_.where));
    t.local_size = t.layout->local_size;
    t.peers = t.layout->cross_comm.get();
    t.fold_group = t.layout->node_comm.get();
    node = t.layout->node;
    nodes = t.layout->nodes;
  } else {
    t.peers = &comm;
  }
  // Level d's partial sums are summed over every rank of the 2d nodes of this node's block.
  const int q = floor_pow2(nodes);
  for (int d = 1; d < q; d *= 2)
    t.level_groups.push_back(comm.split(node < q ? node / (2 * d) : -1, comm.rank()));
  return topologies_.emplace(&comm, std::move(t)).first->second;
}

void AdasumReducer::exchange_and_sum(Communicator& peers, int partner, int tag, Tensor& x,
                                     int64_t klo, int64_t khi, int64_t glo, int64_t ghi, bool left,
                                     const std::vector<TensorSpan>& pieces,
                                     std::vector<double>& mine) {
  Tensor theirs = scratch(khi - klo, x.device());
  const Tensor own = x.narrow(klo, khi - klo);
  const Tensor& a = left ? own : theirs;
  const Tensor& b = left ? theirs : own;
  std::fill(mine.begin(), mine.end(), 0.0);
  size_t first = 0;  // pieces are in buffer order: the first tensor not yet behind
  std::vector<ops::Segment> segs;
  auto on_piece = [&](int64_t off, int64_t count) {
    const int64_t lo = klo + off, hi = lo + count;
    while (first < pieces.size() && pieces[first].offset + pieces[first].numel <= lo) ++first;
    segs.clear();
    for (size_t i = first; i < pieces.size() && pieces[i].offset < hi; ++i) {
      const Clip c = clip(pieces[i], lo, hi, klo);
      if (c.n > 0) segs.push_back({c.off, c.n, static_cast<int64_t>(i)});
    }
    ops::segment_partial_sums(a, b, segs, mine.data());
  };
  // The fold only receives. On a 16-bit wire each piece is widened into `theirs` as it arrives.
  Tensor give = glo < 0 ? Tensor::empty({0}, DType::f32, x.device()) : x.narrow(glo, ghi - glo);
  wire_.sendrecv_pipelined(peers, give, partner, theirs, partner, tag, pipeline_chunk(x), on_piece);
}

void AdasumReducer::tree(Tensor& x, const std::vector<TensorSpan>& pieces, Topology& topo) {
  Communicator& peers = *topo.peers;
  const int p = peers.size(), r = peers.rank();
  if (p == 1) return;
  const int q = floor_pow2(p), extra = p - q;
  const int64_t n = x.numel();
  std::vector<double> mine(3 * pieces.size()), all;
  std::vector<ops::Segment> segs;

  if (r >= q) {  // fold into rank r - q, then receive the result
    Tensor none = Tensor::empty({0}, DType::f32, x.device());
    wire_.sendrecv_pipelined(peers, x, r - q, none, r - q, kTagFold, pipeline_chunk(x),
                             [](int64_t, int64_t) {});
    wire_.recv(peers, x, r - q, kTagUnfold);
    return;
  }
  if (r < extra) {
    // Both vectors are whole here; in the hierarchical form the slices of the other local ranks
    // hold the rest of each tensor, so the sums go over the node.
    exchange_and_sum(peers, r + q, kTagFold, x, 0, n, -1, -1, true, pieces, mine);
    sum_triples(topo.fold_group, mine, all);
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].numel > 0)
        segs.push_back({pieces[i].offset, pieces[i].numel, static_cast<int64_t>(i)});
    ops::segment_combine(x, scratch_.narrow(0, n), x, segs, coefficients(mine, 0.5, 0.5).data());
  }
  // Number of original tree nodes a node i < q stands for, summed over [start, start+len).
  auto nodes_in = [&](int start, int len) {
    return len + std::max(0, std::min(start + len, extra) - start);
  };

  std::vector<std::pair<int64_t, int64_t>> parents;
  int64_t lo = 0, hi = n;
  int level = 0;
  for (int d = 1; d < q; d *= 2, ++level) {
    const int partner = r ^ d;
    const bool left = (r & d) == 0;  // my block is the left operand a
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t klo = left ? lo : mid, khi = left ? mid : hi;  // kept half
    const int64_t glo = left ? mid : lo, ghi = left ? hi : mid;  // given half
    exchange_and_sum(peers, partner, kTagLevel + level, x, klo, khi, glo, ghi, left, pieces, mine);
    sum_triples(topo.level_groups[level].get(), mine, all);
    if (d == 1) add_pair_cosines(mine);
    fault_point("adasum");
    const int base = (r / (2 * d)) * (2 * d);
    const double na = nodes_in(base, d), nb = nodes_in(base + d, d);
    segs.clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Clip c = clip(pieces[i], klo, khi, klo);
      if (c.n > 0) segs.push_back({c.off, c.n, static_cast<int64_t>(i)});
    }
    Tensor own = x.narrow(klo, khi - klo);
    const Tensor theirs = scratch_.narrow(0, khi - klo);
    ops::segment_combine(left ? own : theirs, left ? theirs : own, own, segs,
                         coefficients(mine, na / (na + nb), nb / (na + nb)).data());
    parents.emplace_back(lo, hi);
    lo = klo;
    hi = khi;
  }
  // Allgather phase: undo the halvings, swapping finished segments with the same partners. On a
  // 16-bit wire this rank's own segment is rounded first, as the others will receive it.
  Tensor finished = x.narrow(lo, hi - lo);
  wire_.round(finished);
  for (int d = q / 2; d >= 1; d /= 2) {
    --level;
    const auto [plo, phi] = parents.back();
    parents.pop_back();
    const int partner = r ^ d;
    const int64_t olo = lo == plo ? hi : plo, ohi = lo == plo ? phi : lo;  // partner's segment
    Tensor theirs = x.narrow(olo, ohi - olo);
    wire_.sendrecv(peers, x.narrow(lo, hi - lo), partner, theirs, partner, kTagGather + level);
    lo = plo;
    hi = phi;
  }
  if (r < extra) wire_.send(peers, x, r + q, kTagUnfold);
}

void AdasumReducer::reduce_gathered(Tensor& x, const std::vector<TensorSpan>& spans,
                                    Communicator& comm, int local_size) {
  const int p = comm.size(), nodes = p / local_size;
  const int64_t n = x.numel();
  Tensor all = scratch(int64_t(p) * n, x.device());
  wire_.allgather(comm, x, all);  // on a 16-bit wire every rank works on the same rounded inputs
  auto input = [&](int k) {
    return all.narrow(int64_t(k) * local_size * n, n);
  };                                 // node k's vector
  for (int k = 0; k < nodes; ++k) {  // node sums, in local rank order
    Tensor v = input(k);
    for (int j = 1; j < local_size; ++j)
      ops::add_(v, all.narrow((int64_t(k) * local_size + j) * n, n));
  }
  std::vector<ops::Segment> segs;
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].numel > 0)
      segs.push_back({spans[i].offset, spans[i].numel, static_cast<int64_t>(i)});
  // u <- the count-weighted pair operator of u and w, per tensor, rounded to float like the
  // distributed schedule's combine.
  std::vector<double> triples(3 * spans.size());
  auto pair = [&](Tensor u, const Tensor& w, double wu, double ww, bool first) {
    std::fill(triples.begin(), triples.end(), 0.0);
    ops::segment_partial_sums(u, w, segs, triples.data());
    if (first)
      add_pair_cosines(triples);  // the diagnostic's triples, as the distributed schedule sees them
    ops::segment_combine(u, w, u, segs, coefficients(triples, wu, ww).data());
  };
  const int q = floor_pow2(nodes), extra = nodes - q;
  std::vector<int> count(q, 1);
  for (int i = 0; i < extra; ++i) {  // the fold
    pair(input(i), input(q + i), 0.5, 0.5, false);
    count[i] = 2;
  }
  for (int d = 1; d < q; d *= 2)  // the balanced tree over adjacent blocks
    for (int i = 0; i < q; i += 2 * d) {
      const double na = count[i], nb = count[i + d];
      pair(input(i), input(i + d), na / (na + nb), nb / (na + nb), d == 1);
      count[i] += count[i + d];
    }
  if (local_size == 1) {
    x.copy_from(input(0));
  } else {
    const std::vector<double> inv = {1.0 / local_size, 0.0};
    ops::segment_combine(input(0), input(0), x, {{0, n, 0}}, inv.data());
  }
}

void AdasumReducer::reduce(Tensor& buffer, const std::vector<TensorSpan>& spans,
                           Communicator& comm) {
  check_dtype(buffer, DType::f32, "adasum", "buffer");
  const int64_t n = buffer.numel();
  int64_t end = 0;
  for (const auto& s : spans) {
    ADA_CHECK_ARG(s.offset >= end && s.numel >= 0 && s.offset + s.numel <= n, ShapeError)
        << "adasum: span [" << s.offset << ", " << s.offset + s.numel
        << ") is outside the buffer of " << n
        << " elements or before the end of the previous span (" << end
        << "); spans must be in buffer order and disjoint";
    end = s.offset + s.numel;
  }
  // Collective on first use, before any rank returns early; also checks the options.
  Topology& topo = topology_for(comm);
  if (comm.size() == 1) return;
  Tensor x = buffer.reshape({n});
  const int L = topo.local_size;
  if (n * comm.size() <= options_.gather_below) {
    reduce_gathered(x, spans, comm, L);
    return;
  }
  if (L == 1) {  // flat, or one rank per node
    tree(x, spans, topo);
    return;
  }
  // Hierarchical: local rank j owns slice j of the node sum.
  NodeLayout& nl = *topo.layout;
  std::vector<int64_t> counts(L);
  for (int j = 0; j < L; ++j) counts[j] = n / L + (j < n % L ? 1 : 0);
  const int64_t s0 = (n / L) * nl.local_rank + std::min<int64_t>(nl.local_rank, n % L);
  const int64_t m = counts[nl.local_rank];
  if (!slice_.defined() || slice_.numel() < m || slice_.device() != x.device()) {
    slice_ = Tensor();
    slice_ = Tensor::empty({m}, DType::f32, x.device());
  }
  Tensor s = slice_.narrow(0, m);
  wire_.reduce_scatter(*nl.node_comm, x, s, counts);
  std::vector<TensorSpan> pieces(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    const Clip c = clip(spans[i], s0, s0 + m, s0);
    pieces[i] = {c.off, c.n};
  }
  tree(s, pieces, topo);
  Tensor mine = x.narrow(s0, m);
  const std::vector<double> inv = {1.0 / L, 0.0};
  ops::segment_combine(s, s, mine, {{0, m, 0}}, inv.data());
  // On a 16-bit wire this rank's slice goes out rounded, and is kept rounded.
  wire_.allgather_inplace(*nl.node_comm, x, counts);
}

}  // namespace ada::comm
