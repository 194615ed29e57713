#include "dist/Watchdog.h"

#include <cstdlib>
#include <future>
#include <memory>

#include "common/Log.h"

namespace mb::dist {

Watchdog::Scope& Watchdog::Scope::operator=(Scope&& other) noexcept {
  if (this != &other) {
    close();
    owner_ = other.owner_;
    id_ = other.id_;
    other.owner_ = nullptr;
  }
  return *this;
}

void Watchdog::Scope::close() {
  if (owner_ == nullptr) return;
  std::lock_guard<std::mutex> lock(owner_->mutex_);
  owner_->open_.erase(id_);
  owner_ = nullptr;
}

Watchdog& Watchdog::instance() {
  // Leaked on purpose: scopes may close from static destructors after main returns.
  static Watchdog* watchdog = new Watchdog();
  return *watchdog;
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::setTimeout(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeoutSeconds_ = seconds;
  wake_.notify_all();
}

double Watchdog::timeout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeoutSeconds_;
}

void Watchdog::addAbortHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  abortHooks_.push_back(std::move(hook));
}

Watchdog::Scope Watchdog::track(std::string what) {
  std::lock_guard<std::mutex> lock(mutex_);
  ensureThread();
  std::uint64_t id = nextId_++;
  open_.emplace(id, Open{std::move(what), Clock::now()});
  return Scope(this, id);
}

void Watchdog::ensureThread() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    // Check at least every second, and four times per timeout for short (test) timeouts.
    double period = std::min(1.0, timeoutSeconds_ / 4.0);
    wake_.wait_for(lock, std::chrono::duration<double>(period));
    if (stopping_) break;
    auto now = Clock::now();
    for (const auto& [id, entry] : open_) {
      double waited = std::chrono::duration<double>(now - entry.start).count();
      if (waited > timeoutSeconds_) {
        std::string what = entry.what + describeOthers(id, now);
        lock.unlock();
        fire(what, waited);
      }
    }
  }
}

// Scopes nest (a training step holds the collectives it waits for): the one that expires first
// is often the outer one, so the message also names what else this rank is waiting for.
std::string Watchdog::describeOthers(std::uint64_t expired, Clock::time_point now) const {
  std::string text;
  for (const auto& [id, entry] : open_) {
    if (id == expired) continue;
    double waited = std::chrono::duration<double>(now - entry.start).count();
    text +=
        fmt::format("{} {} ({:.1f} s)", text.empty() ? "; inside it:" : ",", entry.what, waited);
  }
  return text;
}

void Watchdog::fire(const std::string& what, double waited) {
  auto& logger = log::get("dist");
  logger.critical(
      "watchdog: rank {} has waited {:.1f} s for {} (dist.timeout_s = {:g}). A peer rank is "
      "probably dead or hung; ending this rank so that no rank waits forever. Re-run the same "
      "command to resume from the last checkpoint; if it recurs, see docs/operations.md "
      "(\"When NCCL (or MPI) hangs\").",
      log::rank(), waited, what, timeoutSeconds_);
  runAbortHooksAndExit();
}

void Watchdog::terminate(const std::string& reason) {
  log::get("dist").critical("rank {} stops the job: {}", log::rank(), reason);
  runAbortHooksAndExit();
}

void Watchdog::runAbortHooksAndExit() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hooks = abortHooks_;
  }
  // ncclCommAbort can itself block on a broken peer: run the hooks on their own thread and exit
  // after a deadline whatever they do, so every rank ends within timeout + a few seconds.
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> done = finished->get_future();
  std::thread([hooks, finished] {
    for (const auto& hook : hooks)
      hook();
    finished->set_value();
  }).detach();
  if (done.wait_for(std::chrono::duration<double>(kAbortHookSeconds)) != std::future_status::ready)
    log::get("dist").error("abort hooks did not finish within {:g} s; exiting anyway",
                           kAbortHookSeconds);
  log::flush();
  std::_Exit(1);
}

}  // namespace mb::dist
