// The simulator against closed forms on tiny topologies (one transfer, two
// flows sharing a link, ring all-gathers with and without wraparound, a
// bidirectional ring), against the cost model where nothing contends, and
// in the expected direction where something does (two mesh axes on shared
// links, a straggler, a slow link). Targets use round numbers: links of
// 1 GB/s and 1 us per hop, compute at 1 TFLOP/s.
#include "sim/simulator.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cost/step_time.h"
#include "cost/target_cost_model.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "sim/network.h"
#include "sim/plan.h"
#include "test_targets.h"

namespace loom::sim {
namespace {

using cost::Target;

using test::Bus;
using test::kAlpha;
using test::kBw;
using test::SimpleCompute;
using test::Torus;

// Within a few ulps of a sum of a few terms.
#define EXPECT_TIME(actual, expected) \
  EXPECT_NEAR((actual), (expected),   \
              1e-12 * std::max(1.0, std::abs(static_cast<double>(expected))) + 1e-15)

Target Ring4(bool wrap) { return Torus({4, 1, 1}, {wrap, false, false}); }

// Four devices.
Target Switched(int64_t devices_per_node = 2) {
  return test::Switched(devices_per_node, 4 / devices_per_node);
}

std::unique_ptr<ir::Module> Parse(std::string_view text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return module.ok() ? std::move(module).value() : nullptr;
}

SimReport SimulateOk(const ir::Module& module, const Target& target, SimOptions options = {}) {
  auto report = Simulate(module, target, options);
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  return report.ok() ? std::move(report).value() : SimReport{};
}

double ModelStep(const ir::Module& module, const Target& target,
                 cost::Contention contention = cost::Contention::kSharedPorts) {
  const cost::TargetCostModel model(target);
  auto estimate = cost::EstimateStep(module, model, contention);
  EXPECT_TRUE(estimate.ok());
  return estimate.ok() ? estimate->total_seconds : 0;
}

// Transfer events (tid > 0) of one device, by instruction name: start and
// duration in microseconds.
std::map<std::string, std::pair<double, double>> Transfers(const std::string& trace, int device) {
  std::map<std::string, std::pair<double, double>> out;
  const auto json = nlohmann::json::parse(trace);
  for (const auto& event : json["traceEvents"]) {
    if (event["ph"] != "X" || event["pid"] != device || event["tid"] == 0) continue;
    out[event["name"].get<std::string>()] = {event["ts"].get<double>(), event["dur"].get<double>()};
  }
  return out;
}

// An all-gather of f32[elements] per device over `groups` of `group_size`.
std::string AllGatherModule(int devices, std::string_view groups, int elements,
                            int group_size = 4) {
  return fmt::format(R"(
HloModule ag, num_partitions={0}
ENTRY %main {{
  %x = f32[{2}] parameter(0)
  ROOT %g = f32[{3}] all-gather(%x), channel_id=1, replica_groups={1}, dimensions={{0}}, use_global_device_ids=true
}}
)",
                     devices, groups, elements, elements * group_size);
}

// --- the network alone -----------------------------------------------------------

TEST(FairShareNetwork, TwoFlowsShareALinkThenTheLongerSpeedsUp) {
  FairShareNetwork network({1e9});
  const LinkId link = 0;
  std::vector<std::pair<int32_t, double>> changed;
  const int32_t short_flow = network.Add(&link, nullptr, 1, 1e6, 0, 1);
  const int32_t long_flow = network.Add(&link, nullptr, 1, 2e6, 0, 2);
  network.Reallocate(0, &changed);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_DOUBLE_EQ(network.rate(short_flow), 5e8);
  EXPECT_DOUBLE_EQ(network.rate(long_flow), 5e8);
  std::map<int32_t, double> finish(changed.begin(), changed.end());
  EXPECT_DOUBLE_EQ(finish[short_flow], 2e-3);  // 1 MB at half of 1 GB/s
  EXPECT_DOUBLE_EQ(finish[long_flow], 4e-3);   // if nothing changed
  network.Remove(short_flow, 2e-3);
  network.Reallocate(2e-3, &changed);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_DOUBLE_EQ(network.rate(long_flow), 1e9);
  EXPECT_TIME(changed[0].second, 3e-3);  // its last 1 MB at the full rate
}

TEST(FairShareNetwork, MaxMinFairnessGivesLeftoversToUnconstrainedFlows) {
  // Link 0 (1 B/s) limits flow a; link 1 (5 B/s) is shared by a, b and c:
  // a gets 1, b and c split the other 4.
  FairShareNetwork network({1, 5});
  const LinkId both[] = {0, 1};
  const LinkId one[] = {1};
  std::vector<std::pair<int32_t, double>> changed;
  const int32_t a = network.Add(both, nullptr, 2, 10, 0, 0);
  const int32_t b = network.Add(one, nullptr, 1, 10, 0, 0);
  const int32_t c = network.Add(one, nullptr, 1, 10, 0, 0);
  network.Reallocate(0, &changed);
  EXPECT_DOUBLE_EQ(network.rate(a), 1);
  EXPECT_DOUBLE_EQ(network.rate(b), 2);
  EXPECT_DOUBLE_EQ(network.rate(c), 2);
}

TEST(FairShareNetwork, RecomputesOnlyTheAffectedComponent) {
  // Four flows on four separate links; ending one recomputes one link.
  FairShareNetwork network({1, 1, 1, 1});
  std::vector<std::pair<int32_t, double>> changed;
  std::vector<int32_t> flows;
  for (LinkId link = 0; link < 4; ++link) flows.push_back(network.Add(&link, nullptr, 1, 1, 0, 0));
  network.Reallocate(0, &changed);
  EXPECT_EQ(network.links_recomputed(), 4);
  network.Remove(flows[2], 1);
  network.Reallocate(1, &changed);
  EXPECT_EQ(network.links_recomputed(), 5);
  EXPECT_TRUE(changed.empty());
}

TEST(Network, TorusRoutesAreDimensionOrderedTheShortWayRound) {
  const Target target = Torus({4, 2, 1}, {true, false, false});
  auto network = Network::Build(target, 8, {});
  ASSERT_TRUE(network.ok());
  EXPECT_EQ(network->RouteBetween(0, 1).links.size(), 1u);
  EXPECT_EQ(network->RouteBetween(0, 3).links.size(), 1u);  // wraps: -x
  EXPECT_EQ(network->LinkName(network->RouteBetween(0, 3).links[0]), "chip 0 (0,0,0) -x");
  const Route diagonal = network->RouteBetween(0, 6);  // (0,0) -> (2,1): 2 x hops, then 1 y
  EXPECT_EQ(diagonal.links.size(), 3u);
  EXPECT_DOUBLE_EQ(diagonal.latency_seconds, 3 * kAlpha);
  EXPECT_EQ(network->LinkName(diagonal.links[2]), "chip 2 (2,0,0) +y");
  EXPECT_FALSE(Network::Build(target, 8, {{{0, 2}, 0.5}}).ok());  // not neighbours
}

// --- exact times on tiny topologies -------------------------------------------------

TEST(Simulator, OneTransferTakesLatencyPlusBytesOverBandwidth) {
  auto module = Parse(R"(
HloModule one, num_partitions=2
ENTRY %main {
  %x = f32[250000] parameter(0)
  ROOT %y = f32[250000] collective-permute(%x), channel_id=1, source_target_pairs={{0,1}}
}
)");
  const SimReport report = SimulateOk(*module, Torus({2, 1, 1}, {false, false, false}));
  EXPECT_TIME(report.step_seconds, kAlpha + 1e6 / kBw);
  ASSERT_EQ(report.devices.size(), 2u);
  // The sender waits for its send and the receiver for its receive.
  EXPECT_TIME(report.devices[0].exposed_communication, kAlpha + 1e6 / kBw);
  EXPECT_TIME(report.devices[1].exposed_communication, kAlpha + 1e6 / kBw);
  EXPECT_EQ(report.flows, 1);
  EXPECT_TIME(report.step_seconds, ModelStep(*module, Torus({2, 1, 1}, {false, false, false})));
}

TEST(Simulator, TwoFlowsSharingALinkFinishAtTheirFairShareTimes) {
  // A 1 MB permute 0 -> 1 and an all-gather of 2 MB shards over {0,1}
  // (a chain: 0 -> 1 and 1 -> 0 at once), in flight together on different
  // streams: on link 0 -> 1 both at half rate until the permute ends at
  // a + 2 ms, then the gather's flow alone at full rate, ending at a + 3 ms.
  auto module = Parse(R"(
HloModule shared, num_partitions=2
ENTRY %main {
  %a = f32[250000] parameter(0)
  %b = f32[500000] parameter(1)
  %s1 = (f32[250000], f32[250000]) collective-permute-start(%a), channel_id=1, source_target_pairs={{0,1}}
  %g = (f32[500000], f32[1000000]) all-gather-start(%b), channel_id=2, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %r1 = f32[250000] collective-permute-done(%s1)
  %r2 = f32[1000000] all-gather-done(%g)
  ROOT %t = (f32[250000], f32[1000000]) tuple(%r1, %r2)
}
)");
  SimOptions options;
  options.trace = true;
  const Target line = Torus({2, 1, 1}, {false, false, false});
  const SimReport report = SimulateOk(*module, line, options);
  EXPECT_TIME(report.step_seconds, kAlpha + 3e-3);
  const auto transfers = Transfers(report.trace_json, 0);
  ASSERT_EQ(transfers.size(), 2u);
  EXPECT_NEAR(transfers.at("s1").second, (kAlpha + 2e-3) * 1e6, 1e-6);
  EXPECT_NEAR(transfers.at("g").second, (kAlpha + 3e-3) * 1e6, 1e-6);
  // Without contention the cost model has each at full rate.
  EXPECT_TIME(ModelStep(*module, line, cost::Contention::kNone), kAlpha + 2e-3);
  // With it both share device 0's port going +x, the latency too (the
  // simulator shares only the bytes): the permute ends at 2 (a + 1 ms), the
  // gather 1 ms later.
  EXPECT_TIME(ModelStep(*module, line), 2 * kAlpha + 3e-3);
}

// The trace's occupancy samples of one link: (microseconds, busy fraction).
std::vector<std::pair<double, double>> LinkBusy(const std::string& trace, int device,
                                                const std::string& link) {
  std::vector<std::pair<double, double>> samples;
  const auto json = nlohmann::json::parse(trace);
  for (const auto& event : json["traceEvents"]) {
    if (event["ph"] == "C" && event["pid"] == device && event["name"] == "link " + link) {
      samples.emplace_back(event["ts"].get<double>(), event["args"]["busy"].get<double>());
    }
  }
  return samples;
}

TEST(Simulator, TraceShowsEachLinksOccupancyAsACounter) {
  // On a line 0-1-2-3: a 1 MB permute 0 -> 2 (two hops) and all-gathers of
  // 1 MB shards over {0,1} and {2,3}, in flight together. The gather's
  // 0 -> 1 flow starts after one hop's latency and has link 0 +x alone
  // until the permute's flow arrives after two; then they share it at half
  // rate each, so link 1 +x, which only the permute crosses, is half busy.
  // The gather's flow has 1 MB - 1 KB left then and ends 1.998 ms later;
  // the permute's, with 1 KB left, has both links to itself for 1 us more.
  auto module = Parse(R"(
HloModule occupancy, num_partitions=4
ENTRY %main {
  %a = f32[250000] parameter(0)
  %b = f32[250000] parameter(1)
  %s = (f32[250000], f32[250000]) collective-permute-start(%a), channel_id=1, source_target_pairs={{0,2}}
  %g = (f32[250000], f32[500000]) all-gather-start(%b), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  %r = f32[250000] collective-permute-done(%s)
  %q = f32[500000] all-gather-done(%g)
  ROOT %t = (f32[250000], f32[500000]) tuple(%r, %q)
}
)");
  SimOptions options;
  options.trace = true;
  const SimReport report = SimulateOk(*module, Ring4(false), options);
  const double shared = 2 * kAlpha, gather_done = shared + 999000 / (kBw / 2);
  const double permute_done = gather_done + 1000 / kBw;
  using Samples = std::vector<std::pair<double, double>>;
  const auto near = [](const Samples& got, const Samples& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::abs(got[i].first - want[i].first) > 1e-6 || got[i].second != want[i].second) {
        return false;
      }
    }
    return true;
  };
  const Samples both = LinkBusy(report.trace_json, 0, "chip 0 (0,0,0) +x");
  EXPECT_TRUE(near(both, {{kAlpha * 1e6, 1}, {permute_done * 1e6, 0}}))
      << testing::PrintToString(both);
  const Samples only_permute = LinkBusy(report.trace_json, 1, "chip 1 (1,0,0) +x");
  EXPECT_TRUE(
      near(only_permute, {{shared * 1e6, 0.5}, {gather_done * 1e6, 1}, {permute_done * 1e6, 0}}))
      << testing::PrintToString(only_permute);
  EXPECT_TIME(report.step_seconds, permute_done);
}

