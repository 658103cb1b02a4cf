// The NCCL library, opened at run time (dlopen) rather than linked: a binary built here runs on a
// GPU machine whatever NCCL it has (the CUDA toolkit's, or PyTorch's wheel), and a machine
// without NCCL still runs everything else, failing only when an NCCL communicator is asked for.
// Built with ADA_WITH_NCCL; nccl.h supplies the types and the function signatures.
#pragma once

#include <nccl.h>

#include <string>

namespace ada::comm::nccl {

// clang-format off
#define ADA_NCCL_FUNCTIONS(X)                                                                   \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort)  \
  X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError) X(ncclCommCount)           \
  X(ncclCommUserRank) X(ncclCommSplit) X(ncclAllReduce) X(ncclBroadcast) X(ncclReduce)          \
  X(ncclAllGather) X(ncclReduceScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)
// clang-format on

struct Library {
#define ADA_NCCL_MEMBER(f) decltype(&::f) f = nullptr;
  ADA_NCCL_FUNCTIONS(ADA_NCCL_MEMBER)
#undef ADA_NCCL_MEMBER
  std::string path;  // the file dlopen found
  int version = 0;   // NCCL_VERSION_CODE of the loaded library, e.g. 22809 for 2.28.9
};

// Opens the library once (ADA_NCCL_LIBRARY, else libnccl.so.2 on the loader's search path) and
// returns it; throws DeviceError naming what was tried and how to fix it, every time it is
// called after a failure. Needs NCCL >= 2.18 (ncclCommSplit).
const Library& library();

}  // namespace ada::comm::nccl
