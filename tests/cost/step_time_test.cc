// The step estimate on hand-written schedules with a fake cost model (dots
// and transfers of fixed lengths, everything else free), so that every
// expected time is a closed form.
#include "cost/step_time.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "ir/async.h"
#include "ir/parser.h"

namespace loom::cost {
namespace {

constexpr double kUs = 1e-6;

// A dot takes dot_us, every transfer (a synchronous collective or a start)
// transfer_us; nothing else takes time.
class FakeCostModel : public CostModel {
 public:
  FakeCostModel(double dot_us, double transfer_us)
      : dot_(dot_us * kUs), transfer_(transfer_us * kUs) {}
  double ComputeSeconds(const ir::Instruction& instruction) const override {
    return instruction.opcode() == ir::Opcode::kDot ? dot_ : 0;
  }
  double TransferSeconds(const ir::Instruction& instruction, const ir::DeviceGrid&) const override {
    const TransferRole role = TransferRoleOf(instruction);
    return role == TransferRole::kSynchronous || role == TransferRole::kStart ? transfer_ : 0;
  }

 private:
  double dot_, transfer_;
};

StepEstimate Estimate(std::string_view hlo, double dot_us, double transfer_us) {
  auto module = ir::ParseModule(hlo);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  if (!module.ok()) return {};
  FakeCostModel model(dot_us, transfer_us);
  Expected<StepEstimate> estimate = EstimateStep(**module, model);
  EXPECT_TRUE(estimate.ok()) << estimate.error().ToString();
  return estimate.ok() ? *estimate : StepEstimate{};
}

#define EXPECT_US(seconds, us) EXPECT_NEAR((seconds) / kUs, (us), 1e-9)

TEST(StepTime, SequentialProgramAddsUp) {
  constexpr std::string_view kHlo = R"(
HloModule sequential, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %d1 = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %g = f32[8,4] all-gather(%d1), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  ROOT %d2 = f32[8,4] dot(%g, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";
  const StepEstimate e = Estimate(kHlo, 1, 2);
  EXPECT_US(e.total_seconds, 4);
  EXPECT_US(e.compute_seconds, 2);
  EXPECT_US(e.transfer_seconds, 2);
  EXPECT_US(e.exposed_transfer_seconds, 2);
  EXPECT_TRUE(e.unknown_trip_counts.empty());
}

// start; an independent dot; done; the dot that needs the transfer.
constexpr std::string_view kOverlapped = R"(
HloModule overlapped, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %d = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[4,4] collective-permute-done(%s)
  ROOT %sum = f32[4,4] add(%d, %r)
}
)";

TEST(StepTime, TransferHiddenBehindALongerDot) {
  const StepEstimate e = Estimate(kOverlapped, 3, 2);
  EXPECT_US(e.total_seconds, 3);  // the dot's time
  EXPECT_US(e.compute_seconds, 3);
  EXPECT_US(e.transfer_seconds, 2);
  EXPECT_US(e.exposed_transfer_seconds, 0);
}

TEST(StepTime, TransferLongerThanTheDotIsPartlyExposed) {
  const StepEstimate e = Estimate(kOverlapped, 1, 2);
  EXPECT_US(e.total_seconds, 2);  // the transfer's time
  EXPECT_US(e.exposed_transfer_seconds, 1);
}

TEST(StepTime, DoneRightAfterStartSerialises) {
  constexpr std::string_view kSerialised = R"(
HloModule serialised, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %r = f32[4,4] collective-permute-done(%s)
  %d = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %sum = f32[4,4] add(%d, %r)
}
)";
  const StepEstimate serial = Estimate(kSerialised, 3, 2);
  EXPECT_US(serial.total_seconds, 5);  // dot + transfer
  EXPECT_US(serial.exposed_transfer_seconds, 2);
  const StepEstimate overlapped = Estimate(kOverlapped, 3, 2);
  EXPECT_US(overlapped.total_seconds, 3);  // max(dot, transfer)
}