TEST(Simulator, TransfersOfOneKindOnSharedLinksRunOneAfterTheOther) {
  // Two permutes 0 -> 1 issued together, 1 MB then 2 MB: the second takes
  // the stream when the first is done, as the step estimate has it.
  auto module = Parse(R"(
HloModule shared, num_partitions=2
ENTRY %main {
  %a = f32[250000] parameter(0)
  %b = f32[500000] parameter(1)
  %s1 = (f32[250000], f32[250000]) collective-permute-start(%a), channel_id=1, source_target_pairs={{0,1}}
  %s2 = (f32[500000], f32[500000]) collective-permute-start(%b), channel_id=2, source_target_pairs={{0,1}}
  %r1 = f32[250000] collective-permute-done(%s1)
  %r2 = f32[500000] collective-permute-done(%s2)
  ROOT %t = (f32[250000], f32[500000]) tuple(%r1, %r2)
}
)");
  SimOptions options;
  options.trace = true;
  const Target line = Torus({2, 1, 1}, {false, false, false});
  const SimReport report = SimulateOk(*module, line, options);
  EXPECT_TIME(report.step_seconds, 2 * kAlpha + 3e-3);
  EXPECT_TIME(report.step_seconds, ModelStep(*module, line));
  const auto transfers = Transfers(report.trace_json, 0);
  ASSERT_EQ(transfers.size(), 2u);
  EXPECT_NEAR(transfers.at("s1").second, (kAlpha + 1e-3) * 1e6, 1e-6);
  EXPECT_NEAR(transfers.at("s2").second, (2 * kAlpha + 3e-3) * 1e6, 1e-6);
}

