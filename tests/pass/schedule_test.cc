// schedule on rings the collective-matmul pass writes (then made
// asynchronous) and on hand-written modules, with a fake cost model (dots
// 1 us, transfers 2 us, everything else free): the relative order of starts,
// dots and dones, the in-flight limit, validity of the order, the step
// estimate in closed form, and execution bitwise equal to the unscheduled
// module.
#include "pass/schedule.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "cost/step_time.h"
#include "exec/runner.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "pass/async_collectives.h"
#include "pass/collective_matmul.h"
#include "pass/module_testing.h"

namespace loom::pass {
namespace {

using test::ExpectSameResults;
using test::ExpectVerifies;
constexpr auto Parse = test::ParseOrFail;

using cost::TransferRole;
using ir::Instruction;

constexpr double kUs = 1e-6;

class FakeCostModel : public cost::CostModel {
 public:
  double ComputeSeconds(const Instruction& instruction) const override {
    return instruction.opcode() == ir::Opcode::kDot ? 1 * kUs : 0;
  }
  double TransferSeconds(const Instruction& instruction, const ir::DeviceGrid&) const override {
    const TransferRole role = cost::TransferRoleOf(instruction);
    return role == TransferRole::kSynchronous || role == TransferRole::kStart ? 2 * kUs : 0;
  }
};

// The three stages of one rewrite, as text.
struct Stages {
  std::string ring;       // collective-matmul's output
  std::string async;      // then async-collectives
  std::string scheduled;  // then schedule
  std::vector<std::string> explanation;
};

Stages Rewrite(std::string_view hlo, CollectiveMatmulOptions ring_options,
               ScheduleOptions schedule_options = {}) {
  Stages stages;
  auto module = Parse(hlo);
  if (!module) return stages;
  CollectiveMatmul ring(ring_options);
  Expected<bool> changed = ring.Run(*module);
  EXPECT_TRUE(changed.ok() && *changed) << (changed.ok() ? "unchanged" : changed.error().message);
  stages.ring = ir::PrintModule(*module);
  AsyncCollectives async;
  changed = async.Run(*module);
  EXPECT_TRUE(changed.ok() && *changed);
  ExpectVerifies(*module);
  stages.async = ir::PrintModule(*module);
  FakeCostModel model;
  Schedule schedule(model, schedule_options);
  changed = schedule.Run(*module);
  EXPECT_TRUE(changed.ok() && *changed) << (changed.ok() ? "unchanged" : changed.error().message);
  EXPECT_TRUE(module->is_scheduled());
  ExpectVerifies(*module);
  stages.scheduled = ir::PrintModule(*module);
  stages.explanation = schedule.Explain();
  return stages;
}

double EstimateUs(std::string_view text) {
  auto module = Parse(text);
  if (!module) return -1;
  FakeCostModel model;
  Expected<cost::StepEstimate> estimate = cost::EstimateStep(*module, model);
  EXPECT_TRUE(estimate.ok()) << estimate.error().ToString();
  return estimate.ok() ? estimate->total_seconds / kUs : -1;
}

std::unordered_map<const Instruction*, size_t> Positions(const ir::Computation& computation) {
  std::unordered_map<const Instruction*, size_t> position;
  for (size_t i = 0; i < computation.instructions().size(); ++i) {
    position[computation.instructions()[i].get()] = i;
  }
  return position;
}

// Every operand and control predecessor comes before its user.
void ExpectValidOrder(const ir::Computation& computation) {
  const auto position = Positions(computation);
  for (const auto& instruction : computation.instructions()) {
    for (const Instruction* operand : instruction->operands()) {
      EXPECT_LT(position.at(operand), position.at(instruction.get()))
          << "%" << operand->name() << " after its user %" << instruction->name();
    }
    for (const Instruction* predecessor : instruction->attrs().control_predecessors) {
      EXPECT_LT(position.at(predecessor), position.at(instruction.get()));
    }
  }
}

// The most transfers of each kind open at once, walking the text order.
std::unordered_map<cost::TransferKind, int64_t> MaxOpen(const ir::Computation& computation) {
  std::unordered_map<cost::TransferKind, int64_t> open, most;
  for (const auto& instruction : computation.instructions()) {
    const TransferRole role = cost::TransferRoleOf(*instruction);
    if (role == TransferRole::kStart) {
      const cost::TransferKind kind = *cost::TransferKindOf(*instruction);
      most[kind] = std::max(most[kind], ++open[kind]);
    } else if (role == TransferRole::kDone) {
      --open[*cost::TransferKindOf(*instruction)];
    }
  }
  return most;
}

// The done that completes `start`.
const Instruction* DoneOf(const ir::Computation& computation, const Instruction* start) {
  for (const Instruction* user : computation.Users(start)) {
    if (cost::TransferRoleOf(*user) == TransferRole::kDone) return user;
  }
  return nullptr;
}

bool DependsOn(const Instruction* user, const Instruction* value) {
  std::unordered_set<const Instruction*> seen;
  std::vector<const Instruction*> stack = {user};
  while (!stack.empty()) {
    const Instruction* at = stack.back();
    stack.pop_back();
    if (at == value) return true;
    if (!seen.insert(at).second) continue;
    for (const Instruction* operand : at->operands()) stack.push_back(operand);
  }
  return false;
}

// Each start comes before every dot of its computation that does not need
// its transfer but reads what it sends (the step's own dot), and its done
// after that dot. Returns how many such (start, dot) pairs there were.
int64_t ExpectStartsAroundTheirDots(const ir::Computation& computation) {
  const auto position = Positions(computation);
  int64_t pairs = 0;
  for (const auto& instruction : computation.instructions()) {
    if (cost::TransferRoleOf(*instruction) != TransferRole::kStart) continue;
    const Instruction* start = instruction.get();
    const Instruction* done = DoneOf(computation, start);
    EXPECT_NE(done, nullptr) << start->name();
    if (!done) continue;
    for (const auto& dot : computation.instructions()) {
      if (dot->opcode() != ir::Opcode::kDot || DependsOn(dot.get(), done)) continue;
      if (!DependsOn(dot.get(), start->operand(0))) continue;
      ++pairs;
      EXPECT_LT(position.at(start), position.at(dot.get()))
          << "%" << start->name() << " after %" << dot->name();
      EXPECT_LT(position.at(dot.get()), position.at(done))
          << "%" << done->name() << " before %" << dot->name();
    }
  }
  return pairs;
}

CollectiveMatmulOptions Ring(RingDirection direction, RingForm form) {
  CollectiveMatmulOptions options;
  options.min_bytes = 0;
  options.direction = direction;
  options.form = form;
  return options;
}

constexpr std::string_view kGather = R"(
HloModule ag, num_partitions=4
ENTRY %main {
  %x = f32[2,6] parameter(0)
  %w = f32[6,5] parameter(1)
  %x.full = f32[8,6] all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT %y = f32[8,5] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

TEST(Schedule, UnrolledRingOverlapsEachTransferWithItsStepsDot) {
  const Stages stages = Rewrite(kGather, Ring(RingDirection::kUnidirectional, RingForm::kUnrolled));
  auto module = Parse(stages.scheduled);
  ASSERT_TRUE(module);
  const ir::Computation& entry = *module->entry();
  ExpectValidOrder(entry);
  EXPECT_EQ(ExpectStartsAroundTheirDots(entry), 3);
  EXPECT_EQ(MaxOpen(entry)[cost::TransferKind::kCollectivePermute], 1);
  EXPECT_EQ(entry.instructions()[0]->opcode(), ir::Opcode::kParameter);
  EXPECT_EQ(entry.instructions()[1]->opcode(), ir::Opcode::kParameter);
  EXPECT_EQ(entry.instructions().back().get(), entry.root());
  // Three 2 us transfers, each beside a 1 us dot, then the last dot: 7 us
  // against 4 + 6 in the ring's own order.
  EXPECT_NEAR(EstimateUs(stages.ring), 10, 1e-9);
  EXPECT_NEAR(EstimateUs(stages.async), 10, 1e-9);
  EXPECT_NEAR(EstimateUs(stages.scheduled), 7, 1e-9);
  ASSERT_FALSE(stages.explanation.empty());
  EXPECT_NE(stages.explanation.back().find("10.000 us -> 7.000 us"), std::string::npos)
      << stages.explanation.back();
  ExpectSameResults(stages.async, stages.scheduled, 4);
  ExpectSameResults(kGather, stages.scheduled, 4);
}

TEST(Schedule, InFlightLimitHoldsAndTwoMayFlyWhenAllowed) {
  const auto bidirectional = Ring(RingDirection::kBidirectional, RingForm::kUnrolled);
  const Stages one = Rewrite(kGather, bidirectional);
  auto module = Parse(one.scheduled);
  ASSERT_TRUE(module);
  ExpectValidOrder(*module->entry());
  EXPECT_EQ(MaxOpen(*module->entry())[cost::TransferKind::kCollectivePermute], 1);

  ScheduleOptions two;
  two.MaxInFlight(cost::TransferKind::kCollectivePermute) = 2;
  const Stages both = Rewrite(kGather, bidirectional, two);
  module = Parse(both.scheduled);
  ASSERT_TRUE(module);
  ExpectValidOrder(*module->entry());
  EXPECT_EQ(MaxOpen(*module->entry())[cost::TransferKind::kCollectivePermute], 2);
  ExpectSameResults(both.async, both.scheduled, 4);
  ExpectSameResults(one.scheduled, both.scheduled, 4);
}

TEST(Schedule, LoopRingOverlapsInsideTheBody) {
  const Stages stages = Rewrite(kGather, Ring(RingDirection::kUnidirectional, RingForm::kLoop));
  auto module = Parse(stages.scheduled);
  ASSERT_TRUE(module);
  const ir::Computation* body = nullptr;
  for (const auto& computation : module->computations()) {
    ExpectValidOrder(*computation);
    for (const auto& instruction : computation->instructions()) {
      if (instruction->opcode() == ir::Opcode::kCollectivePermuteStart &&
          computation.get() != module->entry()) {
        body = computation.get();
      }
    }
  }
  ASSERT_NE(body, nullptr) << stages.scheduled;
  EXPECT_EQ(ExpectStartsAroundTheirDots(*body), 1) << stages.scheduled;
  EXPECT_EQ(MaxOpen(*body)[cost::TransferKind::kCollectivePermute], 1);
  // The loop's three trips each take max(dot, transfer) once scheduled.
  EXPECT_LT(EstimateUs(stages.scheduled), EstimateUs(stages.async));
  ExpectSameResults(stages.async, stages.scheduled, 4);
  ExpectSameResults(kGather, stages.scheduled, 4);
}

TEST(Schedule, ReduceScatterRingKeepsItsChainMoving) {
  constexpr std::string_view kReduceScatter = R"(
HloModule rs, num_partitions=4
%add {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}
ENTRY %main {
  %a = f32[3,4] parameter(0)
  %b = f32[4,8] parameter(1)
  %p.0 = f32[3,8] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = f32[3,2] reduce-scatter(%p.0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true, to_apply=%add
}
)";
  const Stages stages =
      Rewrite(kReduceScatter, Ring(RingDirection::kUnidirectional, RingForm::kUnrolled));
  auto module = Parse(stages.scheduled);
  ASSERT_TRUE(module);
  ExpectValidOrder(*module->entry());
  EXPECT_EQ(MaxOpen(*module->entry())[cost::TransferKind::kCollectivePermute], 1);
  // The first block's dot, then three 2 us transfers in a row, the other
  // dots hidden beside them: 7 us, against 4 dots + 3 transfers = 10.
  EXPECT_NEAR(EstimateUs(stages.async), 10, 1e-9);
  EXPECT_NEAR(EstimateUs(stages.scheduled), 7, 1e-9);
  ExpectSameResults(stages.async, stages.scheduled, 4);
  ExpectSameResults(kReduceScatter, stages.scheduled, 4);
}

// An op unrelated to the pending transfer is not made to wait for it;
// parameters come first and the root last.
TEST(Schedule, NoFalseDependenciesParametersFirstRootLast) {
  constexpr std::string_view kHlo = R"(
HloModule m, num_partitions=2
ENTRY %main {
  %c = f32[] constant(2)
  %x = f32[4,4] parameter(0)
  %s = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %r = f32[4,4] collective-permute-done(%s)
  %y = f32[4,4] parameter(1)
  %u = f32[4,4] negate(%y)
  %d = f32[4,4] dot(%y, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z = f32[4,4] add(%r, %x)
  ROOT %t = (f32[4,4], f32[4,4], f32[4,4], f32[]) tuple(%z, %d, %u, %c)
}
)";
  auto module = Parse(kHlo);
  ASSERT_TRUE(module);
  const std::string before = ir::PrintModule(*module);
  FakeCostModel model;
  Schedule schedule(model);
  Expected<bool> changed = schedule.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.error().message;
  EXPECT_TRUE(*changed);
  ExpectVerifies(*module);
  std::vector<std::string> order;
  for (const auto& instruction : module->entry()->instructions()) {
    order.push_back(instruction->name());
  }
  // The start as early as it can be; the dot (longest path) and the negate
  // beside the transfer; the done when nothing else is left but its users.
  EXPECT_EQ(order, (std::vector<std::string>{"x", "y", "s", "d", "c", "u", "r", "z", "t"}));
  EXPECT_NEAR(EstimateUs(before), 3, 1e-9);
  EXPECT_NEAR(EstimateUs(ir::PrintModule(*module)), 2, 1e-9);
  ExpectSameResults(before, ir::PrintModule(*module), 2);

  // Scheduling a scheduled module again changes nothing.
  const std::string once = ir::PrintModule(*module);
  changed = schedule.Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::PrintModule(*module), once);
}

TEST(Schedule, ControlPredecessorsAreKept) {
  constexpr std::string_view kHlo = R"(
HloModule m, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %d = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}, control-predecessors={%d}
  %r = f32[4,4] collective-permute-done(%s)
  ROOT %z = f32[4,4] add(%r, %d)
}
)";
  auto module = Parse(kHlo);
  ASSERT_TRUE(module);
  FakeCostModel model;
  Schedule schedule(model);
  ASSERT_TRUE(schedule.Run(*module).ok());
  ExpectValidOrder(*module->entry());
  std::vector<std::string> order;
  for (const auto& instruction : module->entry()->instructions()) {
    order.push_back(instruction->name());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"x", "d", "s", "r", "z"}));
}

