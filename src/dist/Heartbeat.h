#pragma once
// MpiHeartbeat: the watchdog's heartbeats between ranks over MPI (Note [Watchdog heartbeat] in
// Watchdog.cpp). Each rank's watchdog thread sends a small record (its progress count, whether
// it waits in a collective and in which) to every peer with MPI_Isend, and takes in theirs from
// pre-posted MPI_Irecv, all on a duplicate of the world communicator, so heartbeats never match
// a collective's traffic. Nothing blocks: a peer that is dead or cut off simply goes silent.
// Needs MPI_THREAD_MULTIPLE (the watchdog thread calls MPI beside the communicators' workers).
#include <chrono>
#include <cstdint>
#include <vector>

#include <mpi.h>

#include "dist/Watchdog.h"

namespace mb::dist {

class MpiHeartbeat final : public PeerMonitor {
 public:
  // Collective over `world` (it is duplicated). Then only the watchdog thread may call it.
  explicit MpiHeartbeat(MPI_Comm world);
  // Cancels the pending receives and frees the communicator; call before MPI_Finalize.
  ~MpiHeartbeat() override;
  MpiHeartbeat(const MpiHeartbeat&) = delete;
  MpiHeartbeat& operator=(const MpiHeartbeat&) = delete;

  void exchange(const Report& mine) override;
  std::vector<Peer> peers() const override;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kDoingBytes = 200;
  struct Message {
    std::int64_t progress = 0;
    std::int32_t waiting = 0;
    std::int32_t stop = 0;
    char doing[kDoingBytes] = {};
  };
  struct PeerLine {
    MPI_Request send = MPI_REQUEST_NULL;
    MPI_Request receive = MPI_REQUEST_NULL;
    Message out;          // must not change while `send` is pending
    Message in;           // filled by `receive`
    bool broken = false;  // MPI reported an error on this line: no more traffic on it
    bool heard = false;
    Clock::time_point lastHeard;
    Clock::time_point lastChange;
    Report last;
  };
  void receiveFrom(int peer, PeerLine& line);
  void sendTo(int peer, PeerLine& line, const Message& message);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  Clock::time_point lastSent_;
  double sendEverySeconds_ = 0;  // grows with the world, so the traffic stays small
  std::vector<PeerLine> lines_;  // [rank]; this rank's own entry is unused
};

}  // namespace mb::dist
