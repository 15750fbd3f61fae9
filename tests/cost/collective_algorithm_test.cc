// The one description of each collective algorithm (phases: lines, steps,
// bytes per message, links) on tiny topologies, in closed form, and the
// routes both the cost model and the simulator take.
#include "cost/collective_algorithm.h"

#include <gtest/gtest.h>

namespace loom::cost {
namespace {

using Kind = CollectivePhase::Kind;
using Lines = std::vector<std::vector<int64_t>>;

constexpr double kBw = 1e9;
constexpr double kAlpha = 1e-6;
constexpr double kB = 4e6;  // the gathered bytes

ComputeSpec Compute() {
  ComputeSpec spec;
  spec.peak_flops = {{"f32", 1e12}};
  spec.memory_bytes_per_second = 1e12;
  spec.memory_bytes = 1e9;
  return spec;
}

Target Torus(std::vector<int64_t> dims, std::vector<bool> wrap,
             std::vector<int64_t> device_order = {}) {
  TorusTopology torus;
  torus.dims = std::move(dims);
  torus.wraparound = std::move(wrap);
  torus.link = {kBw, kAlpha};
  torus.device_order = std::move(device_order);
  return Target("torus", "", Compute(), torus);
}

Target Switched() {
  SwitchedTopology switched;
  switched.devices_per_node = 2;
  switched.nodes = 2;
  switched.intra_node = {10 * kBw, kAlpha};
  switched.inter_node = {kBw, 10 * kAlpha};
  return Target("switched", "", Compute(), switched);
}

Target Bus() {
  BusTopology bus;
  bus.bus = {kBw, kAlpha};
  return Target("bus", "", Compute(), bus);
}

double Total(const std::vector<CollectivePhase>& phases) {
  double seconds = 0;
  for (const CollectivePhase& phase : phases) seconds += phase.Seconds();
  return seconds;
}

TEST(CollectiveAlgorithm, WrappingRingSendsHalfShardsBothWays) {
  const auto phases = AllGatherPhases({0, 1, 2, 3}, kB, Torus({4, 1, 1}, {true, false, false}));
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_EQ(phases[0].kind, Kind::kBidirectionalRing);
  EXPECT_EQ(phases[0].lines, (Lines{{0, 1, 2, 3}}));
  EXPECT_EQ(phases[0].steps, 3);
  EXPECT_EQ(phases[0].hops, 1);
  EXPECT_DOUBLE_EQ(phases[0].bytes, kB / 4 / 2);
  EXPECT_DOUBLE_EQ(Total(phases), 3 * (kAlpha + kB / 8 / kBw));
  EXPECT_EQ(phases[0].name, "bidirectional ring 4 over x");
}

TEST(CollectiveAlgorithm, LineWithoutWraparoundIsABidirectionalChainOfWholeShards) {
  const auto phases = AllGatherPhases({0, 1, 2, 3}, kB, Torus({4, 1, 1}, {false, false, false}));
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_EQ(phases[0].kind, Kind::kLine);
  EXPECT_EQ(phases[0].steps, 3);
  EXPECT_DOUBLE_EQ(phases[0].bytes, kB / 4);
  EXPECT_DOUBLE_EQ(Total(phases), 3 * (kAlpha + kB / 4 / kBw));
}

TEST(CollectiveAlgorithm, BoxRunsOnePhasePerDimensionWithGrowingShards) {
  // x first over lines {0,1} and {2,3} with shards B/4, then y over {0,2}
  // and {1,3} with the blocks gathered so far, B/2.
  const auto phases = AllGatherPhases({0, 1, 2, 3}, kB, Torus({2, 2, 1}, {false, false, false}));
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].dim, 0u);
  EXPECT_EQ(phases[0].lines, (Lines{{0, 1}, {2, 3}}));
  EXPECT_DOUBLE_EQ(phases[0].bytes, kB / 4);
  EXPECT_EQ(phases[1].dim, 1u);
  EXPECT_EQ(phases[1].lines, (Lines{{0, 2}, {1, 3}}));
  EXPECT_DOUBLE_EQ(phases[1].bytes, kB / 2);
  EXPECT_DOUBLE_EQ(Total(phases), (kAlpha + kB / 4 / kBw) + (kAlpha + kB / 2 / kBw));
}