TEST(StepTime, TransfersOfOneKindShareAStream) {
  // Two permutes in flight at once run one after the other; an all-gather
  // has its own stream and runs beside them.
  constexpr std::string_view kHlo = R"(
HloModule streams, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s1 = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %s2 = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %g = (f32[4,4], f32[8,4]) all-gather-start(%x), channel_id=3, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %d = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r1 = f32[4,4] collective-permute-done(%s1)
  %gd = f32[8,4] all-gather-done(%g)
  %r2 = f32[4,4] collective-permute-done(%s2)
  ROOT %t = (f32[4,4], f32[4,4], f32[4,4], f32[8,4]) tuple(%d, %r1, %r2, %gd)
}
)";
  const StepEstimate e = Estimate(kHlo, 1, 2);
  // s1 0..2, s2 2..4, g 0..2; dot 0..1; waits 1..2 and 2..4.
  EXPECT_US(e.total_seconds, 4);
  EXPECT_US(e.transfer_seconds, 6);
  EXPECT_US(e.exposed_transfer_seconds, 3);
}

// The fake model, with each start's links given by name.
class FakeLinkedModel : public FakeCostModel {
 public:
  FakeLinkedModel(double dot_us, double transfer_us,
                  std::map<std::string, std::vector<int64_t>> links)
      : FakeCostModel(dot_us, transfer_us), links_(std::move(links)) {}
  std::vector<int64_t> TransferLinks(const ir::Instruction& instruction,
                                     const ir::DeviceGrid&) const override {
    auto it = links_.find(instruction.name());
    return it == links_.end() ? std::vector<int64_t>{} : it->second;
  }

 private:
  std::map<std::string, std::vector<int64_t>> links_;
};

TEST(StepTime, TransfersOfOneKindOnDisjointLinksRunAtOnce) {
  // Three permutes issued together: a and b on links of their own, c on
  // a's. In program order a, b, c: a and b 0..2, c after a 2..4. In order
  // a, c, b: c waits for a (2..4) and b, issued after c, begins no earlier
  // than c (2..4).
  constexpr std::string_view kHlo = R"(
HloModule links, num_partitions=2
ENTRY %main {{
  %x = f32[4,4] parameter(0)
  %{0} = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{{{0,1}}}}
  %{1} = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=2, source_target_pairs={{{{0,1}}}}
  %{2} = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=3, source_target_pairs={{{{0,1}}}}
  %d = f32[4,4] dot(%x, %x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %r0 = f32[4,4] collective-permute-done(%{0})
  %r1 = f32[4,4] collective-permute-done(%{1})
  %r2 = f32[4,4] collective-permute-done(%{2})
  ROOT %t = (f32[4,4], f32[4,4], f32[4,4], f32[4,4]) tuple(%d, %r0, %r1, %r2)
}}
)";
  const FakeLinkedModel model(1, 2, {{"a", {1, 2}}, {"b", {3}}, {"c", {2, 5}}});
  const auto step = [&](const char* first, const char* second, const char* third) {
    auto module = ir::ParseModule(fmt::format(kHlo, first, second, third));
    EXPECT_TRUE(module.ok()) << module.error().ToString();
    return module.ok() ? EstimateStep(**module, model)->total_seconds : 0.0;
  };
  EXPECT_US(step("a", "b", "c"), 4);
  EXPECT_US(step("a", "c", "b"), 4);
  EXPECT_US(step("a", "b", "u"), 4);  // u's links are unknown: it waits for both
  // Unknown links (the plain fake model) run one after the other: 6.
  auto module = ir::ParseModule(fmt::format(kHlo, "a", "b", "c"));
  ASSERT_TRUE(module.ok());
  EXPECT_US(EstimateStep(**module, FakeCostModel(1, 2))->total_seconds, 6);
  const FakeLinkedModel disjoint(1, 2, {{"a", {1}}, {"b", {2}}, {"c", {3}}});
  EXPECT_US(EstimateStep(**module, disjoint)->total_seconds, 2);
}

// A counted loop: i from 0 while i < 3; each iteration a dot then a
// synchronous permute of its result.
constexpr std::string_view kLoop = R"(
HloModule loop, num_partitions=2
%cond {
  %cp = (s32[], f32[4,4]) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %limit = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}
