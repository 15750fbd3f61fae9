// The replay of one device per class of symmetric devices (sim/symmetry.h)
// against the replay of every device: weighted flows get the rates of the
// flows they stand for; Find sees the moves a module's collectives allow
// and no others; and on hand-written modules, training steps from the
// model builder and every corpus module and example, on tori with and
// without wraparound, switched clusters and a bus, the two replays give
// the same step, device times and op kinds.
#include "sim/symmetry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "corpus_files.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "model/training_step.h"
#include "sim/network.h"
#include "sim/simulator.h"
#include "test_targets.h"

namespace loom::sim {
namespace {

namespace fs = std::filesystem;
using cost::Target;

using test::Bus;
using test::Switched;
using test::Torus;

// "torus 2x4 (wrap: 1,1)", "switched 4 x 2", "bus".
std::string Describe(const Target& target) {
  if (const auto* torus = std::get_if<cost::TorusTopology>(&target.topology())) {
    std::string dims, wraps;
    for (size_t d = 0; d < torus->dims.size(); ++d) {
      dims += (d ? "x" : "") + std::to_string(torus->dims[d]);
      wraps +=
          (d ? "," : "") + std::to_string(d < torus->wraparound.size() && torus->wraparound[d]);
    }
    return "torus " + dims + " (wrap: " + wraps + ")";
  }
  if (const auto* switched = std::get_if<cost::SwitchedTopology>(&target.topology())) {
    return "switched " + std::to_string(switched->nodes) + " x " +
           std::to_string(switched->devices_per_node);
  }
  return "bus";
}

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return module.ok() ? std::move(module).value() : nullptr;
}

Symmetry FindOn(const ir::Module& module, const Target& target) {
  const ir::DeviceGrid grid = *ir::DeviceGridOf(module);
  const Network network = *Network::Build(target, grid.size(), {});
  return Symmetry::Find(module, grid, target, network);
}

// The two replays agree: the step and each device's times to rounding, the
// op kinds' counts exactly and their seconds to rounding.
void ExpectSameReplay(const ir::Module& module, const Target& target) {
  auto classes = Simulate(module, target);
  SimOptions every_device;
  every_device.exploit_symmetry = false;
  auto all = Simulate(module, target, every_device);
  ASSERT_EQ(classes.ok(), all.ok());
  if (!all.ok()) return;
  const auto near = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(std::abs(b), 1e-9);
  };
  EXPECT_EQ(all->simulated_devices, all->device_count);
  // One device per class was replayed: no plan fell back to every device.
  EXPECT_EQ(classes->simulated_devices, FindOn(module, target).classes()) << classes->symmetry;
  EXPECT_TRUE(near(classes->step_seconds, all->step_seconds))
      << classes->step_seconds << " against " << all->step_seconds << " (" << classes->symmetry
      << ")";
  ASSERT_EQ(classes->devices.size(), all->devices.size());
  for (size_t d = 0; d < all->devices.size(); ++d) {
    EXPECT_TRUE(
        near(classes->devices[d].exposed_communication, all->devices[d].exposed_communication))
        << "device " << d;
    EXPECT_TRUE(near(classes->devices[d].compute, all->devices[d].compute)) << "device " << d;
    EXPECT_TRUE(near(classes->devices[d].finish, all->devices[d].finish)) << "device " << d;
  }
  EXPECT_TRUE(near(classes->mfu, all->mfu));
  for (const auto& [kind, report] : all->op_kinds) {
    const OpKindReport& other = classes->op_kinds.at(kind);
    EXPECT_EQ(other.count, report.count) << kind;
    EXPECT_TRUE(near(other.exposed_seconds, report.exposed_seconds)) << kind;
    EXPECT_TRUE(near(other.communication_seconds, report.communication_seconds)) << kind;
  }
}

