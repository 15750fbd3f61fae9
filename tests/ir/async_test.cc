// ir/async.h: which collective a start begins and a done completes, through
// the dedicated -start ops, an async-start's callee and an async-update.
#include "ir/async.h"

#include <gtest/gtest.h>

#include "ir/parser.h"

namespace loom::ir {
namespace {

constexpr char kModule[] = R"(HloModule m, num_partitions=4

wrapped {
  p = f32[8] parameter(0)
  ROOT a = f32[8] all-to-all(p), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}
}

not_a_collective {
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p)
}

ENTRY e {
  x = f32[2] parameter(0)
  y = f32[8] parameter(1)
  gs = (f32[2], f32[8]) all-gather-start(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  gd = f32[8] all-gather-done(gs)
  as = ((f32[8]), f32[8], u32[]) async-start(y), calls=wrapped
  au = ((f32[8]), f32[8], u32[]) async-update(as)
  ad = f32[8] async-done(au)
  ns = ((f32[8]), f32[8], u32[]) async-start(y), calls=not_a_collective
  nd = f32[8] async-done(ns)
  c = f32[8] copy(gd)
  ROOT t = (f32[8], f32[8], f32[8], f32[8]) tuple(c, ad, nd, y)
}
)";

TEST(Async, CollectiveOpcodeOfStartAndDone) {
  auto module = ParseModule(kModule);
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  const Computation& entry = *(*module)->entry();
  const auto at = [&](const char* name) -> const Instruction& {
    return *entry.FindInstruction(name);
  };
  EXPECT_EQ(CollectiveOpcodeOfStart(at("gs")), Opcode::kAllGather);
  EXPECT_EQ(CollectiveOpcodeOfDone(at("gd")), Opcode::kAllGather);
  EXPECT_EQ(CollectiveOpcodeOfStart(at("as")), Opcode::kAllToAll);
  EXPECT_EQ(CollectiveOpcodeOfDone(at("ad")), Opcode::kAllToAll);  // through the update
  // An async-start of something that is no collective, and ops that are no
  // start or done (a copy of a done's value is not a done).
  EXPECT_EQ(CollectiveOpcodeOfStart(at("ns")), std::nullopt);
  EXPECT_EQ(CollectiveOpcodeOfDone(at("nd")), std::nullopt);
  EXPECT_EQ(CollectiveOpcodeOfDone(at("c")), std::nullopt);
  EXPECT_EQ(CollectiveOpcodeOfStart(at("y")), std::nullopt);
  EXPECT_EQ(SynchronousOpcode(Opcode::kAllReduceStart), Opcode::kAllReduce);
  EXPECT_EQ(SynchronousOpcode(Opcode::kDot), Opcode::kDot);
}

}  // namespace
}  // namespace loom::ir
