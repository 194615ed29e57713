#include "dist/Heartbeat.h"

#include <algorithm>
#include <cstring>

#include "dist/MpiCheck.h"

namespace mb::dist {
namespace {

constexpr int kTag = 7;

double secondsBetween(std::chrono::steady_clock::time_point from,
                      std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

MpiHeartbeat::MpiHeartbeat(MPI_Comm world) {
  MB_MPI_CHECK(MPI_Comm_dup(world, &comm_));
  // A dead peer must come back as an error code here, not abort this process.
  MB_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  int size = 1;
  MB_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MB_MPI_CHECK(MPI_Comm_size(comm_, &size));
  // All-to-all heartbeats are size^2 small messages per round: every second up to 64 ranks,
  // then slower (2 s at 128 ranks), about 4,000 messages a second in the whole job.
  sendEverySeconds_ = std::max(0.0, (static_cast<double>(size) - 64.0) / 64.0);
  const Clock::time_point started = Clock::now();
  lines_.resize(static_cast<std::size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank_) continue;
    PeerLine& line = lines_[static_cast<std::size_t>(peer)];
    line.lastHeard = line.lastChange = started;
    MB_MPI_CHECK(MPI_Irecv(&line.in, sizeof(Message), MPI_BYTE, peer, kTag, comm_, &line.receive));
  }
}

MpiHeartbeat::~MpiHeartbeat() {
  for (PeerLine& line : lines_) {
    if (line.receive != MPI_REQUEST_NULL) {
      MPI_Cancel(&line.receive);
      MPI_Wait(&line.receive, MPI_STATUS_IGNORE);
    }
    // A pending send (a peer that stopped receiving) is let go; MPI delivers or drops it.
    if (line.send != MPI_REQUEST_NULL) MPI_Request_free(&line.send);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiHeartbeat::receiveFrom(int peer, PeerLine& line) {
  while (!line.broken && line.receive != MPI_REQUEST_NULL) {
    int arrived = 0;
    if (MPI_Test(&line.receive, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      line.broken = true;  // the peer is gone: it stays silent from now on
      return;
    }
    if (!arrived) return;
    const Clock::time_point now = Clock::now();
    if (!line.heard || line.in.progress != line.last.progress) line.lastChange = now;
    line.heard = true;
    line.lastHeard = now;
    line.last.progress = line.in.progress;
    line.last.waiting = line.in.waiting != 0;
    line.last.stop = line.in.stop;
    line.last.doing.assign(line.in.doing, strnlen(line.in.doing, kDoingBytes));
    if (MPI_Irecv(&line.in, sizeof(Message), MPI_BYTE, peer, kTag, comm_, &line.receive) !=
        MPI_SUCCESS)
      line.broken = true;
  }
}

void MpiHeartbeat::sendTo(int peer, PeerLine& line, const Message& message) {
  if (line.broken) return;
  if (line.send != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&line.send, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      line.broken = true;
      return;
    }
    if (!done) return;  // the peer has not taken the last one: do not pile up more
  }
  line.out = message;
  if (MPI_Isend(&line.out, sizeof(Message), MPI_BYTE, peer, kTag, comm_, &line.send) != MPI_SUCCESS)
    line.broken = true;
}

void MpiHeartbeat::exchange(const Report& mine) {
  for (int peer = 0; peer < static_cast<int>(lines_.size()); ++peer) {
    if (peer != rank_) receiveFrom(peer, lines_[static_cast<std::size_t>(peer)]);
  }
  const Clock::time_point now = Clock::now();
  if (secondsBetween(lastSent_, now) < sendEverySeconds_) return;
  lastSent_ = now;
  Message message;
  message.progress = mine.progress;
  message.waiting = mine.waiting ? 1 : 0;
  message.stop = mine.stop;
  std::strncpy(message.doing, mine.doing.c_str(), kDoingBytes - 1);
  for (int peer = 0; peer < static_cast<int>(lines_.size()); ++peer) {
    if (peer != rank_) sendTo(peer, lines_[static_cast<std::size_t>(peer)], message);
  }
}

std::vector<PeerMonitor::Peer> MpiHeartbeat::peers() const {
  const Clock::time_point now = Clock::now();
  std::vector<Peer> out;
  for (int peer = 0; peer < static_cast<int>(lines_.size()); ++peer) {
    if (peer == rank_) continue;
    const PeerLine& line = lines_[static_cast<std::size_t>(peer)];
    Peer view;
    view.rank = peer;
    view.heard = line.heard;
    view.silentSeconds = secondsBetween(line.lastHeard, now);
    view.stalledSeconds = secondsBetween(line.lastChange, now);
    view.last = line.last;
    out.push_back(view);
  }
  return out;
}

}  // namespace mb::dist
