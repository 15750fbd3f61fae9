// The verifier on hand-written HLO: for every op family, modules that must
// verify and modules that must not, with the exact "LINE:COL: message" of the
// first problem; device-count inference; robustness on hostile input; and the
// corpus of real modules.
//
// The offending instruction is never marked ROOT (the last instruction of a
// computation is its root anyway), so every location is the column of a
// name at the start of its line.
#include "ir/verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "ir/parser.h"
#include "ir/shape_inference.h"

namespace loom::ir {
namespace {

// "ok", or the first error as "LINE:COL: message".
std::string Verdict(std::string_view text) {
  Expected<std::unique_ptr<Module>> module = ParseModule(text);
  if (!module.ok()) return "parse error: " + module.error().ToString();
  Expected<VerifyReport> report = VerifyModule(**module);
  return report.ok() ? "ok" : report.error().ToString();
}

// The report of a module that must verify (an empty one otherwise).
VerifyReport Report(std::string_view text) {
  Expected<std::unique_ptr<Module>> module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  if (!module.ok()) return {};
  Expected<VerifyReport> report = VerifyModule(**module);
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  return report.ok() ? *report : VerifyReport{};
}

// A module whose entry computation is `body` (instructions, one per line,
// starting on line 3).
std::string Entry(std::string_view body, std::string_view header = "") {
  return "HloModule m" + std::string(header) + "\nENTRY %main {\n" + std::string(body) + "}\n";
}

// A scalar f32 adder, for reduce and the collectives; its lines come after
// the entry's.
constexpr std::string_view kAdd = R"(
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %s = f32[] add(%x, %y)
}
)";

// --- structure -----------------------------------------------------------------

TEST(VerifierStructure, AcceptsASmallModule) {
  const VerifyReport report = Report(Entry(R"(  %p = f32[2] parameter(0)
  %n = f32[2] negate(%p)
)"));
  EXPECT_EQ(report.partition_count, 1);
  EXPECT_EQ(report.replica_count, 1);
  EXPECT_TRUE(report.trusted.empty());
}

// `computations` computations, each but the last calling the next.
std::string CallChain(int computations) {
  std::string text = "HloModule chain\n";
  for (int i = computations - 1; i >= 1; --i) {
    text += fmt::format("%c{} (p: f32[2]) -> f32[2] {{\n  %p = f32[2] parameter(0)\n", i);
    text += i + 1 < computations
                ? fmt::format("  ROOT %r = f32[2] call(%p), to_apply=%c{}\n}}\n", i + 1)
                : "  ROOT %r = f32[2] negate(%p)\n}\n";
  }
  text += computations > 1 ? "ENTRY %main {\n  %x = f32[2] parameter(0)\n  ROOT %r = f32[2] "
                             "call(%x), to_apply=%c1\n}\n"
                           : "ENTRY %main {\n  %x = f32[2] parameter(0)\n  ROOT %r = f32[2] "
                             "negate(%x)\n}\n";
  return text;
}

TEST(VerifierStructure, CallsNestAtMostTheOneBound) {
  // kMaxCallDepth computations on a chain are fine, one more is refused at
  // the outermost computation too deep; 20,000 are refused without
  // exhausting the stack.
  auto deepest = ParseModule(CallChain(static_cast<int>(kMaxCallDepth)));
  ASSERT_TRUE(deepest.ok()) << deepest.error().ToString();
  EXPECT_TRUE(VerifyModule(**deepest).ok());
  for (int computations : {static_cast<int>(kMaxCallDepth) + 1, 20000}) {
    auto module = ParseModule(CallChain(computations));
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    auto verified = VerifyModule(**module);
    ASSERT_FALSE(verified.ok()) << computations;
    EXPECT_NE(verified.error().message.find(
                  fmt::format("calls nest more than {} computations deep", kMaxCallDepth)),
              std::string::npos)
        << verified.error().message;
    EXPECT_TRUE(verified.error().loc.known());
  }
}

// `levels` computations above a leaf, each calling the one below twice:
// 3 x 2^levels instructions with the calls inlined.
std::string Doubling(int levels) {
  std::string text =
      "HloModule doubling\n%c0 (p: f32[2]) -> f32[2] {\n  %p = f32[2] "
      "parameter(0)\n  ROOT %r = f32[2] negate(%p)\n}\n";
  for (int i = 1; i <= levels; ++i) {
    text += fmt::format(
        "%c{0} (p: f32[2]) -> f32[2] {{\n  %p = f32[2] parameter(0)\n  %a = f32[2] call(%p), "
        "to_apply=%c{1}\n  ROOT %b = f32[2] call(%a), to_apply=%c{1}\n}}\n",
        i, i - 1);
  }
  return text + fmt::format(
                    "ENTRY %main {{\n  %x = f32[2] parameter(0)\n  ROOT %r = f32[2] call(%x), "
                    "to_apply=%c{}\n}}\n",
                    levels);
}

TEST(VerifierStructure, InlinedInstructionsAreBounded) {
  auto small = ParseModule(Doubling(10));
  ASSERT_TRUE(small.ok()) << small.error().ToString();
  EXPECT_TRUE(VerifyModule(**small).ok());
  for (int levels : {23, 70}) {  // 2^24 and far past 2^63 (saturating)
    auto module = ParseModule(Doubling(levels));
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    auto verified = VerifyModule(**module);
    ASSERT_FALSE(verified.ok()) << levels;
    EXPECT_NE(
        verified.error().message.find(fmt::format(
            "runs more than {} instructions with its calls inlined", kMaxInlinedInstructions)),
        std::string::npos)
        << verified.error().message;
    EXPECT_TRUE(verified.error().loc.known());
  }
}

TEST(VerifierStructure, ReportsOperandCycle) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] add(%p, %b)
  %b = f32[2] negate(%a)
  %c = f32[2] negate(%b)
)")),
            "4:3: operand cycle: %a -> %b -> %a");
}

TEST(VerifierStructure, ReportsSelfCycle) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] add(%p, %a)
)")),
            "4:3: operand cycle: %a -> %a");
}

TEST(VerifierStructure, ReportsCycleThroughControlPredecessor) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] negate(%p), control-predecessors={%b}
  %b = f32[2] negate(%a)
)")),
            "4:3: operand cycle: %a -> %b -> %a");
}

TEST(VerifierStructure, ReportsUseBeforeDefinition) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] negate(%b)
  %b = f32[2] negate(%p)
  %c = f32[2] add(%a, %b)
)")),
            "4:3: %a: operand %b is used before its definition");
}

TEST(VerifierStructure, ReportsControlPredecessorDefinedLater) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] negate(%p), control-predecessors={%b}
  %b = f32[2] negate(%p)
  %c = f32[2] add(%a, %b)
)")),
            "4:3: %a: control predecessor %b is used before its definition");
}

TEST(VerifierStructure, ReportsMissingParameterNumberAtTheComputation) {
  EXPECT_EQ(Verdict(R"(HloModule m
main {
  %p0 = f32[2] parameter(0)
  %p2 = f32[2] parameter(2)
  %s = f32[2] add(%p0, %p2)
}
)"),
            "2:1: computation %main has no parameter 1: its 2 parameters must be numbered 0 to 1");
}

TEST(VerifierStructure, ReportsDuplicateParameterNumber) {
  EXPECT_EQ(Verdict(Entry(R"(  %p0 = f32[2] parameter(0)
  %p1 = f32[2] parameter(0)
  %s = f32[2] add(%p0, %p1)
)")),
            "4:3: %p1: parameter number 0 is already used by %p0");
}

TEST(VerifierStructure, ReportsCallCycle) {
  EXPECT_EQ(Verdict(R"(HloModule m
%f {
  %x = f32[] parameter(0)
  %y = f32[] call(%x), to_apply=%g
}
%g {
  %x = f32[] parameter(0)
  %y = f32[] call(%x), to_apply=%f
}
ENTRY %main {
  %p = f32[] parameter(0)
  %c = f32[] call(%p), to_apply=%f
}
)"),
            "2:1: call cycle: %f -> %g -> %f");
}

TEST(VerifierStructure, ReportsWrongOperandCounts) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %n = f32[2] negate(%p, %p)
)")),
            "4:3: %n: negate takes 1 operand, got 2");
  EXPECT_EQ(Verdict(Entry(R"(  %p = pred[2] parameter(0)
  %s = pred[2] select(%p, %p)
)")),
            "4:3: %s: select takes 3 operands, got 2");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %r = f32[2] reduce(%p), dimensions={}
)")),
            "4:3: %r: reduce takes at least 2 operands, got 1");
}

TEST(VerifierStructure, DeepChainsNeitherRecurseNorFail) {
  // 10^4 instructions in order verify; the same chain backwards is rejected
  // at its first use, and a 10^4-long cycle is reported in a short line.
  constexpr int kLength = 10000;
  std::string forward = "  %i0 = f32[2] parameter(0)\n";
  std::string backward = "  %i0 = f32[2] parameter(0)\n";
  std::string cycle = "  %i0 = f32[2] parameter(0)\n  %c0 = f32[2] add(%i0, %c1)\n";
  for (int i = 1; i < kLength; ++i) {
    forward += fmt::format("  %i{} = f32[2] negate(%i{})\n", i, i - 1);
    backward += fmt::format("  %i{} = f32[2] negate(%i{})\n", i, i + 1 < kLength ? i + 1 : 0);
    cycle += fmt::format("  %c{} = f32[2] negate(%c{})\n", i, (i + 1) % kLength);
  }
  EXPECT_EQ(Verdict(Entry(forward)), "ok");
  EXPECT_EQ(Verdict(Entry(backward)), "4:3: %i1: operand %i2 is used before its definition");
  EXPECT_EQ(Verdict(Entry(cycle)),
            "4:3: operand cycle: %c0 -> %c1 -> %c2 -> %c3 -> %c4 -> %c5 -> %c6 -> %c7 -> ... "
            "(9992 more) -> %c0");
}

TEST(VerifierStructure, RejectsLayoutsThatAreNotPermutations) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3]{1,0:T(8,128)} parameter(0)
  %q = f32[2,3]{0,0} negate(%p)
)")),
            "4:3: %q: layout {0,0} of f32[2,3] is not a permutation of its dimensions");
}

// Modules built in code rather than parsed can break rules the parser
// enforces; the verifier still reports them instead of crashing.
class VerifierBuiltModule : public testing::Test {
 protected:
  VerifierBuiltModule() : module_("m") {
    auto owned = std::make_unique<Computation>("main");
    owned->set_loc({1, 1});
    main_ = module_.AddComputation(std::move(owned));
  }
  Instruction* Add(std::string name, Opcode opcode, Shape shape, int line) {
    auto instruction = std::make_unique<Instruction>(std::move(name), opcode, std::move(shape));
    instruction->set_loc({line, 3});
    if (opcode == Opcode::kParameter) instruction->set_parameter_number(0);
    return main_->AddInstruction(std::move(instruction));
  }
  std::string Verify() {
    Expected<VerifyReport> report = VerifyModule(module_);
    return report.ok() ? "ok" : report.error().ToString();
  }
  Module module_;
  Computation* main_;
};

