// KnownTripCount on counted loops written as XLA writes them, and on loops
// whose trip count cannot be read off the text.
#include "analysis/while_loop.h"

#include <gtest/gtest.h>

#include <string>

#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom::analysis {
namespace {

// A module whose entry runs one while loop over (s32[] counter, f32[8]):
// `init` is the counter's initial value (an instruction of the entry named
// %init), `condition` the root of the condition (reads %i, the counter), and
// `next` the counter's value at the end of the body (reads %i).
std::string LoopModule(const std::string& init, const std::string& condition,
                       const std::string& next) {
  return R"(
HloModule loop
%cond {
  %state = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %x = f32[8] get-tuple-element(%state), index=1
  )" + condition +
         R"(
}
%body {
  %state = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %x = f32[8] get-tuple-element(%state), index=1
  %y = f32[8] multiply(%x, %x)
  )" + next +
         R"(
  ROOT %next = (s32[], f32[8]) tuple(%i.next, %y)
}
ENTRY %e {
  %p = f32[8] parameter(0)
  %n = s32[] parameter(1)
  )" + init +
         R"(
  %t = (s32[], f32[8]) tuple(%init, %p)
  %w = (s32[], f32[8]) while(%t), condition=%cond, body=%body
  ROOT %r = f32[8] get-tuple-element(%w), index=1
}
)";
}

constexpr const char* kInitZero = "%init = s32[] constant(0)";
constexpr const char* kLessThanTen =
    "%ten = s32[] constant(10)\n"
    "  ROOT %lt = pred[] compare(%i, %ten), direction=LT";
constexpr const char* kPlusOne =
    "%one = s32[] constant(1)\n"
    "  %i.next = s32[] add(%i, %one)";

// The trip count of the while named %w in `text`.
std::optional<int64_t> TripCountOf(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  if (!module.ok()) return std::nullopt;
  auto report = ir::VerifyModule(**module);
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  const ir::Instruction* loop = (*module)->entry()->FindInstruction("w");
  EXPECT_NE(loop, nullptr);
  if (loop == nullptr) return std::nullopt;
  return KnownTripCount(*loop);
}

TEST(WhileLoopTest, CountsTheCanonicalLoop) {
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero, kLessThanTen, kPlusOne)), 10);
}

TEST(WhileLoopTest, RoundsUpPartialStepsAndStartsFromTheInit) {
  // i = 3, 6, 9: three trips below 10.
  EXPECT_EQ(TripCountOf(LoopModule("%init = s32[] constant(3)", kLessThanTen,
                                   "%three = s32[] constant(3)\n"
                                   "  %i.next = s32[] add(%three, %i)")),
            3);
  // i = -4, -1, 2, 5, 8: negative inits count from where they start.
  EXPECT_EQ(TripCountOf(LoopModule("%init = s32[] constant(-4)", kLessThanTen,
                                   "%three = s32[] constant(3)\n"
                                   "  %i.next = s32[] add(%i, %three)")),
            5);
}

TEST(WhileLoopTest, AnInitPastTheBoundRunsZeroTimes) {
  EXPECT_EQ(TripCountOf(LoopModule("%init = s32[] constant(12)", kLessThanTen, kPlusOne)), 0);
}

TEST(WhileLoopTest, AcceptsLessOrEqualAndSwappedComparisons) {
  // i <= 10 from 0: 11 trips.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%ten = s32[] constant(10)\n"
                                   "  ROOT %le = pred[] compare(%i, %ten), direction=LE",
                                   kPlusOne)),
            11);
  // 10 > i is i < 10.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%ten = s32[] constant(10)\n"
                                   "  ROOT %gt = pred[] compare(%ten, %i), direction=GT",
                                   kPlusOne)),
            10);
  // 10 >= i is i <= 10.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%ten = s32[] constant(10)\n"
                                   "  ROOT %ge = pred[] compare(%ten, %i), direction=GE",
                                   kPlusOne)),
            11);
}

TEST(WhileLoopTest, AddsUpAChainOfConstantSteps) {
  // add(add(i, 1), 1), as in XLA's windowed-einsum loops that do two steps a
  // trip: 0, 2 below 4.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%four = s32[] constant(4)\n"
                                   "  ROOT %lt = pred[] compare(%i, %four), direction=LT",
                                   "%one = s32[] constant(1)\n"
                                   "  %i.1 = s32[] add(%i, %one)\n"
                                   "  %i.next = s32[] add(%i.1, %one)")),
            2);
}

TEST(WhileLoopTest, ReadsAnInlineConstantOperand) {
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "ROOT %lt = pred[] compare(%i, s32[] constant(7)), direction=LT",
                                   "%i.next = s32[] add(%i, s32[] constant(1))")),
            7);
}

TEST(WhileLoopTest, UnknownWhenTheBoundIsNotAConstant) {
  // A computed bound is not read through, even when it is constant in fact.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%ten = s32[] constant(10)\n"
                                   "  %bound = s32[] add(%ten, %ten)\n"
                                   "  ROOT %lt = pred[] compare(%i, %bound), direction=LT",
                                   kPlusOne)),
            std::nullopt);
}

TEST(WhileLoopTest, UnknownWhenTheInitIsNotAConstant) {
  EXPECT_EQ(TripCountOf(LoopModule("%init = s32[] add(%n, %n)", kLessThanTen, kPlusOne)),
            std::nullopt);
}

TEST(WhileLoopTest, UnknownWhenTheBodyCountsDown) {
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero, kLessThanTen,
                                   "%minus.one = s32[] constant(-1)\n"
                                   "  %i.next = s32[] add(%i, %minus.one)")),
            std::nullopt);
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero, kLessThanTen,
                                   "%one = s32[] constant(1)\n"
                                   "  %i.next = s32[] subtract(%i, %one)")),
            std::nullopt);
  // A zero step never ends.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero, kLessThanTen,
                                   "%zero = s32[] constant(0)\n"
                                   "  %i.next = s32[] add(%i, %zero)")),
            std::nullopt);
}

TEST(WhileLoopTest, UnknownWhenTheConditionDependsOnData) {
  // The loop runs while the data is small: no counter decides it.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%x0 = f32[1] slice(%x), slice={[0:1]}\n"
                                   "  %s = f32[] reshape(%x0)\n"
                                   "  %limit = f32[] constant(100)\n"
                                   "  ROOT %lt = pred[] compare(%s, %limit), direction=LT",
                                   kPlusOne)),
            std::nullopt);
  // The counter compared with an element of the state that is not constant.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero,
                                   "%x0 = f32[1] slice(%x), slice={[0:1]}\n"
                                   "  %s = f32[] reshape(%x0)\n"
                                   "  %bound = s32[] convert(%s)\n"
                                   "  ROOT %lt = pred[] compare(%i, %bound), direction=LT",
                                   kPlusOne)),
            std::nullopt);
}

TEST(WhileLoopTest, UnknownWhenTheBodyStepsADifferentElement) {
  // The condition tests element 0 but the body's element 0 is a fresh value.
  EXPECT_EQ(TripCountOf(LoopModule(kInitZero, kLessThanTen,
                                   "%one = s32[] constant(1)\n"
                                   "  %i.next = s32[] add(%one, %one)")),
            std::nullopt);
}

TEST(WhileLoopTest, UnknownForAnythingButAWhile) {
  auto module = ir::ParseModule(LoopModule(kInitZero, kLessThanTen, kPlusOne));
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  EXPECT_EQ(KnownTripCount(*(*module)->entry()->FindInstruction("t")), std::nullopt);
}

}  // namespace
}  // namespace loom::analysis