// The scheduled module and its explanation with `order`.
struct Ordered {
  std::string text;
  std::vector<std::string> explanation;
};
Ordered ScheduleWith(std::string_view hlo, ScheduleOrder order) {
  auto module = Parse(hlo);
  if (!module) return {};
  FakeCostModel model;
  ScheduleOptions options;
  options.order = order;
  Schedule schedule(model, options);
  EXPECT_TRUE(schedule.Run(*module).ok());
  ExpectValidOrder(*module->entry());
  return {ir::PrintModule(*module), schedule.Explain()};
}

// Schedules `hlo` each way: top-down takes `top_down_us`, bottom-up
// `bottom_up_us`, and the default keeps the faster (`chosen`) and says so.
// Returns the chosen order's text.
std::string ExpectBothOrders(std::string_view hlo, double top_down_us, double bottom_up_us,
                             std::string_view chosen) {
  const Ordered top_down = ScheduleWith(hlo, ScheduleOrder::kTopDown);
  const Ordered bottom_up = ScheduleWith(hlo, ScheduleOrder::kBottomUp);
  const Ordered best = ScheduleWith(hlo, ScheduleOrder::kBest);
  EXPECT_NEAR(EstimateUs(top_down.text), top_down_us, 1e-9);
  EXPECT_NEAR(EstimateUs(bottom_up.text), bottom_up_us, 1e-9);
  EXPECT_EQ(best.text, chosen == "top-down" ? top_down.text : bottom_up.text);
  EXPECT_EQ(best.explanation.size(), 1u);
  const std::string said = fmt::format("({}; top-down {:.3f} us, bottom-up {:.3f} us)", chosen,
                                       top_down_us, bottom_up_us);
  for (const std::string& line : best.explanation) {
    EXPECT_NE(line.find(said), std::string::npos) << line;
  }
  ExpectSameResults(hlo, best.text, 2);
  return best.text;
}

