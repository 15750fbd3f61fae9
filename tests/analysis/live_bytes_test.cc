// PeakLiveBytes against peaks worked out by hand on tiny modules. f32[1024] is
// 4096 bytes, s32[] 4, pred[] 1.
#include "analysis/live_bytes.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom::analysis {
namespace {

std::unique_ptr<ir::Module> Verified(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  if (!module.ok()) return nullptr;
  auto report = ir::VerifyModule(**module);
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  if (!report.ok()) return nullptr;
  return std::move(*module);
}

// PeakLiveBytes of `text`, which must parse and verify (-1 when it does not).
// Every module here also checks that the breakdown of the peak adds up to
// it, largest buffer first.
int64_t PeakOf(const std::string& text, Fusion fusion = Fusion::kNone) {
  std::unique_ptr<ir::Module> module = Verified(text);
  if (module == nullptr) return -1;
  const int64_t peak = PeakLiveBytes(*module, fusion);
  const PeakBreakdown breakdown = PeakLiveBreakdown(*module, fusion);
  EXPECT_EQ(breakdown.peak_bytes, peak);
  int64_t sum = 0;
  for (size_t i = 0; i < breakdown.live.size(); ++i) {
    sum += breakdown.live[i].bytes;
    if (i > 0) {
      EXPECT_GE(breakdown.live[i - 1].bytes, breakdown.live[i].bytes);
    }
  }
  EXPECT_EQ(sum, peak) << text;
  return peak;
}

// "name:bytes" of each buffer live at the peak, largest first.
std::vector<std::string> LiveAtPeak(const PeakBreakdown& breakdown) {
  std::vector<std::string> live;
  for (const LiveBuffer& buffer : breakdown.live) {
    live.push_back(buffer.defined_by->name() + ":" + std::to_string(buffer.bytes));
  }
  return live;
}

std::vector<std::string> Where(const PeakBreakdown& breakdown) {
  std::vector<std::string> where;
  for (const ir::Instruction* instruction : breakdown.where) {
    where.push_back(instruction->parent()->name() + "/" + instruction->name());
  }
  return where;
}

TEST(LiveBytesTest, OperandsAndResultAreLiveTogether) {
  // At %c: the parameter (to the end), %b (read by %c) and %c (the root).
  EXPECT_EQ(PeakOf(R"(
HloModule m
ENTRY %e {
  %a = f32[1024] parameter(0)
  %b = f32[1024] add(%a, %a)
  ROOT %c = f32[1024] multiply(%b, %b)
}
)"),
            3 * 4096);
}

TEST(LiveBytesTest, FreesEachValueAfterItsLastRead) {
  // Each step holds the parameter, its operand and its result: 3 x 4 KiB,
  // where keeping everything would reach 5 x 4 KiB. %dead is freed at once.
  EXPECT_EQ(PeakOf(R"(
HloModule m
ENTRY %e {
  %a = f32[1024] parameter(0)
  %b = f32[1024] negate(%a)
  %dead = f32[1024] exponential(%a)
  %c = f32[1024] exponential(%b)
  %d = f32[1024] negate(%c)
  ROOT %r = f32[1024] exponential(%d)
}
)"),
            3 * 4096);
}

TEST(LiveBytesTest, AliasesAddNothing) {
  // tuple, get-tuple-element and bitcast name %a's buffer; only %n is new.
  EXPECT_EQ(PeakOf(R"(
HloModule m
ENTRY %e {
  %a = f32[1024] parameter(0)
  %t = (f32[1024], f32[1024]) tuple(%a, %a)
  %g = f32[1024] get-tuple-element(%t), index=0
  %bc = f32[32,32] bitcast(%g)
  ROOT %n = f32[32,32] negate(%bc)
}
)"),
            2 * 4096);
}

// A loop counting to 3 over an f32[1024] state.
constexpr char kCountingLoop[] = R"(
HloModule m
%cond {
  %state = (s32[], f32[1024]) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %three), direction=LT
}
%body {
  %state = (s32[], f32[1024]) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %x = f32[1024] get-tuple-element(%state), index=1
  %one = s32[] constant(1)
  %i.next = s32[] add(%i, %one)
  %y = f32[1024] multiply(%x, %x)
  ROOT %next = (s32[], f32[1024]) tuple(%i.next, %y)
}
ENTRY %e {
  %p = f32[1024] parameter(0)
  %c0 = s32[] constant(0)
  %t = (s32[], f32[1024]) tuple(%c0, %p)
  %w = (s32[], f32[1024]) while(%t), condition=%cond, body=%body
  ROOT %r = f32[1024] get-tuple-element(%w), index=1
}
)";

