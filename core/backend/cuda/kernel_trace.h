// Every kernel's GPU time while profiling (bench_step --profile), through CUPTI's activity API,
// each kernel attributed to the innermost op that launched it (an external correlation id pushed
// by OpTimer). CUPTI is opened at run time: ADA_CUPTI_LIBRARY, else libcupti.so.13 on the
// loader's path (tools/gpu_bundle.sh carries the toolkit's); without it the report says why and
// the per-op table stands alone. The CUDA build only.
#pragma once

#include <string>

namespace ada::cuda::kernel_trace {

// Starts collecting (false when CUPTI cannot be opened or refuses; report() then says why).
bool start();
// Flushes and stops collecting (after the device has finished the traced work).
void stop();
// Whether collecting now (OpTimer pushes and pops op names only then).
bool active();
// The innermost op around the calling thread's next launches; pop restores the one before.
void push_op(const char* op);
void pop_op();
// kernel_report (core/kernel_report.h) of the kernels since start(), then forgets them; or the
// reason nothing was collected.
std::string report();

}  // namespace ada::cuda::kernel_trace
