#pragma once
// Watchdog: no rank waits forever. Every collective and every training step runs inside a
// Watchdog::Scope. A background thread checks the open scopes; one older than the timeout
// (dist.timeout_s) is logged with the rank, the operation, and how long it waited, the abort
// hooks run (NCCL communicators are aborted first; a hook that itself hangs is given up on
// after kAbortHookSeconds), and the process ends with exit code 1.
// Every rank runs its own watchdog, so each rank stuck in a collective ends itself; under
// mpirun the first non-zero exit also ends the others.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mb::dist {

class Watchdog {
 public:
  // How long the abort hooks (ncclCommAbort) may take before the process exits regardless.
  static constexpr double kAbortHookSeconds = 10.0;

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
  Scope track(std::string what);
  // Ends the process now, the way a timeout does (log, abort hooks, exit code 1), for failures
  // found off the main thread that no exception can carry, e.g. an asynchronous NCCL error.
  [[noreturn]] void terminate(const std::string& reason);

 private:
  Watchdog() = default;
  void ensureThread();
  void run();
  [[noreturn]] void fire(const std::string& what, double waited);
  [[noreturn]] void runAbortHooksAndExit();

  using Clock = std::chrono::steady_clock;
  // The other open scopes, for the timeout message; callers hold mutex_.
  std::string describeOthers(std::uint64_t expired, Clock::time_point now) const;
  struct Open {
    std::string what;
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
};

}  // namespace mb::dist
