// Which ops the fusion model puts inside their users' kernels
// (analysis/fusion.h), on HLO text: the elementwise chains it must fuse and
// the producers it must not.
#include "analysis/fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ir/parser.h"

namespace loom::analysis {
namespace {

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return std::move(*module);
}

// What the kernel rooted at `root` reads, as "reader.index<-value", sorted
// (a value two of its instructions read, twice).
std::vector<std::string> KernelReadsOf(const FusionPlan& plan, const ir::Computation& computation,
                                       const char* root) {
  std::vector<std::string> reads;
  for (const OperandRead& read : plan.KernelReads(*computation.FindInstruction(root))) {
    reads.push_back(read.reader->name() + "." + std::to_string(read.index) + "<-" +
                    read.reader->operand(read.index)->name());
  }
  std::sort(reads.begin(), reads.end());
  return reads;
}

constexpr const char* kModule = R"(
HloModule fusion

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main {
  %x = f32[64,32] parameter(0)
  %w = f32[32,16] parameter(1)
  %h = f32[64,16] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %half = f32[] constant(0.5)
  %b = f32[64,16] broadcast(%half), dimensions={}
  %m = f32[64,16] multiply(%h, %b)
  %t = f32[64,16] tanh(%m)
  %e = f32[64,16] exponential(%t)
  %u = f32[64,16] add(%e, %b)
  %zero = f32[] constant(0)
  %r = f32[64] reduce(%u, %zero), dimensions={1}, to_apply=%add
  %c = f32[64,16] convert(%h)
  %w2 = f32[16,16] parameter(2)
  %d = f32[64,16] dot(%c, %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %n = f32[64,16] negate(%u)
  ROOT %out = (f32[64], f32[64,16], f32[64,16]) tuple(%r, %d, %n)
}
)";

TEST(FusionPlan, FusesElementwiseChainsIntoTheirKernel) {
  auto module = Parse(kModule);
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  const auto fused = [&](const char* name) {
    return plan.FusedIntoUsers(*entry.FindInstruction(name));
  };
  // multiply -> tanh -> exponential feed one user each: one kernel.
  EXPECT_TRUE(fused("m"));
  EXPECT_TRUE(fused("t"));
  EXPECT_TRUE(fused("e"));
  // A broadcast is duplicated into each of its consumers.
  EXPECT_TRUE(fused("b"));
  // %u has two users (the reduce and the negate): it stays a kernel.
  EXPECT_FALSE(fused("u"));
  // Dots never fuse, nor does a value the tuple takes; the convert of a
  // dot's result that only another dot reads is read through by that dot.
  EXPECT_FALSE(fused("h"));
  EXPECT_TRUE(fused("c"));
  EXPECT_FALSE(fused("d"));
  EXPECT_FALSE(fused("n"));
  // The reduce, whose result the tuple takes, roots a kernel of its own
  // (an input fusion).
  EXPECT_FALSE(fused("r"));
  EXPECT_EQ(plan.fused_count(), 5u);
  // The kernel of %u reads %h and the broadcast's scalar; that of %d reads
  // %h through the convert, and %w2.
  EXPECT_EQ(KernelReadsOf(plan, entry, "u"), (std::vector<std::string>{"b.0<-half", "m.0<-h"}));
  EXPECT_EQ(KernelReadsOf(plan, entry, "d"), (std::vector<std::string>{"c.0<-h", "d.1<-w2"}));
  EXPECT_TRUE(plan.KernelReads(*entry.FindInstruction("m")).empty());
}

TEST(FusionPlan, FusesAReducesInputAndADynamicUpdateSlicesUpdateOnly) {
  auto module = Parse(R"(
HloModule fusion2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main {
  %x = f32[64,16] parameter(0)
  %sq = f32[64,16] multiply(%x, %x)
  %zero = f32[] constant(0)
  %r = f32[64] reduce(%sq, %zero), dimensions={1}, to_apply=%add
  %buffer = f32[128,16] parameter(1)
  %big = f32[128,16] negate(%buffer)
  %update = f32[64,16] tanh(%x)
  %i = s32[] parameter(2)
  %j = s32[] constant(0)
  %dus = f32[128,16] dynamic-update-slice(%big, %update, %i, %j)
  ROOT %out = (f32[64], f32[128,16]) tuple(%r, %dus)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("sq")));
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("update")));
  // The buffer updated in place is not computed inside the update.
  EXPECT_FALSE(plan.FusedIntoUsers(*entry.FindInstruction("big")));
}