TEST(Simulator, RingAllGatherMatchesTheCostModelOnEveryTopology) {
  const std::vector<int64_t> group = {0, 1, 2, 3};
  const double bytes = 4 * 1000 * 4;  // the gathered f32[4000]
  auto module = Parse(AllGatherModule(4, "{{0,1,2,3}}", 1000));
  const std::vector<std::pair<std::string, Target>> targets = {
      {"ring with wraparound", Ring4(true)},
      {"line (no wraparound)", Ring4(false)},
      {"2x2 box", Torus({2, 2, 1}, {false, false, false})},
      {"2x2 wrapping box", Torus({2, 2, 1}, {true, true, false})},
      {"switched, two nodes", Switched()},
      {"bus", Bus()},
  };
  for (const auto& [name, target] : targets) {
    SCOPED_TRACE(name);
    const cost::TargetCostModel model(target);
    const SimReport report = SimulateOk(*module, target);
    EXPECT_TIME(report.step_seconds, model.AllGatherSeconds(group, bytes));
    EXPECT_TIME(report.step_seconds, ModelStep(*module, target));
  }
  // The closed forms themselves: (N-1) a + (N-1)/N B / (w bw).
  EXPECT_TIME(SimulateOk(*module, Ring4(true)).step_seconds, 3 * kAlpha + 0.75 * bytes / (2 * kBw));
  EXPECT_TIME(SimulateOk(*module, Ring4(false)).step_seconds, 3 * kAlpha + 0.75 * bytes / kBw);
}

TEST(Simulator, ReduceScatterAndAllReduceMatchTheCostModel) {
  auto module = Parse(R"(
HloModule rs_ar, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[4000] parameter(0)
  %rs = f32[1000] reduce-scatter(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
  ROOT %ar = f32[1000] all-reduce(%rs), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
}
)");
  for (const Target& target :
       {Ring4(true), Ring4(false), Torus({2, 2, 1}, {false, false, false}), Switched(), Bus()}) {
    SCOPED_TRACE(target.kind());
    const SimReport report = SimulateOk(*module, target);
    EXPECT_TIME(report.step_seconds, ModelStep(*module, target));
  }
}

