// The commit the program was built from (tools/version.cmake): the short hash, "+changes" when
// tracked files differed from it, "unknown" outside a git checkout. The trainer prints it with
// --version and records it in its log and summary.json; the study runner reads it from there.
#pragma once

namespace ada {
const char* build_commit();
}  // namespace ada