TEST_F(VerifierBuiltModule, ReportsMissingEntryAndRoot) {
  EXPECT_EQ(Verify(), "the module has no entry computation");
  module_.set_entry(main_);
  EXPECT_EQ(Verify(), "1:1: computation %main has no root instruction");
  main_->set_root(Add("p", Opcode::kParameter, Shape(PrimitiveType::kF32, {2}), 2));
  EXPECT_EQ(Verify(), "ok");
}

TEST_F(VerifierBuiltModule, ReportsShapesTooLargeToCount) {
  module_.set_entry(main_);
  main_->set_root(
      Add("p", Opcode::kParameter, Shape(PrimitiveType::kF32, {int64_t{1} << 62, 4}), 2));
  EXPECT_EQ(Verify(), "2:3: %p: f32[4611686018427387904,4] holds more than 2^63 bits");
}

TEST_F(VerifierBuiltModule, ReportsNullAndForeignOperands) {
  module_.set_entry(main_);
  Instruction* p = Add("p", Opcode::kParameter, Shape(PrimitiveType::kF32, {2}), 2);
  Instruction* n = Add("n", Opcode::kNegate, Shape(PrimitiveType::kF32, {2}), 3);
  main_->set_root(n);
  n->AppendOperand(nullptr);
  EXPECT_EQ(Verify(), "3:3: %n: operand 0 is missing");
  Computation* other = module_.AddComputation(std::make_unique<Computation>("other"));
  auto stray =
      std::make_unique<Instruction>("q", Opcode::kParameter, Shape(PrimitiveType::kF32, {2}));
  stray->set_parameter_number(0);
  Instruction* q = other->AddInstruction(std::move(stray));
  other->set_root(q);
  n->ReplaceOperand(0, q);
  EXPECT_EQ(Verify(), "3:3: %n: operand %q is not an instruction of computation %main");
  n->ReplaceOperand(0, p);
  EXPECT_EQ(Verify(), "ok");
}

// --- elementwise ---------------------------------------------------------------

TEST(VerifierElementwise, AcceptsUnaryAndBinaryOps) {
  EXPECT_EQ(Verdict(Entry(R"(  %f = f32[2,3] parameter(0)
  %i = s32[2,3] parameter(1)
  %b = pred[2,3] parameter(2)
  %c = c64[2,3] parameter(3)
  %abs = f32[2,3] abs(%f)
  %neg = s32[2,3] negate(%i)
  %exp = f32[2,3] exponential(%f)
  %log = f32[2,3] log(%f)
  %sqrt = f32[2,3] sqrt(%f)
  %rsqrt = f32[2,3] rsqrt(%f)
  %tanh = f32[2,3] tanh(%f)
  %logistic = f32[2,3] logistic(%f)
  %copy = f32[2,3] copy(%f)
  %not = pred[2,3] not(%b)
  %finite = pred[2,3] is-finite(%f)
  %real = f32[2,3] real(%c)
  %imag = f32[2,3] imag(%c)
  %cabs = f32[2,3] abs(%c)
  %popcnt = s32[2,3] popcnt(%i)
  %add = f32[2,3] add(%f, %abs)
  %sub = f32[2,3] subtract(%f, %f)
  %mul = s32[2,3] multiply(%i, %i)
  %div = f32[2,3] divide(%f, %f)
  %max = f32[2,3] maximum(%f, %f)
  %min = f32[2,3] minimum(%f, %f)
  %pow = f32[2,3] power(%f, %f)
  %rem = s32[2,3] remainder(%i, %i)
  %and = pred[2,3] and(%b, %b)
  %or = s32[2,3] or(%i, %i)
  %xor = pred[2,3] xor(%b, %not)
  %shl = s32[2,3] shift-left(%i, %i)
  %shr = s32[2,3] shift-right-logical(%i, %i)
  %atan2 = f32[2,3] atan2(%f, %f)
  %complex = c64[2,3] complex(%f, %f)
  %cmp = pred[2,3] compare(%f, %f), direction=LT
)")),
            "ok");
}

TEST(VerifierElementwise, CopyTakesTuples) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = (f32[2], s32[]) parameter(0)
  %c = (f32[2], s32[]) copy(%p)
)")),
            "ok");
}

TEST(VerifierElementwise, RejectsMismatchedBinaryOperands) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %q = f32[16] parameter(1)
  %a = f32[8] add(%p, %q)
)")),
            "5:3: %a: operands have different shapes: f32[8] and f32[16]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %q = bf16[8] parameter(1)
  %a = f32[8] multiply(%p, %q)
)")),
            "5:3: %a: operands have different element types: f32[8] and bf16[8]");
}

TEST(VerifierElementwise, RejectsWrongDeclaredShape) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8,8] parameter(0)
  %a = f32[8,16] add(%p, %p)
)")),
            "4:3: %a: declared shape f32[8,16] but add infers f32[8,8]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %f = f32[4] is-finite(%p)
)")),
            "4:3: %f: declared shape f32[4] but is-finite infers pred[4]");
}

TEST(VerifierElementwise, RejectsWrongElementTypes) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] and(%p, %p)
)")),
            "4:3: %a: and needs pred or integer operands, got f32[2]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = s32[2] parameter(0)
  %e = s32[2] exponential(%p)
)")),
            "4:3: %e: exponential needs floating-point or complex operands, got s32[2]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = (f32[2]) parameter(0)
  %n = f32[2] negate(%p)
)")),
            "4:3: %n: the operand must be an array, got (f32[2])");
}

TEST(VerifierElementwise, CompareNeedsDirectionAndMatchingOperands) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %c = pred[2] compare(%p, %p)
)")),
            "4:3: %c: compare needs direction=EQ|NE|LT|LE|GT|GE");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %q = s32[2] parameter(1)
  %c = pred[2] compare(%p, %q), direction=EQ
)")),
            "5:3: %c: compares f32[2] with s32[2]: operands must have the same shape");
}

TEST(VerifierElementwise, SelectAcceptsScalarPredicate) {
  EXPECT_EQ(Verdict(Entry(R"(  %b = pred[] parameter(0)
  %v = pred[4] parameter(1)
  %x = f32[4] parameter(2)
  %s1 = f32[4] select(%b, %x, %x)
  %s2 = f32[4] select(%v, %x, %s1)
)")),
            "ok");
}

TEST(VerifierElementwise, SelectRejectsMismatches) {
  EXPECT_EQ(Verdict(Entry(R"(  %b = pred[3] parameter(0)
  %x = f32[2] parameter(1)
  %s = f32[2] select(%b, %x, %x)
)")),
            "5:3: %s: the predicate pred[3] must be a scalar or have the dimensions of f32[2]");
  EXPECT_EQ(Verdict(Entry(R"(  %b = pred[] parameter(0)
  %x = f32[2] parameter(1)
  %y = f32[3] parameter(2)
  %s = f32[2] select(%b, %x, %y)
)")),
            "6:3: %s: on_true f32[2] and on_false f32[3] differ");
  EXPECT_EQ(Verdict(Entry(R"(  %b = s32[] parameter(0)
  %x = f32[2] parameter(1)
  %s = f32[2] select(%b, %x, %x)
)")),
            "5:3: %s: the predicate must have element type pred, got s32[]");
}

TEST(VerifierElementwise, Clamp) {
  EXPECT_EQ(Verdict(Entry(R"(  %lo = f32[] parameter(0)
  %x = f32[4] parameter(1)
  %c1 = f32[4] clamp(%lo, %x, %lo)
  %c2 = f32[4] clamp(%x, %x, %x)
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %lo = f32[2] parameter(0)
  %x = f32[4] parameter(1)
  %c = f32[4] clamp(%lo, %x, %x)
)")),
            "5:3: %c: min f32[2] must be a scalar or shape of the operand f32[4]");
}

// --- shape manipulation --------------------------------------------------------

TEST(VerifierShapes, Broadcast) {
  EXPECT_EQ(Verdict(Entry(R"(  %s = f32[] parameter(0)
  %v = f32[3] parameter(1)
  %b1 = f32[2,3] broadcast(%s), dimensions={}
  %b2 = f32[2,3] broadcast(%v), dimensions={1}
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %v = f32[3] parameter(0)
  %b = f32[3,4] broadcast(%v), dimensions={1}
)")),
            "4:3: %b: operand dimension 0 (size 3) maps to output dimension 1 of size 4");
  EXPECT_EQ(Verdict(Entry(R"(  %v = f32[3] parameter(0)
  %b = f32[3,4] broadcast(%v), dimensions={0,1}
)")),
            "4:3: %b: dimensions has 2 entries but the operand f32[3] has rank 1");
  EXPECT_EQ(Verdict(Entry(R"(  %v = f32[3] parameter(0)
  %b = f32[3,4] broadcast(%v), dimensions={2}
)")),
            "4:3: %b: output dimension 2 is out of range for f32[3,4] (rank 2)");
  EXPECT_EQ(Verdict(Entry(R"(  %v = f32[3] parameter(0)
  %b = s32[3,4] broadcast(%v), dimensions={0}
)")),
            "4:3: %b: declared shape s32[3,4] but broadcast infers f32[3,4]");
}

TEST(VerifierShapes, ReshapeAndBitcast) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,8] parameter(0)
  %r = f32[4,4] reshape(%p)
  %b = f32[16] bitcast(%p)
  %i = s32[2,2,4] bitcast(%r)
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3] parameter(0)
  %r = f32[4] reshape(%p)
)")),
            "4:3: %r: the operand f32[2,3] has 6 elements but the result f32[4] has 4");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %b = f16[4] bitcast(%p)
)")),
            "4:3: %b: the operand f32[4] holds 128 bits but the result f16[4] holds 64");
}

TEST(VerifierShapes, TransposeAndReverse) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3,4] parameter(0)
  %t = f32[4,2,3] transpose(%p), dimensions={2,0,1}
  %r = f32[4,2,3] reverse(%t), dimensions={0,2}
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3] parameter(0)
  %t = f32[3,2] transpose(%p), dimensions={0,0}
)")),
            "4:3: %t: dimensions={0,0} is not a permutation of the 2 dimensions of f32[2,3]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3] parameter(0)
  %t = f32[2,3] transpose(%p), dimensions={1,0}
)")),
            "4:3: %t: declared shape f32[2,3] but transpose infers f32[3,2]");
}