TEST(Simulator, BidirectionalRingSendsHalfEachWayOnDisjointLinks) {
  // A ring permute each way at once (collective-matmul's bidirectional
  // form). With wraparound each direction has its own links: one hop each.
  auto module = Parse(R"(
HloModule bidirectional, num_partitions=4
ENTRY %main {
  %x = f32[250000] parameter(0)
  %cw = (f32[250000], f32[250000]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %ccw = (f32[250000], f32[250000]) collective-permute-start(%x), channel_id=2, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}
  %a = f32[250000] collective-permute-done(%cw)
  %b = f32[250000] collective-permute-done(%ccw)
  ROOT %t = (f32[250000], f32[250000]) tuple(%a, %b)
}
)");
  const SimReport ring = SimulateOk(*module, Ring4(true));
  EXPECT_TIME(ring.step_seconds, kAlpha + 1e6 / kBw);
  // Disjoint links: the step estimate runs the two at once as well.
  EXPECT_TIME(ModelStep(*module, Ring4(true)), ring.step_seconds);
  // On one switch the two directions leave each device by the same port:
  // one after the other, in the estimate and the simulation alike.
  const Target node = Switched(4);
  EXPECT_TIME(SimulateOk(*module, node).step_seconds, ModelStep(*module, node));
  EXPECT_TIME(ModelStep(*module, node), 2 * (1e-6 + 1e6 / 1e10));
  // Without wraparound 3 -> 0 travels back over three -x links, each shared
  // with one of the other direction's flows: slower than the ring.
  const SimReport line = SimulateOk(*module, Ring4(false));
  EXPECT_GT(line.step_seconds, ring.step_seconds + 0.5e-3);

  // The native bidirectional ring all-gather: (N-1) steps of half a shard
  // each way.
  auto gather = Parse(AllGatherModule(4, "{{0,1,2,3}}", 250000));
  EXPECT_TIME(SimulateOk(*gather, Ring4(true)).step_seconds, 3 * (kAlpha + 0.5e6 / kBw));
}

TEST(Simulator, OverlappedTransferTakesTheMaxSequentialTheSum) {
  constexpr std::string_view kOverlapped = R"(
HloModule overlap, num_partitions=2
ENTRY %main {
  %x = f32[250000] parameter(0)
  %w = f32[1000,1000] parameter(1)
  %s = (f32[250000], f32[250000]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %d = f32[1000,1000] dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[250000] collective-permute-done(%s)
  ROOT %t = (f32[250000], f32[1000,1000]) tuple(%r, %d)
}
)";
  constexpr std::string_view kSequential = R"(
HloModule sequential, num_partitions=2
ENTRY %main {
  %x = f32[250000] parameter(0)
  %w = f32[1000,1000] parameter(1)
  %s = (f32[250000], f32[250000]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %r = f32[250000] collective-permute-done(%s)
  %d = f32[1000,1000] dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (f32[250000], f32[1000,1000]) tuple(%r, %d)
}
)";
  const Target target = Torus({2, 1, 1}, {false, false, false});
  const double dot = 2e9 / 1e12 + 1e-6;  // 2 GFLOP at 1 TFLOP/s, plus launch
  const double permute = kAlpha + 1e6 / kBw;
  auto overlapped = Parse(kOverlapped);
  auto sequential = Parse(kSequential);
  const SimReport a = SimulateOk(*overlapped, target);
  const SimReport b = SimulateOk(*sequential, target);
  EXPECT_TIME(a.step_seconds, std::max(dot, permute));
  EXPECT_TIME(b.step_seconds, dot + permute);
  EXPECT_TIME(a.devices[0].exposed_communication, 0);
  EXPECT_TIME(b.devices[0].exposed_communication, permute);
  EXPECT_TIME(a.step_seconds, ModelStep(*overlapped, target));
  EXPECT_TIME(b.step_seconds, ModelStep(*sequential, target));
  // MFU: the dot's ideal time over the step.
  EXPECT_NEAR(a.mfu, 2e-3 / a.step_seconds, 1e-12);
  // Products that sustain half the peak take twice as long, and MFU still
  // counts the dot's time at the datasheet peak.
  cost::ComputeSpec half = SimpleCompute();
  half.matrix_efficiency = 0.5;
  const Target slower("torus", "", half, target.topology());
  const SimReport c = SimulateOk(*sequential, slower);
  EXPECT_TIME(c.step_seconds, 2 * 2e9 / 1e12 + 1e-6 + permute);
  EXPECT_NEAR(c.mfu, 2e-3 / c.step_seconds, 1e-12);
  EXPECT_GT(a.seconds_by_op_kind.at("dot"), 0);
  EXPECT_TIME(b.seconds_by_op_kind.at("collective-permute"), permute);
}

// --- contention, stragglers, slow links -----------------------------------------------

// Tensor-parallel pairs along x ({0,1},{2,3}) and a second mesh axis whose
// pairs ({0,3},{1,2}) sit diagonally on the 2x2 torus: its routes go x then
// y, over the very x links the first axis uses.
constexpr std::string_view kTwoAxes = R"(
HloModule two_axes, num_partitions=4
ENTRY %main {
  %x = f32[250000] parameter(0)
  %y = f32[500000] parameter(1)
  %a = (f32[250000], f32[500000]) all-gather-start(%x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  %b = f32[500000] all-to-all(%y), channel_id=2, replica_groups={{0,3},{1,2}}, dimensions={0}
  %ad = f32[500000] all-gather-done(%a)
  ROOT %t = (f32[500000], f32[500000]) tuple(%ad, %b)
}
)";

TEST(Simulator, TwoMeshAxesContendOnSharedLinks) {
  const Target target = Torus({2, 2, 1}, {false, false, false});
  auto module = Parse(kTwoAxes);
  const cost::TargetCostModel model(target);
  const ir::DeviceGrid grid{1, 4};
  const ir::Computation& entry = *module->entry();
  const double a_alone = model.TransferSeconds(*entry.FindInstruction("a"), grid);
  const double b_alone = model.TransferSeconds(*entry.FindInstruction("b"), grid);
  EXPECT_TIME(a_alone, kAlpha + 1e6 / kBw);
  EXPECT_TIME(b_alone, 2 * kAlpha + 1e6 / kBw);
  const SimReport report = SimulateOk(*module, target);
  // Axis a starts one hop of latency earlier; from 2a on both share each x
  // link. a ends at 2 s/bw, b has a*bw bytes left and ends a later.
  EXPECT_TIME(report.step_seconds, 2 * 1e6 / kBw + kAlpha);
  EXPECT_GT(report.step_seconds, std::max(a_alone, b_alone));
}

