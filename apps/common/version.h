// What the program was built from (tools/version.cmake). build_commit(): the short hash of HEAD,
// "+changes" when tracked files differed from it, "unknown" outside a git checkout (provenance).
// build_version(): the newest commit that changed the files the programs are built from (not
// docs, studies, configs, tools, tests), "+changes.<hash of the uncommitted changes>" when they
// differed from it: equal versions, equal sources. The trainer prints both with --version and
// records them in its log and summary.json; the study runner keys its cache of finished cells
// on the version and records the commit with every cell.
#pragma once

namespace ada {
const char* build_commit();
const char* build_version();
}  // namespace ada