TEST(VerifierShapes, Slice) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[5,8] parameter(0)
  %s = f32[3,2] slice(%p), slice={[0:5:2], [6:8]}
  %e = f32[0,8] slice(%p), slice={[2:2], [0:8]}
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = f32[6] slice(%p), slice={[0:6]}
)")),
            "4:3: %s: slice dimension 0: limit 6 exceeds the dimension size 4 of f32[4]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = f32[1] slice(%p), slice={[3:2]}
)")),
            "4:3: %s: slice dimension 0: start 3 is greater than limit 2");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = f32[1] slice(%p), slice={[0:4:0]}
)")),
            "4:3: %s: slice dimension 0: stride 0 must be positive");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = f32[2] slice(%p), slice={[0:4:3]}
  %t = f32[3] slice(%p), slice={[0:4:3]}
)")),
            "5:3: %t: declared shape f32[3] but slice infers f32[2]");
}

TEST(VerifierShapes, GatherAndScatter) {
  const std::string add =
      "\n%add {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%x, %y)\n}\n";
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %g = f32[6,5] gather(%t, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
  %w = f32[5,6] gather(%t, %ids), offset_dims={0}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
  %s = f32[8,5] scatter(%t, %ids, %g), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
)") + add),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %g = f32[6,4] gather(%t, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
)")),
            "5:3: %g: declared shape f32[6,4] but gather infers f32[6,5]");
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %g = f32[6,5] gather(%t, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,5}
)")),
            "5:3: %g: collapsed dimension 0 has slice size 2, not 1");
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %g = f32[6,5] gather(%t, %ids), offset_dims={1}, collapsed_slice_dims={0}, index_vector_dim=1, slice_sizes={1,5}
)")),
            "5:3: %g: gather needs start_index_map={...}");
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %g = f32[6,5] gather(%t, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=one, slice_sizes={1,5}
)")),
            "5:99: %g: index_vector_dim must be an integer, got one");
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %u = f32[7,5] parameter(2)
  %s = f32[8,5] scatter(%t, %ids, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
)") + add),
            "6:3: %s: the updates f32[7,5] do not match the indices s32[6]: their scatter "
            "dimensions must be the indices' batch dimensions");
  EXPECT_EQ(Verdict(Entry(R"(  %t = f32[8,5] parameter(0)
  %ids = s32[6] parameter(1)
  %u = f32[6,6] parameter(2)
  %s = f32[8,5] scatter(%t, %ids, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
)") + add),
            "6:3: %s: update window dimension 1 (6) is larger than operand dimension 1 (5)");
}

TEST(VerifierShapes, GatherAndScatterBatchingDimensions) {
  const std::string add =
      "\n%add {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%x, %y)\n}\n";
  const std::string head = "  %t = f32[4,10,3] parameter(0)\n  %at = s32[4,5,1] parameter(1)\n";
  const std::string batched =
      "operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2";
  EXPECT_EQ(Verdict(Entry(head +
                          "  %g = f32[4,5,3] gather(%t, %at), offset_dims={2}, "
                          "collapsed_slice_dims={1}, start_index_map={1}, " +
                          batched +
                          ", slice_sizes={1,1,3}\n"
                          "  %s = f32[4,10,3] scatter(%t, %at, %g), update_window_dims={2}, "
                          "inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, "
                          "input_batching_dims={0}, scatter_indices_batching_dims={0}, "
                          "index_vector_dim=2, to_apply=%add\n") +
                    add),
            "ok");
  // The batching dimension is no offset dimension: the shape is inferred
  // without it.
  EXPECT_EQ(Verdict(Entry(head +
                          "  %g = f32[4,5,1,3] gather(%t, %at), offset_dims={2,3}, "
                          "collapsed_slice_dims={1}, start_index_map={1}, " +
                          batched + ", slice_sizes={1,1,3}\n")),
            "5:3: %g: offset_dims has 2 entries but the operand has 1 dimensions neither "
            "collapsed nor batching");
  EXPECT_EQ(Verdict(Entry(head +
                          "  %g = f32[4,5,3] gather(%t, %at), offset_dims={2}, "
                          "collapsed_slice_dims={0}, start_index_map={1}, " +
                          batched + ", slice_sizes={1,1,3}\n")),
            "5:3: %g: operand dimension 0 is in both operand_batching_dims and "
            "collapsed_slice_dims");
  EXPECT_EQ(Verdict(Entry("  %t = f32[4,10,3] parameter(0)\n  %at = s32[5,4,1] parameter(1)\n"
                          "  %g = f32[5,4,3] gather(%t, %at), offset_dims={2}, "
                          "collapsed_slice_dims={1}, start_index_map={1}, " +
                          batched + ", slice_sizes={1,1,3}\n")),
            "5:3: %g: batching dimension 0 of the operand f32[4,10,3] has 4 elements but "
            "dimension 0 of the indices s32[5,4,1] has 5");
  EXPECT_EQ(Verdict(Entry(head + "  %g = f32[4,5,3] gather(%t, %at), offset_dims={2}, "
                                 "collapsed_slice_dims={1}, start_index_map={1}, "
                                 "operand_batching_dims={0}, start_indices_batching_dims={2}, "
                                 "index_vector_dim=2, slice_sizes={1,1,3}\n")),
            "5:3: %g: start_indices_batching_dims holds index_vector_dim=2");
  EXPECT_EQ(Verdict(Entry(head + "  %u = f32[4,5,3] parameter(2)\n"
                                 "  %s = f32[4,10,3] scatter(%t, %at, %u), update_window_dims={2}, "
                                 "inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, "
                                 "index_vector_dim=2, to_apply=%add\n") +
                    add),
            "6:3: %s: update_window_dims, inserted_window_dims and input_batching_dims have 2 "
            "entries, the operand f32[4,10,3] has rank 3");
}

TEST(VerifierShapes, DynamicSliceAndUpdate) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8,16] parameter(0)
  %i = s32[] parameter(1)
  %v = s32[2] parameter(2)
  %ds = f32[2,16] dynamic-slice(%p, %i, %i), dynamic_slice_sizes={2,16}
  %old = f32[2,16] dynamic-slice(%p, %v), dynamic_slice_sizes={2,16}
  %dus = f32[8,16] dynamic-update-slice(%p, %ds, %i, %i)
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4,4] parameter(0)
  %i = s32[] parameter(1)
  %d = f32[2,2] dynamic-slice(%p, %i), dynamic_slice_sizes={2,2}
)")),
            "5:3: %d: dynamic-slice of f32[4,4] takes 1 + rank = 3 operands, got 2");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %i = f32[] parameter(1)
  %d = f32[2] dynamic-slice(%p, %i), dynamic_slice_sizes={2}
)")),
            "5:3: %d: start index 0 must be an integer scalar, got f32[]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %i = s32[] parameter(1)
  %d = f32[5] dynamic-slice(%p, %i), dynamic_slice_sizes={5}
)")),
            "5:3: %d: slice size 5 in dimension 0 is outside [0, 4] for f32[4]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4,4] parameter(0)
  %u = f32[2,5] parameter(1)
  %i = s32[] parameter(2)
  %d = f32[4,4] dynamic-update-slice(%p, %u, %i, %i)
)")),
            "6:3: %d: the update f32[2,5] does not fit in the operand f32[4,4] in dimension 1");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %i = s32[] parameter(1)
  %j = u32[] parameter(2)
  %d = f32[4,4] dynamic-update-slice(%p, %p, %i, %j)
)")),
            "6:3: %d: dynamic-update-slice of f32[4] takes 2 + rank = 3 operands, got 4");
}

TEST(VerifierShapes, Concatenate) {
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[2,3] parameter(0)
  %b = f32[2,5] parameter(1)
  %c = f32[2,11] concatenate(%a, %b, %a), dimensions={1}
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[2,3] parameter(0)
  %b = f32[2,4] parameter(1)
  %c = f32[4,3] concatenate(%a, %b), dimensions={0}
)")),
            "5:3: %c: operand 1 f32[2,4] differs from operand 0 f32[2,3] in dimension 1");
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[2,3] parameter(0)
  %c = f32[4,3] concatenate(%a, %a)
)")),
            "4:3: %c: concatenate needs dimensions={d}");
}

TEST(VerifierShapes, Pad) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4,3] parameter(0)
  %z = f32[] parameter(1)
  %a = f32[8,3] pad(%p, %z), padding=-1_2_1x0_0
  %b = f32[0,3] pad(%p, %z), padding=-2_-2x0_0
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %z = f32[] parameter(1)
  %a = f32[4] pad(%p, %z), padding=0_0x0_0
)")),
            "5:3: %a: padding has 2 dimensions but the operand f32[4] has rank 1");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %z = f32[] parameter(1)
  %a = f32[0] pad(%p, %z), padding=-3_-3
)")),
            "5:3: %a: padding dimension 0: the padded size -2 is negative");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %z = f32[] parameter(1)
  %a = f32[4] pad(%p, %z), padding=9223372036854775807_1
)")),
            "5:3: %a: padding dimension 0: the padded size overflows");
}

TEST(VerifierShapes, ConvertAndBitcastConvert) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %c = bf16[4] convert(%p)
  %b = s32[4] bitcast-convert(%p)
  %n = s8[4,4] bitcast-convert(%p)
  %w = f32[4] bitcast-convert(%n)
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[3] parameter(0)
  %c = f32[2] convert(%p)
)")),
            "4:3: %c: declared shape f32[2] but convert infers f32[3]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = s8[4,3] parameter(0)
  %c = f32[4] bitcast-convert(%p)
)")),
            "4:3: %c: bitcast-convert of s8[4,3] to the wider type f32 needs a last dimension of "
            "size 4");
}

TEST(VerifierShapes, IotaTupleAndFriends) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %i = s32[4,8] iota(), iota_dimension=1
  %t = (f32[2], s32[4,8]) tuple(%p, %i)
  %g = s32[4,8] get-tuple-element(%t), index=1
  %o = (f32[2], s32[4,8]) opt-barrier(%t)
  %pid = u32[] partition-id()
  %rid = u32[] replica-id()
  %tok = token[] after-all()
  %c = f32[2,2] constant({{1, 2}, {3, 4}})
  %e = () tuple()
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %i = s32[4,4] iota(), iota_dimension=2
)")),
            "3:3: %i: iota_dimension 2 is out of range for s32[4,4] (rank 2)");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %t = (f32[2], f32[2]) tuple(%p, %p)
  %g = f32[2] get-tuple-element(%t), index=2
)")),
            "5:3: %g: index 2 is out of range for a tuple of 2 elements");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %g = f32[2] get-tuple-element(%p), index=0
)")),
            "4:3: %g: the operand f32[2] is not a tuple");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %t = (f32[2], f32[3]) tuple(%p, %p)
)")),
            "4:3: %t: declared shape (f32[2], f32[3]) but tuple infers (f32[2], f32[2])");
  EXPECT_EQ(Verdict(Entry(R"(  %r = s32[] replica-id()
)")),
            "3:3: %r: declared shape s32[] but replica-id infers u32[]");
}

