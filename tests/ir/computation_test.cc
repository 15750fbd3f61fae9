// The editing operations passes use: insertion in order, replacing uses
// (root included), removal, users, the callee-first order of computations,
// and putting definitions back ahead of their uses.
#include <gtest/gtest.h>

#include "ir/compare.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace loom::ir {
namespace {

constexpr std::string_view kModule = R"(
HloModule m
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %e {
  %p = f32[4] parameter(0)
  %n = f32[4] negate(%p)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%n, %z), dimensions={0}, to_apply=%add
}
)";

TEST(ComputationTest, InsertReplaceAndRemove) {
  auto module = ParseModule(kModule);
  ASSERT_TRUE(module.ok());
  Computation& entry = *(*module)->entry();
  Instruction* p = entry.FindInstruction("p");
  Instruction* n = entry.FindInstruction("n");
  // abs(p) inserted before %n takes %n's place as the reduce's operand.
  auto abs = std::make_unique<Instruction>("a", Opcode::kAbs, p->shape());
  abs->AppendOperand(p);
  Instruction* a = entry.InsertInstructionBefore(std::move(abs), n);
  EXPECT_EQ(entry.instructions()[1].get(), a);
  EXPECT_EQ(entry.Users(n), std::vector<Instruction*>{entry.root()});
  entry.ReplaceAllUsesWith(n, a);
  EXPECT_TRUE(entry.Users(n).empty());
  EXPECT_EQ(entry.root()->operand(0), a);
  entry.RemoveInstruction(n);
  EXPECT_EQ(entry.FindInstruction("n"), nullptr);
  EXPECT_TRUE(VerifyModule(**module).ok()) << PrintModule(**module);
}

TEST(ComputationTest, ReplacingTheRootMovesIt) {
  auto module = ParseModule(kModule);
  ASSERT_TRUE(module.ok());
  Computation& entry = *(*module)->entry();
  Instruction* z = entry.FindInstruction("z");
  entry.ReplaceAllUsesWith(entry.root(), z);
  EXPECT_EQ(entry.root(), z);
}

TEST(ComputationTest, PostOrderPutsCalleesFirst) {
  auto module = ParseModule(kModule);
  ASSERT_TRUE(module.ok());
  std::vector<Computation*> order = (*module)->PostOrder();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0]->name(), "add");
  EXPECT_EQ(order[1]->name(), "e");
}

// After %n's uses are pointed at a value defined after the reduce (as a
// pass that replaces an early value by one it builds later does), the
// computation reads a value before its definition; OrderDefinitionsFirst
// moves what needs it after it and keeps the rest in place.
TEST(ComputationTest, OrderDefinitionsFirstMovesUsesAfterTheirDefinitions) {
  auto module = ParseModule(R"(
HloModule m
ENTRY %e {
  %p = f32[4] parameter(0)
  %n = f32[4] negate(%p)
  %u = f32[4] exponential(%n)
  %q = f32[4] parameter(1)
  %late = f32[4] abs(%q)
  ROOT %t = (f32[4], f32[4]) tuple(%u, %late)
}
)");
  ASSERT_TRUE(module.ok());
  Computation& entry = *(*module)->entry();
  Instruction* n = entry.FindInstruction("n");
  Instruction* u = entry.FindInstruction("u");
  Instruction* late = entry.FindInstruction("late");
  EXPECT_TRUE(entry.DependsOn(*u, *entry.FindInstruction("p")));
  EXPECT_FALSE(entry.DependsOn(*late, *n));
  entry.ReplaceAllUsesWith(n, late);
  entry.RemoveInstruction(n);
  EXPECT_FALSE(VerifyModule(**module).ok());
  ASSERT_TRUE(entry.OrderDefinitionsFirst());
  EXPECT_TRUE(VerifyModule(**module).ok()) << PrintModule(**module);
  std::vector<std::string> order;
  for (const auto& instruction : entry.instructions()) order.push_back(instruction->name());
  EXPECT_EQ(order, (std::vector<std::string>{"p", "q", "late", "u", "t"}));
  EXPECT_TRUE(entry.DependsOn(*u, *late));
}

TEST(ComputationTest, OrderDefinitionsFirstRefusesACycleAndChangesNothing) {
  auto module = ParseModule(R"(
HloModule m
ENTRY %e {
  %p = f32[4] parameter(0)
  %a = f32[4] negate(%p)
  ROOT %b = f32[4] abs(%a)
}
)");
  ASSERT_TRUE(module.ok());
  Computation& entry = *(*module)->entry();
  Instruction* a = entry.FindInstruction("a");
  Instruction* b = entry.FindInstruction("b");
  a->ReplaceOperand(0, b);  // a reads b, which reads a
  EXPECT_TRUE(entry.DependsOn(*b, *a));
  EXPECT_FALSE(entry.DependsOn(*b, *entry.FindInstruction("p")));
  const std::string before = PrintModule(**module);
  EXPECT_FALSE(entry.OrderDefinitionsFirst());
  EXPECT_EQ(PrintModule(**module), before);
}

// Copies of a computation are one program under other names: their own,
// their callees' (themselves copies) and their channels' numbers may
// differ; an instruction, an operand or a callee's body may not.
TEST(ComputationTest, BodyDifferenceFindsCopiesOfAComputation) {
  auto module = ParseModule(R"(
HloModule m, num_partitions=2
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
%add.1 {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
%max {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] maximum(%x, %y)
}
%body {
  %p = f32[4] parameter(0)
  ROOT %r = f32[4] all-reduce(%p), channel_id=1, replica_groups={{0,1}}, to_apply=%add
}
%body.1 {
  %p = f32[4] parameter(0)
  ROOT %r = f32[4] all-reduce(%p), channel_id=7, replica_groups={{0,1}}, to_apply=%add.1
}
%by_max {
  %p = f32[4] parameter(0)
  ROOT %r = f32[4] all-reduce(%p), channel_id=2, replica_groups={{0,1}}, to_apply=%max
}
%no_channel {
  %p = f32[4] parameter(0)
  ROOT %r = f32[4] all-reduce(%p), replica_groups={{0,1}}, to_apply=%add
}
%negated {
  %p = f32[4] parameter(0)
  %n = f32[4] negate(%p)
  ROOT %r = f32[4] all-reduce(%n), channel_id=3, replica_groups={{0,1}}, to_apply=%add
}
ENTRY %e {
  %p = f32[4] parameter(0)
  %a = f32[4] call(%p), to_apply=%body
  %b = f32[4] call(%a), to_apply=%body.1
  %c = f32[4] call(%b), to_apply=%by_max
  %d = f32[4] call(%c), to_apply=%no_channel
  ROOT %f = f32[4] call(%d), to_apply=%negated
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  const Module& m = **module;
  auto body = [&](std::string_view name) -> const Computation& { return *m.FindComputation(name); };
  EXPECT_EQ(BodyDifference(body("body"), body("body.1")), "");
  EXPECT_EQ(BodyDifference(body("add"), body("add.1")), "");
  EXPECT_NE(BodyDifference(body("body"), body("by_max")), "");
  EXPECT_NE(BodyDifference(body("body"), body("no_channel")), "");
  EXPECT_NE(BodyDifference(body("body"), body("negated")), "");
}

}  // namespace
}  // namespace loom::ir
