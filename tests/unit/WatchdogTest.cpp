// The watchdog's decision (Note [Watchdog heartbeat]): when a rank that waits ends the job, and
// when it keeps waiting for a busy peer. Driven through Watchdog::judge with made-up views; the
// multi-rank runs that exercise it end to end are in tests/dist/test_watchdog_hang.py.
#include <string>

#include <gtest/gtest.h>

#include "dist/Watchdog.h"

namespace mb::dist {
namespace {

constexpr double kTimeout = 10;

Watchdog::View twoRanks() {
  Watchdog::View view;
  view.timeout = kTimeout;
  view.worldSize = 2;
  view.rank = 0;
  view.heartbeats = true;
  PeerMonitor::Peer peer;
  peer.rank = 1;
  peer.heard = true;
  view.peers.push_back(peer);
  return view;
}

Watchdog::OpenScope waitingFor(const std::string& what, double age) {
  return {what, Watchdog::Kind::kWait, age};
}

PeerMonitor::Report doing(const std::string& what, bool waiting) {
  PeerMonitor::Report report;
  report.doing = what;
  report.waiting = waiting;
  return report;
}

TEST(Watchdog, ASingleRankNeverEndsItselfHoweverLongItsStep) {
  Watchdog::View view;
  view.timeout = kTimeout;
  view.worldSize = 1;
  view.stalledSeconds = 10 * kTimeout;
  view.open.push_back({"training step 1", Watchdog::Kind::kWork, 10 * kTimeout});
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  EXPECT_FALSE(verdict.fire) << verdict.message;
}

TEST(Watchdog, ABusyPeerIsWaitedForAndNamed) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = 3 * kTimeout;  // this rank only waits
  view.open.push_back(waitingFor("grad bucket 1/2 (1 MiB, float)", 3 * kTimeout));
  view.peers[0].stalledSeconds = 0.5;  // the peer computes
  view.peers[0].last = doing("training step 1", false);
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  EXPECT_FALSE(verdict.fire) << verdict.message;
  EXPECT_NE(verdict.message.find("still waiting"), std::string::npos) << verdict.message;
  EXPECT_NE(verdict.message.find("rank 1 (is in 'training step 1'"), std::string::npos)
      << verdict.message;
}

TEST(Watchdog, NoNoteBeforeTheTimeout) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = 0.5 * kTimeout;
  view.open.push_back(waitingFor("stop flag", 0.5 * kTimeout));
  view.peers[0].stalledSeconds = 0.5 * kTimeout;
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  EXPECT_FALSE(verdict.fire);
  EXPECT_EQ(verdict.message, "");
}

TEST(Watchdog, NoProgressAnywhereEndsTheWaitingRankNamingTheCollectiveAndWhoIsMissing) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = kTimeout + 1;
  view.open.push_back(waitingFor("grad bucket 4/5 (2 MiB, float)", kTimeout + 1));
  view.peers[0].stalledSeconds = kTimeout + 2;
  view.peers[0].last = doing("training step 3", false);
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  ASSERT_TRUE(verdict.fire);
  EXPECT_NE(verdict.message.find("watchdog: rank 0 has waited 11.0 s for grad bucket 4/5 (2 MiB, "
                                 "float) (dist.timeout_s = 10)"),
            std::string::npos)
      << verdict.message;
  EXPECT_NE(verdict.message.find("Not arrived in it: rank 1 (is in 'training step 3'"),
            std::string::npos)
      << verdict.message;
}

TEST(Watchdog, APeerInTheSameCollectiveHasArrived) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = kTimeout + 1;
  view.open.push_back(waitingFor("eval metrics", kTimeout + 1));
  view.peers[0].stalledSeconds = kTimeout + 1;
  view.peers[0].last = doing("eval metrics", true);
  PeerMonitor::Peer third = view.peers[0];
  third.rank = 2;
  third.last = doing("eval sample counts", true);
  view.peers.push_back(third);
  view.worldSize = 3;
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  ASSERT_TRUE(verdict.fire);
  EXPECT_EQ(verdict.message.find("rank 1 ("), std::string::npos) << verdict.message;
  EXPECT_NE(verdict.message.find("rank 2 (waits in 'eval sample counts'"), std::string::npos)
      << verdict.message;
}

TEST(Watchdog, ASilentPeerEndsAWaitingRankEvenIfThisRankIsBusy) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = 0;  // e.g. a spinning MPI call on this rank's compute thread
  view.open.push_back(waitingFor("stop flag", kTimeout + 1));
  view.peers[0].silentSeconds = kTimeout + 3;
  view.peers[0].stalledSeconds = kTimeout + 3;
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  ASSERT_TRUE(verdict.fire);
  EXPECT_NE(verdict.message.find("rank 1 has not been heard from for 13.0 s"), std::string::npos)
      << verdict.message;
}

TEST(Watchdog, ASilentPeerDoesNotEndARankThatIsNotWaiting) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = 0;
  view.open.push_back({"training step 2", Watchdog::Kind::kWork, kTimeout + 1});
  view.peers[0].silentSeconds = kTimeout + 3;
  view.peers[0].stalledSeconds = kTimeout + 3;
  EXPECT_FALSE(Watchdog::judge(view).fire);  // it will wait for the peer soon, and end then
}

TEST(Watchdog, AStuckRankEndsItselfWhileItsPeerWaitsForIt) {
  // Rank 1 stopped before a collective: it holds no waiting scope, maybe none at all.
  Watchdog::View view = twoRanks();
  view.rank = 1;
  view.peers[0].rank = 0;
  view.stalledSeconds = kTimeout + 1;
  view.peers[0].stalledSeconds = kTimeout + 1;
  view.peers[0].last = doing("stop flag (4 B, int)", true);
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  ASSERT_TRUE(verdict.fire);
  EXPECT_NE(verdict.message.find("rank 1 has made no progress for 11.0 s outside any collective"),
            std::string::npos)
      << verdict.message;
  EXPECT_NE(verdict.message.find("rank 0 waits for it in 'stop flag (4 B, int)'"),
            std::string::npos)
      << verdict.message;
}

TEST(Watchdog, IdleRanksWithNothingOpenAreNotAHang) {
  Watchdog::View view = twoRanks();
  view.stalledSeconds = 5 * kTimeout;
  view.peers[0].stalledSeconds = 5 * kTimeout;
  view.peers[0].last = doing("", false);
  EXPECT_FALSE(Watchdog::judge(view).fire);
}

TEST(Watchdog, WithoutHeartbeatsOwnProgressDecides) {
  Watchdog::View view = twoRanks();
  view.heartbeats = false;
  view.peers.clear();
  view.open.push_back(waitingFor("grad bucket 1/1", kTimeout + 1));
  view.stalledSeconds = 1;  // still computing (e.g. a backward pass while a bucket waits)
  EXPECT_FALSE(Watchdog::judge(view).fire);
  view.stalledSeconds = kTimeout + 1;
  const Watchdog::Verdict verdict = Watchdog::judge(view);
  ASSERT_TRUE(verdict.fire);
  EXPECT_NE(verdict.message.find("no heartbeats"), std::string::npos) << verdict.message;
}

}  // namespace
}  // namespace mb::dist
