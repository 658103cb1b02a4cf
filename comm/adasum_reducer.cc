#include "comm/adasum_reducer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/fault.h"

namespace ada::comm {
namespace {

constexpr int kTagFold = 7101, kTagUnfold = 7102, kTagLevel = 7200, kTagGather = 7300;

// One pass over a and b: (a.b, |a|^2, |b|^2) in double. The simd reduction lets the compiler
// keep vector accumulators (fixed order for a given build, so deterministic).
void partial_sums(const float* a, const float* b, int64_t n, double& dot, double& aa, double& bb) {
  double d = 0, x = 0, y = 0;
#pragma omp simd reduction(+ : d, x, y)
  for (int64_t i = 0; i < n; ++i) {
    const double ai = a[i], bi = b[i];
    d += ai * bi;
    x += ai * ai;
    y += bi * bi;
  }
  dot += d;
  aa += x;
  bb += y;
}

// out[i] = ca * a[i] + cb * b[i] in double, rounded to float; out may alias a or b.
void combine(const float* a, const float* b, float* out, int64_t n, double ca, double cb) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(ca * a[i] + cb * b[i]);
}

int64_t floor_pow2(int64_t p) {
  int64_t q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

}  // namespace

AdasumCoefficients adasum_coefficients(double dot, double a2, double b2, double w_a, double w_b) {
  static const double kTiny = std::sqrt(DBL_MIN);
  return {a2 >= kTiny ? 1.0 - w_a * dot / a2 : 1.0, b2 >= kTiny ? 1.0 - w_b * dot / b2 : 1.0};
}

AdasumReducer::Groups& AdasumReducer::groups_for(Communicator& comm) {
  auto it = groups_.find(&comm);
  if (it != groups_.end()) return it->second;
  Groups g;
  const int p = comm.size(), r = comm.rank();
  const int q = static_cast<int>(floor_pow2(p));
  for (int d = 1; d < q; d *= 2) g.by_level.push_back(comm.split(r < q ? r / (2 * d) : -1, r));
  return groups_.emplace(&comm, std::move(g)).first->second;
}

void AdasumReducer::reduce(Tensor& buffer, const std::vector<TensorSpan>& spans, Communicator& comm) {
  check_dtype(buffer, DType::f32, "adasum", "buffer");
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const int64_t n = buffer.numel();
  for (const auto& s : spans)
    ADA_CHECK_ARG(s.offset >= 0 && s.numel >= 0 && s.offset + s.numel <= n, ShapeError)
        << "adasum: span [" << s.offset << ", " << s.offset + s.numel << ") outside the buffer of "
        << n << " elements";
  Groups& groups = groups_for(comm);  // collective on first use: before any rank returns early
  const int q = static_cast<int>(floor_pow2(p)), extra = p - q;
  Tensor x = buffer.reshape({n});
  float* xp = x.data<float>();

  if (r >= q) {  // fold into rank r - q, then receive the result
    comm.send(x, r - q, kTagFold);
    comm.recv(x, r - q, kTagUnfold);
    return;
  }
  Tensor tmp = Tensor::empty({n});
  float* tp = tmp.data<float>();
  if (r < extra) {
    comm.recv(tmp, r + q, kTagFold);
    for (const auto& s : spans) {
      double d = 0, aa = 0, bb = 0;
      partial_sums(xp + s.offset, tp + s.offset, s.numel, d, aa, bb);
      auto c = adasum_coefficients(d, aa, bb);
      combine(xp + s.offset, tp + s.offset, xp + s.offset, s.numel, c.ca, c.cb);
    }
  }
  // Number of original ranks a tree node (rank i < q) stands for, summed over [start, start+len).
  auto ranks_in = [&](int start, int len) {
    return len + std::max(0, std::min(start + len, extra) - start);
  };

  const size_t t = spans.size();
  std::vector<double> mine(3 * t), all;
  std::vector<std::pair<int64_t, int64_t>> parents;
  int64_t lo = 0, hi = n;
  int level = 0;
  for (int d = 1; d < q; d *= 2, ++level) {
    const int partner = r ^ d;
    const bool left = (r & d) == 0;  // my block is the left operand a
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t klo = left ? lo : mid, khi = left ? mid : hi;  // kept half
    const int64_t glo = left ? mid : lo, ghi = left ? hi : mid;  // given half
    Tensor recv_half = tmp.narrow(klo, khi - klo);
    comm.sendrecv(x.narrow(glo, ghi - glo), partner, recv_half, partner, kTagLevel + level);
    fault_point("adasum");
    const float* a = left ? xp : tp;
    const float* b = left ? tp : xp;
    std::fill(mine.begin(), mine.end(), 0.0);
    for (size_t i = 0; i < t; ++i) {
      const int64_t s0 = std::max(spans[i].offset, klo);
      const int64_t s1 = std::min(spans[i].offset + spans[i].numel, khi);
      if (s1 > s0) partial_sums(a + s0, b + s0, s1 - s0, mine[3 * i], mine[3 * i + 1], mine[3 * i + 2]);
    }
    Communicator& group = *groups.by_level[level];
    all.assign(3 * t * group.size(), 0.0);
    group.allgather(mine.data(), static_cast<int64_t>(3 * t), all.data());
    const int base = (r / (2 * d)) * (2 * d);
    const double na = ranks_in(base, d), nb = ranks_in(base + d, d);
    const double wa = na / (na + nb), wb = nb / (na + nb);
    for (size_t i = 0; i < t; ++i) {
      const int64_t s0 = std::max(spans[i].offset, klo);
      const int64_t s1 = std::min(spans[i].offset + spans[i].numel, khi);
      if (s1 <= s0) continue;
      double dot = 0, a2 = 0, b2 = 0;  // summed in group-rank order: identical on every rank
      for (int g = 0; g < group.size(); ++g) {
        dot += all[3 * t * g + 3 * i];
        a2 += all[3 * t * g + 3 * i + 1];
        b2 += all[3 * t * g + 3 * i + 2];
      }
      auto c = adasum_coefficients(dot, a2, b2, wa, wb);
      combine(a + s0, b + s0, xp + s0, s1 - s0, c.ca, c.cb);
    }
    parents.emplace_back(lo, hi);
    lo = klo;
    hi = khi;
  }
  // Allgather phase: undo the halvings, swapping finished segments with the same partners.
  for (int d = q / 2; d >= 1; d /= 2) {
    --level;
    const auto [plo, phi] = parents.back();
    parents.pop_back();
    const int partner = r ^ d;
    const int64_t olo = lo == plo ? hi : plo, ohi = lo == plo ? phi : lo;  // partner's segment
    Tensor theirs = x.narrow(olo, ohi - olo);
    comm.sendrecv(x.narrow(lo, hi - lo), partner, theirs, partner, kTagGather + level);
    lo = plo;
    hi = phi;
  }
  if (r < extra) comm.send(x, r + q, kTagUnfold);
}

}  // namespace ada::comm