// --- reductions and dot --------------------------------------------------------

TEST(VerifierReduce, AcceptsPlainAndVariadicReduce) {
  EXPECT_EQ(Verdict(R"(HloModule m
%argmax {
  %v0 = f32[] parameter(0)
  %i0 = s32[] parameter(1)
  %v1 = f32[] parameter(2)
  %i1 = s32[] parameter(3)
  %gt = pred[] compare(%v0, %v1), direction=GT
  %v = f32[] select(%gt, %v0, %v1)
  %i = s32[] select(%gt, %i0, %i1)
  %r = (f32[], s32[]) tuple(%v, %i)
}
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %s = f32[] add(%x, %y)
}
ENTRY %main {
  %p = f32[2,3] parameter(0)
  %idx = s32[2,3] iota(), iota_dimension=1
  %zero = f32[] constant(0)
  %first = s32[] constant(0)
  %sum = f32[2] reduce(%p, %zero), dimensions={1}, to_apply=%add
  %all = f32[] reduce(%p, %zero), dimensions={0,1}, to_apply=%add
  %am = (f32[3], s32[3]) reduce(%p, %idx, %zero, %first), dimensions={0}, to_apply=%argmax
}
)"),
            "ok");
}

TEST(VerifierReduce, RejectsBadReductions) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3] parameter(0)
  %z = f32[] constant(0)
  %r = f32[2] reduce(%p, %z), dimensions={2}, to_apply=%add
)") + std::string(kAdd)),
            "5:3: %r: reduced dimension 2 is out of range for f32[2,3] (rank 2)");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,3] parameter(0)
  %z = f32[] constant(0)
  %r = f32[3] reduce(%p, %z), dimensions={1}, to_apply=%add
)") + std::string(kAdd)),
            "5:3: %r: declared shape f32[3] but reduce infers f32[2]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = s32[2,3] parameter(0)
  %z = s32[] constant(0)
  %r = s32[2] reduce(%p, %z), dimensions={1}, to_apply=%add
)") + std::string(kAdd)),
            "5:3: %r: init value 0 is s32[] but to_apply %add accumulates f32");
  EXPECT_EQ(Verdict(R"(HloModule m
%add_vec {
  %x = f32[2] parameter(0)
  %y = f32[2] parameter(1)
  %s = f32[2] add(%x, %y)
}
ENTRY %main {
  %p = f32[2,3] parameter(0)
  %z = f32[] constant(0)
  %r = f32[2] reduce(%p, %z), dimensions={1}, to_apply=%add_vec
}
)"),
            "10:3: %r: to_apply %add_vec parameter 0 is f32[2], expected a scalar");
  EXPECT_EQ(Verdict(R"(HloModule m
%three {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %z = f32[] parameter(2)
  %s = f32[] add(%x, %y)
}
ENTRY %main {
  %p = f32[2,3] parameter(0)
  %z = f32[] constant(0)
  %r = f32[2] reduce(%p, %z), dimensions={1}, to_apply=%three
}
)"),
            "11:3: %r: to_apply %three must take 2 scalar parameters, takes 3");
}

TEST(VerifierDot, AcceptsMatmulsAndBatchedDots) {
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[8,16] parameter(0)
  %b = f32[16,4] parameter(1)
  %x = bf16[2,8,16] parameter(2)
  %y = bf16[2,4,16] parameter(3)
  %mm = f32[8,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bmm = f32[2,8,4] dot(%x, %y), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}
  %outer = f32[8,16,16,4] dot(%a, %b)
  %lhs_free_after = f32[16,16] dot(%a, %a), lhs_contracting_dims={0}, rhs_contracting_dims={0}
)")),
            "ok");
}

TEST(VerifierDot, RejectsBadDimensionNumbers) {
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[8,16] parameter(0)
  %b = f32[8,4] parameter(1)
  %dot.3 = f32[8,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
)")),
            "5:3: %dot.3: contracting dimension sizes differ: lhs dimension 1 is 16, rhs "
            "dimension 0 is 8");
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[2,8,16] parameter(0)
  %b = f32[16,4] parameter(1)
  %d = f32[2,8,4] dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={0}
)")),
            "5:3: %d: lhs_batch_dims has 1 dimension(s) but rhs_batch_dims has 0");
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[8,16] parameter(0)
  %b = f32[16,4] parameter(1)
  %d = f32[8,4] dot(%a, %b), lhs_contracting_dims={2}, rhs_contracting_dims={0}
)")),
            "5:3: %d: lhs dimension 2 is out of range for f32[8,16] (rank 2)");
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[16,16] parameter(0)
  %d = f32[16] dot(%a, %a), lhs_batch_dims={1}, rhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_contracting_dims={1}
)")),
            "4:3: %d: lhs dimension 1 appears more than once");
  EXPECT_EQ(Verdict(Entry(R"(  %a = f32[2,8,16] parameter(0)
  %b = f32[2,16,4] parameter(1)
  %d = f32[8,2,4] dot(%a, %b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
)")),
            "5:3: %d: declared shape f32[8,2,4] but dot infers f32[2,8,4]");
}

// --- control flow and calls ------------------------------------------------------

constexpr std::string_view kLoop = R"(HloModule m
%cond {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(4)
  %lt = pred[] compare(%i, %n), direction=LT
}
%body {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[4] negate(%x)
  %t = (s32[], f32[4]) tuple(%next, %y)
}
)";

TEST(VerifierControlFlow, While) {
  EXPECT_EQ(Verdict(std::string(kLoop) + R"(ENTRY %main {
  %x = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]) tuple(%zero, %x)
  %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body
}
)"),
            "ok");
  EXPECT_EQ(Verdict(std::string(kLoop) + R"(ENTRY %main {
  %x = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]) tuple(%zero, %x)
  %w = (s32[], f32[4]) while(%init), condition=%body, body=%body
}
)"),
            "21:3: %w: condition %body returns (s32[], f32[4]), expected pred[]");
  EXPECT_EQ(Verdict(std::string(kLoop) + R"(ENTRY %main {
  %x = f32[4] parameter(0)
  %w = f32[4] while(%x), condition=%cond, body=%body
}
)"),
            "19:3: %w: condition %cond parameter 0 is (s32[], f32[4]), but while passes f32[4]");
  EXPECT_EQ(Verdict(R"(HloModule m
%cond {
  %p = s32[] parameter(0)
  %n = s32[] constant(4)
  %lt = pred[] compare(%p, %n), direction=LT
}
%body {
  %p = s32[] parameter(0)
  %f = f32[] convert(%p)
}
ENTRY %main {
  %zero = s32[] constant(0)
  %w = s32[] while(%zero), condition=%cond, body=%body
}
)"),
            "13:3: %w: body %body returns f32[], but %w is s32[]");
}

TEST(VerifierControlFlow, Conditional) {
  constexpr std::string_view kBranches = R"(HloModule m
%neg {
  %p = f32[2] parameter(0)
  %n = f32[2] negate(%p)
}
%abs {
  %p = f32[2] parameter(0)
  %a = f32[2] abs(%p)
}
%wide {
  %p = f32[2] parameter(0)
  %c = f32[4] concatenate(%p, %p), dimensions={0}
}
)";
  EXPECT_EQ(Verdict(std::string(kBranches) + R"(ENTRY %main {
  %b = pred[] parameter(0)
  %i = s32[] parameter(1)
  %x = f32[2] parameter(2)
  %c1 = f32[2] conditional(%b, %x, %x), true_computation=%neg, false_computation=%abs
  %c2 = f32[2] conditional(%i, %x, %x, %c1), branch_computations={%neg, %abs, %neg}
}
)"),
            "ok");
  EXPECT_EQ(Verdict(std::string(kBranches) + R"(ENTRY %main {
  %i = s32[] parameter(0)
  %x = f32[2] parameter(1)
  %c = f32[2] conditional(%i, %x, %x), branch_computations={%neg, %wide}
}
)"),
            "17:3: %c: branch_computations[1] %wide returns f32[4], but %c is f32[2]");
  EXPECT_EQ(Verdict(std::string(kBranches) + R"(ENTRY %main {
  %i = s32[] parameter(0)
  %x = f32[2] parameter(1)
  %c = f32[2] conditional(%i, %x), branch_computations={%neg, %abs}
}
)"),
            "17:3: %c: a conditional with 2 branches takes 3 operands, got 2");
  EXPECT_EQ(Verdict(std::string(kBranches) + R"(ENTRY %main {
  %f = f32[] parameter(0)
  %x = f32[2] parameter(1)
  %c = f32[2] conditional(%f, %x, %x), branch_computations={%neg, %abs}
}
)"),
            "17:3: %c: the branch selector must be pred[] or s32[], got f32[]");
}

TEST(VerifierControlFlow, CallFusionAndMap) {
  constexpr std::string_view kCallees = R"(HloModule m
%twice {
  %p = f32[2] parameter(0)
  %s = f32[2] add(%p, %p)
}
%mul {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %m = f32[] multiply(%x, %y)
}
)";
  EXPECT_EQ(Verdict(std::string(kCallees) + R"(ENTRY %main {
  %x = f32[2] parameter(0)
  %c = f32[2] call(%x), to_apply=%twice
  %f = f32[2] fusion(%x), kind=kLoop, calls=%twice
  %m = f32[2] map(%x, %c), dimensions={0}, to_apply=%mul
}
)"),
            "ok");
  EXPECT_EQ(Verdict(std::string(kCallees) + R"(ENTRY %main {
  %x = f32[2] parameter(0)
  %c = f32[2] call(%x, %x), to_apply=%twice
}
)"),
            "13:3: %c: to_apply %twice takes 1 parameter, but call passes 2 operands");
  EXPECT_EQ(Verdict(std::string(kCallees) + R"(ENTRY %main {
  %x = f32[2] parameter(0)
  %f = f32[3] fusion(%x), kind=kLoop, calls=%twice
}
)"),
            "13:3: %f: calls %twice returns f32[2], but %f is f32[3]");
  EXPECT_EQ(Verdict(std::string(kCallees) + R"(ENTRY %main {
  %x = f32[3] parameter(0)
  %c = f32[3] call(%x), to_apply=%twice
}
)"),
            "13:3: %c: to_apply %twice parameter 0 is f32[2], but call passes f32[3]");
}

// --- collectives -------------------------------------------------------------------