TEST(CollectiveAlgorithm, GroupThatIsNoBoxRingsInGroupOrderOverItsLongestRoute) {
  // {0, 3} on a 2x2 grid: diagonal, two hops each way.
  const auto phases = AllGatherPhases({0, 3}, kB, Torus({2, 2, 1}, {false, false, false}));
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_EQ(phases[0].kind, Kind::kRing);
  EXPECT_TRUE(phases[0].routed);
  EXPECT_EQ(phases[0].hops, 2);
  EXPECT_EQ(phases[0].steps, 1);
  EXPECT_DOUBLE_EQ(Total(phases), 2 * kAlpha + kB / 2 / kBw);
}

TEST(CollectiveAlgorithm, DeviceOrderPlacesTheRing) {
  // Devices 0 and 1 sit at the two ends of a 4-chip line: not neighbours.
  const Target target = Torus({4, 1, 1}, {false, false, false}, {0, 2, 3, 1});
  EXPECT_EQ(TorusHops(target, 0, 1), 3);
  const auto phases = AllGatherPhases({0, 1}, kB, target);
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_EQ(phases[0].hops, 3);
}

TEST(CollectiveAlgorithm, SwitchedGoesAcrossNodesFirstThenInside) {
  // Across nodes: rings of the devices with the same local rank, shards of
  // B / (2 nodes x 2 local); then inside each node, blocks of B / 2.
  const auto phases = AllGatherPhases({0, 1, 2, 3}, kB, Switched());
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].lines, (Lines{{0, 2}, {1, 3}}));
  EXPECT_DOUBLE_EQ(phases[0].bytes, kB / 4);
  EXPECT_DOUBLE_EQ(phases[0].link.bytes_per_second, kBw);
  EXPECT_EQ(phases[1].lines, (Lines{{0, 1}, {2, 3}}));
  EXPECT_DOUBLE_EQ(phases[1].bytes, kB / 2);
  EXPECT_DOUBLE_EQ(phases[1].link.bytes_per_second, 10 * kBw);
  EXPECT_DOUBLE_EQ(Total(phases), (10 * kAlpha + kB / 4 / kBw) + (kAlpha + kB / 2 / (10 * kBw)));
  // One node only: no phase across.
  EXPECT_EQ(AllGatherPhases({2, 3}, kB, Switched()).size(), 1u);
}

TEST(CollectiveAlgorithm, BusSharesEveryStepsMessages) {
  const auto phases = AllGatherPhases({0, 1, 2, 3}, kB, Bus());
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_DOUBLE_EQ(phases[0].sharing, 4);
  EXPECT_EQ(phases[0].steps, 3);
  // (N-1) a + (N-1) B / bw
  EXPECT_DOUBLE_EQ(Total(phases), 3 * kAlpha + 3 * kB / kBw);
}

TEST(CollectiveAlgorithm, GroupsWhoseRoutesCrossShareTheirLinks) {
  // Four pairs {i, i+4} on a ring of 8: none is a box, so each rings in
  // group order over routes of 4 hops (ties go +x), and every +x link
  // carries one message of each of the four groups each step.
  const Target ring = Torus({8, 1, 1}, {true, false, false});
  const std::vector<std::vector<int64_t>> pairs = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  const auto phases = AllGatherPhasesOfGroups(pairs, std::vector<double>(4, kB), ring);
  ASSERT_EQ(phases.size(), 4u);
  for (const auto& group : phases) {
    ASSERT_EQ(group.size(), 1u);
    EXPECT_DOUBLE_EQ(group[0].sharing, 4);
    EXPECT_DOUBLE_EQ(Total(group), 4 * kAlpha + 4 * (kB / 2) / kBw);
  }
  // One pair alone shares with nobody.
  EXPECT_DOUBLE_EQ(AllGatherPhasesOfGroups({{0, 4}}, {kB}, ring)[0][0].sharing, 1);
  // Lines of a box are on links of their own.
  const auto lines =
      AllGatherPhasesOfGroups({{0, 1}, {2, 3}}, {kB, kB}, Torus({2, 2, 1}, {false, false, false}));
  EXPECT_DOUBLE_EQ(lines[0][0].sharing, 1);
  // On a bus every group's messages are on the one medium.
  const auto bus = AllGatherPhasesOfGroups({{0, 1}, {2, 3}}, {kB, kB}, Bus());
  EXPECT_DOUBLE_EQ(bus[0][0].sharing, 4);
}

