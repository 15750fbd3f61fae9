// The editing operations passes use: insertion in order, replacing uses
// (root included), removal, users, and the callee-first order of computations.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace loom::ir