TEST(LiveBytesTest, AWhileAddsItsBodysPeakOnTopOfTheLoopState) {
  // Entry: %p (4096) and the counter's init %c0 (4) are the loop state. The
  // body's parameter is that state (0 bytes); the body peaks at %y, holding
  // %y (4096) and %i.next (4; %one was freed at %i.next). Condition: 4 + 1.
  // Peak while the loop runs: 4096 + 4 + 4096 + 4.
  EXPECT_EQ(PeakOf(kCountingLoop), 4096 + 4 + 4096 + 4);
}

TEST(LiveBytesTest, TheBreakdownDescendsIntoTheLoopBodyThatPeaks) {
  // The same loop: the entry peaks while %w runs, holding %p and the
  // counter's init %c0; the body's peak, %y and %i.next, is what %w adds.
  std::unique_ptr<ir::Module> module = Verified(kCountingLoop);
  ASSERT_NE(module, nullptr);
  const PeakBreakdown breakdown = PeakLiveBreakdown(*module);
  EXPECT_EQ(breakdown.peak_bytes, 4096 + 4 + 4096 + 4);
  EXPECT_EQ(Where(breakdown), (std::vector<std::string>{"e/w", "body/y"}));
  EXPECT_EQ(LiveAtPeak(breakdown),
            (std::vector<std::string>{"p:4096", "y:4096", "c0:4", "i.next:4"}));
}

TEST(LiveBytesTest, ACallAddsItsCalleesPeak) {
  // %f peaks at %z with %y and %z live (its parameter is the caller's %a):
  // 8192 on top of %a.
  EXPECT_EQ(PeakOf(R"(
HloModule m
%f {
  %x = f32[1024] parameter(0)
  %y = f32[1024] negate(%x)
  ROOT %z = f32[1024] exponential(%y)
}
ENTRY %e {
  %a = f32[1024] parameter(0)
  ROOT %c = f32[1024] call(%a), to_apply=%f
}
)"),
            3 * 4096);
}

// %z (f32[4096], 16 KiB) updated with %p at %i; `root` decides whether %z is
// read after the update.
std::string UpdateModule(const std::string& root) {
  return R"(
HloModule m
ENTRY %e {
  %p = f32[1024] parameter(0)
  %i = s32[] parameter(1)
  %zero = f32[] constant(0)
  %z = f32[4096] broadcast(%zero), dimensions={}
  %u = f32[4096] dynamic-update-slice(%z, %p, %i)
  )" + root +
         R"(
}
)";
}

TEST(LiveBytesTest, DynamicUpdateSliceWritesInPlaceIntoADeadOperand) {
  // Peak at %z: the parameters (4096 + 4), %zero (4) and %z (16384); %u
  // reuses %z's buffer.
  EXPECT_EQ(PeakOf(UpdateModule("ROOT %r = f32[4096] bitcast(%u)")), 4096 + 4 + 4 + 16384);
}

TEST(LiveBytesTest, DynamicUpdateSliceCopiesAnOperandReadLater) {
  // %z is part of the result, so %u is a second 16 KiB buffer (%zero is
  // already freed).
  EXPECT_EQ(PeakOf(UpdateModule("ROOT %r = (f32[4096], f32[4096]) tuple(%u, %z)")),
            4096 + 4 + 2 * 16384);
}