TEST(VerifierCollectives, AllGather) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,8] parameter(0)
  %q = bf16[4,4] parameter(1)
  %ag = f32[8,8] all-gather(%p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %two = (f32[2,16], bf16[4,8]) all-gather(%p, %q), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={1}, use_global_device_ids=true
  %iota = f32[4,8] all-gather(%p), channel_id=3, replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}, use_global_device_ids=true
  %replicas = f32[4,8] all-gather(%p), replica_groups={{0,1}}, dimensions={0}
)",
                          ", num_partitions=2, replica_count=2")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[4] all-gather(%p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
)")),
            "4:3: %ag: declared shape f32[4] but all-gather infers f32[8]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,2] parameter(0)
  %ag = f32[2,4] all-gather(%p), channel_id=1, replica_groups={{0,1}}, dimensions={2}
)")),
            "4:3: %ag: dimension 2 is out of range for f32[2,2] (rank 2)");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2,2] parameter(0)
  %ag = f32[2,4] all-gather(%p), channel_id=1, replica_groups={{0,1}}
)")),
            "4:3: %ag: all-gather needs dimensions={d}");
}

TEST(VerifierCollectives, ChannelIdWithoutGlobalIdsSpansAllPartitions) {
  // XLA's cross-replica-and-partition mode: the ids are replicas, and each
  // group also takes in every partition: 2 replicas x 2 partitions here.
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[8] all-gather(%p), channel_id=1, replica_groups={{0,1}}, dimensions={0}
)",
                          ", num_partitions=2")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[4] all-gather(%p), channel_id=1, replica_groups={{0,1}}, dimensions={0}
)",
                          ", num_partitions=2")),
            "4:3: %ag: declared shape f32[4] but all-gather infers f32[8]");
}

TEST(VerifierCollectives, AllGatherWithAllDevicesInfersTheGroupSize) {
  // `{}` with no device count in the header: the shapes say 8 partitions.
  const VerifyReport report = Report(Entry(R"(  %p = f32[1,8] parameter(0)
  %ag = f32[8,8] all-gather(%p), channel_id=1, replica_groups={}, dimensions={0}
)"));
  EXPECT_EQ(report.partition_count, 8);
  EXPECT_EQ(report.replica_count, 1);
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[3] parameter(0)
  %ag = f32[7] all-gather(%p), replica_groups={}, dimensions={0}
)")),
            "4:3: %ag: dimension 0 of the result (7) is not a multiple of dimension 0 of the "
            "operand (3)");
  // With the count in the header, `{}` is one group of all its devices.
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[1,8] parameter(0)
  %ag = f32[8,8] all-gather(%p), channel_id=1, replica_groups={}, dimensions={0}
)",
                          ", num_partitions=4")),
            "4:3: %ag: declared shape f32[8,8] but all-gather infers f32[4,8]");
}

TEST(VerifierCollectives, AllGatherStartAndDone) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %s1 = (f32[2], f32[4]) all-gather-start(%p), replica_groups={{0,1}}, dimensions={0}
  %d1 = f32[4] all-gather-done(%s1)
  %s2 = f32[4] all-gather-start(%p), replica_groups={{0,1}}, dimensions={0}
  %d2 = f32[4] all-gather-done(%s2)
  %s3 = ((f32[2], f32[2]), (f32[4], f32[4])) all-gather-start(%p, %p), replica_groups={{0,1}}, dimensions={0}
  %d3 = (f32[4], f32[4]) all-gather-done(%s3)
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %s = (f32[2], f32[8]) all-gather-start(%p), replica_groups={{0,1}}, dimensions={0}
)")),
            "4:3: %s: declared shape (f32[2], f32[8]) but all-gather-start infers (f32[2], "
            "f32[4]) (or f32[4])");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %d = f32[2] all-gather-done(%p)
)")),
            "4:3: %d: the operand %p must be all-gather-start, not parameter");
}

TEST(VerifierCollectives, ReduceScatter) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8,4] parameter(0)
  %rs = f32[2,4] reduce-scatter(%p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
  %rs2 = f32[8,1] reduce-scatter(%p), replica_groups={}, dimensions={1}, to_apply=%add
)") + std::string(kAdd)),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[6] parameter(0)
  %rs = f32[2] reduce-scatter(%p), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
)") + std::string(kAdd)),
            "4:3: %rs: dimension 0 of the operand (size 6) is not divisible by the 4 devices of a "
            "replica group");
  EXPECT_EQ(Verdict(Entry(R"(  %p = s32[8] parameter(0)
  %rs = s32[4] reduce-scatter(%p), replica_groups={{0,1}}, dimensions={0}, to_apply=%add
)") + std::string(kAdd)),
            "4:3: %rs: operand %p is s32[8] but to_apply %add reduces f32");
}

TEST(VerifierCollectives, AllReduce) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %q = f32[2,2] parameter(1)
  %ar = f32[8] all-reduce(%p), replica_groups={}, to_apply=%add
  %uneven = f32[8] all-reduce(%p), replica_groups={{0},{1,2}}, to_apply=%add
  %two = (f32[8], f32[2,2]) all-reduce(%p, %q), replica_groups={{0,1,2}}, to_apply=%add
  %start = f32[8] all-reduce-start(%p), replica_groups={{0,1,2}}, to_apply=%add
  %done = f32[8] all-reduce-done(%start)
)") + std::string(kAdd)),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %ar = f32[4] all-reduce(%p), replica_groups={}, to_apply=%add
)") + std::string(kAdd)),
            "4:3: %ar: declared shape f32[4] but all-reduce infers f32[8]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %ar = f32[8] all-reduce(%p), replica_groups={}
)")),
            "4:3: %ar: all-reduce needs to_apply=");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %ar = f32[8] all-reduce(%p), replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add
)") + std::string(kAdd)),
            "4:3: %ar: use_global_device_ids=true needs a channel_id");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %ar = f32[8] all-reduce(%p), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=%add
)") + std::string(kAdd)),
            "4:3: %ar: use_global_device_ids=true needs explicit replica_groups");
}

TEST(VerifierCollectives, AllToAll) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4,8] parameter(0)
  %q = f32[2] parameter(1)
  %a = f32[4,8] all-to-all(%p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  %t = (f32[2], f32[2]) all-to-all(%q, %q), replica_groups={{0,1}}
)")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[6,8] parameter(0)
  %a = f32[6,8] all-to-all(%p), replica_groups={{0,1,2,3}}, dimensions={0}
)")),
            "4:3: %a: dimension 0 of the operand f32[6,8] (size 6) is not divisible by the 4 "
            "devices of a replica group");
  EXPECT_EQ(Verdict(Entry(R"(  %q = f32[2] parameter(0)
  %t = (f32[2], f32[2], f32[2]) all-to-all(%q, %q, %q), replica_groups={{0,1}}
)")),
            "4:3: %t: all-to-all without dimensions takes one operand per device of a replica "
            "group (2), got 3");
}

TEST(VerifierCollectives, CollectivePermute) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %cp = f32[4] collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %one = f32[4] collective-permute(%p), channel_id=2, source_target_pairs={{3,0}}
  %s = (f32[4], f32[4], u32[], u32[]) collective-permute-start(%p), channel_id=3, source_target_pairs={{0,1}}
  %d = f32[4] collective-permute-done(%s)
  %s2 = ((f32[4], f32[4]), (f32[4], f32[4])) collective-permute-start(%p, %p), source_target_pairs={{0,1}}
  %d2 = (f32[4], f32[4]) collective-permute-done(%s2)
)",
                          ", num_partitions=4")),
            "ok");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %cp = f32[4] collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,1}}
)")),
            "4:3: %cp: target 1 appears more than once in source_target_pairs");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %cp = f32[4] collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{0,2}}
)")),
            "4:3: %cp: source 0 appears more than once in source_target_pairs");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %cp = f32[4] collective-permute(%p), channel_id=1, source_target_pairs={{3,4}}
)",
                          ", num_partitions=4")),
            "4:3: %cp: target 4 in source_target_pairs is out of range: the module has 4 "
            "partitions");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %cp = f32[4] collective-permute(%p), source_target_pairs={{-1,0}}
)")),
            "4:3: %cp: source -1 in source_target_pairs is negative");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = (f32[4], f32[2]) collective-permute-start(%p), source_target_pairs={{0,1}}
)")),
            "4:3: %s: declared shape (f32[4], f32[2]) but collective-permute-start infers "
            "(f32[4], f32[4]) (optionally followed by context elements)");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = (f32[4], f32[4]) collective-permute-start(%p), source_target_pairs={{0,1}}
  %d = f32[2] collective-permute-done(%s)
)")),
            "5:3: %d: declared shape f32[2] but collective-permute-done infers f32[4]");
}

TEST(VerifierCollectives, ReplicaGroupRules) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[4] all-gather(%p), replica_groups={{0,1},{2}}, dimensions={0}
)")),
            "4:3: %ag: replica groups have different sizes: group 0 has 2 devices, group 1 has 1");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[4] all-gather(%p), replica_groups={{0,1},{1,2}}, dimensions={0}
)")),
            "4:3: %ag: device 1 appears more than once in replica_groups");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[4] all-gather(%p), replica_groups={{0,2}}, dimensions={0}
)")),
            "4:3: %ag: device 2 in replica_groups is out of range: 2 devices must be numbered 0 "
            "to 1, and device 1 is missing");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %a = f32[2] all-to-all(%p), channel_id=1, replica_groups={{0,1}}, dimensions={0}
)",
                          ", num_partitions=4")),
            "4:3: %a: replica_groups name 2 of the module's 4 partitions");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[8] all-gather(%p), channel_id=1, replica_groups={{0,1,2,4}}, dimensions={0}, use_global_device_ids=true
)",
                          ", num_partitions=4")),
            "4:3: %ag: device 4 in replica_groups is out of range: the module has 4 devices "
            "(replicas x partitions)");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[2] parameter(0)
  %ag = f32[4] all-gather(%p), replica_groups={{0,1},{}}, dimensions={0}
)")),
            "4:3: %ag: replica group 1 is empty");
}

