#include "data/pipeline/RowCache.h"

#include <algorithm>
#include <memory>
#include <mutex>

namespace mb::data {
namespace {

struct Active {
  std::string path;
  std::unique_ptr<RowCache> cache;
};

std::mutex& activeMutex() {
  static std::mutex mutex;
  return mutex;
}

std::optional<Active>& active() {
  static std::optional<Active> current;
  return current;
}

}  // namespace

RowCache::Scope::Scope(const std::string& path) {
  std::lock_guard<std::mutex> lock(activeMutex());
  active() = Active{path, std::make_unique<RowCache>()};
}

RowCache::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(activeMutex());
  active().reset();
}

RowCache* RowCache::of(const std::string& path) {
  std::lock_guard<std::mutex> lock(activeMutex());
  if (!active() || active()->path != path) return nullptr;
  return active()->cache.get();
}

const RowCache::Held* RowCache::find(const std::string& key) const {
  for (const auto& [name, held] : entries_)
    if (name == key) return &held;
  return nullptr;
}

void RowCache::keep(const std::string& key, Held held) {
  for (auto& [name, old] : entries_) {
    if (name != key) continue;
    old = std::move(held);
    return;
  }
  entries_.emplace_back(key, std::move(held));
}

std::int64_t RowCache::bytesHeld() const {
  std::int64_t bytes = 0;
  for (const auto& entry : entries_)
    bytes += static_cast<std::int64_t>(entry.second.rows.nbytes());
  return bytes;
}

std::pair<ItemRange, ItemRange> rowsLacking(const ItemRange& need, const ItemRange& have) {
  const std::int64_t begin = std::max(need.begin, have.begin);
  const std::int64_t end = std::min(need.end, have.end);
  if (begin >= end) return {need, ItemRange{need.end, need.end}};
  return {ItemRange{need.begin, begin}, ItemRange{end, need.end}};
}

}  // namespace mb::data
