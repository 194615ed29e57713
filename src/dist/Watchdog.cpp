#include "dist/Watchdog.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <future>

#include "common/Log.h"

namespace mb::dist {

// Note [Watchdog heartbeat]
// The first watchdog timed every scope from its start: a rank that waited dist.timeout_s in a
// collective, or spent that long in one training step, ended the job. That took slow compute
// for a hang: a single-rank step of GPT-2 small on a CPU (300 s) was ended as "a peer rank is
// probably dead", and so would be a large model on a slow card or a first compiled step.
// What a waiting rank needs to know is whether the ranks it waits for are alive and moving, so
// the watchdog now times *waiting without progress*, as PyTorch's NCCL heartbeat monitor
// separates a live watchdog from a stuck collective:
//  - Progress, per rank: a collective completes (a waiting scope closes); the code marks a unit
//    of work (Watchdog::progress(): each micro-batch, each evaluation batch); or, on the CPU,
//    the compute thread (the one that built the Runtime) burned at least kBusyCpuShare of a core
//    since the last check. A rank blocked in a collective or asleep burns none; one in a long
//    matrix product burns one core or more. On CUDA the host thread spins while it waits for the
//    GPU, so there only marks and collectives count (setCpuTimeIsProgress(false)).
//  - Heartbeats: every check (at most 1 s apart, 8 per timeout), each rank's watchdog thread
//    sends its progress count and what it is doing ("grad bucket 3/5 ...", "training step 12")
//    to every peer over a duplicate of the world communicator (MpiHeartbeat in Heartbeat.h,
//    non-blocking point-to-point; this needs MPI_THREAD_MULTIPLE, as the gradient
//    communicator's worker thread does). A peer is silent when nothing arrived from it for the
//    timeout, stalled when its progress count did not change for the timeout.
//  - The rule (judge()): a rank ends the job when
//      (a) it has waited in a collective for longer than the timeout and a peer is silent: that
//          peer is dead, stopped, or cut off (the message names it); or
//      (b) no rank has made progress for the timeout, while this rank has a scope open that
//          long or a peer waits in a collective: the job is hung (the message names the
//          collective and which ranks have not arrived in it, from their heartbeats).
//    Otherwise a long wait only logs, once, which ranks are still busy. A slow peer is waited
//    for as long as it makes progress.
//  - A world of one waits for nobody: its scopes never fire, whatever a step takes.
//  - Without heartbeats (MPI without MPI_THREAD_MULTIPLE) a rank knows only its own progress:
//    it ends itself when a scope is older than the timeout and it made no progress for as long.
// The price: a rank whose compute thread spins forever (a livelock on the CPU) counts as busy,
// and on CUDA a single kernel longer than the timeout counts as stuck. Both are rarer than the
// slow steps the old rule killed.
namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string describePeer(const PeerMonitor::Peer& peer) {
  if (!peer.heard) return fmt::format("rank {} (no heartbeat yet)", peer.rank);
  const std::string where = peer.last.waiting         ? "waits in '" + peer.last.doing + "'"
                            : peer.last.doing.empty() ? std::string("outside any collective")
                                                      : "is in '" + peer.last.doing + "'";
  return fmt::format("rank {} ({}, no progress for {:.1f} s)", peer.rank, where,
                     peer.stalledSeconds);
}

// The ranks that are not in `collective`, described from their heartbeats.
std::string notArrived(const std::vector<PeerMonitor::Peer>& peers, const std::string& collective) {
  std::string text;
  for (const auto& peer : peers) {
    if (peer.heard && peer.last.waiting && peer.last.doing == collective) continue;
    text += (text.empty() ? "" : ", ") + describePeer(peer);
  }
  return text;
}

constexpr const char* kRemedy =
    "Re-run the same command to resume from the last checkpoint; if it recurs, see "
    "docs/operations.md (\"When NCCL (or MPI) hangs\").";

}  // namespace

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
  auto found = owner_->open_.find(id_);
  if (found != owner_->open_.end()) {
    if (found->second.kind == Kind::kWait) owner_->progress();  // a collective completed
    owner_->open_.erase(found);
  }
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

Watchdog::Scope Watchdog::track(std::string what, Kind kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  ensureThread();
  std::uint64_t id = nextId_++;
  open_.emplace(id, Open{std::move(what), kind, Clock::now()});
  return Scope(this, id);
}