TEST(Schedule, BottomUpStartsATransferJustEarlyEnoughToBeCovered) {
  // A's operand is ready at once but A is needed only at the end; B's
  // operand needs a dot and three dots need B. One permute in flight at a
  // time. Top-down starts A at once (0..2), so B waits for the slot
  // (2..4) and the dots run 4..7: 7 us. Bottom-up, from the end, places
  // A's start once the dots after it cover its 2 us: p 0..1, B 1..3, z1
  // 3..4, A 4..6 beside z2 and z3: 6 us.
  constexpr std::string_view kHlo = R"(
HloModule m, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %sa = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %ra = f32[4,4] collective-permute-done(%sa)
  %p = f32[4,4] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sb = (f32[4,4], f32[4,4]) collective-permute-start(%p), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %rb = f32[4,4] collective-permute-done(%sb)
  %z1 = f32[4,4] dot(%rb, %rb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z2 = f32[4,4] dot(%z1, %z1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z3 = f32[4,4] dot(%z2, %z2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (f32[4,4], f32[4,4]) tuple(%ra, %z3)
}
)";
  const std::string bottom_up = ExpectBothOrders(kHlo, 7, 6, "bottom-up");
  // The order itself: A's start after z1, its done last.
  auto module = Parse(bottom_up);
  ASSERT_TRUE(module);
  std::vector<std::string> order;
  for (const auto& instruction : module->entry()->instructions()) {
    order.push_back(instruction->name());
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"x", "p", "sb", "rb", "z1", "sa", "z2", "z3", "ra", "t"}));
}

TEST(Schedule, BestKeepsTopDownWhereBottomUpPlacesAnIndependentDotLate) {
  // Two permutes of x, one in flight at a time; d2 needs both, d3 only the
  // first. Top-down runs d3 while the second transfer flies: 2 + 2 + 1 =
  // 5 us. Bottom-up places d3 last (it is as deep as d2), so nothing
  // overlaps the second transfer: 6 us. The best of the two is top-down's.
  constexpr std::string_view kHlo = R"(
HloModule m, num_partitions=2
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s0 = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %r0 = f32[4,4] collective-permute-done(%s0)
  %s1 = (f32[4,4], f32[4,4]) collective-permute-start(%x), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %r1 = f32[4,4] collective-permute-done(%s1)
  %d2 = f32[4,4] dot(%r1, %r0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %d3 = f32[4,4] dot(%r0, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (f32[4,4], f32[4,4]) tuple(%d2, %d3)
}
)";
  ExpectBothOrders(kHlo, 5, 6, "top-down");
}

}  // namespace
}  // namespace loom::pass
