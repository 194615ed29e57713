#pragma once
// Lookups shared by the registries of named kinds (data layouts, models): a vector of entries
// with a `name` member, in the order users see them listed.
#include <string>
#include <vector>

namespace mb::registry {

// The entry called `name`, or nullptr.
template <class Kind>
const Kind* find(const std::vector<Kind>& kinds, const std::string& name) {
  for (const auto& kind : kinds) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

template <class Kind>
std::vector<std::string> names(const std::vector<Kind>& kinds) {
  std::vector<std::string> out;
  for (const auto& kind : kinds)
    out.push_back(kind.name);
  return out;
}

}  // namespace mb::registry
