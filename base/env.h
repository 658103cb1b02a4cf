#pragma once
// On/off switches read from the environment (ADA_HOST_CACHE, ADA_CUDA_BN_ROWS_APPLY, ...).

namespace ada {

// The switch `name`: unset or empty gives `default_on`; "1"/"on" and "0"/"off" turn it on and
// off; anything else is a ConfigError naming the variable, its value and `meaning` (what 1 and 0
// do, e.g. "1 (cache large host blocks, the default) or 0 (plain malloc)").
bool env_switch(const char* name, bool default_on, const char* meaning);

}  // namespace ada
