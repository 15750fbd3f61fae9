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

// A module's entry computation and the fusion plan of it.
class Planned {
 public:
  explicit Planned(const std::string& text) : module_(Parse(text)) {
    if (module_ != nullptr) plan_ = std::make_unique<FusionPlan>(*module_->entry());
  }
  bool ok() const { return plan_ != nullptr; }
  bool Fused(const char* name) const {
    return plan_->FusedIntoUsers(*module_->entry()->FindInstruction(name));
  }
  std::vector<std::string> Reads(const char* root) const {
    return KernelReadsOf(*plan_, *module_->entry(), root);
  }
  const FusionPlan& plan() const { return *plan_; }
  const ir::Module& module() const { return *module_; }

 private:
  std::unique_ptr<ir::Module> module_;
  std::unique_ptr<FusionPlan> plan_;
};

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
  const Planned module(kModule);
  ASSERT_TRUE(module.ok());
  // multiply -> tanh -> exponential feed one user each: one kernel.
  EXPECT_TRUE(module.Fused("m"));
  EXPECT_TRUE(module.Fused("t"));
  EXPECT_TRUE(module.Fused("e"));
  // A broadcast is duplicated into each of its consumers.
  EXPECT_TRUE(module.Fused("b"));
  // %u has two users (the reduce and the negate): it stays a kernel.
  EXPECT_FALSE(module.Fused("u"));
  // Dots never fuse, nor does a value the tuple takes; the convert of a
  // dot's result that only another dot reads is read through by that dot.
  EXPECT_FALSE(module.Fused("h"));
  EXPECT_TRUE(module.Fused("c"));
  EXPECT_FALSE(module.Fused("d"));
  EXPECT_FALSE(module.Fused("n"));
  // The reduce, whose result the tuple takes, roots a kernel of its own
  // (an input fusion).
  EXPECT_FALSE(module.Fused("r"));
  EXPECT_EQ(module.plan().fused_count(), 5u);
  // The kernel of %u reads %h and the broadcast's scalar; that of %d reads
  // %h through the convert, and %w2.
  EXPECT_EQ(module.Reads("u"), (std::vector<std::string>{"b.0<-half", "m.0<-h"}));
  EXPECT_EQ(module.Reads("d"), (std::vector<std::string>{"c.0<-h", "d.1<-w2"}));
  EXPECT_TRUE(module.Reads("m").empty());
}

