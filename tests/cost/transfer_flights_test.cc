// The transfers in flight on one device and the ports they share, in
// closed form: equal shares on a port, shares weighted by a segment's own
// flows, segments changing ports, and what later launches can and cannot
// change.
#include "cost/transfer_flights.h"

#include <gtest/gtest.h>

namespace loom::cost {
namespace {

constexpr PortMask kNvlink = 0b0011;  // egress and ingress
constexpr PortMask kNic = 0b1100;
constexpr int kPermute = 0, kAllGather = 1, kAllReduce = 2;

std::vector<TransferSegment> On(PortMask ports, double seconds, double flows = 1) {
  return {TransferSegment{seconds, ports, flows}};
}

TEST(TransferFlights, TwoTransfersOnOnePortShareItEqually) {
  // The header's example: 2 and 2 seconds, the second launched at 1.
  TransferFlights flights;
  const auto first = flights.Launch(0, 0, kPermute, {}, On(kNvlink, 2));
  EXPECT_DOUBLE_EQ(flights.End(first), 2);  // alone so far
  const auto second = flights.Launch(1, 1, kAllGather, {}, On(kNvlink, 2));
  EXPECT_DOUBLE_EQ(flights.End(first), 3);
  EXPECT_DOUBLE_EQ(flights.End(second), 4);
}

TEST(TransferFlights, TransfersOnDifferentPortsOrOnNoneDoNotSlowEachOther) {
  TransferFlights flights;
  const auto nvlink = flights.Launch(0, 0, kPermute, {}, On(kNvlink, 2));
  const auto nic = flights.Launch(0, 0, kAllReduce, {}, On(kNic, 3));
  const auto unported = flights.Launch(0, 0, kAllGather, {}, On(0, 1));
  EXPECT_DOUBLE_EQ(flights.End(nvlink), 2);
  EXPECT_DOUBLE_EQ(flights.End(nic), 3);
  EXPECT_DOUBLE_EQ(flights.End(unported), 1);
}

TEST(TransferFlights, ASegmentOfManyFlowsHoldsAsManyShares) {
  // A phase of 4 flows on the port (its 5 s already pay for them) beside a
  // permute of one: 4/5 and 1/5 of the port while both run. The permute's
  // 1 s takes 5 s; the phase has 1 s left then and runs it alone.
  TransferFlights flights;
  const auto phase = flights.Launch(0, 0, kAllReduce, {}, On(kNvlink, 5, 4));
  const auto permute = flights.Launch(0, 0, kPermute, {}, On(kNvlink, 1));
  EXPECT_DOUBLE_EQ(flights.End(permute), 5);
  EXPECT_DOUBLE_EQ(flights.End(phase), 6);
}

TEST(TransferFlights, ATransferSharesOnlyWhileItsSegmentIsOnThePort) {
  // An all-reduce 1 s across nodes, then 1 s over NVLink; a permute of 2 s
  // over NVLink from 0. The permute runs alone until 1, then both share
  // NVLink: the permute's last 1 s and the all-reduce's 1 s end at 3.
  TransferFlights flights;
  std::vector<TransferSegment> all_reduce = {{1, kNic, 1}, {1, kNvlink, 1}};
  const auto reduce = flights.Launch(0, 0, kAllReduce, {}, all_reduce);
  const auto permute = flights.Launch(0, 0, kPermute, {}, On(kNvlink, 2));
  EXPECT_DOUBLE_EQ(flights.End(permute), 3);
  EXPECT_DOUBLE_EQ(flights.End(reduce), 3);
}

TEST(TransferFlights, ALaterLaunchDelaysOnlyWhatStillRunsWhenItBegins) {
  TransferFlights flights;
  const auto early = flights.Launch(0, 0, kPermute, {}, On(kNvlink, 1));
  const auto late = flights.Launch(0, 0, kAllGather, {}, On(kNvlink, 4));
  EXPECT_DOUBLE_EQ(flights.End(early), 2);
  EXPECT_DOUBLE_EQ(flights.End(late), 5);
  // Launched at 3, after `early` ended, which it cannot change: `late` has
  // 2 s left at 3, and it and the newcomer's 2 s run at half speed each.
  const auto third = flights.Launch(3, 3, kAllReduce, {}, On(kNvlink, 2));
  EXPECT_DOUBLE_EQ(flights.End(early), 2);
  EXPECT_DOUBLE_EQ(flights.End(late), 7);
  EXPECT_DOUBLE_EQ(flights.End(third), 7);
}

TEST(TransferFlights, QueuedTransfersBeginWhenTheirKindsStreamLetsThem) {
  // The same kind on links that are not disjoint: the second may begin
  // only when the first has ended, which sharing with a third moved later.
  TransferFlights flights;
  const auto first = flights.Launch(0, 0, kPermute, {1, 2}, On(kNvlink, 2));
  flights.Launch(0, 0, kAllGather, {}, On(kNvlink, 2));
  EXPECT_DOUBLE_EQ(flights.LatestEndOfKind(kPermute, {2, 3}, 0), flights.End(first));
  EXPECT_DOUBLE_EQ(flights.End(first), 4);
  EXPECT_DOUBLE_EQ(flights.LatestEndOfKind(kPermute, {5}, 0), 0);  // disjoint links
  EXPECT_DOUBLE_EQ(flights.LatestEndOfKind(kPermute, {}, 1), 4);   // unknown links
  const auto second = flights.Launch(0, 4, kPermute, {2, 3}, On(kNvlink, 1));
  EXPECT_DOUBLE_EQ(flights.End(second), 5);
  const auto backlog = flights.Backlog(1);
  EXPECT_DOUBLE_EQ(backlog[kPermute], 4);
  EXPECT_DOUBLE_EQ(backlog[kAllGather], 3);
  EXPECT_DOUBLE_EQ(backlog[kAllReduce], 0);
}

TEST(TransferFlights, DelayMovesWhatIsInFlightAndKeepsWhatFinished) {
  TransferFlights flights;
  const auto done = flights.Launch(0, 0, kPermute, {}, On(kNvlink, 1));
  const auto running = flights.Launch(0, 0, kAllGather, {}, On(kNic, 4));
  flights.Delay(2, 10);
  EXPECT_DOUBLE_EQ(flights.End(done), 1);
  EXPECT_DOUBLE_EQ(flights.End(running), 14);
  // A released transfer that has finished is forgotten: its end reads as
  // the state's clock.
  flights.Release(done);
  flights.Launch(13, 13, kPermute, {}, On(kNvlink, 1));
  EXPECT_DOUBLE_EQ(flights.End(running), 14);
}

}  // namespace
}  // namespace loom::cost