constexpr const char* kSoftmax = R"(
HloModule softmax

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main {
  %s = f32[4,ROW] parameter(0)
  %ninf = f32[] constant(-inf)
  %m = f32[4] reduce(%s, %ninf), dimensions={1}, to_apply=%max
  %bm = f32[4,ROW] broadcast(%m), dimensions={0}
  %d = f32[4,ROW] subtract(%s, %bm)
  %e = f32[4,ROW] exponential(%d)
  %zero = f32[] constant(0)
  %z = f32[4] reduce(%e, %zero), dimensions={1}, to_apply=%add
  %bz = f32[4,ROW] broadcast(%z), dimensions={0}
  %p = f32[4,ROW] divide(%e, %bz)
  %c = bf16[4,ROW] convert(%p)
  %v = bf16[ROW,8] parameter(1)
  ROOT %o = bf16[4,8] dot(%c, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

std::string SoftmaxWithRows(int64_t row) {
  std::string text = kSoftmax;
  for (size_t at = text.find("ROW"); at != std::string::npos; at = text.find("ROW")) {
    text.replace(at, 3, std::to_string(row));
  }
  return text;
}

TEST(FusionPlan, FusesASoftmaxWithItsReductionsIntoOneKernelWhileARowFitsOnChip) {
  auto module = Parse(SoftmaxWithRows(2048));
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  // The convert that narrows the probabilities roots the kernel: the dot
  // reads them as the kernel wrote them, since the chain starts inside it.
  for (const char* name : {"m", "bm", "d", "e", "z", "bz", "p"}) {
    EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction(name))) << name;
  }
  EXPECT_FALSE(plan.FusedIntoUsers(*entry.FindInstruction("c")));
  // It reads %s (by the max and the subtract) and the two initial values.
  EXPECT_EQ(KernelReadsOf(plan, entry, "c"),
            (std::vector<std::string>{"d.0<-s", "m.0<-s", "m.1<-ninf", "z.1<-zero"}));

  // A row longer than a kernel keeps on chip: the reductions are kernels of
  // their own, and so is %e, which one of them and the divide both read.
  auto wide = Parse(SoftmaxWithRows(2 * kMaxFusedReduceRow));
  ASSERT_NE(wide, nullptr);
  const ir::Computation& wide_entry = *wide->entry();
  const FusionPlan wide_plan(wide_entry);
  for (const char* name : {"m", "z", "e"}) {
    EXPECT_FALSE(wide_plan.FusedIntoUsers(*wide_entry.FindInstruction(name))) << name;
  }
  EXPECT_TRUE(wide_plan.FusedIntoUsers(*wide_entry.FindInstruction("d")));
  EXPECT_TRUE(wide_plan.FusedIntoUsers(*wide_entry.FindInstruction("p")));
}