void Watchdog::setWorld(int worldSize, std::unique_ptr<PeerMonitor> peers) {
  clockid_t clock;
  const bool haveClock = pthread_getcpuclockid(pthread_self(), &clock) == 0;
  {
    std::lock_guard<std::mutex> peersLock(peersMutex_);
    peers_ = std::move(peers);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  worldSize_ = worldSize;
  if (haveClock) computeClock_ = clock;
  computeCpuSeen_ = -1;
  lastProgress_ = Clock::now();
  // Heartbeats flow from now on, scopes or not: a rank that computes outside any scope must
  // not look silent to the others.
  if (worldSize_ > 1) ensureThread();
}

void Watchdog::dropPeers() {
  std::lock_guard<std::mutex> peersLock(peersMutex_);
  peers_.reset();
}

void Watchdog::setCpuTimeIsProgress(bool counts) {
  std::lock_guard<std::mutex> lock(mutex_);
  cpuTimeIsProgress_ = counts;
}

void Watchdog::setStopSource(std::function<int()> source) {
  std::lock_guard<std::mutex> lock(mutex_);
  stopSource_ = std::move(source);
}

void Watchdog::ensureThread() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    // At least every second, and eight times per timeout for short (test) timeouts.
    const double period = std::min(1.0, timeoutSeconds_ / 8.0);
    wake_.wait_for(lock, std::chrono::duration<double>(period));
    if (stopping_) break;
    check(lock);
  }
}

bool Watchdog::sampleCpuProgress() {
  if (!cpuTimeIsProgress_ || !computeClock_) return false;
  timespec ts{};
  if (clock_gettime(*computeClock_, &ts) != 0) return false;  // the thread has ended
  const double cpu = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  const Clock::time_point now = Clock::now();
  const double wall = seconds(now - computeSampled_);
  const bool busy = computeCpuSeen_ >= 0 && cpu - computeCpuSeen_ >= kBusyCpuShare * wall;
  computeCpuSeen_ = cpu;
  computeSampled_ = now;
  return busy;
}

void Watchdog::check(std::unique_lock<std::mutex>& lock) {
  const std::int64_t marks = progress_.load(std::memory_order_relaxed);
  const bool busy = sampleCpuProgress();
  if (marks != progressSeen_ || busy) {
    progressSeen_ = marks;
    lastProgress_ = Clock::now();
    ++reported_;
  }
  View view;
  view.timeout = timeoutSeconds_;
  view.worldSize = worldSize_;
  view.rank = log::rank();
  PeerMonitor::Report mine;
  mine.progress = reported_;
  mine.stop = stopSource_ ? stopSource_() : 0;
  // Ids grow with the time of opening, so the map is oldest first.
  const std::map<std::uint64_t, Open> open = open_;
  for (const auto& [id, entry] : open) {
    if (entry.kind == Kind::kWait && !mine.waiting) {
      mine.waiting = true;
      mine.doing = entry.what;
    }
    if (mine.doing.empty()) mine.doing = entry.what;
  }
  lock.unlock();
  {
    std::lock_guard<std::mutex> peersLock(peersMutex_);
    if (peers_) {
      peers_->exchange(mine);
      view.peers = peers_->peers();
      view.heartbeats = true;
      for (const PeerMonitor::Peer& peer : view.peers) {
        int none = 0;
        if (peer.last.stop != 0) peerStop_.compare_exchange_strong(none, peer.last.stop);
      }
    }
  }
  lock.lock();
  const Clock::time_point now = Clock::now();
  view.stalledSeconds = seconds(now - lastProgress_);
  std::uint64_t oldestWait = 0;
  for (const auto& [id, entry] : open) {
    if (open_.count(id) == 0) continue;  // closed while the heartbeats went out
    view.open.push_back({entry.what, entry.kind, seconds(now - entry.start)});
    if (entry.kind == Kind::kWait && oldestWait == 0) oldestWait = id;
  }
  const Verdict verdict = judge(view);
  if (verdict.fire) {
    lock.unlock();
    fire(verdict.message);
  }
  if (!verdict.message.empty() && oldestWait != notedScope_) {
    notedScope_ = oldestWait;
    log::get("dist").info("watchdog: {}", verdict.message);
  }
}

