#include "apps/trainer/freeze.h"

#include <set>

#include "base/error.h"

namespace ada::trainer {

namespace {
bool under(const std::string& name, const std::string& prefix) {
  return name == prefix ||
         (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name[prefix.size()] == '.');
}
}  // namespace

Frozen freeze_parameters(const std::vector<Param>& params, const std::vector<std::string>& prefixes,
                         const std::string& where) {
  std::string tops;
  std::set<std::string> seen;
  for (const auto& p : params) {
    const std::string top = p.name.substr(0, p.name.find('.'));
    if (seen.insert(top).second) tops += (tops.empty() ? "" : ", ") + top;
  }
  std::vector<bool> hit(params.size(), false);
  for (const auto& prefix : prefixes) {
    ADA_CHECK_ARG(!prefix.empty(), ConfigError)
        << where << ": an empty name; give parameter names or their prefixes (" << tops << ")";
    bool any = false;
    for (size_t i = 0; i < params.size(); ++i)
      if (under(params[i].name, prefix)) hit[i] = any = true;
    ADA_CHECK_ARG(any, ConfigError)
        << where << ": '" << prefix
        << "' names no parameter of the model; its parameters lie under " << tops
        << " (trainer --describe lists them all)";
  }
  Frozen f;
  for (size_t i = 0; i < params.size(); ++i)
    if (hit[i]) ++f.tensors, f.elements += params[i].var.value().numel();
  ADA_CHECK_ARG(f.tensors < static_cast<int64_t>(params.size()), ConfigError)
      << where << ": freezes every parameter of the model, so nothing would train; leave out a "
      << "part (e.g. the head) from the list";
  for (size_t i = 0; i < params.size(); ++i)
    if (hit[i]) params[i].var.impl()->requires_grad = false;
  return f;
}

std::vector<Param> trainable(const std::vector<Param>& params) {
  std::vector<Param> out;
  for (const auto& p : params)
    if (p.var.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace ada::trainer
