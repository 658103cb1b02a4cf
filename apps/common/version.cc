#include "apps/common/version.h"

#include "ada_version.h"  // generated into the build tree

namespace ada {
const char* build_commit() {
  return ADA_BUILD_COMMIT;
}
const char* build_version() {
  return ADA_BUILD_VERSION;
}
}  // namespace ada