TEST(FusionPlan, FusesAReducesInputAndADynamicUpdateSlicesUpdateOnly) {
  const Planned module(R"(
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
  ASSERT_TRUE(module.ok());
  EXPECT_TRUE(module.Fused("sq"));
  EXPECT_TRUE(module.Fused("update"));
  // The buffer updated in place is not computed inside the update.
  EXPECT_FALSE(module.Fused("big"));
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
  const Planned module(SoftmaxWithRows(2048));
  ASSERT_TRUE(module.ok());
  // The convert that narrows the probabilities roots the kernel: the dot
  // reads them as the kernel wrote them, since the chain starts inside it.
  for (const char* name : {"m", "bm", "d", "e", "z", "bz", "p"}) {
    EXPECT_TRUE(module.Fused(name)) << name;
  }
  EXPECT_FALSE(module.Fused("c"));
  // It reads %s (by the max and the subtract) and the two initial values.
  EXPECT_EQ(module.Reads("c"),
            (std::vector<std::string>{"d.0<-s", "m.0<-s", "m.1<-ninf", "z.1<-zero"}));

  // A row longer than a kernel keeps on chip: the reductions are kernels of
  // their own, and so is %e, which one of them and the divide both read.
  const Planned wide(SoftmaxWithRows(2 * kMaxFusedReduceRow));
  ASSERT_TRUE(wide.ok());
  for (const char* name : {"m", "z", "e"}) {
    EXPECT_FALSE(wide.Fused(name)) << name;
  }
  EXPECT_TRUE(wide.Fused("d"));
  EXPECT_TRUE(wide.Fused("p"));
}

TEST(FusionPlan, ADotReadsItsWeightsWindowThroughTheSliceAndTheConvert) {
  const Planned module(R"(
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
  ASSERT_TRUE(module.ok());
  // %wb has a user that is not a dot (the transpose, whose result the
  // tuple takes): it stays a kernel, and the chain under it fuses into it.
  EXPECT_FALSE(module.Fused("wb"));
  EXPECT_TRUE(module.Fused("w"));
  EXPECT_TRUE(module.Fused("window"));
  // The normed input's convert starts inside the multiply's kernel: it
  // roots it, and writes the bf16 value the dot reads.
  EXPECT_TRUE(module.Fused("n"));
  EXPECT_FALSE(module.Fused("nb"));

  // Without the transpose, the dot reads the f32 window itself.
  const Planned only_dot(R"(
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
  ASSERT_TRUE(only_dot.ok());
  for (const char* name : {"window", "w", "wb"}) {
    EXPECT_TRUE(only_dot.Fused(name)) << name;
  }
  EXPECT_EQ(only_dot.Reads("y"),
            (std::vector<std::string>{"window.0<-stacked", "window.1<-layer", "window.2<-z",
                                      "window.3<-z", "y.0<-x"}));
}

TEST(FusionPlan, ADotReadsThroughAConvertOfAValueOtherKernelsReadToo) {
  // %p is written once, since the tuple takes it too: the dot reads it
  // through the convert instead of a kernel converting it first.
  const Planned module(R"(
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
  ASSERT_TRUE(module.ok());
  EXPECT_FALSE(module.Fused("p"));
  EXPECT_TRUE(module.Fused("pb"));
  EXPECT_EQ(module.Reads("o"), (std::vector<std::string>{"o.1<-v", "pb.0<-p"}));
}

// A ring's accumulation: each partial product is added to the sum so far
// in its own kernel (output fusion), which reads the addend and the dot's
// operands (through the convert) and roots at the add; the adds stay apart
// though each feeds the next. A product another op reads too, one added to
// itself and one no add reads stay kernels of their own.
TEST(FusionPlan, AnAddOfADotsOnlyUseSumsItInTheDotsKernel) {
  const Planned module(R"(
HloModule ring

ENTRY %main {
  %x0 = f32[16,64] parameter(0)
  %x1 = bf16[16,64] parameter(1)
  %w = bf16[64,8] parameter(2)
  %acc = f32[16,8] parameter(3)
  %x0b = bf16[16,64] convert(%x0)
  %p0 = f32[16,8] dot(%x0b, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s0 = f32[16,8] add(%acc, %p0)
  %p1 = f32[16,8] dot(%x1, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s1 = f32[16,8] add(%s0, %p1)
  %p2 = f32[16,8] dot(%x1, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s2 = f32[16,8] add(%s1, %p2)
  %n2 = f32[16,8] negate(%p2)
  %p3 = f32[16,8] dot(%x1, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s3 = f32[16,8] add(%p3, %p3)
  %p4 = bf16[16,8] dot(%x1, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s4 = f32[16,8] add(%s2, %s3)
  ROOT %out = (f32[16,8], f32[16,8], bf16[16,8]) tuple(%s4, %n2, %p4)
}
)");
  ASSERT_TRUE(module.ok());
  EXPECT_TRUE(module.Fused("p0"));
  EXPECT_TRUE(module.Fused("p1"));
  EXPECT_FALSE(module.Fused("s0"));
  EXPECT_FALSE(module.Fused("s1"));
  EXPECT_EQ(module.Reads("s0"), (std::vector<std::string>{"p0.1<-w", "s0.0<-acc", "x0b.0<-x0"}));
  EXPECT_EQ(module.Reads("s1"), (std::vector<std::string>{"p1.0<-x1", "p1.1<-w", "s1.0<-s0"}));
  const ir::Computation& main = *module.module().entry();
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("s1")),
            main.FindInstruction("p1"));
  EXPECT_FALSE(module.Fused("p2"));  // %n2 reads it too
  EXPECT_FALSE(module.Fused("p3"));  // added to itself
  EXPECT_FALSE(module.Fused("p4"));  // the tuple takes it
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("s2")), nullptr);
}

// A layer's weight gradient summed into its window of a stack of them: the
// product's kernel reads the window and writes it back, the store roots the
// kernel (no copy of the sum into the stack after it); a bare product
// stored into a window is written there by its kernel too. Not when the
// stored value has another reader, when what is stored is not a product's
// result, nor when a kernel runs between the product and its store.
TEST(FusionPlan, AProductStoredIntoAWindowIsWrittenThereByItsKernel) {
  const Planned module(R"(
HloModule accumulate

ENTRY %main {
  %grads = f32[4,64,8] parameter(0)
  %x = bf16[16,64] parameter(1)
  %dy = bf16[16,8] parameter(2)
  %layer = s32[] parameter(3)
  %out = f32[4,64,8] parameter(4)
  %z = s32[] constant(0)
  %g = f32[1,64,8] dynamic-slice(%grads, %layer, %z, %z), dynamic_slice_sizes={1,64,8}
  %r = f32[64,8] reshape(%g)
  %p = f32[64,8] dot(%x, %dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %s = f32[64,8] add(%r, %p)
  %u = f32[1,64,8] reshape(%s)
  %next = f32[4,64,8] dynamic-update-slice(%grads, %u, %layer, %z, %z)
  %q = f32[64,8] dot(%x, %dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %qu = f32[1,64,8] reshape(%q)
  %stored = f32[4,64,8] dynamic-update-slice(%out, %qu, %layer, %z, %z)
  %t = f32[64,8] dot(%x, %dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %tu = f32[1,64,8] reshape(%t)
  %kept = f32[4,64,8] dynamic-update-slice(%out, %tu, %z, %z, %z)
  %tn = f32[1,64,8] negate(%tu)
  %v = f32[64,8] dot(%x, %dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %xn = bf16[16,64] negate(%x)
  %vu = f32[1,64,8] reshape(%v)
  %late = f32[4,64,8] dynamic-update-slice(%out, %vu, %layer, %z, %z)
  %h = f32[1,64,8] dynamic-slice(%out, %layer, %z, %z), dynamic_slice_sizes={1,64,8}
  %n = f32[1,64,8] negate(%h)
  %copied = f32[4,64,8] dynamic-update-slice(%out, %n, %z, %z, %z)
  ROOT %all = (f32[4,64,8], f32[4,64,8], f32[4,64,8], f32[1,64,8], f32[4,64,8], f32[4,64,8],
      bf16[16,64]) tuple(%next, %stored, %kept, %tn, %copied, %late, %xn)
}
)");
  ASSERT_TRUE(module.ok());
  const ir::Computation& main = *module.module().entry();
  for (const char* fused : {"g", "r", "p", "s", "u", "q", "qu"}) {
    EXPECT_TRUE(module.Fused(fused)) << fused;
  }
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("next")),
            main.FindInstruction("p"));
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("s")), nullptr);
  EXPECT_EQ(
      module.Reads("next"),
      (std::vector<std::string>{"g.0<-grads", "g.1<-layer", "g.2<-z", "g.3<-z", "next.0<-grads",
                                "next.2<-layer", "next.3<-z", "next.4<-z", "p.0<-x", "p.1<-dy"}));
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("stored")),
            main.FindInstruction("q"));
  EXPECT_FALSE(module.Fused("t"));  // its reshape has a second reader
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("kept")), nullptr);
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("copied")), nullptr);
  // A kernel (%xn) runs between the product and its store: fused, the
  // product would run at the store.
  EXPECT_FALSE(module.Fused("v"));
  EXPECT_EQ(module.plan().OutputFusedProduct(*main.FindInstruction("late")), nullptr);
}