TEST(FusionPlan, ADotReadsItsWeightsWindowThroughTheSliceAndTheConvert) {
  auto module = Parse(R"(
HloModule stacked

ENTRY %main {
  %stacked = f32[4,64,32] parameter(0)
  %layer = s32[] parameter(1)
  %z = s32[] constant(0)
  %window = f32[1,64,32] dynamic-slice(%stacked, %layer, %z, %z), dynamic_slice_sizes={1,64,32}
  %w = f32[64,32] reshape(%window)
  %wb = bf16[64,32] convert(%w)
  %x = f32[16,64] parameter(2)
  %g = f32[16,64] parameter(3)
  %n = f32[16,64] multiply(%x, %g)
  %nb = bf16[16,64] convert(%n)
  %y = bf16[16,32] dot(%nb, %wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = bf16[32,64] transpose(%wb), dimensions={1,0}
  ROOT %out = (bf16[16,32], bf16[32,64]) tuple(%y, %t)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  const auto fused = [&](const char* name) {
    return plan.FusedIntoUsers(*entry.FindInstruction(name));
  };
  // %wb has a user that is not a dot (the transpose, whose result the
  // tuple takes): it stays a kernel, and the chain under it fuses into it.
  EXPECT_FALSE(fused("wb"));
  EXPECT_TRUE(fused("w"));
  EXPECT_TRUE(fused("window"));
  // The normed input's convert starts inside the multiply's kernel: it
  // roots it, and writes the bf16 value the dot reads.
  EXPECT_TRUE(fused("n"));
  EXPECT_FALSE(fused("nb"));

  // Without the transpose, the dot reads the f32 window itself.
  auto only_dot = Parse(R"(
HloModule stacked

ENTRY %main {
  %stacked = f32[4,64,32] parameter(0)
  %layer = s32[] parameter(1)
  %z = s32[] constant(0)
  %window = f32[1,64,32] dynamic-slice(%stacked, %layer, %z, %z), dynamic_slice_sizes={1,64,32}
  %w = f32[64,32] reshape(%window)
  %wb = bf16[64,32] convert(%w)
  %x = bf16[16,64] parameter(2)
  ROOT %y = bf16[16,32] dot(%x, %wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
  ASSERT_NE(only_dot, nullptr);
  const ir::Computation& dot_entry = *only_dot->entry();
  const FusionPlan dot_plan(dot_entry);
  for (const char* name : {"window", "w", "wb"}) {
    EXPECT_TRUE(dot_plan.FusedIntoUsers(*dot_entry.FindInstruction(name))) << name;
  }
  EXPECT_EQ(KernelReadsOf(dot_plan, dot_entry, "y"),
            (std::vector<std::string>{"window.0<-stacked", "window.1<-layer", "window.2<-z",
                                      "window.3<-z", "y.0<-x"}));
}

TEST(FusionPlan, ADotReadsThroughAConvertOfAValueOtherKernelsReadToo) {
  // %p is written once, since the tuple takes it too: the dot reads it
  // through the convert instead of a kernel converting it first.
  auto module = Parse(R"(
HloModule saved

ENTRY %main {
  %s = f32[16,64] parameter(0)
  %p = f32[16,64] exponential(%s)
  %pb = bf16[16,64] convert(%p)
  %v = bf16[64,8] parameter(1)
  %o = bf16[16,8] dot(%pb, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = (bf16[16,8], f32[16,64]) tuple(%o, %p)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  EXPECT_FALSE(plan.FusedIntoUsers(*entry.FindInstruction("p")));
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("pb")));
  EXPECT_EQ(KernelReadsOf(plan, entry, "o"), (std::vector<std::string>{"o.1<-v", "pb.0<-p"}));
}

// The text may use a value before the line that defines it: the plan
// follows the data, not the lines.
TEST(FusionPlan, FollowsTheDataWhereTheTextUsesAValueBeforeDefiningIt) {
  auto module = Parse(R"(
HloModule backwards

ENTRY %main {
  %x = f32[64,32] parameter(0)
  ROOT %a = f32[64,32] add(%t, %x)
  %t = f32[64,32] tanh(%m)
  %m = f32[64,32] multiply(%x, %x)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("m")));
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("t")));
  EXPECT_EQ(KernelReadsOf(plan, entry, "a"),
            (std::vector<std::string>{"a.1<-x", "m.0<-x", "m.1<-x"}));
}

}  // namespace
}  // namespace loom::analysis
