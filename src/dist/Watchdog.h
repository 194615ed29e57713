#pragma once
// Watchdog: no rank waits forever, and no rank is ended for being slow (Note [Watchdog
// heartbeat] in Watchdog.cpp). Every collective runs inside a waiting scope and every training
// step inside a working scope. A background thread checks them against dist.timeout_s, but it
// times *waiting without progress*, not work:
//  - a rank makes progress when it completes a collective, when its code marks one (a
//    micro-batch, an evaluation batch) or, on the CPU, when its compute thread burns CPU time;
//  - the ranks tell each other their progress with heartbeats (PeerMonitor, MPI: Heartbeat.h).
// A rank ends the job (log, abort hooks such as ncclCommAbort, exit code 1) when it has waited
// longer than the timeout and either a peer has gone silent (dead, stopped, link down) or no
// rank has made progress (a hang). A busy peer is not a dead one; on a single rank nothing
// waits, so a long step never ends the run.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mb::dist {

// What this rank tells its peers, and what it has heard from them (Note [Watchdog heartbeat]).
class PeerMonitor {
 public:
  struct Report {
    std::int64_t progress = 0;  // this rank's progress count (only changes matter)
    bool waiting = false;       // in a collective
    std::string doing;          // the collective waited for, else the work ("training step 3")
    int stop = 0;               // a stop signal this rank has seen (Note [Stopping within seconds])
  };
  struct Peer {
    int rank = 0;
    bool heard = false;         // at least one heartbeat arrived
    double silentSeconds = 0;   // since the last heartbeat (or since start, if none)
    double stalledSeconds = 0;  // since its progress count last changed
    Report last;                // its latest heartbeat
  };
  virtual ~PeerMonitor() = default;
  // Sends `mine` to every peer and takes in what arrived. Called by the watchdog thread only.
  virtual void exchange(const Report& mine) = 0;
  virtual std::vector<Peer> peers() const = 0;
};

class Watchdog {
 public:
  // How long the abort hooks (ncclCommAbort) may take before the process exits regardless.
  static constexpr double kAbortHookSeconds = 10.0;
  // On the CPU, a compute thread that burned at least this share of one core since the last
  // check is computing (Note [Watchdog heartbeat]).
  static constexpr double kBusyCpuShare = 0.1;

  enum class Kind {
    kWait,  // a collective: waiting for the other ranks
    kWork,  // local work that contains waits (a training step)
  };

  class Scope {
   public:
    Scope() = default;
    Scope(Watchdog* owner, std::uint64_t id) : owner_(owner), id_(id) {}
    Scope(Scope&& other) noexcept : owner_(other.owner_), id_(other.id_) { other.owner_ = nullptr; }
    Scope& operator=(Scope&& other) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { close(); }
    void close();

   private:
    Watchdog* owner_ = nullptr;
    std::uint64_t id_ = 0;
  };

  // The process-wide watchdog (collectives on any communicator and the trainer share it).
  static Watchdog& instance();

  ~Watchdog();
  void setTimeout(double seconds);
  double timeout() const;
  // Runs before the process exits on a timeout, e.g. ncclCommAbort.
  void addAbortHook(std::function<void()> hook);
  // Times `what` ("allreduce grad bucket 2 (1.5 MiB)") until the returned scope closes.
  Scope track(std::string what, Kind kind = Kind::kWait);
  // A unit of local work is done (a micro-batch, an evaluation batch). Cheap: an atomic add.
  void progress() noexcept { progress_.fetch_add(1, std::memory_order_relaxed); }

  // The job's ranks: `worldSize` and, for more than one, how to hear from them (nullptr: no
  // heartbeats, e.g. MPI without MPI_THREAD_MULTIPLE; then a rank ends itself after the timeout
  // without progress of its own). Called on the thread that computes (its CPU time is watched).
  void setWorld(int worldSize, std::unique_ptr<PeerMonitor> peers);
  // Stops the heartbeats (before MPI_Finalize); the watchdog keeps timing scopes.
  void dropPeers();
  // Whether the compute thread's CPU time counts as progress: true for CPU training, false on
  // CUDA, where the host thread spins while it waits for the GPU.
  void setCpuTimeIsProgress(bool counts);

  // Stop requests travel with the heartbeats (Note [Stopping within seconds] in train/Signals.cpp):
  // `source` is read on the watchdog thread at every check (it must be cheap and thread-safe),
  // and its value goes to every peer. peerStop() is the first nonzero value a peer sent: an
  // atomic load, for loops that must leave soon after any rank is asked to stop.
  void setStopSource(std::function<int()> source);
  int peerStop() const noexcept { return peerStop_.load(std::memory_order_relaxed); }

  // Ends the process now, the way a timeout does (log, abort hooks, exit code 1), for failures
  // found off the main thread that no exception can carry, e.g. an asynchronous NCCL error.
  [[noreturn]] void terminate(const std::string& reason);

  // --- the decision, exposed for tests (Note [Watchdog heartbeat]) ---
  struct OpenScope {
    std::string what;
    Kind kind = Kind::kWait;
    double ageSeconds = 0;
  };
  struct View {
    double timeout = 300;
    int worldSize = 1;
    int rank = 0;                 // this rank, for the messages
    bool heartbeats = false;      // peers holds what the other ranks reported
    double stalledSeconds = 0;    // since this rank last made progress
    std::vector<OpenScope> open;  // oldest first
    std::vector<PeerMonitor::Peer> peers;
  };
  struct Verdict {
    bool fire = false;
    std::string message;  // fire: the reason; else a note for a long wait on busy peers ("")
  };
  static Verdict judge(const View& view);

 private:
  Watchdog() = default;
  void ensureThread();
  void run();
  // One check: samples progress, exchanges heartbeats, and fires if judge() says so.
  void check(std::unique_lock<std::mutex>& lock);
  bool sampleCpuProgress();  // callers hold mutex_
  [[noreturn]] void fire(const std::string& message);
  [[noreturn]] void runAbortHooksAndExit();

  using Clock = std::chrono::steady_clock;
  struct Open {
    std::string what;
    Kind kind;
    Clock::time_point start;
  };
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::uint64_t, Open> open_;
  std::vector<std::function<void()>> abortHooks_;
  std::uint64_t nextId_ = 1;
  double timeoutSeconds_ = 300.0;
  bool stopping_ = false;
  std::thread thread_;

  // Progress (Note [Watchdog heartbeat]).
  std::atomic<std::int64_t> progress_{0};  // marks and finished collectives
  std::int64_t progressSeen_ = -1;         // progress_ at the last check
  Clock::time_point lastProgress_ = Clock::now();
  std::optional<clockid_t> computeClock_;  // the compute thread's CPU clock
  double computeCpuSeen_ = -1;
  Clock::time_point computeSampled_ = Clock::now();
  bool cpuTimeIsProgress_ = true;
  std::int64_t reported_ = 0;  // this rank's progress count as its peers see it

  int worldSize_ = 1;
  // Exchanged outside mutex_ (MPI calls), under peersMutex_; dropPeers() takes both.
  std::mutex peersMutex_;
  std::unique_ptr<PeerMonitor> peers_;
  std::uint64_t notedScope_ = 0;     // the wait scope whose "busy peers" note was logged
  std::function<int()> stopSource_;  // under mutex_
  std::atomic<int> peerStop_{0};
};

}  // namespace mb::dist