TEST(Simulator, DataAndTensorParallelTrafficTakesLongerThanTheContentionFreeModelSays) {
  // An all-reduce on one axis and an all-gather on the other: without
  // contention the cost model runs them side by side (different kinds); the
  // simulator makes them share the links of their routes, and so does the
  // estimate, through the ports of the devices' x links.
  auto module = Parse(R"(
HloModule dp_tp, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[250000] parameter(0)
  %g = (f32[250000], f32[500000]) all-gather-start(%x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  %r = f32[250000] all-reduce-start(%x), channel_id=2, replica_groups={{0,3},{1,2}}, use_global_device_ids=true, to_apply=%add
  %gd = f32[500000] all-gather-done(%g)
  %rd = f32[250000] all-reduce-done(%r)
  ROOT %t = (f32[500000], f32[250000]) tuple(%gd, %rd)
}
)");
  const Target target = Torus({2, 2, 1}, {false, false, false});
  const double model = ModelStep(*module, target, cost::Contention::kNone);
  const SimReport report = SimulateOk(*module, target);
  EXPECT_GT(report.step_seconds, model * 1.1);
  EXPECT_GT(report.cost_model_step_seconds, 0);
  EXPECT_TIME(report.cost_model_step_seconds, model);
  EXPECT_NEAR(ModelStep(*module, target), report.step_seconds, 0.01 * report.step_seconds);
}

TEST(Simulator, GroupsSharingABusContend) {
  auto module = Parse(AllGatherModule(4, "{{0,1},{2,3}}", 1000, 2));
  const Target bus = Bus();
  const SimReport report = SimulateOk(*module, bus);
  // Two pairs at once on one medium: twice the cost model's time for one.
  const cost::TargetCostModel model(bus);
  EXPECT_TIME(report.step_seconds, 1e-4 + 2 * 8000 / 1e8);
  EXPECT_GT(report.step_seconds, model.AllGatherSeconds({0, 1}, 8000));
}

// An all-to-all is a pairwise exchange: 3 rounds of B/4 on 4 devices. On 2
// nodes of 2, every device has a message across nodes in every round (round
// 1: 1->2 and 3->0 out, 0 and 2 receiving them; round 2: all across; round
// 3 the mirror of round 1), so each round takes the NIC's a + (B/4)/bw and
// the simulator agrees with the cost model. On a wrapping ring of 4, round
// 2's four messages each go two hops the same way, two on every link: the
// cost model prices each message at its busiest link's share, and the
// simulator's max-min sharing gives the same.
TEST(Simulator, AllToAllIsAPairwiseExchangeOfRounds) {
  auto module = Parse(R"(
HloModule a2a, num_partitions=4
ENTRY %main {
  %x = f32[4000] parameter(0)
  ROOT %y = f32[4000] all-to-all(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
}
)");
  const Target switched = Switched(2);
  const SimReport report = SimulateOk(*module, switched);
  const double round = 1e-5 + 4000.0 / 1e9;  // B/4 = 4000 bytes over a NIC
  EXPECT_TIME(report.step_seconds, 3 * round);
  EXPECT_TIME(report.step_seconds, ModelStep(*module, switched));
  // Devices 0 and 1 (one per node) stand for 2 and 3: their 6 messages
  // are the replay's, of the 12 that every device's replay moves.
  EXPECT_EQ(report.simulated_devices, 2);
  EXPECT_EQ(report.flows, 6);
  const SimReport every = SimulateOk(*module, switched, {.exploit_symmetry = false});
  EXPECT_EQ(every.simulated_devices, 4);
  EXPECT_EQ(every.flows, 12);
  EXPECT_EQ(every.step_seconds, report.step_seconds);

  const Target ring = Ring4(true);
  const SimReport on_ring = SimulateOk(*module, ring);
  const double model = ModelStep(*module, ring);
  EXPECT_TIME(model, (kAlpha + 4000 / kBw) + (2 * kAlpha + 2 * 4000 / kBw) + (kAlpha + 4000 / kBw));
  EXPECT_TIME(on_ring.step_seconds, model);
}

constexpr std::string_view kDotThenGather = R"(
HloModule straggle, num_partitions=4
ENTRY %main {
  %w = f32[1000,1000] parameter(0)
  %x = f32[250000] parameter(1)
  %d = f32[1000,1000] dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %g = f32[1000000] all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT %t = (f32[1000,1000], f32[1000000]) tuple(%d, %g)
}
)";

TEST(Simulator, AStragglerDelaysTheWholeRing) {
  auto module = Parse(kDotThenGather);
  const Target target = Ring4(true);
  const cost::TargetCostModel model(target);
  const double dot = 2e9 / 1e12 + 1e-6;
  const double gather = model.AllGatherSeconds({0, 1, 2, 3}, 4e6);
  EXPECT_TIME(SimulateOk(*module, target).step_seconds, dot + gather);
  SimOptions options;
  ASSERT_TRUE(ParseComputeScale("2=2", &options).ok());
  const SimReport report = SimulateOk(*module, target, options);
  EXPECT_TIME(report.step_seconds, 2 * dot + gather);
  for (const DeviceReport& device : report.devices) {
    SCOPED_TRACE(device.device);
    EXPECT_TIME(device.compute + device.exposed_communication + device.idle, report.step_seconds);
    EXPECT_TIME(device.compute, device.device == 2 ? 2 * dot : dot);
    // Everyone else waits for device 2 and then the whole ring.
    EXPECT_TIME(device.exposed_communication, device.device == 2 ? gather : dot + gather);
  }
}