%body {
  %bp = (s32[], f32[4,4]) parameter(0)
  %bi = s32[] get-tuple-element(%bp), index=0
  %bx = f32[4,4] get-tuple-element(%bp), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %bd = f32[4,4] dot(%bx, %bx), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sent = f32[4,4] collective-permute(%bd), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ROOT %bt = (s32[], f32[4,4]) tuple(%next, %sent)
}
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,4]) tuple(%zero, %x)
  %w = (s32[], f32[4,4]) while(%init), condition=%cond, body=%body
  ROOT %y = f32[4,4] get-tuple-element(%w), index=1
}
)";

TEST(StepTime, WhileLoopRunsItsTripCount) {
  const StepEstimate e = Estimate(kLoop, 1, 2);
  EXPECT_US(e.total_seconds, 9);  // 3 x (1 + 2)
  EXPECT_US(e.compute_seconds, 3);
  EXPECT_US(e.transfer_seconds, 6);
  EXPECT_US(e.exposed_transfer_seconds, 6);
  EXPECT_TRUE(e.unknown_trip_counts.empty());
}

TEST(StepTime, LongLoopsAreExtrapolatedExactly) {
  // A million trips, each a dot (1 us) beside a permute (2 us) whose done
  // follows the dot: 2 us a trip, 1 of them exposed.
  std::string hlo(R"(
HloModule long_loop, num_partitions=2
%cond {
  %cp = (s32[], f32[4,4]) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %limit = s32[] constant(1000000)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}
%body {
  %bp = (s32[], f32[4,4]) parameter(0)
  %bi = s32[] get-tuple-element(%bp), index=0
  %bx = f32[4,4] get-tuple-element(%bp), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %s = (f32[4,4], f32[4,4]) collective-permute-start(%bx), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %bd = f32[4,4] dot(%bx, %bx), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[4,4] collective-permute-done(%s)
  %sum = f32[4,4] add(%bd, %r)
  ROOT %bt = (s32[], f32[4,4]) tuple(%next, %sum)
}
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,4]) tuple(%zero, %x)
  %w = (s32[], f32[4,4]) while(%init), condition=%cond, body=%body
  ROOT %y = f32[4,4] get-tuple-element(%w), index=1
}
)");
  const StepEstimate e = Estimate(hlo, 1, 2);
  EXPECT_NEAR(e.total_seconds / kUs, 2e6, 1e-3);
  EXPECT_NEAR(e.compute_seconds / kUs, 1e6, 1e-3);
  EXPECT_NEAR(e.transfer_seconds / kUs, 2e6, 1e-3);
  EXPECT_NEAR(e.exposed_transfer_seconds / kUs, 1e6, 1e-3);
}

TEST(StepTime, UnknownTripCountRunsOnceAndSaysSo) {
  std::string hlo(kLoop);
  // The bound is now a parameter of the loop state: not a constant.
  const std::string from = "%limit = s32[] constant(3)\n  ROOT %lt = pred[] compare(%ci, %limit)";
  const std::string to =
      "%limit = s32[] constant(3)\n  %bound = s32[] add(%limit, %ci)\n"
      "  ROOT %lt = pred[] compare(%ci, %bound)";
  ASSERT_NE(hlo.find(from), std::string::npos);
  hlo.replace(hlo.find(from), from.size(), to);
  const StepEstimate e = Estimate(hlo, 1, 2);
  EXPECT_US(e.total_seconds, 3);
  ASSERT_EQ(e.unknown_trip_counts, std::vector<std::string>{"w"});
  EXPECT_NE(e.ToString().find("trip count unknown: %w"), std::string::npos) << e.ToString();
}

TEST(StepTime, ConditionalTakesTheSlowestBranchAndCallsTheirCallee) {
  constexpr std::string_view kHlo = R"(
HloModule branches, num_partitions=2
%fast {
  %fx = f32[4,4] parameter(0)
  ROOT %fn = f32[4,4] negate(%fx)
}
%slow {
  %sx = f32[4,4] parameter(0)
  %sd = f32[4,4] dot(%sx, %sx), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %sd2 = f32[4,4] dot(%sd, %sx), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%callee {
  %kx = f32[4,4] parameter(0)
  ROOT %kd = f32[4,4] dot(%kx, %kx), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %b = s32[] parameter(1)
  %c = f32[4,4] conditional(%b, %x, %x), branch_computations={%fast, %slow}
  ROOT %k = f32[4,4] call(%c), to_apply=%callee
}
)";
  const StepEstimate e = Estimate(kHlo, 1, 2);
  EXPECT_US(e.total_seconds, 3);
  EXPECT_US(e.compute_seconds, 3);
}

