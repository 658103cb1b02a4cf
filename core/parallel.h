// The one place that owns CPU threading. Every CPU kernel (ours and Eigen's GEMM) runs on the
// same OpenMP pool, sized by set_num_threads(); two pools never fight for the cores.
#pragma once

#include <cstdint>
#include <functional>

namespace ada {

// Sets the number of threads for every CPU kernel (OpenMP and Eigen). n <= 0 means all cores.
void set_num_threads(int n);
int num_threads();

// Subnormal floats (magnitudes below 2^-126) in CPU arithmetic: flushed to zero, as results and
// as inputs (x86's FTZ and DAZ), or kept (IEEE, the default of a thread). A diverging run can fill
// softmaxes and their gradients with them, and x86 cores compute on them up to ~100x slower (one
// such run slowed 6x). Sets the calling thread and the OpenMP pool's threads; threads they start
// later inherit it. train.flush_denormals.
void set_flush_denormals(bool on);
bool flush_denormals();  // the calling thread's mode

// Marks the calling thread as serial: parallel_for runs inline on it. The communication thread
// does this, so ops it runs (e.g. a reducer's scaling) never start a second OpenMP pool that
// would fight the compute threads for the cores.
void set_thread_serial(bool serial);

// Runs fn(begin, end) over [begin, end) split into contiguous chunks of at least `grain`
// elements, in parallel when the range is large enough. Chunks are static (deterministic).
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ada