Watchdog::Verdict Watchdog::judge(const View& view) {
  Verdict verdict;
  if (view.worldSize <= 1) return verdict;  // nobody to wait for: slow is not hung
  const double limit = view.timeout;
  const OpenScope* oldWait = nullptr;  // the oldest collective waited in for longer than limit
  const OpenScope* oldAny = nullptr;
  for (const auto& scope : view.open) {
    if (scope.ageSeconds <= limit) continue;
    if (!oldAny) oldAny = &scope;
    if (!oldWait && scope.kind == Kind::kWait) oldWait = &scope;
  }
  const int self = view.rank;
  const bool selfStalled = view.stalledSeconds > limit;
  if (!view.heartbeats) {
    if (!oldAny || !selfStalled) return verdict;
    verdict.fire = true;
    verdict.message = fmt::format(
        "watchdog: rank {} has waited {:.1f} s for {} (dist.timeout_s = {:g}) without progress. "
        "A peer rank is probably dead or hung (no heartbeats: this MPI has no "
        "MPI_THREAD_MULTIPLE, so a busy peer cannot be told from a hung one); ending this rank "
        "so that no rank waits forever. {}",
        self, oldAny->ageSeconds, oldAny->what, limit, kRemedy);
    return verdict;
  }
  if (oldWait) {
    for (const auto& peer : view.peers) {
      if (peer.silentSeconds <= limit) continue;
      verdict.fire = true;
      verdict.message = fmt::format(
          "watchdog: rank {} has waited {:.1f} s for {} (dist.timeout_s = {:g}), and rank {} "
          "has not been heard from for {:.1f} s{}: it is dead, stopped, or the network to it "
          "is down. Ending this rank so that no rank waits forever. {}",
          self, oldWait->ageSeconds, oldWait->what, limit, peer.rank, peer.silentSeconds,
          peer.heard ? " (its last heartbeat: " + describePeer(peer) + ")" : "", kRemedy);
      return verdict;
    }
  }
  bool allStalled = selfStalled;
  const PeerMonitor::Peer* waitingPeer = nullptr;
  for (const auto& peer : view.peers) {
    allStalled = allStalled && peer.stalledSeconds > limit;
    if (!waitingPeer && peer.heard && peer.last.waiting) waitingPeer = &peer;
  }
  if (allStalled && oldWait) {
    verdict.fire = true;
    verdict.message = fmt::format(
        "watchdog: rank {} has waited {:.1f} s for {} (dist.timeout_s = {:g}), and no rank has "
        "made progress for {:.1f} s. Not arrived in it: {}. A rank is hung; ending this rank "
        "so that no rank waits forever. {}",
        self, oldWait->ageSeconds, oldWait->what, limit, view.stalledSeconds,
        notArrived(view.peers, oldWait->what), kRemedy);
    return verdict;
  }
  if (allStalled && (oldAny || waitingPeer)) {
    const std::string where = oldAny ? "in " + oldAny->what : "outside any collective";
    verdict.fire = true;
    verdict.message = fmt::format(
        "watchdog: rank {} has made no progress for {:.1f} s {} (dist.timeout_s = {:g}), "
        "and neither has any other rank{}. This rank is hung; ending it so that no rank waits "
        "forever. {}",
        self, view.stalledSeconds, where, limit,
        waitingPeer ? fmt::format(": rank {} waits for it in '{}'", waitingPeer->rank,
                                  waitingPeer->last.doing)
                    : "",
        kRemedy);
    return verdict;
  }
  if (oldWait) {
    // Busy: progress within half the timeout (a peer near the limit is about to be judged).
    std::string busy;
    for (const auto& peer : view.peers) {
      if (peer.stalledSeconds <= limit / 2) busy += (busy.empty() ? "" : ", ") + describePeer(peer);
    }
    if (busy.empty()) return verdict;
    verdict.message = fmt::format(
        "rank {} has waited {:.1f} s for {} (longer than dist.timeout_s = {:g}), but the job "
        "is making progress: {}: still waiting (a busy rank is not a hung one)",
        self, oldWait->ageSeconds, oldWait->what, limit, busy);
  }
  return verdict;
}

void Watchdog::fire(const std::string& message) {
  log::get("dist").critical("{}", message);
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