TEST(Simulator, ASlowLinkSlowsTheRing) {
  auto module = Parse(kDotThenGather);
  for (bool wrap : {true, false}) {
    SCOPED_TRACE(wrap);
    const Target target = Ring4(wrap);
    const double normal = SimulateOk(*module, target).step_seconds;
    SimOptions options;
    ASSERT_TRUE(ParseLinkScale("0-1=0.5", &options).ok());
    const double slow = SimulateOk(*module, target, options).step_seconds;
    EXPECT_GT(slow, normal * 1.05);
    // No worse than every link at half speed.
    SimOptions all;
    for (int d = 0; d < 4; ++d) {
      ASSERT_TRUE(ParseLinkScale(fmt::format("{}-{}=0.5", d, (d + 1) % 4), &all).ok());
    }
    if (wrap) {
      EXPECT_LE(slow, SimulateOk(*module, target, all).step_seconds + 1e-12);
    }
  }
  // A slow port on a switched cluster slows its node's ring too.
  auto gather = Parse(AllGatherModule(4, "{{0,1,2,3}}", 250000));
  SimOptions port;
  ASSERT_TRUE(ParseLinkScale("0>1=0.25", &port).ok());
  EXPECT_GT(SimulateOk(*gather, Switched(), port).step_seconds,
            SimulateOk(*gather, Switched()).step_seconds);
}

TEST(Simulator, WhileLoopRunsItsTripCount) {
  auto module = Parse(R"(
HloModule loop, num_partitions=2
%cond (p: (s32[], f32[100,100])) -> pred[] {
  %p = (s32[], f32[100,100]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (p: (s32[], f32[100,100])) -> (s32[], f32[100,100]) {
  %p = (s32[], f32[100,100]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[100,100] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[100,100] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z = f32[100,100] collective-permute(%y), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT %t = (s32[], f32[100,100]) tuple(%next, %z)
}
ENTRY %main {
  %x = f32[100,100] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[100,100]) tuple(%zero, %x)
  %w = (s32[], f32[100,100]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[100,100] get-tuple-element(%w), index=1
}
)");
  const Target target = Torus({2, 1, 1}, {false, false, false});
  const cost::TargetCostModel model(target);
  const ir::Computation& body = *module->FindComputation("body");
  const ir::Computation& cond = *module->FindComputation("cond");
  const double compare = model.ComputeSeconds(*cond.FindInstruction("lt"));
  const double iteration = compare + model.ComputeSeconds(*body.FindInstruction("next")) +
                           model.ComputeSeconds(*body.FindInstruction("y")) + kAlpha + 40000 / kBw;
  SimOptions options;
  options.trace = true;
  const SimReport report = SimulateOk(*module, target, options);
  EXPECT_TIME(report.step_seconds, 3 * iteration + compare);
  EXPECT_TIME(report.step_seconds, ModelStep(*module, target));
  EXPECT_EQ(report.collectives, 3);
  EXPECT_EQ(report.op_kinds.at("dot").count, 3 * 2);
  EXPECT_TRUE(report.unknown_trip_counts.empty());
}

// A permute with no pairs moves nothing, so only the steps bound its loop:
// the replay is refused up front when they pass --max-steps, and the count
// it names is exact (that many is allowed).
TEST(Simulator, LoopOfTransfersThatMoveNothingIsBoundedByItsSteps) {
  const auto loop = [](int64_t trips) {
    return fmt::format(R"(
HloModule loop, num_partitions=2
%cond (p: (s32[], f32[8])) -> pred[] {{
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant({})
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}}
%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {{
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %z = f32[8] collective-permute(%x), channel_id=1, source_target_pairs={{}}
  ROOT %t = (s32[], f32[8]) tuple(%next, %z)
}}
ENTRY %main {{
  %x = f32[8] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]) tuple(%zero, %x)
  %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[8] get-tuple-element(%w), index=1
}}
)",
                       trips);
  };
  const Target target = Torus({2, 1, 1}, {false, false, false});
  auto endless = Parse(loop(2147483647));
  auto refused = Simulate(*endless, target);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message, ::testing::HasSubstr("--max-steps"));

  auto small = Parse(loop(1000));
  SimOptions options;
  options.max_steps = 1;
  auto counted = Simulate(*small, target, options);
  ASSERT_FALSE(counted.ok());
  const std::string& message = counted.error().message;
  const size_t at = message.find("would replay ");
  ASSERT_NE(at, std::string::npos) << message;
  const int64_t steps = std::stoll(message.substr(at + 13));
  EXPECT_GT(steps, 2 * 1000 * 2) << message;  // each trip: the permute and the loop end, twice
  options.max_steps = steps;
  const SimReport report = SimulateOk(*small, target, options);
  EXPECT_EQ(report.collectives, 1000);
  options.max_steps = steps - 1;
  EXPECT_FALSE(Simulate(*small, target, options).ok());
}

