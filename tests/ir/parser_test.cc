// Parser and printer on hand-written HLO: the syntax variants of real dumps,
// canonical printing, and syntax errors with their locations.
#include "ir/parser.h"

#include <gtest/gtest.h>

#include "ir/compare.h"
#include "ir/printer.h"

namespace loom::ir {
namespace {

std::unique_ptr<Module> Parse(std::string_view text) {
  Expected<std::unique_ptr<Module>> module = ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return module.ok() ? std::move(module).value() : nullptr;
}

std::string ParseError(std::string_view text) {
  Expected<std::unique_ptr<Module>> module = ParseModule(text);
  return module.ok() ? "<parsed>" : module.error().ToString();
}

// print(parse(text)) parses to the same module, and printing is idempotent.
void ExpectRoundTrip(std::string_view text) {
  std::unique_ptr<Module> module = Parse(text);
  ASSERT_NE(module, nullptr);
  const std::string printed = PrintModule(*module);
  std::unique_ptr<Module> reparsed = Parse(printed);
  ASSERT_NE(reparsed, nullptr) << printed;
  EXPECT_EQ(FirstDifference(*module, *reparsed), "");
  EXPECT_EQ(PrintModule(*reparsed), printed);
}

TEST(ParserTest, NewStyleModule) {
  std::unique_ptr<Module> module = Parse(R"(
HloModule m, num_partitions=4

ENTRY main {
  p0 = f32[8,16]{1,0} parameter(0)
  p1 = f32[16,4] parameter(1)
  ROOT d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->name(), "m");
  EXPECT_EQ(module->num_partitions(), 4);
  ASSERT_NE(module->entry(), nullptr);
  const Instruction* root = module->entry()->root();
  EXPECT_EQ(root->name(), "d");
  EXPECT_EQ(root->opcode(), Opcode::kDot);
  EXPECT_EQ(root->operand(0)->name(), "p0");
  ASSERT_TRUE(root->attrs().dot.has_value());
  EXPECT_EQ(root->attrs().dot->lhs_contracting, std::vector<int64_t>{1});
  EXPECT_EQ(root->operand(0)->shape().layout()->minor_to_major, (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(root->operand(1)->shape().layout().has_value());
}

TEST(ParserTest, OldStyleSignatureAndOperandShapes) {
  std::unique_ptr<Module> module = Parse(R"(
HloModule m

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(f32[] %x, f32[] %y)
}

ENTRY %main (p: f32[8]) -> f32[] {
  %p = f32[8]{0} parameter(0)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(f32[8]{0} %p, f32[] %zero), dimensions={0}, to_apply=%add
}
)");
  ASSERT_NE(module, nullptr);
  const Instruction* root = module->entry()->root();
  EXPECT_EQ(root->called("to_apply"), module->FindComputation("add"));
  EXPECT_EQ(root->operand(1)->literal(), "0");
}

TEST(ParserTest, MultiLineInstructionsCommentsAndTiledLayouts) {
  std::unique_ptr<Module> module = Parse(R"(
HloModule m, is_scheduled=true // a trailing comment

ENTRY %e {
  %c = f32[]{:T(128)} constant(1) /* block comment */
  %b = f32[8,256]{1,0:T(8,128)S(1)} broadcast(
    f32[]{:T(128)} %c), dimensions={}
  ROOT %t = (f32[8,256], /*index=1*/f32[]) tuple(%b, %c)
}
)");
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(module->is_scheduled());
  const Instruction* b = module->entry()->FindInstruction("b");
  ASSERT_NE(b, nullptr);
  const Layout& layout = *b->shape().layout();
  EXPECT_EQ(layout.Tiles(), (std::vector<std::vector<int64_t>>{{8, 128}}));
  EXPECT_EQ(layout.MemorySpace(), 1);
  EXPECT_EQ(layout.ToString(), "{1,0:T(8,128)S(1)}");
}

TEST(ParserTest, InlineOperandInstructionsAndShapelessInstructions) {
  std::unique_ptr<Module> module = Parse(R"(
HloModule m
ENTRY %e {
  %p = (s32[], f32[4]) parameter(0)
  %i = get-tuple-element(%p), index=0
  ROOT %n = s32[] add(%i, s32[] constant(1))
}
)");
  ASSERT_NE(module, nullptr);
  const Computation& entry = *module->entry();
  EXPECT_EQ(entry.instruction_count(), 4);
  EXPECT_EQ(entry.FindInstruction("i")->shape().ToString(), "s32[]");
  EXPECT_EQ(entry.root()->operand(1)->opcode(), Opcode::kConstant);
  EXPECT_EQ(entry.root()->operand(1)->literal(), "1");
}

TEST(ParserTest, ReplicaGroupForms) {
  std::unique_ptr<Module> module = Parse(R"(
HloModule m, num_partitions=8
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %e {
  %p = f32[4] parameter(0)
  %a = f32[4] all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add
  %b = f32[4] all-reduce(%p), replica_groups={}, to_apply=%add
  ROOT %c = f32[4] all-reduce(%p), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%add
}
)");
  ASSERT_NE(module, nullptr);
  const Computation& entry = *module->entry();
  EXPECT_EQ(entry.FindInstruction("a")->attrs().replica_groups->Groups(8),
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(entry.FindInstruction("b")->attrs().replica_groups->IsAllDevices());
  // iota [2,4] transposed: 0 4 1 5 2 6 3 7, cut into 4 groups of 2.
  EXPECT_EQ(entry.root()->attrs().replica_groups->Groups(8),
            (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(entry.root()->attrs().replica_groups->ToString(), "[4,2]<=[2,4]T(1,0)");
}

TEST(ParserTest, KeepsUninterpretedAttributesVerbatim) {
  std::unique_ptr<Module> module = Parse(R"(
HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}
ENTRY %e {
  %p = f32[2] parameter(0), sharding={devices=[2]<=[2]}, metadata={op_name="a b" source_line=3}
  ROOT %c = f32[2] custom-call(%p), custom_call_target="Foo", backend_config={"x": [1, 2]}, api_version=API_VERSION_TYPED_FFI
}
)");
  ASSERT_NE(module, nullptr);
  const Instruction* p = module->entry()->FindInstruction("p");
  ASSERT_NE(p->attrs().FindRaw("metadata"), nullptr);
  EXPECT_EQ(p->attrs().FindRaw("metadata")->value, R"({op_name="a b" source_line=3})");
  EXPECT_EQ(p->attrs().FindRaw("sharding")->value, "{devices=[2]<=[2]}");
  EXPECT_EQ(module->entry()->root()->attrs().custom_call_target, "Foo");
  EXPECT_EQ(module->header_attributes().at(0).key, "entry_computation_layout");
  EXPECT_EQ(
      PrintInstruction(*module->entry()->root()),
      R"(%c = f32[2] custom-call(%p), custom_call_target="Foo", backend_config={"x": [1, 2]}, api_version=API_VERSION_TYPED_FFI)");
}

TEST(ParserTest, RoundTripsEveryForm) {
  ExpectRoundTrip(R"(
HloModule m, is_scheduled=true, replica_count=2, frontend_attributes={a="b"}

FileNames
1 "x.py"

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one), control-predecessors={%one}
  %x = f32[4] get-tuple-element(%p), index=1
  %s = f32[2] slice(%x), slice={[0:4:2]}
  %q = f32[6] pad(%x, f32[] constant(0)), padding=1_1
  ROOT %t = (s32[], f32[4]) tuple(%n, %x)
}

%cond {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %lt = pred[] compare(%i, s32[] constant(3)), direction=LT
}

ENTRY %main {
  %init = (s32[], f32[4]) parameter(0)
  ROOT %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
}
)");
}

TEST(ParserTest, ReportsSyntaxErrorsWithLocations) {
  EXPECT_EQ(ParseError("HloModule m\nENTRY e {\n  p = f32[2] frobnicate(1)\n}\n"),
            "3:14: unknown opcode 'frobnicate'");
  EXPECT_EQ(ParseError("HloModule m\nENTRY e {\n  p = f33[2] parameter(0)\n}\n"),
            "3:7: unknown element type 'f33'");
  EXPECT_EQ(ParseError("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"),
            "4:1: unexpected end of input: expected '}' to close computation %e");
  EXPECT_EQ(ParseError("HloModule m\nENTRY e {\n  ROOT p = f32[2] add(q, q)\n}\n"),
            "3:23: use of undefined instruction %q in computation %e");
  EXPECT_EQ(ParseError("ENTRY e {}"), "1:1: expected 'HloModule', found 'ENTRY'");
  EXPECT_EQ(ParseError(""), "1:1: unexpected end of input: expected 'HloModule'");
  EXPECT_EQ(ParseError("HloModule m\n/* never closed"), "2:1: unterminated /* comment");
}

TEST(ParserTest, RejectsHostileNesting) {
  std::string deep = "HloModule m\nENTRY e {\n  ROOT p = ";
  deep += std::string(10000, '(');
  EXPECT_NE(ParseError(deep + ")"), "<parsed>");
  std::string braces = "HloModule m, x=" + std::string(100000, '{');
  EXPECT_NE(ParseError(braces), "<parsed>");
}

}  // namespace
}  // namespace loom::ir