// The fake model, each transfer on the ports given by its name (every
// device alike).
class FakePortedModel : public FakeCostModel {
 public:
  FakePortedModel(double dot_us, double transfer_us, std::map<std::string, PortMask> ports)
      : FakeCostModel(dot_us, transfer_us), ports_(std::move(ports)) {}
  TransferSegmentTable TransferSegmentsByDevice(const ir::Instruction& instruction,
                                                const ir::DeviceGrid& grid) const override {
    auto it = ports_.find(instruction.name());
    const double seconds = TransferSeconds(instruction, grid);
    TransferSegmentTable table;
    table.distinct = {{TransferSegment{seconds, it == ports_.end() ? 0 : it->second, 1}}};
    table.row_of_device.assign(static_cast<size_t>(grid.size()), seconds > 0 ? 0 : -1);
    return table;
  }

 private:
  std::map<std::string, PortMask> ports_;
};

TEST(StepTime, TransfersInFlightAtOnceShareTheirPorts) {
  // The header's example: a permute and an all-gather of 2 us each started
  // together beside a dot of 1 us. On one port each moves at half speed and
  // both end at 4 us; on ports of their own, or with no contention, at 2.
  constexpr std::string_view kHlo = R"(
HloModule ports, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %g = (f32[4,4], f32[8,4]) all-gather-start(%x), channel_id=2, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %d = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[4,4] collective-permute-done(%s)
  %gd = f32[8,4] all-gather-done(%g)
  ROOT %t = (f32[4,4], f32[4,4], f32[8,4]) tuple(%d, %r, %gd)
}
)";
  auto module = ir::ParseModule(kHlo);
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  const FakePortedModel shared(1, 2, {{"s", 0b1}, {"g", 0b1}});
  const StepEstimate e = *EstimateStep(**module, shared);
  EXPECT_US(e.total_seconds, 4);
  EXPECT_US(e.exposed_transfer_seconds, 3);
  EXPECT_US(e.transfer_seconds, 4);  // what they would take alone
  EXPECT_US(EstimateStep(**module, shared, Contention::kNone)->total_seconds, 2);
  const FakePortedModel apart(1, 2, {{"s", 0b01}, {"g", 0b10}});
  EXPECT_US(EstimateStep(**module, apart)->total_seconds, 2);
  // The scheduler's replay, one instruction at a time, sees the same.
  Timeline timeline(shared, ir::DeviceGrid{1, 2});
  const ir::Computation& entry = *(*module)->entry();
  for (const char* name : {"x", "s", "g"}) timeline.Run(*entry.FindInstruction(name));
  EXPECT_US(*timeline.TransferFinish(*entry.FindInstruction("s")), 4);
}

TEST(StepTime, KindsAndRoles) {
  EXPECT_EQ(TransferKindName(TransferKind::kReduceScatter), "reduce-scatter");
  EXPECT_EQ(ParseTransferKind("collective-permute"), TransferKind::kCollectivePermute);
  EXPECT_EQ(ParseTransferKind("bogus"), std::nullopt);
  auto module = ir::ParseModule(kOverlapped);
  ASSERT_TRUE(module.ok());
  const ir::Computation& entry = *(*module)->entry();
  EXPECT_EQ(TransferRoleOf(*entry.FindInstruction("s")), TransferRole::kStart);
  EXPECT_EQ(TransferRoleOf(*entry.FindInstruction("r")), TransferRole::kDone);
  EXPECT_EQ(TransferRoleOf(*entry.FindInstruction("d")), TransferRole::kNone);
  EXPECT_EQ(TransferKindOf(*entry.FindInstruction("r")), TransferKind::kCollectivePermute);
  EXPECT_EQ(ir::StartOf(*entry.FindInstruction("r")), entry.FindInstruction("s"));
}

}  // namespace
}  // namespace loom::cost