TEST(VerifierCollectives, DeviceCounts) {
  // Flattened ids with no header counts: all of them are partitions.
  VerifyReport report = Report(Entry(R"(  %p = f32[8] parameter(0)
  %ar = f32[8] all-reduce(%p), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add
)") + std::string(kAdd));
  EXPECT_EQ(report.partition_count, 8);
  EXPECT_EQ(report.replica_count, 1);
  // Without a channel_id, ids number replicas.
  report = Report(Entry(R"(  %p = f32[8] parameter(0)
  %cp = f32[8] collective-permute(%p), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
)"));
  EXPECT_EQ(report.partition_count, 1);
  EXPECT_EQ(report.replica_count, 4);
  // The header's counts win.
  report = Report(Entry(R"(  %p = f32[8] parameter(0)
  %cp = f32[8] collective-permute(%p), channel_id=1, source_target_pairs={{0,1}}
)",
                        ", num_partitions=16, replica_count=2"));
  EXPECT_EQ(report.partition_count, 16);
  EXPECT_EQ(report.replica_count, 2);
  // A header giving one count means the other is 1 (XLA prints neither count
  // when it is 1), so flattened ids range over the one given.
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %ar = f32[8] all-reduce(%p), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
)",
                          ", replica_count=2") +
                    std::string(kAdd)),
            "4:3: %ar: device 7 in replica_groups is out of range: the module has 2 devices "
            "(replicas x partitions)");
  // Ids of other spaces may exceed a count of 1: XLA cannot tell it from an
  // absent one, so Loom infers the count instead.
  report = Report(Entry(R"(  %p = f32[8] parameter(0)
  %cp = f32[8] collective-permute(%p), channel_id=1, source_target_pairs={{0,7}}
)",
                        ", replica_count=2, num_partitions=1"));
  EXPECT_EQ(report.partition_count, 8);
  EXPECT_EQ(report.replica_count, 2);
}

// --- async wrappers ------------------------------------------------------------

constexpr std::string_view kAsyncCallee = R"(HloModule m
%a2a {
  %p = f32[4,4] parameter(0)
  %a = f32[4,4] all-to-all(%p), dimensions={0}, replica_groups={{0,1}}
}
)";

TEST(VerifierAsync, AsyncStartUpdateDone) {
  EXPECT_EQ(Verdict(std::string(kAsyncCallee) + R"(ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = ((f32[4,4]), f32[4,4], u32[]) async-start(%x), calls=%a2a
  %u = ((f32[4,4]), f32[4,4], u32[]) async-update(%s), calls=%a2a
  %d = f32[4,4] async-done(%u), calls=%a2a
  %cs = (f32[4,4], f32[4,4], u32[]) copy-start(%d)
  %cd = f32[4,4] copy-done(%cs)
}
)"),
            "ok");
  EXPECT_EQ(Verdict(std::string(kAsyncCallee) + R"(ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = ((f32[4,4]), f32[2,4]) async-start(%x), calls=%a2a
}
)"),
            "8:3: %s: element 1 of the shape is f32[2,4], but calls %a2a returns f32[4,4]");
  EXPECT_EQ(Verdict(std::string(kAsyncCallee) + R"(ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = (f32[4,4], f32[4,4]) async-start(%x), calls=%a2a
}
)"),
            "8:3: %s: declared shape (f32[4,4], f32[4,4]) but async-start of 1 operand needs "
            "((f32[4,4]), result, context...)");
  EXPECT_EQ(Verdict(std::string(kAsyncCallee) + R"(ENTRY %main {
  %x = f32[4,4] parameter(0)
  %s = ((f32[4,4]), f32[4,4]) async-start(%x), calls=%a2a
  %d = f32[4] async-done(%s)
}
)"),
            "9:3: %d: declared shape f32[4] but async-done infers f32[4,4]");
  EXPECT_EQ(Verdict(std::string(kAsyncCallee) + R"(ENTRY %main {
  %x = f32[4,4] parameter(0)
  %d = f32[4,4] async-done(%x)
}
)"),
            "8:3: %d: the operand %x must be async-start or async-update, not parameter");
}

// --- trusted ops ------------------------------------------------------------------

TEST(VerifierTrusted, UninterpretedOpsAreListed) {
  const VerifyReport report = Report(Entry(R"(  %p = f32[16,64,256] parameter(0)
  %conv = f32[16,256,256] convolution(%p, %p), window={size=16 stride=15 lhs_dilate=16}, dim_labels=0fb_0io->0fb
  %cc = bf16[3] custom-call(%conv), custom_call_target="Boh"
  %s = f32[16,256,256] sort(%conv), dimensions={0}, to_apply=%lt
  %l = f32[16,256,256] cholesky(%s), lower=true
)") + R"(
%lt {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %r = pred[] compare(%a, %b), direction=LT
}
)");
  // sort and cholesky are verified (ir/sort.h, ir/linear_algebra.h), not
  // trusted.
  EXPECT_EQ(report.trusted,
            (std::vector<std::string>{"%cc: custom-call (shape trusted as declared)"}));
}

// --- convolution ------------------------------------------------------------------

TEST(VerifierConvolution, InfersTheOutputOfWindowsStridesPaddingAndDilation) {
  // 0fb: spatial, feature, batch. 16 inputs dilated by 16 are 241 wide;
  // windows of 16 at stride 15 fit 16 times.
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[16,64,256] parameter(0)
  %c = f32[16,256,256] convolution(%p, %p), window={size=16 stride=15 lhs_dilate=16}, dim_labels=0fb_0io->0fb
)")),
            "ok");
  // 2-D, padded 1 on each side, stride 2: (32 + 2 - 3) / 2 + 1 = 16.
  EXPECT_EQ(Verdict(Entry(R"(  %x = bf16[8,32,32,16] parameter(0)
  %w = bf16[3,3,16,64] parameter(1)
  %y = f32[8,16,16,64] convolution(%x, %w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
)")),
            "ok");
  // Depthwise: 16 groups of one feature, the kernel's 32 outputs 2 a group.
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[2,16,10] parameter(0)
  %w = f32[32,1,3] parameter(1)
  %y = f32[2,32,10] convolution(%x, %w), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0, feature_group_count=16
)")),
            "ok");
  // A weight gradient of it: the batch in 16 groups of features.
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[16,2,10] parameter(0)
  %dy = f32[10,2,32] parameter(1)
  %w = f32[3,1,32] convolution(%x, %dy), window={size=10 pad=1_1}, dim_labels=bf0_0io->0bf, batch_group_count=16
)")),
            "ok");
}

TEST(VerifierConvolution, NamesWhatDoesNotFit) {
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8,32,32,16] parameter(0)
  %w = f32[3,3,16,64] parameter(1)
  %y = f32[8,32,32,64] convolution(%x, %w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
)")),
            "5:3: %y: declared shape f32[8,32,32,64] but convolution infers f32[8,16,16,64]");
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8,32,32,16] parameter(0)
  %w = f32[3,3,8,64] parameter(1)
  %y = f32[8,30,30,64] convolution(%x, %w), window={size=3x3}, dim_labels=b01f_01io->b01f
)")),
            "5:3: %y: the input's 16 features in 1 group(s) do not match the kernel's 8 input "
            "features");
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8,32,16] parameter(0)
  %w = f32[5,16,64] parameter(1)
  %y = f32[8,30,64] convolution(%x, %w), window={size=3}, dim_labels=b0f_0io->b0f
)")),
            "5:3: %y: window size 3 in spatial dimension 0 but the kernel f32[5,16,64] has 5");
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8,32,16] parameter(0)
  %w = f32[3,16,64] parameter(1)
  %y = f32[8,30,64] convolution(%x, %w), window={size=3}, dim_labels=b0f_0io->b1f
)")),
            "5:59: %y: dim_labels=b0f_0io->b1f: 'b1f' takes b, f and the spatial digits 0..0 "
            "once each");
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8,32,16] parameter(0)
  %w = f32[3,16,64] parameter(1)
  %y = f32[8,30,64] convolution(%x, %w), window={size=3 stride=0}, dim_labels=b0f_0io->b0f
)")),
            "5:42: %y: window stride=0: 0 must be at least 1");
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8,32,16] parameter(0)
  %w = s32[3,16,64] parameter(1)
  %y = f32[8,30,64] convolution(%x, %w), window={size=3}, dim_labels=b0f_0io->b0f
)")),
            "5:3: %y: the input f32[8,32,16] and kernel s32[3,16,64] must be of one float or "
            "integer type");
}

TEST(VerifierReduceWindow, InfersTheResultFromTheWindow) {
  // Max-pooling 3x3, stride 2, padded by one at the high end: (32 + 1 - 3)
  // / 2 + 1 = 16 positions; base and window dilation: 4 inputs dilated by 2
  // span 7, a window of 2 taps 3 apart spans 4: 4 positions.
  const VerifyReport report = Report(Entry(R"(  %x = f32[8,32,32,64] parameter(0)
  %z = f32[] constant(0)
  %r = f32[8,16,16,64] reduce-window(%x, %z), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}, to_apply=%add
  %v = f32[4] parameter(1)
  %d = f32[4] reduce-window(%v, %z), window={size=2 lhs_dilate=2 rhs_dilate=3}, to_apply=%add
)") + std::string(kAdd));
  EXPECT_TRUE(report.trusted.empty());
  EXPECT_EQ(Verdict(Entry(R"(  %x = f32[8] parameter(0)
  %z = f32[] constant(0)
  %r = f32[4] reduce-window(%x, %z), window={size=2 stride=3}, to_apply=%add
)") + std::string(kAdd)),
            "5:3: %r: declared shape f32[4] but reduce-window infers f32[3]");
}

TEST(VerifierReduceWindow, NamesWhatIsWrong) {
  const auto verdict = [](std::string_view line) {
    return Verdict(Entry(std::string(R"(  %x = f32[8,8] parameter(0)
  %z = f32[] constant(0)
)") + std::string(line) + "\n") +
                   std::string(kAdd));
  };
  EXPECT_EQ(verdict("  %r = f32[4,4] reduce-window(%x, %z), to_apply=%add"),
            "5:3: %r: reduce-window needs window={size=...}");
  EXPECT_EQ(verdict("  %r = f32[4] reduce-window(%x, %z), window={size=2}, to_apply=%add"),
            "5:3: %r: the window has 1 dimensions but the input f32[8,8] has 2");
  EXPECT_EQ(verdict("  %r = f32[7,7] reduce-window(%x, %z), window={size=2x2 rhs_reversal=1x0}, "
                    "to_apply=%add"),
            "5:40: %r: reduce-window takes no rhs_reversal");
  EXPECT_EQ(verdict("  %r = f32[7,7] reduce-window(%x, %z), window={size=2x2 stride=0x1}, "
                    "to_apply=%add"),
            "5:40: %r: window stride=0x1: 0 must be at least 1");
}

// A max-pooling's gradient: the source has the pooling's 16 x 16 positions.
TEST(VerifierSelectAndScatter, ChecksTheSourceAndTheComputations) {
  const std::string computations = R"(
%ge {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = pred[] compare(%a, %b), direction=GE
}
)" + std::string(kAdd);
  const auto verdict = [&](std::string_view source, std::string_view select) {
    return Verdict(Entry(fmt::format(R"(  %x = f32[8,32,32,64] parameter(0)
  %dy = f32[{}] parameter(1)
  %z = f32[] constant(0)
  %dx = f32[8,32,32,64] select-and-scatter(%x, %dy, %z), window={{size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}}, select={}, scatter=%add
)",
                                     source, select)) +
                   computations);
  };
  EXPECT_EQ(verdict("8,16,16,64", "%ge"), "ok");
  EXPECT_EQ(verdict("8,15,16,64", "%ge"),
            "6:3: %dx: the window has f32[8,16,16,64] positions over the operand f32[8,32,32,64], "
            "but the source is f32[8,15,16,64]");
  EXPECT_EQ(verdict("8,16,16,64", "%add"),
            "6:3: %dx: select %add returns f32[], but %dx is pred[]");
}