TEST(FairShareNetwork, AWeightedFlowTakesTheShareOfTheFlowsItStandsFor) {
  // Flow a stands for two flows on link 0 (capacity 4) and crosses link 1
  // (capacity 10) too; flow b is one flow on link 0. Three flows share link
  // 0: each gets 4/3, as three unweighted flows would.
  FairShareNetwork network({4, 10});
  const LinkId both[] = {0, 1};
  const double weights[] = {2, 1};
  const LinkId zero[] = {0};
  std::vector<std::pair<int32_t, double>> changed;
  const int32_t a = network.Add(both, weights, 2, 8, 0, 0);
  const int32_t b = network.Add(zero, nullptr, 1, 8, 0, 0);
  network.Reallocate(0, &changed);
  EXPECT_DOUBLE_EQ(network.rate(a), 4.0 / 3);
  EXPECT_DOUBLE_EQ(network.rate(b), 4.0 / 3);
  EXPECT_DOUBLE_EQ(network.Load(0), 4.0);
  EXPECT_DOUBLE_EQ(network.Load(1), 4.0 / 3);
}

constexpr const char* kRowsAllReduce = R"(
HloModule rows, num_partitions=16
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[65536] parameter(0)
  ROOT %r = f32[65536] all-reduce(%x), channel_id=1, replica_groups=[4,4]<=[16], use_global_device_ids=true, to_apply=%add
}
)";

TEST(Symmetry, EveryChipOfAWrappingTorusIsOneClass) {
  auto module = Parse(kRowsAllReduce);
  const Symmetry symmetry = FindOn(*module, Torus({4, 4}, {true, true}));
  EXPECT_EQ(symmetry.classes(), 1);
  EXPECT_EQ(symmetry.order(), 16);
  ExpectSameReplay(*module, Torus({4, 4}, {true, true}));
}

TEST(Symmetry, ATorusThatDoesNotWrapHasNoMoves) {
  auto module = Parse(kRowsAllReduce);
  EXPECT_TRUE(FindOn(*module, Torus({4, 4}, {false, false})).trivial());
  // Wrapping along y only: y moves, x does not.
  const Symmetry half = FindOn(*module, Torus({4, 4}, {false, true}));
  EXPECT_EQ(half.classes(), 4);
  ExpectSameReplay(*module, Torus({4, 4}, {false, true}));
}

TEST(Symmetry, GroupsAcrossNodesSplitTheNodeIndexIntoDigits) {
  // Groups {0,2}, {1,3}, {4,6}, {5,7} of nodes (one device per node of 1):
  // a move of the whole node index by 1 maps {0,2} to {1,3} but {1,3} to
  // {2,4}, no group; read as 2 x 2 digits, both move.
  auto module = Parse(R"(
HloModule digits, num_partitions=8
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[4096] parameter(0)
  ROOT %r = f32[4096] all-reduce(%x), channel_id=1, replica_groups={{0,2},{1,3},{4,6},{5,7}}, use_global_device_ids=true, to_apply=%add
}
)");
  const Symmetry symmetry = FindOn(*module, Switched(1, 8));
  EXPECT_EQ(symmetry.classes(), 1) << symmetry.description();
  ExpectSameReplay(*module, Switched(1, 8));
}

TEST(Symmetry, PairsThatDoNotCloseARingPinEveryDevice) {
  // 0 -> 1 -> 2 -> 3 and no 3 -> 0: no move of a ring of 4 maps the pairs
  // onto themselves.
  auto module = Parse(R"(
HloModule chain, num_partitions=4
ENTRY %main {
  %x = f32[4096] parameter(0)
  ROOT %p = f32[4096] collective-permute(%x), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}
}
)");
  EXPECT_TRUE(FindOn(*module, Torus({4}, {true})).trivial());
  ExpectSameReplay(*module, Torus({4}, {true}));
}