// A product written in bf16 and widened for two kernels (an activation's
// backward, say): each kernel reads the bf16 value and widens it itself,
// where one kernel writing the f32 copy for both would move three times
// the bytes. A narrowing convert read by two kernels is not duplicated: it
// is written once, narrow.
TEST(FusionPlan, DuplicatesAWideningConvertIntoEachKernelThatReadsIt) {
  const Planned module(R"(
HloModule widen

ENTRY %main {
  %x = bf16[16,64] parameter(0)
  %w = bf16[64,32] parameter(1)
  %d = bf16[16,32] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %f = f32[16,32] convert(%d)
  %e = f32[16,32] exponential(%f)
  %l = f32[16,32] logistic(%f)
  %m = f32[16,32] parameter(2)
  %n = bf16[16,32] convert(%m)
  %a = bf16[16,32] negate(%n)
  %b = bf16[16,32] abs(%n)
  ROOT %out = (f32[16,32], f32[16,32], bf16[16,32], bf16[16,32]) tuple(%e, %l, %a, %b)
}
)");
  ASSERT_TRUE(module.ok());
  EXPECT_TRUE(module.Fused("f"));
  EXPECT_EQ(module.Reads("e"), (std::vector<std::string>{"f.0<-d"}));
  EXPECT_EQ(module.Reads("l"), (std::vector<std::string>{"f.0<-d"}));
  EXPECT_FALSE(module.Fused("n"));
  EXPECT_EQ(module.Reads("a"), (std::vector<std::string>{"a.0<-n"}));
}

// The text may use a value before the line that defines it: the plan
// follows the data, not the lines.
TEST(FusionPlan, FollowsTheDataWhereTheTextUsesAValueBeforeDefiningIt) {
  const Planned module(R"(
HloModule backwards

ENTRY %main {
  %x = f32[64,32] parameter(0)
  ROOT %a = f32[64,32] add(%t, %x)
  %t = f32[64,32] tanh(%m)
  %m = f32[64,32] multiply(%x, %x)
}
)");
  ASSERT_TRUE(module.ok());
  EXPECT_TRUE(module.Fused("m"));
  EXPECT_TRUE(module.Fused("t"));
  EXPECT_EQ(module.Reads("a"), (std::vector<std::string>{"a.1<-x", "m.0<-x", "m.1<-x"}));
}

}  // namespace
}  // namespace loom::analysis