TEST(LiveBytesTest, AsyncDoneIsTheResultOfItsStart) {
  // The start's operand element is %p; it adds the received buffer (4096)
  // and two u32 contexts (8), 8200 in all at %s. The done adds nothing and
  // frees the contexts; its value is the received buffer, live at %n with %p
  // and %n.
  EXPECT_EQ(PeakOf(R"(
HloModule m, num_partitions=2
ENTRY %e {
  %p = f32[1024] parameter(0)
  %s = (f32[1024], f32[1024], u32[], u32[]) collective-permute-start(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %d = f32[1024] collective-permute-done(%s)
  ROOT %n = f32[1024] negate(%d)
}
)"),
            3 * 4096);
}

constexpr char kChain[] = R"(
HloModule m
ENTRY %e {
  %a = f32[1024] parameter(0)
  %b = f32[1024] negate(%a)
  %c = f32[1024] exponential(%b)
  ROOT %d = f32[1024] multiply(%c, %c)
}
)";

TEST(LiveBytesTest, AFusedChainWritesOnlyItsKernelsResult) {
  // Unfused, %a, %b and %c are live at %c. Fused, %b and %c are computed in
  // %d's kernel, which reads %a and writes %d: 2 x 4 KiB.
  EXPECT_EQ(PeakOf(kChain), 3 * 4096);
  EXPECT_EQ(PeakOf(kChain, Fusion::kFused), 2 * 4096);
}

TEST(LiveBytesTest, AFusedSoftmaxKeepsItsIntermediatesOnChip) {
  // %s and %w are 64 KiB each, live throughout. Fused, the softmax is one
  // kernel rooted at %p: it reads %s and the two constants and writes %p
  // (64 KiB); then %y (1 KiB) is live with %p: 3 x 64 KiB + 1 KiB. Unfused,
  // %d, %e and their broadcasts are arrays of their own.
  const std::string softmax = R"(
HloModule m
%max {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %r = f32[] maximum(%x, %y)
}
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %r = f32[] add(%x, %y)
}
ENTRY %e {
  %s = f32[16,1024] parameter(0)
  %w = f32[1024,16] parameter(1)
  %ninf = f32[] constant(-inf)
  %m = f32[16] reduce(%s, %ninf), dimensions={1}, to_apply=%max
  %bm = f32[16,1024] broadcast(%m), dimensions={0}
  %d = f32[16,1024] subtract(%s, %bm)
  %e = f32[16,1024] exponential(%d)
  %zero = f32[] constant(0)
  %z = f32[16] reduce(%e, %zero), dimensions={1}, to_apply=%add
  %bz = f32[16,1024] broadcast(%z), dimensions={0}
  %p = f32[16,1024] divide(%e, %bz)
  ROOT %y = f32[16,16] dot(%p, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";
  EXPECT_EQ(PeakOf(softmax, Fusion::kFused), 3 * 65536 + 1024);
  EXPECT_GT(PeakOf(softmax), 4 * 65536);
}

TEST(LiveBytesTest, AnUpdateWritesInPlaceWhenFusedToo) {
  // The update's kernel reads %p and writes into %z, a buffer of its own
  // (a dynamic-update-slice's operand 0 is never fused into it): as
  // unfused.
  EXPECT_EQ(PeakOf(UpdateModule("ROOT %r = f32[4096] bitcast(%u)"), Fusion::kFused),
            4096 + 4 + 4 + 16384);
}

TEST(LiveBytesTest, ZeroWithoutAnEntry) {
  ir::Module module("empty");
  EXPECT_EQ(PeakLiveBytes(module), 0);
  const PeakBreakdown breakdown = PeakLiveBreakdown(module);
  EXPECT_EQ(breakdown.peak_bytes, 0);
  EXPECT_TRUE(breakdown.where.empty());
  EXPECT_TRUE(breakdown.live.empty());
}

}  // namespace
}  // namespace loom::analysis