TEST(VerifierSort, ChecksOperandsDimensionAndComparator) {
  const std::string less = R"(
%less {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=LT
}
)";
  const auto verdict = [&](std::string_view line) {
    return Verdict(Entry(std::string(R"(  %x = f32[4,9] parameter(0)
  %i = s32[4,9] iota(), iota_dimension=1
)") + std::string(line) + "\n") +
                   less);
  };
  EXPECT_EQ(verdict("  %s = (f32[4,9], s32[4,9]) sort(%x, %i), dimensions={1}, to_apply=%less"),
            "ok");
  EXPECT_EQ(verdict("  %s = (f32[4,9], s32[4,9]) sort(%x, %i), dimensions={2}, to_apply=%less"),
            "5:3: %s: sort takes one dimension of f32[4,9], got dimensions={2}");
  EXPECT_EQ(verdict("  %s = f32[4,9] sort(%x), dimensions={1}, to_apply=%less"),
            "5:3: %s: to_apply %less takes 4 parameters, but sort passes 2 operands");
  EXPECT_EQ(verdict("  %s = (f32[4,9], f32[4,9]) sort(%x, %i), dimensions={1}, to_apply=%less"),
            "5:3: %s: declared shape (f32[4,9], f32[4,9]) but sort infers (f32[4,9], s32[4,9])");
}

TEST(VerifierTopK, InfersValuesAndPositionsOfTheLastDimension) {
  const auto verdict = [](std::string_view line) {
    return Verdict(Entry("  %x = bf16[4,9] parameter(0)\n" + std::string(line) + "\n"));
  };
  EXPECT_EQ(verdict("  %t = (bf16[4,2], s32[4,2]) topk(%x), k=2, largest=true"), "ok");
  EXPECT_EQ(verdict("  %t = (bf16[4,9], s32[4,9]) topk(%x), k=9"), "ok");
  EXPECT_EQ(verdict("  %t = (bf16[4,2], s32[4,2]) topk(%x), k=2, largest=false"), "ok");
  EXPECT_EQ(verdict("  %t = (bf16[4,10], s32[4,10]) topk(%x), k=10, largest=true"),
            "4:3: %t: topk takes an array of rank 1 or more whose last dimension holds k=10, got "
            "bf16[4,9]");
  EXPECT_EQ(verdict("  %t = (bf16[4,2], s64[4,2]) topk(%x), k=2, largest=true"),
            "4:3: %t: declared shape (bf16[4,2], s64[4,2]) but topk infers (bf16[4,2], s32[4,2])");
  EXPECT_EQ(verdict("  %t = (bf16[4,2], s32[4,2]) topk(%x), largest=true"),
            "4:3: %t: topk needs k=N, N >= 0");
  EXPECT_EQ(verdict("  %t = (bf16[4,2], s32[4,2]) topk(%x), k=2, largest=yes"),
            "4:45: %t: largest=yes is neither true nor false");
}

TEST(VerifierRngBitGenerator, StateAndBitsAreChecked) {
  const auto verdict = [](std::string_view state, std::string_view line) {
    return Verdict(Entry(fmt::format("  %s = {} parameter(0)\n{}\n", state, line)));
  };
  EXPECT_EQ(
      verdict("u64[2]", "  %r = (u64[2], u32[4,5]) rng-bit-generator(%s), algorithm=rng_three_fry"),
      "ok");
  EXPECT_EQ(
      verdict("u64[3]", "  %r = (u64[3], bf16[9]) rng-bit-generator(%s), algorithm=rng_philox"),
      "ok");
  EXPECT_EQ(
      verdict("u64[2]", "  %r = (u64[2], s64[]) rng-bit-generator(%s), algorithm=rng_default"),
      "ok");
  EXPECT_EQ(
      verdict("u64[3]", "  %r = (u64[3], u32[4]) rng-bit-generator(%s), algorithm=rng_three_fry"),
      "4:3: %r: rng-bit-generator's ThreeFry state is u64[2], got u64[3]");
  EXPECT_EQ(
      verdict("u32[4]", "  %r = (u32[4], u32[4]) rng-bit-generator(%s), algorithm=rng_philox"),
      "4:3: %r: rng-bit-generator's Philox state is u64[2] or u64[3], got u32[4]");
  EXPECT_EQ(
      verdict("u64[2]", "  %r = (u64[2], pred[4]) rng-bit-generator(%s), algorithm=rng_philox"),
      "4:3: %r: rng-bit-generator draws integers or floating point of 8, 16, 32 or 64 bits, "
      "not pred");
  EXPECT_EQ(
      verdict("u64[2]", "  %r = (u64[3], u32[4]) rng-bit-generator(%s), algorithm=rng_philox"),
      "4:3: %r: declared shape (u64[3], u32[4]) but rng-bit-generator infers (u64[2], u32[4])");
  EXPECT_EQ(verdict("u64[2]", "  %r = (u64[2], u32[4]) rng-bit-generator(%s)"),
            "4:3: %r: rng-bit-generator needs algorithm=rng_three_fry, rng_philox or rng_default");
  EXPECT_EQ(verdict("u64[2]", "  %r = (u64[2], u32[4]) rng-bit-generator(%s), algorithm=mt19937"),
            "4:48: %r: unknown algorithm=mt19937 (rng_three_fry, rng_philox or rng_default)");
}

TEST(VerifierReducePrecision, BitsAreChecked) {
  const auto verdict = [](std::string_view line) {
    return Verdict(Entry("  %x = f32[4] parameter(0)\n" + std::string(line) + "\n"));
  };
  EXPECT_EQ(verdict("  %r = f32[4] reduce-precision(%x), exponent_bits=8, mantissa_bits=7"), "ok");
  EXPECT_EQ(verdict("  %r = f32[4] reduce-precision(%x), exponent_bits=1, mantissa_bits=0"), "ok");
  EXPECT_EQ(verdict("  %r = f32[4] reduce-precision(%x), exponent_bits=0, mantissa_bits=7"),
            "4:37: %r: reduce-precision needs exponent_bits=N, 1 <= N <= 64");
  EXPECT_EQ(verdict("  %r = f32[4] reduce-precision(%x), exponent_bits=8"),
            "4:3: %r: reduce-precision needs mantissa_bits=N, 0 <= N <= 64");
  EXPECT_EQ(verdict("  %r = f16[4] reduce-precision(%x), exponent_bits=8, mantissa_bits=7"),
            "4:3: %r: declared shape f16[4] but reduce-precision infers f32[4]");
}

TEST(VerifierBatchNorm, AttributesAndShapesAreChecked) {
  const auto verdict = [](std::string_view line) {
    return Verdict(
        Entry("  %x = f32[2,3,4] parameter(0)\n  %s = f32[3] parameter(1)\n"
              "  %d = f32[4] parameter(2)\n" +
              std::string(line) + "\n"));
  };
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[3], f32[3]) batch-norm-training(%x, %s, %s), "
                    "epsilon=0.001, feature_index=1"),
            "ok");
  EXPECT_EQ(verdict("  %y = f32[2,3,4] batch-norm-inference(%x, %s, %s, %s, %s), epsilon=1e-5, "
                    "feature_index=1"),
            "ok");
  EXPECT_EQ(verdict("  %g = (f32[2,3,4], f32[3], f32[3]) batch-norm-grad(%x, %s, %s, %s, %x), "
                    "epsilon=0.1, feature_index=1"),
            "ok");
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[4], f32[4]) batch-norm-training(%x, %d, %d), "
                    "epsilon=0.001, feature_index=2"),
            "ok");
  // The feature's size, the grad_output's shape, the attributes, the result.
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[3], f32[3]) batch-norm-training(%x, %d, %s), "
                    "epsilon=0.001, feature_index=1"),
            "6:3: %t: batch-norm-training's operand 1 must be f32[3], got f32[4]");
  EXPECT_EQ(verdict("  %g = (f32[2,3,4], f32[3], f32[3]) batch-norm-grad(%x, %s, %s, %s, %s), "
                    "epsilon=0.1, feature_index=1"),
            "6:3: %g: batch-norm-grad's operand 4 must be f32[2,3,4], got f32[3]");
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[3], f32[3]) batch-norm-training(%x, %s, %s), "
                    "epsilon=0.001, feature_index=3"),
            "6:85: %t: feature_index=3 is not a dimension of the rank-3 operand");
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[3], f32[3]) batch-norm-training(%x, %s, %s), "
                    "epsilon=tiny, feature_index=1"),
            "6:70: %t: epsilon=tiny is not a finite float");
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[3], f32[3]) batch-norm-training(%x, %s, %s), "
                    "epsilon=0.001"),
            "6:3: %t: batch-norm-training needs feature_index=");
  EXPECT_EQ(verdict("  %y = f32[2,3,4] batch-norm-inference(%x, %s, %s), epsilon=1e-5, "
                    "feature_index=1"),
            "6:3: %y: batch-norm-inference takes an operand, a scale, an offset, a mean and a "
            "variance, got 3 operands");
  EXPECT_EQ(verdict("  %t = (f32[2,3,4], f32[3]) batch-norm-training(%x, %s, %s), "
                    "epsilon=0.001, feature_index=1"),
            "6:3: %t: declared shape (f32[2,3,4], f32[3]) but batch-norm-training infers "
            "(f32[2,3,4], f32[3], f32[3])");
}

