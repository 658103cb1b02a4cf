#include "core/parallel.h"

#include <omp.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <Eigen/Core>
#include <algorithm>
#include <exception>
#include <thread>

namespace ada {

void set_num_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

namespace {
thread_local bool t_serial = false;

void set_thread_flush(bool on) {
  _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
  _MM_SET_DENORMALS_ZERO_MODE(on ? _MM_DENORMALS_ZERO_ON : _MM_DENORMALS_ZERO_OFF);
}
}  // namespace

void set_flush_denormals(bool on) {
  set_thread_flush(on);
#pragma omp parallel num_threads(omp_get_max_threads())
  set_thread_flush(on);
}

bool flush_denormals() {
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON;
}

void set_thread_serial(bool serial) {
  t_serial = serial;
}

int num_threads() {
  return t_serial ? 1 : omp_get_max_threads();
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = omp_in_parallel() || t_serial ? 1 : num_threads();
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = begin + n * c / chunks, e = begin + n * (c + 1) / chunks;
    try {
      fn(b, e);
    } catch (...) {
#pragma omp critical(ada_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ada