TEST(Symmetry, AStragglerOrASlowLinkReplaysEveryDevice) {
  auto module = Parse(kRowsAllReduce);
  const Target target = Torus({4, 4}, {true, true});
  SimOptions straggler;
  straggler.compute_scale = {1, 1.5};
  auto slowed = Simulate(*module, target, straggler);
  ASSERT_TRUE(slowed.ok());
  EXPECT_EQ(slowed->simulated_devices, 16);
  SimOptions slow_link;
  ASSERT_TRUE(ParseLinkScale("0-1=0.5", &slow_link).ok());
  auto slow = Simulate(*module, target, slow_link);
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->simulated_devices, 16);
  auto even = Simulate(*module, target);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(even->simulated_devices, 1);
  EXPECT_GT(slow->step_seconds, even->step_seconds);
}

// A device's slices and link samples in a trace: (phase, name, time,
// duration or value).
std::multiset<std::tuple<std::string, std::string, double, double>> TraceOf(
    const std::string& trace, int device) {
  std::multiset<std::tuple<std::string, std::string, double, double>> events;
  const nlohmann::json json = nlohmann::json::parse(trace);
  for (const auto& event : json["traceEvents"]) {
    if (!event.contains("pid") || event["pid"] != device) continue;
    const std::string phase = event["ph"];
    if (phase == "X") {
      events.emplace(phase, event["name"], event["ts"], event["dur"]);
    } else if (phase == "C") {
      for (const auto& [series, value] : event["args"].items()) {
        events.emplace(phase, event["name"].get<std::string>() + "/" + series, event["ts"],
                       value.get<double>());
      }
    }
  }
  return events;
}

TEST(Symmetry, ATraceShowsTheRepresentativesAsEveryDeviceWouldShowThem) {
  // Rows along x, which wraps; y does not: four classes, one per row,
  // whose representatives are devices 0, 4, 8 and 12.
  auto module = Parse(kRowsAllReduce);
  const Target target = Torus({4, 4}, {true, false});
  SimOptions traced;
  traced.trace = true;
  auto classes = Simulate(*module, target, traced);
  traced.exploit_symmetry = false;
  auto all = Simulate(*module, target, traced);
  ASSERT_TRUE(classes.ok() && all.ok());
  EXPECT_EQ(classes->simulated_devices, 4);
  std::set<int> rows;
  const nlohmann::json json = nlohmann::json::parse(classes->trace_json);
  for (const auto& event : json["traceEvents"]) {
    if (event.contains("pid")) rows.insert(event["pid"].get<int>());
  }
  EXPECT_EQ(rows, (std::set<int>{0, 4, 8, 12}));
  for (int device : {0, 4, 12}) {
    const auto mine = TraceOf(classes->trace_json, device);
    EXPECT_GT(mine.size(), 2u);
    EXPECT_EQ(mine, TraceOf(all->trace_json, device)) << "device " << device;
  }
}