TEST(VerifierLinearAlgebra, TriangularSolveAndCholeskyAreChecked) {
  const auto verdict = [](std::string_view line) {
    return Verdict(
        Entry("  %a = f32[2,4,4] parameter(0)\n  %b = f32[2,4,3] parameter(1)\n"
              "  %r = f32[2,3,4] parameter(2)\n  %s = s32[4,4] parameter(3)\n" +
              std::string(line) + "\n"));
  };
  EXPECT_EQ(verdict("  %x = f32[2,4,3] triangular-solve(%a, %b), left_side=true, lower=true, "
                    "unit_diagonal=false, transpose_a=NO_TRANSPOSE"),
            "ok");
  EXPECT_EQ(verdict("  %x = f32[2,3,4] triangular-solve(%a, %r), transpose_a=ADJOINT"), "ok");
  EXPECT_EQ(verdict("  %l = f32[2,4,4] cholesky(%a), lower=true"), "ok");
  EXPECT_EQ(verdict("  %u = f32[2,4,4] cholesky(%a)"), "ok");
  // The side decides which dimension of b meets a's.
  EXPECT_EQ(verdict("  %x = f32[2,4,3] triangular-solve(%a, %b), transpose_a=TRANSPOSE"),
            "7:3: %x: triangular-solve's 'b' f32[2,4,3] must have columns 4 of 'a' f32[2,4,4]");
  EXPECT_EQ(verdict("  %x = f32[2,3,4] triangular-solve(%a, %r), left_side=true, "
                    "transpose_a=TRANSPOSE"),
            "7:3: %x: triangular-solve's 'b' f32[2,3,4] must have rows 4 of 'a' f32[2,4,4]");
  EXPECT_EQ(verdict("  %x = f32[2,4,3] triangular-solve(%a, %b), left_side=true"),
            "7:3: %x: triangular-solve needs transpose_a=NO_TRANSPOSE, TRANSPOSE or ADJOINT");
  EXPECT_EQ(verdict("  %x = f32[2,4,3] triangular-solve(%a, %b), left_side=true, "
                    "transpose_a=CONJUGATE"),
            "7:61: %x: transpose_a=CONJUGATE is not NO_TRANSPOSE, TRANSPOSE or ADJOINT");
  EXPECT_EQ(verdict("  %x = f32[2,4,3] triangular-solve(%a, %b), left_side=yes, "
                    "transpose_a=TRANSPOSE"),
            "7:45: %x: left_side=yes is neither true nor false");
  EXPECT_EQ(verdict("  %x = f32[2,4,3] triangular-solve(%b, %b), left_side=true, "
                    "transpose_a=TRANSPOSE"),
            "7:3: %x: triangular-solve's 'a' must be square matrices in its two minor "
            "dimensions, got f32[2,4,3]");
  EXPECT_EQ(verdict("  %x = f32[2,4,4] cholesky(%s)"),
            "7:3: %x: cholesky takes floating-point or complex matrices, got s32[4,4] for 'a'");
  EXPECT_EQ(verdict("  %x = f32[2,4,4] cholesky(%a, %a)"),
            "7:3: %x: cholesky takes 1 operand, got 2");
  EXPECT_EQ(verdict("  %x = f32[4,4] cholesky(%a), lower=true"),
            "7:3: %x: declared shape f32[4,4] but cholesky infers f32[2,4,4]");
}

TEST(VerifierStochasticConvert, OperandAndRandomBitsAreChecked) {
  const auto verdict = [](std::string_view line) {
    return Verdict(
        Entry("  %x = f32[8] parameter(0)\n  %r = u32[8] parameter(1)\n"
              "  %h = u16[8] parameter(2)\n  %i = s32[8] parameter(3)\n" +
              std::string(line) + "\n"));
  };
  EXPECT_EQ(verdict("  %y = s8[8] stochastic-convert(%x, %r)"), "ok");
  EXPECT_EQ(verdict("  %y = s8[8] stochastic-convert(%x, %h)"),
            "7:3: %y: stochastic-convert's random bits must be unsigned integers as wide as the "
            "operand f32[8], got u16[8]");
  EXPECT_EQ(verdict("  %y = s8[8] stochastic-convert(%x, %i)"),
            "7:3: %y: stochastic-convert's random bits must be unsigned integers as wide as the "
            "operand f32[8], got s32[8]");
  EXPECT_EQ(verdict("  %y = s8[8] stochastic-convert(%i, %r)"),
            "7:3: %y: stochastic-convert rounds a floating-point operand, got s32[8]");
  EXPECT_EQ(verdict("  %y = s8[4] stochastic-convert(%x, %r)"),
            "7:3: %y: declared shape s8[4] but stochastic-convert infers s8[8]");
  EXPECT_EQ(verdict("  %y = s8[8] stochastic-convert(%x)"),
            "7:3: %y: stochastic-convert takes 2 operands, got 1");
}

TEST(VerifierTopKCustomCall, ShapesAndComparatorAreChecked) {
  const std::string greater = R"(
%greater {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = pred[] compare(%a, %b), direction=GT
}
%wrong {
  %a = f32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %r = pred[] constant(true)
}
)";
  const auto verdict = [&](std::string_view line) {
    return Verdict(Entry("  %x = f32[4,9] parameter(0)\n" + std::string(line) + "\n") + greater);
  };
  EXPECT_EQ(verdict(R"(  %t = (f32[4,2], s32[4,2]) custom-call(%x), custom_call_target="TopK")"),
            "ok");
  EXPECT_EQ(verdict(R"(  %t = (f32[4,2], s32[4,2]) custom-call(%x), custom_call_target="TopK", )"
                    R"(to_apply=%greater)"),
            "ok");
  EXPECT_EQ(verdict(R"(  %t = (f32[4,2], s32[4,3]) custom-call(%x), custom_call_target="TopK")"),
            "4:3: %t: custom-call TopK of f32[4,9] returns (f32[4,2], s32[4,2]), not (f32[4,2], "
            "s32[4,3])");
  EXPECT_EQ(verdict(R"(  %t = (f32[4,12], s32[4,12]) custom-call(%x), custom_call_target="TopK")"),
            "4:3: %t: custom-call TopK is a topk, and topk takes an array of rank 1 or more whose "
            "last dimension "
            "holds k=12, got f32[4,9]");
  EXPECT_EQ(
      verdict(R"(  %t = (f32[4,2], s32[4,2]) custom-call(%x), custom_call_target="TopK", )"
              R"(to_apply=%wrong)"),
      "4:3: %t: custom-call TopK needs a comparator of two f32[] (and two s32) to pred[], got "
      "%wrong");
  EXPECT_EQ(verdict(R"(  %t = f32[4,2] custom-call(%x), custom_call_target="TopK")"),
            "4:3: %t: custom-call TopK takes one array and returns (values, s32 positions)");
}

TEST(VerifierReduceWindow, ReducerIsChecked) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[8] parameter(0)
  %z = s32[] constant(0)
  %r = f32[4] reduce-window(%p, %z), window={size=2 stride=2}, to_apply=%add
)") + std::string(kAdd)),
            "5:3: %r: init value 0 is s32[], expected a f32 scalar");
}

// --- hostile input -----------------------------------------------------------------

TEST(VerifierRobustness, HugeNumbersAreErrorsNotCrashes) {
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %s = f32[1] slice(%p), slice={[0:4:9223372036854775807]}
  %i = s32[] parameter(1)
  %d = f32[1] dynamic-slice(%p, %i), dynamic_slice_sizes={-9223372036854775807}
)")),
            "6:3: %d: slice size -9223372036854775807 in dimension 0 is outside [0, 4] for f32[4]");
  EXPECT_EQ(Verdict(Entry(R"(  %p = s2[4611686018427387903] parameter(0)
  %ag = s2[4] all-gather(%p), replica_groups={{0,1,2,3}}, dimensions={0}
)")),
            "4:3: %ag: the gathered dimension overflows");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %ar = f32[4] all-reduce(%p), replica_groups={{0,9223372036854775807}}, to_apply=%add
)") + std::string(kAdd)),
            "4:3: %ar: device id 9223372036854775807 exceeds the 1048576 devices Loom supports");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %ar = f32[4] all-reduce(%p), replica_groups=[1048576,2]<=[2097152], to_apply=%add
)") + std::string(kAdd)),
            "4:3: %ar: iota replica groups [1048576,2] list more than the 1048576 devices Loom "
            "supports");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %g = f32[4] get-tuple-element(%p), index=-1
  %t = () tuple()
  %h = f32[4] get-tuple-element(%t), index=0
)")),
            "4:3: %g: the operand f32[4] is not a tuple");
  EXPECT_EQ(Verdict(Entry(R"(  %t = () tuple()
  %h = f32[4] get-tuple-element(%t), index=0
)")),
            "4:3: %h: index 0 is out of range for a tuple of 0 elements");
  EXPECT_EQ(Verdict(Entry(R"(  %p = f32[4] parameter(0)
  %t = f32[4] transpose(%p), dimensions={-1}
  %b = f32[4] broadcast(%p), dimensions={-5}
)")),
            "4:3: %t: dimensions={-1} is not a permutation of the 1 dimensions of f32[4]");
}

// --- the corpus ---------------------------------------------------------------------

namespace fs = std::filesystem;

TEST(VerifierCorpus, EveryModuleVerifiesWithTheExpectedDeviceCounts) {
  // Device counts (replicas, partitions) the verifier must find; the header
  // gives them for some files and the replica groups for the others.
  const std::map<std::string, std::pair<int64_t, int64_t>> expected_counts = {
      {"01_wes_ag_loop_stream_ids.hlo", {1, 4}},        {"08_wes_a2a_then_gemm.hlo", {1, 8}},
      {"11_lhs_all_gather_async_simple.hlo", {2, 1}},   {"16_lhs_while_cp_start_done.hlo", {4, 1}},
      {"18_gpu_lhs_a2a_gemm_async.hlo", {16, 1}},       {"21_pipeliner_while_ag_rs.hlo", {1, 8}},
      {"35_real_llama31_405b_bf16_16x8.hlo", {1, 128}}, {"36_plain_while_scan.hlo", {1, 1}},
  };
  if (!fs::is_directory(LOOM_CORPUS_DIR)) GTEST_SKIP() << "no corpus at " << LOOM_CORPUS_DIR;
  int verified = 0;
  for (const auto& entry : fs::directory_iterator(LOOM_CORPUS_DIR)) {
    if (entry.path().extension() != ".hlo") continue;
    const std::string name = entry.path().filename().string();
    Expected<std::unique_ptr<Module>> module = ParseModuleFile(entry.path().string());
    ASSERT_TRUE(module.ok()) << module.error().ToString(name);
    Expected<VerifyReport> report = VerifyModule(**module);
    ASSERT_TRUE(report.ok()) << report.error().ToString(name);
    ++verified;
    if (auto it = expected_counts.find(name); it != expected_counts.end()) {
      EXPECT_EQ(report->replica_count, it->second.first) << name;
      EXPECT_EQ(report->partition_count, it->second.second) << name;
    }
    if (name == "35_real_llama31_405b_bf16_16x8.hlo") {
      EXPECT_EQ(report->trusted.size(), 3u) << "the three fused-attention custom-calls";
    }
  }
  EXPECT_GE(verified, 30);
}

}  // namespace
}  // namespace loom::ir
