#include "comm/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "base/error.h"

namespace ada::comm::nccl {
namespace {

constexpr int kMinVersion = 21800;  // 2.18: ncclCommSplit

std::string version_text(int code) {
  std::ostringstream s;
  s << code / 10000 << "." << code / 100 % 100 << "." << code % 100;
  return s.str();
}

// Fills `lib` or returns why it cannot be used.
std::string load(Library& lib) {
  const char* env = std::getenv("ADA_NCCL_LIBRARY");
  const std::string name = env && *env ? env : "libnccl.so.2";
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return "cannot open the NCCL library '" + name + "' (" + (why ? why : "unknown reason") +
           "); install NCCL >= " + version_text(kMinVersion) +
           " (CUDA toolkit or PyTorch's nvidia-nccl wheel), add its folder to LD_LIBRARY_PATH, or "
           "set ADA_NCCL_LIBRARY to the full path of libnccl.so.2";
  }
  lib.path = name;
#define ADA_NCCL_RESOLVE(f)                                     \
  lib.f = reinterpret_cast<decltype(lib.f)>(dlsym(handle, #f)); \
  if (!lib.f)                                                   \
    return "the NCCL library '" + name +                        \
           "' lacks " #f "; it needs NCCL >= " + version_text(kMinVersion);
  ADA_NCCL_FUNCTIONS(ADA_NCCL_RESOLVE)
#undef ADA_NCCL_RESOLVE
  if (lib.ncclGetVersion(&lib.version) != ncclSuccess)
    return "ncclGetVersion failed in '" + name + "'";
  if (lib.version < kMinVersion)
    return "the NCCL library '" + name + "' is version " + version_text(lib.version) +
           "; NCCL >= " + version_text(kMinVersion) + " is needed";
  return "";
}

}  // namespace

const Library& library() {
  static Library lib;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] { failure = load(lib); });
  ADA_CHECK_ARG(failure.empty(), DeviceError) << failure;
  return lib;
}

}  // namespace ada::comm::nccl
