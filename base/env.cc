#include "base/env.h"

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace ada {

bool env_switch(const char* name, bool default_on, const char* meaning) {
  const char* v = std::getenv(name);
  if (!v || !*v) return default_on;
  const std::string s(v);
  if (s == "1" || s == "on") return true;
  if (s == "0" || s == "off") return false;
  ADA_THROW(ConfigError) << "environment variable " << name << "='" << s << "': use " << meaning;
  return default_on;
}

}  // namespace ada