TEST(CollectiveAlgorithm, PortsAreALinksKindAtTheDevicesItJoins) {
  const Target ring = Torus({4, 1, 1}, {true, false, false});
  EXPECT_EQ(PortsOfRoute(ring, 0, 1), PortMask{0b01});  // +x
  EXPECT_EQ(PortsOfRoute(ring, 0, 3), PortMask{0b10});  // -x, the short way
  const Target grid = Torus({2, 2, 1}, {false, false, false});
  EXPECT_EQ(PortsOfRoute(grid, 0, 3), PortMask{0b0101});  // +x then +y
  // Switched: the sender's egress and the receiver's ingress, NVLink in a
  // node, NICs across.
  EXPECT_EQ(PortsOfRoute(Switched(), 0, 1), PortMask{0b0011});
  EXPECT_EQ(PortsOfRoute(Switched(), 0, 2), PortMask{0b1100});
  // A bidirectional ring's members use both directions of its dimension; a
  // ring's, its routes to and from its neighbours.
  const auto both = PhasePorts(AllGatherPhases({0, 1, 2, 3}, kB, ring)[0], ring);
  ASSERT_EQ(both.size(), 4u);
  for (const auto& [device, ports] : both) EXPECT_EQ(ports, PortMask{0b11}) << device;
  const auto across = PhasePorts(AllGatherPhases({0, 1, 2, 3}, kB, Switched())[0], Switched());
  for (const auto& [device, ports] : across) EXPECT_EQ(ports, PortMask{0b1100}) << device;
}

TEST(CollectiveAlgorithm, NothingToDoForOneDevice) {
  EXPECT_TRUE(AllGatherPhases({2}, kB, Torus({4, 1, 1}, {true, false, false})).empty());
}

TEST(RouteLinks, TorusRoutesAreDimensionOrderedTheShortWayRound) {
  const Target ring = Torus({4, 1, 1}, {true, false, false});
  // Link (position, dim, direction) is (position x 3 + dim) x 2 + (0 for +, 1 for -).
  EXPECT_EQ(RouteLinks(ring, 0, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(RouteLinks(ring, 0, 3), (std::vector<int64_t>{1}));     // -x, wrapping
  EXPECT_EQ(RouteLinks(ring, 0, 2), (std::vector<int64_t>{0, 6}));  // a tie goes +
  EXPECT_EQ(RouteLinks(ring, 3, 0), (std::vector<int64_t>{18}));    // +x from 3 wraps
  const Target grid = Torus({2, 2, 1}, {false, false, false});
  // 0 -> 3: +x from 0 to 1, then +y from 1 to 3.
  EXPECT_EQ(RouteLinks(grid, 0, 3), (std::vector<int64_t>{0, TorusLinkId(grid, 1, 1, +1)}));
  EXPECT_TRUE(RouteLinks(grid, 2, 2).empty());
}

TEST(RouteLinks, SwitchedUsesTheSendersEgressAndTheReceiversIngress) {
  const Target target = Switched();
  EXPECT_EQ(RouteLinks(target, 0, 1), (std::vector<int64_t>{0, 5}));   // NVLink
  EXPECT_EQ(RouteLinks(target, 0, 2), (std::vector<int64_t>{2, 11}));  // NIC
  EXPECT_EQ(RouteLinks(Bus(), 1, 3), (std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace loom::cost