TEST(Simulator, AsyncStartWrappingACollectiveOverlapsCompute) {
  // async-collectives' generic form for reduce-scatter.
  auto module = Parse(R"(
HloModule async_rs, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%rs.async (param: f32[1000000]) -> f32[250000] {
  %param = f32[1000000] parameter(0)
  ROOT %rs = f32[250000] reduce-scatter(%param), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
ENTRY %main {
  %x = f32[1000000] parameter(0)
  %w = f32[1000,1000] parameter(1)
  %start = ((f32[1000000]), f32[250000]) async-start(%x), calls=%rs.async
  %d = f32[1000,1000] dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %done = f32[250000] async-done(%start), calls=%rs.async
  ROOT %t = (f32[250000], f32[1000,1000]) tuple(%done, %d)
}
)");
  const Target target = Ring4(true);
  const cost::TargetCostModel model(target);
  const double dot = 2e9 / 1e12 + 1e-6;
  const double scatter = model.AllGatherSeconds({0, 1, 2, 3}, 4e6);
  ASSERT_LT(scatter, dot);
  const SimReport report = SimulateOk(*module, target);
  EXPECT_TIME(report.step_seconds, dot);
  EXPECT_TIME(report.devices[0].communication, scatter);
  EXPECT_TIME(report.op_kinds.at("reduce-scatter").communication_seconds, 4 * scatter);
}

TEST(Simulator, ConditionalRunsItsSlowestBranchAndUnknownLoopsRunOnce) {
  auto module = Parse(R"(
HloModule branches, num_partitions=2
%fast (x: f32[1000,1000]) -> f32[1000,1000] {
  %x = f32[1000,1000] parameter(0)
  ROOT %n = f32[1000,1000] negate(%x)
}
%slow (x: f32[1000,1000]) -> f32[1000,1000] {
  %x = f32[1000,1000] parameter(0)
  ROOT %d = f32[1000,1000] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%cond (p: (f32[1000,1000], pred[])) -> pred[] {
  %p = (f32[1000,1000], pred[]) parameter(0)
  ROOT %b = pred[] get-tuple-element(%p), index=1
}
%body (p: (f32[1000,1000], pred[])) -> (f32[1000,1000], pred[]) {
  %p = (f32[1000,1000], pred[]) parameter(0)
  %x = f32[1000,1000] get-tuple-element(%p), index=0
  %b = pred[] get-tuple-element(%p), index=1
  %y = f32[1000,1000] collective-permute(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT %t = (f32[1000,1000], pred[]) tuple(%y, %b)
}
ENTRY %main {
  %x = f32[1000,1000] parameter(0)
  %c = pred[] parameter(1)
  %r = f32[1000,1000] conditional(%c, %x, %x), true_computation=%slow, false_computation=%fast
  %init = (f32[1000,1000], pred[]) tuple(%r, %c)
  %w = (f32[1000,1000], pred[]) while(%init), condition=%cond, body=%body
  ROOT %o = f32[1000,1000] get-tuple-element(%w), index=0
}
)");
  const Target target = Torus({2, 1, 1}, {false, false, false});
  const SimReport report = SimulateOk(*module, target);
  const double dot = 2e9 / 1e12 + 1e-6;
  EXPECT_TIME(report.step_seconds, dot + kAlpha + 4e6 / kBw);
  EXPECT_EQ(report.unknown_trip_counts, std::vector<std::string>{"w"});
  ASSERT_FALSE(report.notes.empty());
  EXPECT_NE(report.notes[0].find("branch %slow"), std::string::npos);
  EXPECT_NE(ReportTable(report).find("trip count is unknown"), std::string::npos);
}

TEST(Simulator, LoopWithoutTransfersIsOneStretchOfCompute) {
  // A million trips of a dot: replayed as one step per device, not a
  // million, with the same time and op counts.
  auto module = Parse(R"(
HloModule scan, num_partitions=2
%cond (p: (s32[], f32[100,100])) -> pred[] {
  %p = (s32[], f32[100,100]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(1000000)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (p: (s32[], f32[100,100])) -> (s32[], f32[100,100]) {
  %p = (s32[], f32[100,100]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[100,100] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[100,100] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[100,100]) tuple(%next, %y)
}
ENTRY %main {
  %x = f32[100,100] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[100,100]) tuple(%zero, %x)
  %w = (s32[], f32[100,100]) while(%init), condition=%cond, body=%body
  %r = f32[100,100] get-tuple-element(%w), index=1
  ROOT %z = f32[100,100] collective-permute(%r), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
)");
  const Target target = Torus({2, 1, 1}, {false, false, false});
  const cost::TargetCostModel model(target);
  const double compare =
      model.ComputeSeconds(*module->FindComputation("cond")->FindInstruction("lt"));
  const ir::Computation& body = *module->FindComputation("body");
  const double iteration = compare + model.ComputeSeconds(*body.FindInstruction("next")) +
                           model.ComputeSeconds(*body.FindInstruction("y"));
  SimOptions options;
  options.trace = true;
  ASSERT_TRUE(ParseComputeScale("1=2", &options).ok());
  const SimReport report = SimulateOk(*module, target, options);
  const double loop = 1e6 * iteration + compare;
  EXPECT_NEAR(report.step_seconds, 2 * loop + kAlpha + 40000 / kBw, 1e-9 * report.step_seconds);
  EXPECT_EQ(report.op_kinds.at("dot").count, 2 * 1000000);
  EXPECT_NEAR(report.devices[0].compute, loop, 1e-9 * loop);
  EXPECT_NEAR(report.dot_flops, 2 * 1e6 * 2e6, 1);
  EXPECT_LT(report.events, 10);
  EXPECT_NE(report.trace_json.find("\"cat\":\"while\""), std::string::npos);
}

TEST(Simulator, TraceIsChromeJsonWithoutOverlapsOnATrack) {
  // Concurrent transfers of two axes beside dots, on a straggling device.
  auto module = Parse(R"(
HloModule traced, num_partitions=4
ENTRY %main {
  %x = f32[250000] parameter(0)
  %w = f32[500,500] parameter(1)
  %a = (f32[250000], f32[500000]) all-gather-start(%x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  %d1 = f32[500,500] dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %b = (f32[250000], f32[500000]) all-gather-start(%x), channel_id=2, replica_groups={{0,3},{1,2}}, dimensions={0}, use_global_device_ids=true
  %d2 = f32[500,500] dot(%d1, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %ad = f32[500000] all-gather-done(%a)
  %c = (f32[250000], f32[250000]) collective-permute-start(%x), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %bd = f32[500000] all-gather-done(%b)
  %cd = f32[250000] collective-permute-done(%c)
  ROOT %t = (f32[500000], f32[500000], f32[250000], f32[500,500]) tuple(%ad, %bd, %cd, %d2)
}
)");
  SimOptions options;
  options.trace = true;
  options.trace_devices = 3;
  ASSERT_TRUE(ParseComputeScale("1=1.5", &options).ok());
  const SimReport report = SimulateOk(*module, Torus({2, 2, 1}, {false, false, false}), options);
  const auto json = nlohmann::json::parse(report.trace_json);
  ASSERT_TRUE(json.contains("traceEvents"));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::set<int> pids;
  int complete = 0;
  for (const auto& event : json["traceEvents"]) {
    ASSERT_TRUE(event.contains("ph"));
    if (event["ph"] != "X") continue;
    ++complete;
    pids.insert(event["pid"].get<int>());
    tracks[{event["pid"].get<int>(), event["tid"].get<int>()}].emplace_back(
        event["ts"].get<double>(), event["dur"].get<double>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));  // trace_devices
  EXPECT_GT(complete, 3 * 4);
  bool concurrent = false;
  for (auto& [track, events] : tracks) {
    std::sort(events.begin(), events.end());
    if (track.second > 1) concurrent = true;
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_LE(events[i - 1].first + events[i - 1].second, events[i].first + 1e-9)
          << "pid " << track.first << " tid " << track.second;
    }
  }
  EXPECT_TRUE(concurrent);  // some device had two transfers in flight at once
  // The JSON report parses and carries the headline numbers.
  const auto summary = nlohmann::json::parse(ReportJson(report));
  EXPECT_DOUBLE_EQ(summary["step_seconds"].get<double>(), report.step_seconds);
  EXPECT_EQ(summary["per_device"].size(), 4u);
  EXPECT_NE(ReportTable(report).find("step time"), std::string::npos);
}

// --- agreement at the scale of the demo -----------------------------------------------

std::string DemoModule(int64_t chips) {
  std::string text;
  {
    std::ifstream in(std::string(LOOM_EXAMPLES_DIR) + "/mlp_block_tp4.hlo");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto replace = [&](std::string_view from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
      text.replace(at, from.size(), to);
      at += to.size();
    }
  };
  replace("num_partitions=4", fmt::format("num_partitions={}", chips));
  replace("replica_groups={{0,1,2,3}}",
          fmt::format("replica_groups=[{},4]<=[{}]", chips / 4, chips));
  return text;
}

TEST(Simulator, DemoBlockAgreesWithTheCostModelWhereNothingContends) {
  // 4-way tensor parallel groups along x: each group on its own links.
  struct Case {
    int64_t chips;
    std::string target;
  };
  for (const Case& c : {Case{4, "tpu-v4-2x2x1"}, Case{64, "tpu-v4-4x4x4"}, Case{4, "dgx-h100"},
                        Case{4, "loopback-2gbit"}}) {
    SCOPED_TRACE(c.target);
    auto target = cost::FindTarget(c.target);
    ASSERT_TRUE(target.ok());
    auto module = Parse(DemoModule(c.chips));
    ASSERT_NE(module, nullptr);
    const SimReport report = SimulateOk(*module, *target);
    EXPECT_NEAR(report.step_seconds, report.cost_model_step_seconds,
                1e-9 * report.cost_model_step_seconds);
    EXPECT_GT(report.mfu, 0);
    EXPECT_LT(report.mfu, 1);
    EXPECT_EQ(report.device_count, c.chips);
  }
}

TEST(Simulator, SimulatesEveryCorpusModule) {
  // Real dumps (loops, async pairs, all-to-all, f8): each simulates on a
  // TPU slice and on GPU nodes, and its trace parses. The 128-device Llama
  // step (tens of millions of events, seconds) is left to the benchmark.
  namespace fs = std::filesystem;
  if (!fs::is_directory(LOOM_CORPUS_DIR)) GTEST_SKIP() << "no corpus at " << LOOM_CORPUS_DIR;
  int simulated = 0;
  for (const auto& entry : fs::directory_iterator(LOOM_CORPUS_DIR)) {
    if (entry.path().extension() != ".hlo") continue;
    SCOPED_TRACE(entry.path().filename().string());
    auto module = ir::ParseModuleFile(entry.path().string());
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    auto verified = ir::VerifyModule(**module);
    ASSERT_TRUE(verified.ok());
    if (verified->partition_count * verified->replica_count > 16) continue;
    for (const char* name : {"tpu-v4-8x16x16", "dgx-h100-x4"}) {
      SimOptions options;
      options.trace = true;
      auto report = Simulate(**module, *cost::FindTarget(name), options);
      ASSERT_TRUE(report.ok()) << name << ": " << report.error().ToString();
      EXPECT_TRUE(std::isfinite(report->step_seconds));
      EXPECT_GT(report->step_seconds, 0);
      EXPECT_TRUE(nlohmann::json::accept(report->trace_json));
      for (const DeviceReport& device : report->devices) {
        EXPECT_NEAR(device.compute + device.exposed_communication + device.idle,
                    report->step_seconds, 1e-9 * report->step_seconds);
      }
    }
    ++simulated;
  }
  EXPECT_GE(simulated, 30);
}

TEST(Simulator, RejectsModulesLargerThanTheTarget) {
  auto module = Parse(DemoModule(8));
  auto report = Simulate(*module, *cost::FindTarget("tpu-v4-2x2x1"));
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("runs on 8 devices"), std::string::npos);
  SimOptions options;
  EXPECT_FALSE(ParseLinkScale("0=0.5", &options).ok());
  EXPECT_FALSE(ParseLinkScale("0-1=0", &options).ok());
  EXPECT_FALSE(ParseComputeScale("x=2", &options).ok());
  EXPECT_TRUE(ParseLinkScale("0>1=0.5", &options).ok());
  EXPECT_EQ(options.link_scale.size(), 1u);
}

}  // namespace
}  // namespace loom::sim