TEST(Symmetry, TheReplaysAgreeOnMixedCollectivesOnEveryTopology) {
  // Tensor-parallel gathers and sums inside pairs, data-parallel sums and
  // an all-to-all across them, a cyclic permute, async pairs around a dot
  // and a loop that transfers.
  auto module = Parse(R"(
HloModule mixed, num_partitions=8
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%cond (c: (s32[], f32[256,256])) -> pred[] {
  %c = (s32[], f32[256,256]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (b: (s32[], f32[256,256])) -> (s32[], f32[256,256]) {
  %b = (s32[], f32[256,256]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %x = f32[256,256] get-tuple-element(%b), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %d = f32[256,256] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[256,256] all-reduce(%d), channel_id=5, replica_groups=[4,2]<=[8], use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[256,256]) tuple(%j, %r)
}
ENTRY %main {
  %x = f32[256,256] parameter(0)
  %g = f32[512,256] all-gather(%x), channel_id=1, replica_groups=[4,2]<=[8], dimensions={0}, use_global_device_ids=true
  %s = (f32[256,256], f32[1024,256]) all-gather-start(%x), channel_id=2, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, use_global_device_ids=true
  %d = f32[512,256] dot(%g, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sd = f32[1024,256] all-gather-done(%s)
  %a = f32[512,256] all-to-all(%d), channel_id=3, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}
  %p = f32[512,256] collective-permute(%a), channel_id=4, source_target_pairs={{0,2},{2,4},{4,6},{6,0},{1,3},{3,5},{5,7},{7,1}}
  %zero = s32[] constant(0)
  %init = (s32[], f32[256,256]) tuple(%zero, %x)
  %w = (s32[], f32[256,256]) while(%init), condition=%cond, body=%body
  %rs = f32[256,256] reduce-scatter(%p), channel_id=6, replica_groups=[4,2]<=[8], dimensions={0}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (f32[1024,256], f32[256,256], (s32[], f32[256,256])) tuple(%sd, %rs, %w)
}
)");
  ASSERT_NE(module, nullptr);
  ASSERT_TRUE(ir::VerifyModule(*module).ok()) << ir::VerifyModule(*module).error().ToString();
  for (const Target& target :
       {Torus({2, 4}, {true, true}), Torus({8}, {true}), Torus({2, 2, 2}, {true, false, true}),
        Switched(2, 4), Switched(4, 2), Switched(1, 8), Bus()}) {
    SCOPED_TRACE(Describe(target));
    EXPECT_LT(FindOn(*module, target).classes(), 8);
    ExpectSameReplay(*module, target);
  }
}

TEST(Symmetry, TheReplaysAgreeOnTrainingSteps) {
  // Tensor, data, context and pipeline parallel steps (with sequence
  // parallelism and ZeRO-3): the pipeline's hand-offs do not close a ring,
  // sums over every device do not move with the data axis, and ring
  // attention's permutes close a ring on the context axis; under 1F1B
  // (interleaved too: its hand-offs wrap round the stages) each loop's
  // iteration hands on both ways.
  model::ModelConfig config;
  config.layers = 4;
  config.batch = 16;
  for (const auto& [tensor, data, pipeline, zero, sequence, context, schedule, virtual_stages] :
       std::vector<
           std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int64_t, std::string, int64_t>>{
           {2, 4, 1, 0, false, 1, "gpipe", 1},
           {2, 2, 2, 0, true, 1, "gpipe", 1},
           {4, 2, 1, 3, true, 1, "gpipe", 1},
           {2, 2, 4, 0, false, 1, "gpipe", 1},
           {2, 2, 1, 0, true, 4, "gpipe", 1},
           {2, 1, 2, 1, false, 4, "gpipe", 1},
           {2, 2, 4, 0, true, 1, "1f1b", 1},
           {2, 4, 2, 1, false, 1, "1f1b", 2}}) {
    model::ParallelPlan plan;
    plan.schedule = schedule;
    plan.virtual_stages = virtual_stages;
    plan.tensor = tensor;
    plan.data = data;
    plan.context = context;
    plan.pipeline = pipeline;
    plan.micro_batches = pipeline > 1 ? 4 : 1;
    plan.zero_stage = zero;
    plan.sequence_parallel = sequence;
    auto text = model::BuildTrainingStep(config, plan);
    ASSERT_TRUE(text.ok()) << text.error().message;
    auto module = Parse(*text);
    ASSERT_NE(module, nullptr);
    for (const Target& target :
         {Torus({2, 2, 4}, {true, true, true}), Switched(4, 4), Switched(2, 8)}) {
      SCOPED_TRACE(model::PlanName(plan) + " on " + Describe(target));
      ExpectSameReplay(*module, target);
    }
  }
}

TEST(Symmetry, TheReplaysAgreeOnEveryCorpusModule) {
  for (const std::string& path : test::CorpusAndExamplePaths()) {
    SCOPED_TRACE(path);
    auto parsed = ir::ParseModuleFile(path);
    ASSERT_TRUE(parsed.ok());
    auto verified = ir::VerifyModule(**parsed);
    if (!verified.ok()) continue;
    const int64_t devices = verified->partition_count * verified->replica_count;
    for (const char* family : {"tpu-v4:auto", "dgx-h100:auto"}) {
      auto target = cost::FindTarget(family, devices);
      ASSERT_TRUE(target.ok());
      ExpectSameReplay(**parsed, *target);
    }
  }
}

}  // namespace
}  // namespace loom::sim
