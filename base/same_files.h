// Files named more than once by a list of paths (a folder and a file in it, `a/../a/x`, two
// spellings of one path): each path is keyed by its real path (std::filesystem::weakly_canonical,
// the path itself when that fails), so a reader can refuse to read one file twice.
#pragma once

#include <filesystem>
#include <map>
#include <string>

namespace ada {

class SameFiles {
 public:
  // Records `path` (reached as `as`, e.g. the folder it was found in); returns the `as` of an
  // earlier path naming the same file, or "" when it is new.
  std::string add(const std::string& path, const std::string& as) {
    std::error_code ec;
    const std::string real = std::filesystem::weakly_canonical(path, ec).string();
    const auto [it, fresh] = seen_.emplace(ec ? path : real, as);
    return fresh ? std::string() : it->second;
  }

 private:
  std::map<std::string, std::string> seen_;  // real path -> how it was first reached
};

}  // namespace ada
