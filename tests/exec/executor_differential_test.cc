// Every op of the executor against the reference interpreter, one harness
// for all (as ggml checks every backend against its CPU reference): each op,
// on every element type that has it, on random inputs that include NaNs,
// infinities, subnormals and signed zeros, through the fast executor on the
// CPU device and through the element-by-element reference; the results must
// be the same bits (NaN matching NaN: which NaN an op on two NaN operands
// gives depends on the order the compiler puts commutative operands in).
// Dots run with the deterministic kernels, whose sums both sides define
// alike. Sizes go past every SIMD width so that vector loops and their tails
// both run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/batch_norm.h"
#include "exec/interpreter.h"
#include "exec/random_bits.h"
#include "exec/reference/reference_interpreter.h"
#include "ir/parser.h"
#include "ir/reduce_window.h"
#include "ir/verifier.h"

namespace loom::exec {
namespace {

using ir::PrimitiveType;

const std::vector<std::string> kFloats = {"f32", "f64", "bf16", "f16", "f8e4m3fn", "f8e5m2"};
const std::vector<std::string> kIntegers = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"};

std::vector<std::string> AllTypes() {
  std::vector<std::string> all = kFloats;
  all.insert(all.end(), kIntegers.begin(), kIntegers.end());
  all.push_back("pred");
  return all;
}

// Random bits, often special: NaN, infinity, zero, subnormal, small
// integers (so that integer ops and shifts hit their edge cases).
Tensor RandomInput(const ir::Shape& shape, uint32_t seed) {
  Tensor tensor = Tensor::Zeros(shape).value();
  std::mt19937_64 rng(seed);
  const int width = ir::PrimitiveTypeBits(shape.type());
  const uint64_t mask = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  for (int64_t i = 0; i < tensor.ElementCount(); ++i) {
    uint64_t bits = rng() & mask;
    if (shape.type() == PrimitiveType::kPred) {
      bits &= 1;
    } else if (ir::IsFloatingPoint(shape.type())) {
      switch (rng() % 6) {
        case 0:  // an ordinary value
          tensor.SetDouble(i, std::ldexp(static_cast<double>(rng() % 2000) - 1000, -6));
          continue;
        case 1:
          tensor.SetDouble(i, static_cast<double>(rng() % 7) - 3);
          continue;
        default:
          break;
      }
    } else if (rng() % 3 == 0) {
      bits = (rng() % 9) - 4;  // small, negative ones too
    }
    tensor.SetBits(i, bits & mask);
  }
  return tensor;
}

bool IsNaNBits(const Tensor& t, int64_t i) {
  return ir::IsFloatingPoint(t.type()) && std::isnan(t.GetDouble(i));
}

// "" when equal (NaN matching NaN), else where they differ.
std::string Difference(const Tensor& fast, const Tensor& reference) {
  if (!fast.shape().Compatible(reference.shape())) {
    return "shapes " + fast.shape().ToString() + " vs " + reference.shape().ToString();
  }
  if (fast.IsTuple()) {
    for (size_t i = 0; i < fast.tuple_elements().size(); ++i) {
      std::string d = Difference(fast.tuple_elements()[i], reference.tuple_elements()[i]);
      if (!d.empty()) return fmt::format("element {}: {}", i, d);
    }
    return "";
  }
  for (int64_t i = 0; i < fast.ElementCount(); ++i) {
    if (fast.GetBits(i) == reference.GetBits(i)) continue;
    if (IsNaNBits(fast, i) && IsNaNBits(reference, i)) continue;
    return fmt::format("element {}: fast {:#x} ({}), reference {:#x} ({})", i, fast.GetBits(i),
                       fast.GetDouble(i), reference.GetBits(i), reference.GetDouble(i));
  }
  return "";
}

// Runs `body` (an ENTRY body whose parameters are p0, p1, ...) both ways;
// unless `must_run`, both may refuse it. The reference's result goes to
// `result` where one is given.
void ExpectSame(const std::string& what, const std::string& body, uint32_t seed,
                const std::string& computations = "", bool must_run = false,
                Tensor* result = nullptr) {
  SCOPED_TRACE(what);
  const std::string text =
      "HloModule differential\n" + computations + "\nENTRY main {\n" + body + "}\n";
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.error().ToString() << "\n" << text;
  auto verified = ir::VerifyModule(**module);
  ASSERT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << text;
  std::vector<Tensor> inputs;
  for (const ir::Instruction* parameter : (*module)->entry()->parameters()) {
    inputs.push_back(RandomInput(parameter->shape(), seed + static_cast<uint32_t>(inputs.size())));
  }
  const InterpreterOptions options{.deterministic = true};
  Expected<Tensor> reference = ReferenceInterpreter({}, options).RunEntry(**module, inputs);
  Expected<Tensor> fast = Interpreter({}, options).RunEntry(**module, inputs);
  ASSERT_EQ(reference.ok(), fast.ok())
      << (reference.ok() ? "" : reference.error().ToString()) << " / "
      << (fast.ok() ? "" : fast.error().ToString()) << "\n"
      << text;
  ASSERT_TRUE(reference.ok() || !must_run) << reference.error().ToString() << "\n" << text;
  if (!reference.ok()) return;  // both refuse it (an op the type lacks)
  const std::string difference = Difference(*fast, *reference);
  EXPECT_TRUE(difference.empty()) << difference << "\n" << text;
  if (result != nullptr) *result = *reference;
}

bool IsFloat(const std::string& type) {
  return std::find(kFloats.begin(), kFloats.end(), type) != kFloats.end();
}

TEST(ExecutorDifferential, UnaryOps) {
  const std::vector<std::string> float_ops = {"abs",
                                              "negate",
                                              "exponential",
                                              "exponential-minus-one",
                                              "log",
                                              "log-plus-one",
                                              "sqrt",
                                              "rsqrt",
                                              "cbrt",
                                              "sine",
                                              "cosine",
                                              "tan",
                                              "tanh",
                                              "erf",
                                              "logistic",
                                              "floor",
                                              "ceil",
                                              "round-nearest-even",
                                              "round-nearest-afz",
                                              "sign",
                                              "copy"};
  const std::vector<std::string> integer_ops = {
      "abs", "negate", "sign", "not", "popcnt", "count-leading-zeros", "copy"};
  uint32_t seed = 1;
  for (const std::string& type : AllTypes()) {
    for (const std::string& op : IsFloat(type) ? float_ops : integer_ops) {
      if (type == "pred" && op != "not" && op != "copy") continue;
      for (int n : {61, 1000}) {
        ExpectSame(
            fmt::format("{} {}[{}]", op, type, n),
            fmt::format("  p0 = {0}[{1}] parameter(0)\n  ROOT r = {0}[{1}] {2}(p0)\n", type, n, op),
            seed++);
      }
    }
    if (IsFloat(type)) {
      ExpectSame(
          "is-finite " + type,
          fmt::format("  p0 = {}[77] parameter(0)\n  ROOT r = pred[77] is-finite(p0)\n", type),
          seed++);
    }
  }
}

TEST(ExecutorDifferential, BinaryOps) {
  const std::vector<std::string> float_ops = {
      "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2"};
  const std::vector<std::string> integer_ops = {"add",
                                                "subtract",
                                                "multiply",
                                                "divide",
                                                "remainder",
                                                "maximum",
                                                "minimum",
                                                "power",
                                                "and",
                                                "or",
                                                "xor",
                                                "shift-left",
                                                "shift-right-logical",
                                                "shift-right-arithmetic"};
  uint32_t seed = 100;
  for (const std::string& type : AllTypes()) {
    for (const std::string& op : IsFloat(type) ? float_ops : integer_ops) {
      if (type == "pred" && op != "and" && op != "or" && op != "xor" && op != "maximum" &&
          op != "minimum") {
        continue;
      }
      for (int n : {61, 1000}) {
        ExpectSame(fmt::format("{} {}[{}]", op, type, n),
                   fmt::format("  p0 = {0}[{1}] parameter(0)\n  p1 = {0}[{1}] parameter(1)\n"
                               "  ROOT r = {0}[{1}] {2}(p0, p1)\n",
                               type, n, op),
                   seed++);
      }
    }
  }
}

// copy-start/copy-done (XLA's asynchronous copies between memory spaces)
// give the operand; the copy shares its buffer, so an in-place update of
// the copy must leave the operand as it was.
TEST(ExecutorDifferential, AsynchronousCopies) {
  ExpectSame("copy-start, copy-done",
             "  p0 = f32[5,7] parameter(0)\n"
             "  cs = (f32[5,7], f32[5,7], u32[]) copy-start(p0)\n"
             "  d = f32[5,7] copy-done(cs)\n"
             "  zero = f32[] constant(0)\n"
             "  row = f32[1,7] broadcast(zero), dimensions={}\n"
             "  i = s32[] constant(2)\n"
             "  j = s32[] constant(0)\n"
             "  u = f32[5,7] dynamic-update-slice(d, row, i, j)\n"
             "  ROOT r = (f32[5,7], f32[5,7], f32[5,7]) tuple(u, p0, d)\n",
             1300, "", /*must_run=*/true);
}

TEST(ExecutorDifferential, CompareSelectClamp) {
  uint32_t seed = 200;
  for (const std::string& type : AllTypes()) {
    for (const char* direction : {"EQ", "NE", "LT", "LE", "GT", "GE"}) {
      ExpectSame(fmt::format("compare {} {}", direction, type),
                 fmt::format("  p0 = {0}[65] parameter(0)\n  p1 = {0}[65] parameter(1)\n"
                             "  ROOT r = pred[65] compare(p0, p1), direction={1}\n",
                             type, direction),
                 seed++);
      if (IsFloat(type)) {
        ExpectSame(
            fmt::format("compare {} {} TOTALORDER", direction, type),
            fmt::format("  p0 = {0}[65] parameter(0)\n  p1 = {0}[65] parameter(1)\n"
                        "  ROOT r = pred[65] compare(p0, p1), direction={1}, type=TOTALORDER\n",
                        type, direction),
            seed++);
      }
    }
    ExpectSame("select " + type,
               fmt::format("  p0 = pred[3,7] parameter(0)\n  p1 = {0}[3,7] parameter(1)\n"
                           "  p2 = {0}[3,7] parameter(2)\n  ROOT r = {0}[3,7] select(p0, p1, p2)\n",
                           type),
               seed++);
    ExpectSame("select scalar predicate " + type,
               fmt::format("  p0 = pred[] parameter(0)\n  p1 = {0}[21] parameter(1)\n"
                           "  p2 = {0}[21] parameter(2)\n  ROOT r = {0}[21] select(p0, p1, p2)\n",
                           type),
               seed++);
    if (type == "pred") continue;
    ExpectSame("clamp " + type,
               fmt::format("  p0 = {0}[] parameter(0)\n  p1 = {0}[40] parameter(1)\n"
                           "  p2 = {0}[40] parameter(2)\n  ROOT r = {0}[40] clamp(p0, p1, p2)\n",
                           type),
               seed++);
  }
}

TEST(ExecutorDifferential, ConvertBetweenEveryPair) {
  uint32_t seed = 300;
  for (const std::string& from : AllTypes()) {
    for (const std::string& to : AllTypes()) {
      ExpectSame(
          fmt::format("convert {} -> {}", from, to),
          fmt::format("  p0 = {}[67] parameter(0)\n  ROOT r = {}[67] convert(p0)\n", from, to),
          seed++);
    }
  }
}

TEST(ExecutorDifferential, MovingElements) {
  uint32_t seed = 400;
  for (const std::string type : {"f32", "bf16", "s8", "s64", "pred"}) {
    auto same = [&](const std::string& what, const std::string& body) {
      ExpectSame(what + " " + type, fmt::format(fmt::runtime(body), type), seed++);
    };
    same("broadcast",
         "  p0 = {0}[3,4] parameter(0)\n  ROOT r = {0}[5,3,2,4] broadcast(p0), "
         "dimensions={{1,3}}\n");
    same("broadcast scalar",
         "  p0 = {0}[] parameter(0)\n  ROOT r = {0}[70] broadcast(p0), dimensions={{}}\n");
    same("transpose",
         "  p0 = {0}[3,4,5] parameter(0)\n  ROOT r = {0}[5,3,4] transpose(p0), "
         "dimensions={{2,0,1}}\n");
    same("transpose 2-D",
         "  p0 = {0}[67,45] parameter(0)\n  ROOT r = {0}[45,67] transpose(p0), "
         "dimensions={{1,0}}\n");
    same("reverse",
         "  p0 = {0}[3,4,5] parameter(0)\n  ROOT r = {0}[3,4,5] reverse(p0), dimensions={{0,2}}\n");
    same("slice strided",
         "  p0 = {0}[9,10] parameter(0)\n  ROOT r = {0}[3,4] slice(p0), slice={{[1:9:3], "
         "[2:10:2]}}\n");
    same(
        "slice contiguous",
        "  p0 = {0}[9,10] parameter(0)\n  ROOT r = {0}[4,10] slice(p0), slice={{[3:7], [0:10]}}\n");
    same("dynamic-slice",
         "  p0 = {0}[9,10] parameter(0)\n  i = s32[] constant(7)\n  j = s32[] constant(-3)\n"
         "  ROOT r = {0}[4,5] dynamic-slice(p0, i, j), dynamic_slice_sizes={{4,5}}\n");
    same("dynamic-update-slice",
         "  p0 = {0}[9,10] parameter(0)\n  p1 = {0}[4,5] parameter(1)\n"
         "  i = s32[] constant(2)\n  j = s32[] constant(2000000000)\n"
         "  ROOT r = {0}[9,10] dynamic-update-slice(p0, p1, i, j)\n");
    same("concatenate",
         "  p0 = {0}[3,2,5] parameter(0)\n  p1 = {0}[3,4,5] parameter(1)\n"
         "  ROOT r = {0}[3,6,5] concatenate(p0, p1), dimensions={{1}}\n");
    same("pad",
         "  p0 = {0}[4,5] parameter(0)\n  p1 = {0}[] parameter(1)\n"
         "  ROOT r = {0}[8,10] pad(p0, p1), padding=2_-1_1x-1_2_1\n");
    same("reshape", "  p0 = {0}[4,6] parameter(0)\n  ROOT r = {0}[2,12] reshape(p0)\n");
  }
  for (const std::string& type : AllTypes()) {
    ExpectSame("iota " + type, fmt::format("  ROOT r = {}[4,7] iota(), iota_dimension=1\n", type),
               seed++);
  }
}

// Index vectors with repeats, a negative one and ones past the end: gather
// clamps them, scatter drops their windows.
TEST(ExecutorDifferential, GatherAndScatter) {
  uint32_t seed = 450;
  for (const std::string type : {"f32", "bf16", "f64", "s32", "pred"}) {
    auto same = [&](const std::string& what, const std::string& body,
                    const std::string& computations = "") {
      ExpectSame(what + " " + type, fmt::format(fmt::runtime(body), type), seed++,
                 fmt::format(fmt::runtime(computations), type), /*must_run=*/true);
    };
    const std::string ids = "  ids = s32[6] constant({{3, 0, 7, 3, -1, 9}})\n";
    same("gather rows",
         "  p0 = {0}[8,5] parameter(0)\n" + ids +
             "  ROOT r = {0}[6,5] gather(p0, ids), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
             "start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,5}}\n");
    same("gather rows, offsets first",
         "  p0 = {0}[8,5] parameter(0)\n" + ids +
             "  ROOT r = {0}[5,6] gather(p0, ids), offset_dims={{0}}, collapsed_slice_dims={{0}}, "
             "start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,5}}\n");
    same("gather windows of two starts",
         "  p0 = {0}[4,6,5] parameter(0)\n"
         "  at = s32[3,2] constant({{ {{1, 2}}, {{3, 5}}, {{0, -4}} }})\n"
         "  ROOT r = {0}[3,3,2] gather(p0, at), offset_dims={{1,2}}, collapsed_slice_dims={{0}}, "
         "start_index_map={{0,2}}, index_vector_dim=1, slice_sizes={{1,3,2}}\n");
    same("gather at unsigned indices, one above 2^63",
         "  p0 = {0}[8,5] parameter(0)\n"
         "  at = u64[3] constant({{2, 18446744073709551615, 9}})\n"
         "  ROOT r = {0}[3,5] gather(p0, at), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
         "start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,5}}\n");
    same("gather, index vectors along dimension 0",
         "  p0 = {0}[4,6] parameter(0)\n"
         "  at = s32[2,3] constant({{ {{1, 3, 0}}, {{2, 9, 4}} }})\n"
         "  ROOT r = {0}[3,2,2] gather(p0, at), offset_dims={{1,2}}, collapsed_slice_dims={{}}, "
         "start_index_map={{1,0}}, index_vector_dim=0, slice_sizes={{2,2}}\n");
    const std::string add = type == "pred" ? "or" : "add";
    same("scatter-" + add + " rows",
         "  p0 = {0}[8,5] parameter(0)\n  p1 = {0}[6,5] parameter(1)\n" + ids +
             "  ROOT r = {0}[8,5] scatter(p0, ids, p1), update_window_dims={{1}}, "
             "inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, "
             "to_apply=%combine\n",
         "\n%combine (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
         "  %b = {0}[] parameter(1)\n  ROOT %r = {0}[] " +
             add + "(%a, %b)\n}}\n");
    same("scatter-set windows, one past the end",
         "  p0 = {0}[4,6,5] parameter(0)\n  p1 = {0}[3,2,3] parameter(1)\n"
         "  at = s32[3,2] constant({{ {{1, 2}}, {{3, 4}}, {{0, 1}} }})\n"
         "  ROOT r = {0}[4,6,5] scatter(p0, at, p1), update_window_dims={{1,2}}, "
         "inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0,2}}, index_vector_dim=1, "
         "to_apply=%set\n",
         "\n%set (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
         "  ROOT %b = {0}[] parameter(1)\n}}\n");
  }
}

// Newer XLA's batching dimensions (a vmapped take_along_axis), scatters of
// two operands at once, and combiners of more than one op, which the
// executor runs a combiner call per element.
TEST(ExecutorDifferential, BatchedAndVariadicGatherAndScatter) {
  uint32_t seed = 470;
  for (const std::string type : {"f32", "bf16", "s32", "pred"}) {
    auto same = [&](const std::string& what, const std::string& body,
                    const std::string& computations = "") {
      ExpectSame(what + " " + type, fmt::format(fmt::runtime(body), type), seed++,
                 fmt::format(fmt::runtime(computations), type), /*must_run=*/true);
    };
    // Per batch row b of 4, five starts into its own row of 10 (one past
    // the end, one negative: clamped).
    const std::string at =
        "  at = s32[4,5,1] constant({{ {{{{1}},{{9}},{{3}},{{3}},{{0}}}}, "
        "{{{{12}},{{2}},{{2}},{{-1}},{{5}}}}, {{{{7}},{{7}},{{0}},{{4}},{{8}}}}, "
        "{{{{6}},{{1}},{{9}},{{2}},{{3}}}} }})\n";
    same("gather along a batching dimension",
         "  p0 = {0}[4,10,3] parameter(0)\n" + at +
             "  ROOT r = {0}[4,5,3] gather(p0, at), offset_dims={{2}}, collapsed_slice_dims={{1}}, "
             "start_index_map={{1}}, operand_batching_dims={{0}}, "
             "start_indices_batching_dims={{0}}, "
             "index_vector_dim=2, slice_sizes={{1,1,3}}\n");
    same("gather, the batching dimension last in both",
         "  p0 = {0}[10,4] parameter(0)\n"
         "  at = s32[5,4] constant({{ {{1,9,3,3}}, {{0,12,2,2}}, {{-1,5,7,7}}, {{0,4,8,6}}, "
         "{{1,9,2,3}} }})\n"
         "  ROOT r = {0}[5,4] gather(p0, at), offset_dims={{}}, collapsed_slice_dims={{0}}, "
         "start_index_map={{0}}, operand_batching_dims={{1}}, start_indices_batching_dims={{1}}, "
         "index_vector_dim=2, slice_sizes={{1,1}}\n");
    const std::string add = type == "pred" ? "or" : "add";
    const std::string max = type == "pred" ? "and" : "maximum";
    same("scatter-" + add + " along a batching dimension",
         "  p0 = {0}[4,10,3] parameter(0)\n  p1 = {0}[4,5,3] parameter(1)\n" + at +
             "  ROOT r = {0}[4,10,3] scatter(p0, at, p1), update_window_dims={{2}}, "
             "inserted_window_dims={{1}}, scatter_dims_to_operand_dims={{1}}, "
             "input_batching_dims={{0}}, scatter_indices_batching_dims={{0}}, "
             "index_vector_dim=2, to_apply=%combine\n",
         "\n%combine (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
         "  %b = {0}[] parameter(1)\n  ROOT %r = {0}[] " +
             add + "(%a, %b)\n}}\n");
    const std::string ids = "  ids = s32[6] constant({{3, 0, 7, 3, -1, 9}})\n";
    same("scatter of two operands",
         "  p0 = {0}[8,5] parameter(0)\n  p1 = {0}[8,5] parameter(1)\n"
         "  p2 = {0}[6,5] parameter(2)\n  p3 = {0}[6,5] parameter(3)\n" +
             ids +
             "  ROOT r = ({0}[8,5], {0}[8,5]) scatter(p0, p1, ids, p2, p3), "
             "update_window_dims={{1}}, inserted_window_dims={{0}}, "
             "scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%pair\n",
         "\n%pair (a: {0}[], b: {0}[], c: {0}[], d: {0}[]) -> ({0}[], {0}[]) {{\n"
         "  %a = {0}[] parameter(0)\n  %b = {0}[] parameter(1)\n"
         "  %c = {0}[] parameter(2)\n  %d = {0}[] parameter(3)\n"
         "  %s = {0}[] " +
             add + "(%a, %c)\n  %m = {0}[] " + max +
             "(%b, %d)\n  ROOT %r = ({0}[], {0}[]) tuple(%s, %m)\n}}\n");
    // a + b * b, in the order the updates come (repeated rows fold in turn).
    const std::string times = type == "pred" ? "and" : "multiply";
    same("scatter with a combiner of two ops",
         "  p0 = {0}[8,5] parameter(0)\n  p1 = {0}[6,5] parameter(1)\n" + ids +
             "  ROOT r = {0}[8,5] scatter(p0, ids, p1), update_window_dims={{1}}, "
             "inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, "
             "to_apply=%fold\n",
         "\n%fold (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
         "  %b = {0}[] parameter(1)\n  %bb = {0}[] " +
             times + "(%b, %b)\n  ROOT %r = {0}[] " + add + "(%a, %bb)\n}}\n");
  }
}

// A batching dimension is the batch coordinate as one more start index (an
// iota), with its dimension collapsed (inserted): XLA's own normalization of
// them. Both forms, side by side, give the same bits.
TEST(ExecutorDifferential, BatchingDimensionsAreAnIotaOfStarts) {
  const std::string text = R"(HloModule batching

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}

ENTRY main {
  p0 = f32[4,10,3] parameter(0)
  p1 = f32[4,5,3] parameter(1)
  at = s32[4,5,1] constant({ {{1},{9},{3},{3},{0}}, {{12},{2},{2},{-1},{5}}, {{7},{7},{0},{4},{8}}, {{6},{1},{9},{2},{3}} })
  batch = s32[4,5,1] iota(), iota_dimension=0
  both = s32[4,5,2] concatenate(batch, at), dimensions={2}
  g = f32[4,5,3] gather(p0, at), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,3}
  g2 = f32[4,5,3] gather(p0, both), offset_dims={2}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=2, slice_sizes={1,1,3}
  s = f32[4,10,3] scatter(p0, at, p1), update_window_dims={2}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=%add
  s2 = f32[4,10,3] scatter(p0, both, p1), update_window_dims={2}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=2, to_apply=%add
  ROOT r = (f32[4,5,3], f32[4,5,3], f32[4,10,3], f32[4,10,3], f32[4,10,3]) tuple(g, g2, s, s2, p0)
}
)";
  auto module = ir::ParseModule(text);
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  ASSERT_TRUE(ir::VerifyModule(**module).ok());
  std::vector<Tensor> inputs;
  for (const ir::Instruction* parameter : (*module)->entry()->parameters()) {
    inputs.push_back(RandomInput(parameter->shape(), 480 + static_cast<uint32_t>(inputs.size())));
  }
  Expected<Tensor> out = Interpreter({}, {}).RunEntry(**module, inputs);
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  const std::vector<Tensor>& results = out->tuple_elements();
  EXPECT_EQ(Difference(results[0], results[1]), "");
  EXPECT_EQ(Difference(results[2], results[3]), "");
  EXPECT_NE(Difference(results[2], results[4]), "");  // the scatter wrote something
}

TEST(ExecutorDifferential, Reductions) {
  uint32_t seed = 500;
  for (const std::string type : {"f32", "f64", "bf16", "f16", "s32", "u8", "pred"}) {
    for (const char* op : {"add", "multiply", "maximum", "minimum", "and", "or"}) {
      const bool logical = std::string(op) == "and" || std::string(op) == "or";
      if (logical != (type == std::string("pred"))) continue;
      const std::string reducer = fmt::format(
          "\n%red (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
          "  %b = {0}[] parameter(1)\n  ROOT %r = {0}[] {1}(%a, %b)\n}}\n",
          type, op);
      for (const char* dims : {"1", "0", "0,2", "2"}) {
        std::vector<int64_t> kept;
        const std::string d(dims);
        std::string out = "[";
        const int sizes[] = {5, 70, 3};
        bool first = true;
        for (int k = 0; k < 3; ++k) {
          if (d.find(std::to_string(k)) != std::string::npos) continue;
          out += (first ? "" : ",") + std::to_string(sizes[k]);
          first = false;
        }
        out += "]";
        ExpectSame(
            fmt::format("reduce {} {} over {}", op, type, dims),
            fmt::format("  p0 = {0}[5,70,3] parameter(0)\n  p1 = {0}[] parameter(1)\n"
                        "  ROOT r = {0}{1} reduce(p0, p1), dimensions={{{2}}}, to_apply=%red\n",
                        type, out, dims),
            seed++, reducer);
      }
    }
  }
  // A reducer of more than one op, and a variadic one (argmax).
  ExpectSame("reduce with a two-op reducer",
             "  p0 = f32[6,9] parameter(0)\n  p1 = f32[] parameter(1)\n"
             "  ROOT r = f32[6] reduce(p0, p1), dimensions={1}, to_apply=%sumsq\n",
             seed++,
             "\n%sumsq (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
             "  %b = f32[] parameter(1)\n  %bb = f32[] multiply(%b, %b)\n"
             "  ROOT %r = f32[] add(%a, %bb)\n}\n");
}

// "[a,b,...]": the result dimensions of `window` over `dims`.
std::string WindowResult(const std::vector<int64_t>& dims, const std::string& window) {
  const auto parsed = ir::ParseWindow(window);
  EXPECT_TRUE(parsed.ok()) << window;
  if (!parsed.ok()) return "[]";
  const auto out = ir::InferReduceWindowDims(ir::Shape(PrimitiveType::kF32, dims), *parsed);
  EXPECT_TRUE(out.ok()) << window;
  return out.ok() ? fmt::format("[{}]", fmt::join(*out, ",")) : "[]";
}

TEST(ExecutorDifferential, ReduceWindowsEveryWindowAndType) {
  uint32_t seed = 700;
  // NHWC pooling (trailing channels a run), a cumulative sum along a
  // dimension, strides with base and window dilation, negative padding, a
  // window over every dimension, and one the input is smaller than.
  const std::vector<int64_t> dims = {2, 9, 7, 19};
  const std::vector<std::string> windows = {
      "{size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}",
      "{size=1x9x1x1 pad=0_0x8_0x0_0x0_0}",
      "{size=1x3x2x1 stride=1x2x3x1 lhs_dilate=1x2x1x1 rhs_dilate=1x1x2x1}",
      "{size=2x2x2x3 stride=1x1x2x2 pad=0_0x-1_0x0_-2x1_1}",
      "{size=1x1x9x1}",
  };
  for (const std::string type : {"f32", "f64", "bf16", "f16", "f8e5m2", "s32", "u8", "pred"}) {
    for (const char* op : {"add", "maximum", "minimum", "or"}) {
      const bool logical = std::string(op) == "or";
      if (logical != (type == std::string("pred"))) continue;
      const std::string reducer = fmt::format(
          "\n%red (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
          "  %b = {0}[] parameter(1)\n  ROOT %r = {0}[] {1}(%a, %b)\n}}\n",
          type, op);
      for (const std::string& window : windows) {
        ExpectSame(fmt::format("reduce-window {} {} {}", op, type, window),
                   fmt::format("  p0 = {0}[2,9,7,19] parameter(0)\n  p1 = {0}[] parameter(1)\n"
                               "  ROOT r = {0}{1} reduce-window(p0, p1), window={2}, "
                               "to_apply=%red\n",
                               type, WindowResult(dims, window), window),
                   seed++, reducer, /*must_run=*/true);
      }
    }
  }
  // Reducers the device cannot run as one op take a call per tap: one of
  // two ops, one that is not commutative (the order shows), and a variadic
  // one (the max and where it is, as an argmax pooling writes it).
  const std::string window = "{size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}";
  const std::string out = WindowResult(dims, window);
  for (const char* combine : {"%bb = f32[] multiply(%b, %b)\n  ROOT %r = f32[] add(%a, %bb)",
                              "ROOT %r = f32[] subtract(%a, %b)"}) {
    ExpectSame(fmt::format("reduce-window by {}", combine),
               fmt::format("  p0 = f32[2,9,7,19] parameter(0)\n  p1 = f32[] parameter(1)\n"
                           "  ROOT r = f32{} reduce-window(p0, p1), window={}, to_apply=%red\n",
                           out, window),
               seed++,
               fmt::format("\n%red (a: f32[], b: f32[]) -> f32[] {{\n  %a = f32[] parameter(0)\n"
                           "  %b = f32[] parameter(1)\n  {}\n}}\n",
                           combine),
               /*must_run=*/true);
  }
  ExpectSame("variadic reduce-window (argmax)",
             fmt::format("  p0 = f32[2,9,7,19] parameter(0)\n  i = s32[2,9,7,19] iota(), "
                         "iota_dimension=1\n  p1 = f32[] parameter(1)\n  z = s32[] constant(0)\n"
                         "  ROOT r = (f32{0}, s32{0}) reduce-window(p0, i, p1, z), window={1}, "
                         "to_apply=%argmax\n",
                         out, window),
             seed++, R"(
%argmax (a: f32[], ai: s32[], b: f32[], bi: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %ai = s32[] parameter(1)
  %b = f32[] parameter(2)
  %bi = s32[] parameter(3)
  %take = pred[] compare(%b, %a), direction=GT
  %v = f32[] select(%take, %b, %a)
  %i = s32[] select(%take, %bi, %ai)
  ROOT %r = (f32[], s32[]) tuple(%v, %i)
}
)",
             /*must_run=*/true);
}

// Sums of 1 2 3 4 under each window, by hand: what lands and what does not.
TEST(ExecutorDifferential, ReduceWindowsAreTheHandComputedFolds) {
  const auto run = [](const std::string& window, const std::string& reducer, double init,
                      const std::vector<int64_t>& out) {
    SCOPED_TRACE(window + " " + reducer);
    const std::string text = fmt::format(
        "HloModule pool\n%red {{\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
        "  ROOT %r = f32[] {}(%a, %b)\n}}\nENTRY main {{\n  x = f32[4] parameter(0)\n"
        "  z = f32[] parameter(1)\n  ROOT y = f32[{}] reduce-window(x, z), window={{{}}}, "
        "to_apply=%red\n}}\n",
        reducer, out.size(), window);
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    auto verified = ir::VerifyModule(**module);
    ASSERT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << text;
    std::vector<Tensor> inputs = {Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {4})).value(),
                                  Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {})).value()};
    for (int64_t i = 0; i < 4; ++i) inputs[0].SetDouble(i, static_cast<double>(i + 1));
    inputs[1].SetDouble(0, init);
    for (const bool reference : {false, true}) {
      Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                     : Interpreter({}, {}).RunEntry(**module, inputs);
      ASSERT_TRUE(y.ok()) << y.error().ToString();
      std::vector<int64_t> got;
      for (int64_t i = 0; i < y->ElementCount(); ++i) got.push_back(llround(y->GetDouble(i)));
      EXPECT_EQ(got, out) << (reference ? "reference" : "executor");
    }
  };
  run("size=3 pad=1_1", "add", 0, {3, 6, 9, 7});
  // The init is folded in once, not once per tap in the padding.
  run("size=3 pad=1_1", "add", 100, {103, 106, 109, 107});
  // A cumulative sum: every prefix.
  run("size=4 pad=3_0", "add", 0, {1, 3, 6, 10});
  // 1 _ 2 _ 3 _ 4, windows of 3 at stride 2.
  run("size=3 stride=2 lhs_dilate=2", "add", 0, {3, 5, 7});
  // Taps 0, 2, 4 of the padded _ 1 2 3 4 _.
  run("size=3 pad=1_1 rhs_dilate=2", "add", 0, {6, 4});
  run("size=2 stride=2", "maximum", -1000, {2, 4});
  // A window over nothing but padding leaves the init.
  run("size=2 pad=3_0", "add", 7, {7, 7, 8, 10, 12, 14});
}

// A max-pooling's gradient and its kin: overlapping windows (several
// scatters onto one element, whose order shows in f32's rounding),
// padding, dilation; the device's kernel (one compare, one op) and the
// per-element calls (a TOTALORDER select, a scatter of two ops).
TEST(ExecutorDifferential, SelectAndScatterEveryWindowAndType) {
  uint32_t seed = 900;
  const std::vector<int64_t> dims = {2, 9, 7, 5};
  const std::vector<std::string> windows = {
      "{size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}",
      "{size=1x3x2x1 stride=1x1x1x1}",
      "{size=2x2x3x2 stride=1x2x1x2 pad=0_0x0_1x-1_1x1_0 lhs_dilate=1x1x2x1 rhs_dilate=1x2x1x1}",
  };
  const auto computations = [](const std::string& type, const std::string& select,
                               const std::string& scatter) {
    return fmt::format(
        "\n%select (a: {0}[], b: {0}[]) -> pred[] {{\n  %a = {0}[] parameter(0)\n"
        "  %b = {0}[] parameter(1)\n  ROOT %r = pred[] {1}\n}}\n"
        "\n%scatter (a: {0}[], b: {0}[]) -> {0}[] {{\n  %a = {0}[] parameter(0)\n"
        "  %b = {0}[] parameter(1)\n  {2}\n}}\n",
        type, select, scatter);
  };
  const auto body = [&](const std::string& type, const std::string& window) {
    return fmt::format(
        "  p0 = {0}[2,9,7,5] parameter(0)\n  p1 = {0}{1} parameter(1)\n  p2 = {0}[] parameter(2)\n"
        "  ROOT r = {0}[2,9,7,5] select-and-scatter(p0, p1, p2), window={2}, select=%select, "
        "scatter=%scatter\n",
        type, WindowResult(dims, window), window);
  };
  for (const std::string type : {"f32", "bf16", "f64", "s32", "u8"}) {
    for (const char* direction : {"GE", "GT", "LE"}) {
      for (const std::string& window : windows) {
        ExpectSame(fmt::format("select-and-scatter {} {} {}", direction, type, window),
                   body(type, window), seed++,
                   computations(type, fmt::format("compare(%a, %b), direction={}", direction),
                                "ROOT %r = " + type + "[] add(%a, %b)"),
                   /*must_run=*/true);
      }
    }
  }
  for (const std::string& window : windows) {
    ExpectSame("select-and-scatter by calls " + window, body("f32", window), seed++,
               computations("f32", "compare(%b, %a), direction=LT, type=TOTALORDER",
                            "%bb = f32[] multiply(%b, %b)\n  ROOT %r = f32[] add(%a, %bb)"),
               /*must_run=*/true);
  }
}

// Which element each window selects, by hand.
TEST(ExecutorDifferential, SelectAndScatterSelectsAsXlaDoes) {
  const auto run = [](const std::string& direction, const std::vector<double>& x,
                      const std::string& window, const std::vector<double>& source,
                      const std::vector<int64_t>& expected) {
    SCOPED_TRACE(direction + " " + window);
    const auto n = static_cast<int64_t>(x.size()), m = static_cast<int64_t>(source.size());
    const std::string text = fmt::format(
        "HloModule grad\n%select {{\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
        "  ROOT %r = pred[] compare(%a, %b), direction={}\n}}\n%add {{\n"
        "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %r = f32[] add(%a, %b)\n}}\n"
        "ENTRY main {{\n  x = f32[{}] parameter(0)\n  s = f32[{}] parameter(1)\n"
        "  z = f32[] constant(0)\n  ROOT y = f32[{}] select-and-scatter(x, s, z), window={{{}}}, "
        "select=%select, scatter=%add\n}}\n",
        direction, n, m, n, window);
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    auto verified = ir::VerifyModule(**module);
    ASSERT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << text;
    std::vector<Tensor> inputs = {Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {n})).value(),
                                  Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {m})).value()};
    for (int64_t i = 0; i < n; ++i) inputs[0].SetDouble(i, x[static_cast<size_t>(i)]);
    for (int64_t i = 0; i < m; ++i) inputs[1].SetDouble(i, source[static_cast<size_t>(i)]);
    for (const bool reference : {false, true}) {
      Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                     : Interpreter({}, {}).RunEntry(**module, inputs);
      ASSERT_TRUE(y.ok()) << y.error().ToString();
      std::vector<int64_t> got;
      for (int64_t i = 0; i < y->ElementCount(); ++i) got.push_back(llround(y->GetDouble(i)));
      EXPECT_EQ(got, expected) << (reference ? "reference" : "executor");
    }
  };
  // Windows [1 3] [3 2] [2 5] [5 4]: the maxima at 1, 1, 3, 3.
  run("GE", {1, 3, 2, 5, 4}, "size=2", {1, 10, 100, 1000}, {0, 11, 0, 1100, 0});
  // A tie: GE keeps the first, GT takes the later.
  run("GE", {2, 2}, "size=2", {7}, {7, 0});
  run("GT", {2, 2}, "size=2", {7}, {0, 7});
  // The padding is never selected, even where it would be the largest.
  run("GE", {-5, -6}, "size=2 pad=1_1", {1, 10, 100}, {11, 100});
  run("LE", {1, 3, 2, 5, 4}, "size=3 stride=2", {1, 10}, {1, 0, 10, 0, 0});
}

// Sorts on every key type, both directions, with and without TOTALORDER,
// along each dimension; an argsort (keys and an iota, the executor's host
// sort) and a lexicographic comparator (calls). Random inputs repeat values
// and hold NaNs and signed zeros, so ties and unordered keys are sorted too.
TEST(ExecutorDifferential, SortsEveryTypeAndComparator) {
  uint32_t seed = 1100;
  const auto comparator = [](const std::string& type, const std::string& compare) {
    return fmt::format(
        "\n%less (a: {0}[], b: {0}[]) -> pred[] {{\n  %a = {0}[] parameter(0)\n"
        "  %b = {0}[] parameter(1)\n  ROOT %r = pred[] {1}\n}}\n",
        type, compare);
  };
  for (const std::string type : {"f32", "bf16", "f64", "f16", "s32", "u8", "u64", "s8", "pred"}) {
    for (const char* compare :
         {"compare(%a, %b), direction=LT", "compare(%a, %b), direction=GT",
          "compare(%a, %b), direction=LT, type=TOTALORDER", "compare(%b, %a), direction=LT"}) {
      for (const int dimension : {0, 1, 2}) {
        ExpectSame(fmt::format("sort {} by {} along {}", type, compare, dimension),
                   fmt::format("  p0 = {0}[5,37,3] parameter(0)\n"
                               "  ROOT r = {0}[5,37,3] sort(p0), dimensions={{{1}}}, "
                               "is_stable=true, to_apply=%less\n",
                               type, dimension),
                   seed++, comparator(type, compare), /*must_run=*/true);
      }
    }
  }
  ExpectSame("argsort",
             "  p0 = f32[6,50] parameter(0)\n  i = s32[6,50] iota(), iota_dimension=1\n"
             "  ROOT r = (f32[6,50], s32[6,50]) sort(p0, i), dimensions={1}, is_stable=true, "
             "to_apply=%less\n",
             seed++, R"(
%less (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=GT, type=TOTALORDER
}
)",
             /*must_run=*/true);
  ExpectSame("sort by two keys",
             "  p0 = u8[6,50] parameter(0)\n  p1 = f32[6,50] parameter(1)\n"
             "  ROOT r = (u8[6,50], f32[6,50]) sort(p0, p1), dimensions={1}, to_apply=%less\n",
             seed++, R"(
%less (a: u8[], b: u8[], c: f32[], d: f32[]) -> pred[] {
  %a = u8[] parameter(0)
  %b = u8[] parameter(1)
  %c = f32[] parameter(2)
  %d = f32[] parameter(3)
  %lt = pred[] compare(%a, %b), direction=LT
  %eq = pred[] compare(%a, %b), direction=EQ
  %lt2 = pred[] compare(%c, %d), direction=LT, type=TOTALORDER
  %then = pred[] and(%eq, %lt2)
  ROOT %r = pred[] or(%lt, %then)
}
)",
             /*must_run=*/true);
}

// Stability and TOTALORDER, by hand: equal keys keep their order; -NaN <
// -inf < -0 < +0 < inf < NaN.
TEST(ExecutorDifferential, SortsStablyInTotalOrder) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto module = ir::ParseModule(R"(HloModule sort
%less {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=LT, type=TOTALORDER
}
ENTRY main {
  x = f32[8] parameter(0)
  i = s32[8] iota(), iota_dimension=0
  ROOT r = (f32[8], s32[8]) sort(x, i), dimensions={0}, is_stable=true, to_apply=%less
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  ASSERT_TRUE(ir::VerifyModule(**module).ok());
  std::vector<Tensor> inputs = {Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {8})).value()};
  const std::vector<double> x = {1, nan, 0.0, -inf, -0.0, 1, -nan, inf};
  for (int64_t i = 0; i < 8; ++i) inputs[0].SetDouble(i, x[static_cast<size_t>(i)]);
  for (const bool reference : {false, true}) {
    Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                   : Interpreter({}, {}).RunEntry(**module, inputs);
    ASSERT_TRUE(y.ok()) << y.error().ToString();
    const Tensor& order = y->tuple_elements()[1];
    std::vector<int64_t> got;
    for (int64_t i = 0; i < 8; ++i) got.push_back(order.GetInt(i));
    EXPECT_EQ(got, (std::vector<int64_t>{6, 3, 4, 2, 0, 5, 7, 1}))
        << (reference ? "reference" : "executor");
  }
}

// topk on every key type, both ways, k from none to all, is what XLA's
// TopkDecomposer makes of it: the operand and an iota sorted stably by GT
// (LT) TOTALORDER, sliced to k. Random inputs repeat values (ties) and
// hold NaNs and signed zeros.
TEST(ExecutorDifferential, TopKIsTheStableSortXlaDecomposesItInto) {
  uint32_t seed = 1200;
  for (const std::string type : {"f32", "bf16", "f64", "f16", "s32", "u8", "u64", "s8"}) {
    for (const bool largest : {true, false}) {
      const std::string comparator = fmt::format(
          "\n%order (a: {0}[], b: {0}[], c: s32[], d: s32[]) -> pred[] {{\n"
          "  %a = {0}[] parameter(0)\n  %b = {0}[] parameter(1)\n"
          "  %c = s32[] parameter(2)\n  %d = s32[] parameter(3)\n"
          "  ROOT %r = pred[] compare(%a, %b), direction={1}, type=TOTALORDER\n}}\n",
          type, largest ? "GT" : "LT");
      for (const int k : {0, 1, 7, 37}) {
        const std::string body = fmt::format(
            "  p0 = {0}[5,3,37] parameter(0)\n"
            "  t = ({0}[5,3,{1}], s32[5,3,{1}]) topk(p0), k={1}, largest={2}\n"
            "  tv = {0}[5,3,{1}] get-tuple-element(t), index=0\n"
            "  ti = s32[5,3,{1}] get-tuple-element(t), index=1\n"
            "  i = s32[5,3,37] iota(), iota_dimension=2\n"
            "  s = ({0}[5,3,37], s32[5,3,37]) sort(p0, i), dimensions={{2}}, is_stable=true, "
            "to_apply=%order\n"
            "  sv = {0}[5,3,37] get-tuple-element(s), index=0\n"
            "  si = s32[5,3,37] get-tuple-element(s), index=1\n"
            "  svk = {0}[5,3,{1}] slice(sv), slice={{[0:5], [0:3], [0:{1}]}}\n"
            "  sik = s32[5,3,{1}] slice(si), slice={{[0:5], [0:3], [0:{1}]}}\n"
            "  ROOT r = ({0}[5,3,{1}], s32[5,3,{1}], {0}[5,3,{1}], s32[5,3,{1}]) "
            "tuple(tv, ti, svk, sik)\n",
            type, k, largest ? "true" : "false");
        const std::string what = fmt::format("topk {} k={} largest={}", type, k, largest);
        Tensor result;
        ExpectSame(what, body, seed++, comparator, /*must_run=*/true, &result);
        ASSERT_EQ(result.tuple_elements().size(), 4u) << what;
        EXPECT_EQ(Difference(result.tuple_elements()[0], result.tuple_elements()[2]), "") << what;
        EXPECT_EQ(Difference(result.tuple_elements()[1], result.tuple_elements()[3]), "") << what;
      }
    }
  }
}

// XLA's GPU custom-call TopK is the stable sort of the operand and an iota
// by its comparator, sliced to k (TopkDecomposer): without a comparator,
// with one strict compare of the values (the topk kernel), and with
// comparators the executor must call (JAX's NaN-safe GT through bitcasts;
// ties broken by larger position first), over values alone (2 parameters)
// or values and positions (4).
TEST(ExecutorDifferential, TopKCustomCallIsTheSortItReplaced) {
  struct Case {
    std::string name, body;
    int parameters;
  };
  const auto compare = [](const std::string& direction) {
    return "  ROOT r = pred[] compare(a, b), direction=" + direction + ", type=TOTALORDER\n";
  };
  const std::vector<Case> cases = {
      {"none", compare("GT"), 0},
      {"gt4", compare("GT"), 4},
      {"lt2", compare("LT"), 2},
      {"nan-safe-gt",
       "  ai = s32[] bitcast-convert(a)\n  bi = s32[] bitcast-convert(b)\n"
       "  z = s32[] constant(0)\n  m = s32[] constant(2147483647)\n"
       "  an = pred[] compare(ai, z), direction=LT\n  bn = pred[] compare(bi, z), direction=LT\n"
       "  af = s32[] xor(ai, m)\n  bf = s32[] xor(bi, m)\n"
       "  ak = s32[] select(an, af, ai)\n  bk = s32[] select(bn, bf, bi)\n"
       "  ROOT r = pred[] compare(ak, bk), direction=GT\n",
       4},
      {"ties-last-first",
       "  gt = pred[] compare(a, b), direction=GT, type=TOTALORDER\n"
       "  eq = pred[] compare(a, b), direction=EQ, type=TOTALORDER\n"
       "  later = pred[] compare(c, d), direction=GT\n  tie = pred[] and(eq, later)\n"
       "  ROOT r = pred[] or(gt, tie)\n",
       4},
  };
  uint32_t seed = 1600;
  for (const std::string type : {"f32", "bf16", "s32"}) {
    for (const Case& c : cases) {
      if (c.name == "nan-safe-gt" && type != "f32") continue;
      const auto computation = [&](const std::string& name, int parameters) {
        std::string text = fmt::format(
            "\n%{} {{\n  a = {}[] parameter(0)\n  b = {}[] parameter(1)\n", name, type, type);
        if (parameters == 4) text += "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n";
        return text + c.body + "}\n";
      };
      // The decomposition always sorts values and positions.
      std::string computations = computation("sort_order", 4);
      if (c.parameters > 0) computations += computation("topk_order", c.parameters);
      const std::string to_apply = c.parameters > 0 ? ", to_apply=%topk_order" : "";
      for (const int k : {1, 5, 37}) {
        const std::string body = fmt::format(
            "  p0 = {0}[6,37] parameter(0)\n"
            "  t = ({0}[6,{1}], s32[6,{1}]) custom-call(p0), custom_call_target=\"TopK\"{2}\n"
            "  tv = {0}[6,{1}] get-tuple-element(t), index=0\n"
            "  ti = s32[6,{1}] get-tuple-element(t), index=1\n"
            "  i = s32[6,37] iota(), iota_dimension=1\n"
            "  s = ({0}[6,37], s32[6,37]) sort(p0, i), dimensions={{1}}, is_stable=true, "
            "to_apply=%sort_order\n"
            "  sv = {0}[6,37] get-tuple-element(s), index=0\n"
            "  si = s32[6,37] get-tuple-element(s), index=1\n"
            "  svk = {0}[6,{1}] slice(sv), slice={{[0:6], [0:{1}]}}\n"
            "  sik = s32[6,{1}] slice(si), slice={{[0:6], [0:{1}]}}\n"
            "  ROOT r = ({0}[6,{1}], s32[6,{1}], {0}[6,{1}], s32[6,{1}]) tuple(tv, ti, svk, sik)\n",
            type, k, to_apply);
        const std::string what = fmt::format("TopK {} {} k={}", type, c.name, k);
        Tensor result;
        ExpectSame(what, body, seed++, computations, /*must_run=*/true, &result);
        ASSERT_EQ(result.tuple_elements().size(), 4u) << what;
        EXPECT_EQ(Difference(result.tuple_elements()[0], result.tuple_elements()[2]), "") << what;
        EXPECT_EQ(Difference(result.tuple_elements()[1], result.tuple_elements()[3]), "") << what;
      }
    }
  }
}

// topk by hand: NaN is the largest, -NaN the smallest, -0 below +0, and
// equal elements come in increasing position.
TEST(ExecutorDifferential, TopKOrdersTotallyAndTiesByPosition) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> x = {1, nan, 0.0, -inf, -0.0, 1, -nan, inf};
  for (const bool largest : {true, false}) {
    auto module = ir::ParseModule(fmt::format(R"(HloModule topk
ENTRY main {{
  x = f32[8] parameter(0)
  ROOT t = (f32[5], s32[5]) topk(x), k=5, largest={}
}}
)",
                                              largest ? "true" : "false"));
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    ASSERT_TRUE(ir::VerifyModule(**module).ok());
    std::vector<Tensor> inputs = {Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {8})).value()};
    for (int64_t i = 0; i < 8; ++i) inputs[0].SetDouble(i, x[static_cast<size_t>(i)]);
    for (const bool reference : {false, true}) {
      Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                     : Interpreter({}, {}).RunEntry(**module, inputs);
      ASSERT_TRUE(y.ok()) << y.error().ToString();
      std::vector<int64_t> got;
      for (int64_t i = 0; i < 5; ++i) got.push_back(y->tuple_elements()[1].GetInt(i));
      EXPECT_EQ(got, largest ? (std::vector<int64_t>{1, 7, 0, 5, 2})
                             : (std::vector<int64_t>{6, 3, 4, 2, 0}))
          << (reference ? "reference" : "executor") << " largest=" << largest;
    }
  }
}

// rng-bit-generator: both algorithms, both Philox state sizes, every width
// and shapes with even, odd, no and zero dimensions: the kernel's blocks
// land where the reference's element-by-element draw puts them. Random
// states include counters next to 2^64 (the carries). Floats are compared
// as their bits.
TEST(ExecutorDifferential, RngBitGeneratorDrawsXlasBits) {
  uint32_t seed = 1300;
  for (const std::string algorithm : {"rng_three_fry", "rng_philox", "rng_default"}) {
    for (const int state : {2, 3}) {
      if (state == 3 && algorithm == "rng_three_fry") continue;
      for (const std::string type :
           {"u8", "s16", "f16", "bf16", "u32", "s32", "f32", "u64", "s64", "f64"}) {
        for (const std::string dims : {"", "7", "4,6", "3,5", "5,2,3", "0,3", "1"}) {
          const std::string what = fmt::format("{} u64[{}] {}[{}]", algorithm, state, type, dims);
          const std::string as_bits = type == "f16" || type == "bf16" ? "u16"
                                      : type == "f32"                 ? "u32"
                                      : type == "f64"                 ? "u64"
                                                                      : type;
          const std::string body = fmt::format(
              "  st = u64[{0}] parameter(0)\n"
              "  r = (u64[{0}], {1}[{2}]) rng-bit-generator(st), algorithm={3}\n"
              "  s = u64[{0}] get-tuple-element(r), index=0\n"
              "  b = {1}[{2}] get-tuple-element(r), index=1\n"
              "  c = {4}[{2}] bitcast-convert(b)\n"
              "  ROOT t = (u64[{0}], {4}[{2}]) tuple(s, c)\n",
              state, type, dims, algorithm, as_bits);
          ExpectSame(what, body, seed++, "", /*must_run=*/true);
        }
      }
    }
  }
}

// Against numbers XLA printed (r-xla/anvil's documentation of
// nvl_rng_bit_generator runs XLA through PJRT): ThreeFry from a zero state
// into u32[3,2] gives rows (6b200159, 99ba4efe), (1.3515e9, 3.2358e9),
// (1.6886e9, 4.2293e9) and the state (0, 3). And Philox's 128-bit counter
// carries into the key word of a u64[2] state.
TEST(ExecutorDifferential, RngBitGeneratorAgreesWithXla) {
  const auto run = [](const std::string& algorithm, const std::string& bits,
                      const std::vector<uint64_t>& state, bool reference) {
    auto module = ir::ParseModule(fmt::format(R"(HloModule rng
ENTRY main {{
  st = u64[2] parameter(0)
  ROOT r = (u64[2], {}) rng-bit-generator(st), algorithm={}
}}
)",
                                              bits, algorithm));
    EXPECT_TRUE(module.ok() && ir::VerifyModule(**module).ok());
    Tensor input = Tensor::Zeros(ir::Shape(PrimitiveType::kU64, {2})).value();
    input.SetBits(0, state[0]);
    input.SetBits(1, state[1]);
    const std::vector<Tensor> inputs = {input};
    Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                   : Interpreter({}, {}).RunEntry(**module, inputs);
    EXPECT_TRUE(y.ok()) << y.error().ToString();
    return std::move(y).value();
  };
  for (const bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference" : "executor");
    const Tensor xla = run("rng_three_fry", "u32[3,2]", {0, 0}, reference);
    EXPECT_EQ(xla.tuple_elements()[0].GetBits(1), 3u);
    const Tensor& bits = xla.tuple_elements()[1];
    EXPECT_EQ(bits.GetBits(0), 0x6b200159u);
    EXPECT_EQ(bits.GetBits(1), 0x99ba4efeu);
    const double printed[] = {1.3515e9, 3.2358e9, 1.6886e9, 4.2293e9};
    for (int64_t i = 2; i < 6; ++i) {
      EXPECT_NEAR(static_cast<double>(bits.GetBits(i)), printed[i - 2], 0.00005e9) << i;
    }
    const uint64_t key = 0x0123456789abcdefu;
    const Tensor carried = run("rng_philox", "u32[8]", {key, ~uint64_t{0}}, reference);
    EXPECT_EQ(carried.tuple_elements()[0].GetBits(0), key);
    EXPECT_EQ(carried.tuple_elements()[0].GetBits(1), 1u);
    const random::PhiloxWords first = random::Philox4x32(
        {0xffffffffu, 0xffffffffu, 0x89abcdefu, 0x01234567u}, {0x89abcdefu, 0x01234567u});
    const random::PhiloxWords second =
        random::Philox4x32({0, 0, 0x89abcdf0u, 0x01234567u}, {0x89abcdefu, 0x01234567u});
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(carried.tuple_elements()[1].GetBits(i), first[static_cast<size_t>(i)]) << i;
      EXPECT_EQ(carried.tuple_elements()[1].GetBits(4 + i), second[static_cast<size_t>(i)]) << i;
    }
  }
}

// reduce-precision: the kernel works on the bits as XLA does, the
// reference by value; every IEEE type, narrower and wider formats, no
// mantissa at all, over random bits (NaNs, infinities, subnormals).
// Compared as bits, so a NaN must stay the same NaN.
TEST(ExecutorDifferential, ReducePrecisionOnBitsIsReducePrecisionByValue) {
  uint32_t seed = 1400;
  const std::pair<int, int> formats[] = {{8, 7}, {5, 10}, {8, 23}, {11, 52}, {5, 2},   {4, 3},
                                         {1, 0}, {2, 0},  {8, 0},  {3, 1},   {10, 40}, {6, 9}};
  for (const std::string type : {"f16", "bf16", "f32", "f64"}) {
    const std::string bits = type == "f32" ? "u32" : type == "f64" ? "u64" : "u16";
    for (const auto& [exponent, mantissa] : formats) {
      const std::string body = fmt::format(
          "  p0 = {0}[300] parameter(0)\n"
          "  r = {0}[300] reduce-precision(p0), exponent_bits={2}, mantissa_bits={3}\n"
          "  ROOT b = {1}[300] bitcast-convert(r)\n",
          type, bits, exponent, mantissa);
      ExpectSame(fmt::format("{} e{}m{}", type, exponent, mantissa), body, seed++, "",
                 /*must_run=*/true);
    }
  }
}

// reduce-precision to e8m7 is a round trip through bf16, and to e5m10 one
// through f16 for magnitudes f16 holds as normals (smaller ones are
// flushed, not rounded to f16's subnormals); NaNs keep their bits, and
// with no mantissa left become +inf; ties go to even.
TEST(ExecutorDifferential, ReducePrecisionRoundsAsConversionsDo) {
  auto module = ir::ParseModule(R"(HloModule reduce_precision
ENTRY main {
  x = f32[4000] parameter(0)
  bf = f32[4000] reduce-precision(x), exponent_bits=8, mantissa_bits=7
  h = f32[4000] reduce-precision(x), exponent_bits=5, mantissa_bits=10
  cbf = bf16[4000] convert(x)
  ch = f16[4000] convert(x)
  bbf = f32[4000] convert(cbf)
  bh = f32[4000] convert(ch)
  z = f32[4000] reduce-precision(x), exponent_bits=8, mantissa_bits=0
  ROOT t = (f32[4000], f32[4000], f32[4000], f32[4000], f32[4000]) tuple(bf, bbf, h, bh, z)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  ASSERT_TRUE(ir::VerifyModule(**module).ok());
  std::vector<Tensor> inputs = {RandomInput(ir::Shape(PrimitiveType::kF32, {4000}), 1500)};
  std::mt19937 rng(7);
  for (int64_t i = 0; i < 1000; ++i) {  // around f16's range and its ties
    inputs[0].SetDouble(i, std::ldexp(static_cast<double>(rng() % 4096) - 2048, rng() % 30 - 25));
  }
  const double hand[] = {1.5, 2.5, -3.5, 65519.0, 65520.0, 0x1p-14, 0x1.ffcp-15, 3.0};
  for (size_t i = 0; i < std::size(hand); ++i) inputs[0].SetDouble(1000 + i, hand[i]);
  inputs[0].SetBits(1010, 0x7f800001u);  // a signalling NaN
  inputs[0].SetBits(1011, 0xffc12345u);  // a negative quiet NaN
  for (const bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference" : "executor");
    Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                   : Interpreter({}, {}).RunEntry(**module, inputs);
    ASSERT_TRUE(y.ok()) << y.error().ToString();
    const std::vector<Tensor>& t = y->tuple_elements();
    int64_t compared_f16 = 0;
    for (int64_t i = 0; i < 4000; ++i) {
      const double x = inputs[0].GetDouble(i);
      if (std::isnan(x)) {
        EXPECT_EQ(t[0].GetBits(i), inputs[0].GetBits(i)) << i;
        EXPECT_EQ(t[2].GetBits(i), inputs[0].GetBits(i)) << i;
        EXPECT_EQ(t[4].GetBits(i), 0x7f800000u) << i;
        continue;
      }
      EXPECT_EQ(t[0].GetBits(i), t[1].GetBits(i)) << i << ": " << x;
      if (std::fabs(x) >= 0x1p-14) {
        EXPECT_EQ(t[2].GetBits(i), t[3].GetBits(i)) << i << ": " << x;
        ++compared_f16;
      } else {
        EXPECT_TRUE(t[2].GetDouble(i) == 0 || std::fabs(t[2].GetDouble(i)) == 0x1p-14)
            << i << ": " << x;
      }
    }
    EXPECT_GT(compared_f16, 1500);
    // With no mantissa bits a tie goes to the even biased exponent: 1.5
    // (127) up to 2, 3 (128) down to 2.
    EXPECT_EQ(t[4].GetDouble(1000), 2.0);
    EXPECT_EQ(t[4].GetDouble(1007), 2.0);
    EXPECT_EQ(t[4].GetDouble(1001), 2.0);   // 2.5 = 1.25 * 2: to 1 * 2
    EXPECT_EQ(t[4].GetDouble(1002), -4.0);  // -3.5 = -1.75 * 2: to -2 * 2
    EXPECT_EQ(t[2].GetDouble(1003), 65504.0);
    EXPECT_TRUE(std::isinf(t[2].GetDouble(1004)));
    EXPECT_EQ(t[2].GetDouble(1005), 0x1p-14);
    EXPECT_EQ(t[2].GetDouble(1006), 0.0);  // f16's largest subnormal, flushed
  }
}

// get-dimension-size of a static shape is the dimension's size, usable as
// any s32 (a mean's divisor, a loop bound).
TEST(ExecutorDifferential, GetDimensionSizeIsTheStaticSize) {
  Tensor result;
  ExpectSame("get-dimension-size",
             "  p0 = f32[3,7] parameter(0)\n"
             "  n = s32[] get-dimension-size(p0), dimensions={1}\n"
             "  m = s32[] get-dimension-size(p0), dimensions={0}\n"
             "  ROOT r = s32[] multiply(n, m)\n",
             1700, "", /*must_run=*/true, &result);
  EXPECT_EQ(result.GetInt(0), 21);
}

// The three batch-norm ops beside XLA's BatchNormExpander's expansion of
// them written out as HLO (get-dimension-size products, the float epsilon
// converted, reductions from 0, rsqrt at the operand's shape), on both
// backends: all four give the same bits, for four types and with the
// feature dimension first, inside, last and alone.
std::string BatchNormExpansionModule(const std::string& t, const std::vector<int64_t>& dims,
                                     int64_t feature, const std::string& epsilon) {
  const std::string x = fmt::format("{}[{}]", t, fmt::join(dims, ","));
  const std::string f = fmt::format("{}[{}]", t, dims[static_cast<size_t>(feature)]);
  std::vector<int64_t> others;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d != feature) others.push_back(d);
  }
  const std::string reduced = fmt::format("dimensions={{{}}}", fmt::join(others, ","));
  const std::string along = fmt::format("dimensions={{{}}}", feature);
  const std::string attributes = fmt::format("epsilon={}, feature_index={}", epsilon, feature);
  std::string s = fmt::format(
      "HloModule batch_norm\n\n%add (a: {0}[], b: {0}[]) -> {0}[] {{\n"
      "  a = {0}[] parameter(0)\n  b = {0}[] parameter(1)\n  ROOT s = {0}[] add(a, b)\n}}\n\n"
      "ENTRY main {{\n  x = {1} parameter(0)\n  scale = {2} parameter(1)\n"
      "  offset = {2} parameter(2)\n  mean = {2} parameter(3)\n  variance = {2} parameter(4)\n"
      "  dy = {1} parameter(5)\n",
      t, x, f);
  // N and epsilon, as the expander makes them.
  s += "  n_0 = s32[] constant(1)\n";
  for (size_t i = 0; i < others.size(); ++i) {
    s += fmt::format(
        "  size_{0} = s32[] get-dimension-size(x), dimensions={{{1}}}\n"
        "  n_{2} = s32[] multiply(size_{0}, n_{0})\n",
        i, others[i], i + 1);
  }
  s += fmt::format(
      "  n = {0}[] convert(n_{1})\n  eps32 = f32[] constant({2})\n  eps = {0}[] convert(eps32)\n"
      "  zero = {0}[] constant(0)\n  n_f = {3} broadcast(n), dimensions={{}}\n"
      "  n_x = {4} broadcast(n), dimensions={{}}\n  eps_f = {3} broadcast(eps), dimensions={{}}\n"
      "  eps_x = {4} broadcast(eps), dimensions={{}}\n",
      t, others.size(), epsilon, f, x);
  // Training.
  s += fmt::format(
      "  bn_t = ({0}, {1}, {1}) batch-norm-training(x, scale, offset), {2}\n"
      "  t_y = {0} get-tuple-element(bn_t), index=0\n"
      "  t_mean = {1} get-tuple-element(bn_t), index=1\n"
      "  t_var = {1} get-tuple-element(bn_t), index=2\n"
      "  xx = {0} multiply(x, x)\n  sum = {1} reduce(x, zero), {3}, to_apply=%add\n"
      "  sum_xx = {1} reduce(xx, zero), {3}, to_apply=%add\n  e_mean = {1} divide(sum, n_f)\n"
      "  e_xx = {1} divide(sum_xx, n_f)\n  mean2 = {1} multiply(e_mean, e_mean)\n"
      "  e_var = {1} subtract(e_xx, mean2)\n  e_mean_x = {0} broadcast(e_mean), {4}\n"
      "  e_var_x = {0} broadcast(e_var), {4}\n  e_var_eps = {0} add(e_var_x, eps_x)\n"
      "  e_rs = {0} rsqrt(e_var_eps)\n  e_c = {0} subtract(x, e_mean_x)\n"
      "  e_norm = {0} multiply(e_c, e_rs)\n  scale_x = {0} broadcast(scale), {4}\n"
      "  offset_x = {0} broadcast(offset), {4}\n  e_scaled = {0} multiply(e_norm, scale_x)\n"
      "  e_y = {0} add(e_scaled, offset_x)\n",
      x, f, attributes, reduced, along);
  // Inference.
  s += fmt::format(
      "  i_y = {0} batch-norm-inference(x, scale, offset, mean, variance), {2}\n"
      "  v_eps = {1} add(variance, eps_f)\n  v_rs = {1} rsqrt(v_eps)\n"
      "  true_scale = {1} multiply(scale, v_rs)\n  m_s = {1} multiply(mean, true_scale)\n"
      "  true_shift = {1} subtract(offset, m_s)\n  ts_x = {0} broadcast(true_scale), {3}\n"
      "  th_x = {0} broadcast(true_shift), {3}\n  x_ts = {0} multiply(x, ts_x)\n"
      "  ei_y = {0} add(x_ts, th_x)\n",
      x, f, attributes, along);
  // Grad: the expander's I1..I6.
  s += fmt::format(
      "  bn_g = ({0}, {1}, {1}) batch-norm-grad(x, scale, mean, variance, dy), {2}\n"
      "  g_dx = {0} get-tuple-element(bn_g), index=0\n"
      "  g_scale = {1} get-tuple-element(bn_g), index=1\n"
      "  g_offset = {1} get-tuple-element(bn_g), index=2\n"
      "  var_x = {0} broadcast(variance), {4}\n  mean_x = {0} broadcast(mean), {4}\n"
      "  var_eps_x = {0} add(var_x, eps_x)\n  rs_x = {0} rsqrt(var_eps_x)\n"
      "  c = {0} subtract(x, mean_x)\n  dy_c = {0} multiply(dy, c)\n"
      "  sum_dy_c = {1} reduce(dy_c, zero), {3}, to_apply=%add\n"
      "  eg_offset = {1} reduce(dy, zero), {3}, to_apply=%add\n"
      "  eg_scale = {1} multiply(sum_dy_c, v_rs)\n  i2 = {0} broadcast(eg_offset), {4}\n"
      "  i3 = {0} broadcast(sum_dy_c), {4}\n  i4 = {0} multiply(i3, c)\n"
      "  i5 = {0} divide(i4, var_eps_x)\n  s_rs = {0} multiply(scale_x, rs_x)\n"
      "  k = {0} divide(s_rs, n_x)\n  i1 = {0} multiply(dy, n_x)\n"
      "  i1_i2 = {0} subtract(i1, i2)\n  i6 = {0} subtract(i1_i2, i5)\n"
      "  eg_dx = {0} multiply(k, i6)\n",
      x, f, attributes, reduced, along);
  s += fmt::format(
      "  ROOT r = ({0}, {1}, {1}, {0}, {1}, {1}, {0}, {0}, {0}, {1}, {1}, {0}, {1}, {1}) "
      "tuple(t_y, t_mean, t_var, e_y, e_mean, e_var, i_y, ei_y, g_dx, g_scale, g_offset, eg_dx, "
      "eg_scale, eg_offset)\n}}\n",
      x, f);
  return s;
}

// Ordinary values: x and dy in [-3, 3], scale in [0.5, 2], offset and mean
// in [-1, 1], variance in [0.25, 3.25] (so no rsqrt of a negative).
std::vector<Tensor> BatchNormInputs(const ir::Module& module, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](double low, double high) {
    return low + (high - low) * static_cast<double>(rng() % 1025) / 1024.0;
  };
  const double ranges[][2] = {{-3, 3}, {0.5, 2}, {-1, 1}, {-1, 1}, {0.25, 3.25}, {-3, 3}};
  std::vector<Tensor> inputs;
  for (const ir::Instruction* parameter : module.entry()->parameters()) {
    const double* range = ranges[inputs.size()];
    Tensor tensor = Tensor::Zeros(parameter->shape()).value();
    for (int64_t i = 0; i < tensor.ElementCount(); ++i) {
      tensor.SetDouble(i, uniform(range[0], range[1]));
    }
    inputs.push_back(std::move(tensor));
  }
  return inputs;
}

TEST(ExecutorDifferential, BatchNormIsXlasExpansionOfIt) {
  struct Case {
    std::vector<int64_t> dims;
    int64_t feature;
    std::string epsilon;
  };
  const std::vector<Case> cases = {{{4, 5, 6}, 1, "0.001"},
                                   {{3, 33}, 1, "1e-05"},
                                   {{7, 2, 3, 2}, 0, "0.1"},
                                   {{9}, 0, "0.001"},
                                   {{2, 1, 70}, 2, "1e-3"}};
  uint32_t seed = 1800;
  for (const std::string type : {"f32", "f64", "bf16", "f16"}) {
    for (const Case& c : cases) {
      const std::string text = BatchNormExpansionModule(type, c.dims, c.feature, c.epsilon);
      SCOPED_TRACE(text);
      auto module = ir::ParseModule(text);
      ASSERT_TRUE(module.ok()) << module.error().ToString();
      auto verified = ir::VerifyModule(**module);
      ASSERT_TRUE(verified.ok()) << verified.error().ToString();
      const std::vector<Tensor> inputs = BatchNormInputs(**module, seed++);
      const InterpreterOptions options{.deterministic = true};
      Expected<Tensor> reference = ReferenceInterpreter({}, options).RunEntry(**module, inputs);
      Expected<Tensor> fast = Interpreter({}, options).RunEntry(**module, inputs);
      ASSERT_TRUE(reference.ok()) << reference.error().ToString();
      ASSERT_TRUE(fast.ok()) << fast.error().ToString();
      EXPECT_EQ(Difference(*fast, *reference), "");
      const std::vector<Tensor>& r = reference->tuple_elements();
      const std::pair<int, int> op_and_expansion[] = {{0, 3},  {1, 4},  {2, 5},  {6, 7},
                                                      {8, 11}, {9, 12}, {10, 13}};
      for (const auto& [op, expansion] : op_and_expansion) {
        EXPECT_EQ(Difference(r[op], r[expansion]), "") << "result " << op;
      }
      if (type != "f64") continue;
      // In f64 the statistics are the mean and population variance.
      const batch_norm::Layout layout = batch_norm::LayoutOf(c.dims, c.feature);
      for (int64_t f = 0; f < layout.features; ++f) {
        double sum = 0, squares = 0;
        for (int64_t o = 0; o < layout.outer; ++o) {
          for (int64_t i = 0; i < layout.inner; ++i) {
            const double v = inputs[0].GetDouble((o * layout.features + f) * layout.inner + i);
            sum += v;
            squares += v * v;
          }
        }
        const double n = static_cast<double>(layout.outer * layout.inner);
        EXPECT_NEAR(r[1].GetDouble(f), sum / n, 1e-12);
        EXPECT_NEAR(r[2].GetDouble(f), squares / n - (sum / n) * (sum / n), 1e-12);
      }
    }
  }
}

// stochastic-convert beside XLA's StochasticConvertDecomposer's expansion
// of it written out as HLO (sign, abs, floor, the fraction scaled by 2^w
// in f32 for f16, the compare with the random bits, the bounds of the
// integer type as constants of the operand's type).
std::string StochasticConvertModule(const std::string& from, const std::string& random,
                                    const std::string& to, int64_t n) {
  const int width = from == "f64" ? 64 : from == "f32" ? 32 : 16;
  const int to_width = std::stoi(to.substr(1));
  const std::string fraction = from == "f16" ? "f32" : from;
  const auto array = [&](const std::string& type) { return fmt::format("{}[{}]", type, n); };
  const std::string lowest = fmt::format("-{}", uint64_t{1} << (to_width - 1));
  const std::string highest = fmt::format("{}", (uint64_t{1} << (to_width - 1)) - 1);
  return fmt::format(
      "HloModule stochastic\n\nENTRY main {{\n  x = {0} parameter(0)\n  r = {1} parameter(1)\n"
      "  sc = {2} stochastic-convert(x, r)\n  zero = {3}[] constant(0)\n"
      "  zeros = {0} broadcast(zero), dimensions={{}}\n  sign = {0} sign(x)\n"
      "  neg = pred[{4}] compare(sign, zeros), direction=LT\n  abs = {0} abs(x)\n"
      "  floor = {0} floor(abs)\n  frac = {0} subtract(abs, floor)\n"
      "  frac_w = {5} convert(frac)\n  scale = {6}[] constant({7})\n"
      "  scales = {5} broadcast(scale), dimensions={{}}\n  fixed = {5} multiply(frac_w, scales)\n"
      "  fixed_r = {1} convert(fixed)\n  up = pred[{4}] compare(r, fixed_r), direction=LT\n"
      "  t = {2} convert(floor)\n  one = {8}[] constant(1)\n"
      "  ones = {2} broadcast(one), dimensions={{}}\n  t1 = {2} add(t, ones)\n"
      "  rounded = {2} select(up, t1, t)\n  negated = {2} negate(rounded)\n"
      "  signed = {2} select(neg, negated, rounded)\n  lo = {3}[] constant({9})\n"
      "  los = {0} broadcast(lo), dimensions={{}}\n  is_lo = pred[{4}] compare(x, los), "
      "direction=LE\n"
      "  lo_t = {8}[] constant({9})\n  lo_ts = {2} broadcast(lo_t), dimensions={{}}\n"
      "  low = {2} select(is_lo, lo_ts, signed)\n  hi = {3}[] constant({10})\n"
      "  his = {0} broadcast(hi), dimensions={{}}\n  is_hi = pred[{4}] compare(x, his), "
      "direction=GE\n"
      "  hi_t = {8}[] constant({10})\n  hi_ts = {2} broadcast(hi_t), dimensions={{}}\n"
      "  expanded = {2} select(is_hi, hi_ts, low)\n  ROOT out = ({2}, {2}) tuple(sc, "
      "expanded)\n}}\n",
      array(from), array(random), array(to), from, n, array(fraction), fraction,
      fmt::format("{}", std::ldexp(1.0, width)), to, lowest, highest);
}

TEST(ExecutorDifferential, StochasticConvertIsXlasExpansionOfIt) {
  const std::pair<std::string, std::string> operands[] = {
      {"f16", "u16"}, {"bf16", "u16"}, {"f32", "u32"}, {"f64", "u64"}};
  std::mt19937_64 rng(2300);
  for (const auto& [from, random] : operands) {
    for (const std::string to : {"s8", "s16", "s32", "s64"}) {
      const int64_t n = 4096;
      const std::string text = StochasticConvertModule(from, random, to, n);
      SCOPED_TRACE(from + " -> " + to);
      auto module = ir::ParseModule(text);
      ASSERT_TRUE(module.ok()) << module.error().ToString() << "\n" << text;
      auto verified = ir::VerifyModule(**module);
      ASSERT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << text;
      const auto parameters = (*module)->entry()->parameters();
      Tensor x = Tensor::Zeros(parameters[0]->shape()).value();
      Tensor bits = Tensor::Zeros(parameters[1]->shape()).value();
      // Any bits (NaNs, infinities, huge values), values around the
      // integer type's bounds, small values of either sign, and the
      // random bits' extremes.
      const double bound = std::ldexp(1.0, std::stoi(to.substr(1)) - 1);
      const double specials[] = {0.0,
                                 -0.0,
                                 0.5,
                                 -0.5,
                                 1.0,
                                 -1.0,
                                 2.75,
                                 -2.75,
                                 bound,
                                 -bound,
                                 bound - 1,
                                 -bound - 1,
                                 bound + 0.5,
                                 -bound - 0.5,
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()};
      std::uniform_real_distribution<double> unit(-1, 1);
      for (int64_t i = 0; i < n; ++i) {
        switch (i % 4) {
          case 0:
            x.SetBits(i, rng());
            break;
          case 1:
            x.SetDouble(i, specials[(i / 4) % std::size(specials)]);
            break;
          case 2:
            x.SetDouble(i, bound * 1.5 * unit(rng));
            break;
          default:
            x.SetDouble(i, 40 * unit(rng));
            break;
        }
        bits.SetBits(i, i % 97 == 0 ? 0 : i % 89 == 0 ? ~uint64_t{0} : rng());
      }
      const std::vector<Tensor> inputs = {x, bits};
      const InterpreterOptions options{.deterministic = true};
      Expected<Tensor> reference = ReferenceInterpreter({}, options).RunEntry(**module, inputs);
      Expected<Tensor> fast = Interpreter({}, options).RunEntry(**module, inputs);
      ASSERT_TRUE(reference.ok()) << reference.error().ToString();
      ASSERT_TRUE(fast.ok()) << fast.error().ToString();
      EXPECT_EQ(Difference(*fast, *reference), "");
      EXPECT_EQ(Difference(reference->tuple_elements()[0], reference->tuple_elements()[1]), "");
    }
  }
}

// Over every u16 of random bits, a 16-bit float rounds up exactly as often
// as its fraction says: the rounding is unbiased, bit for bit.
TEST(ExecutorDifferential, StochasticConvertRoundsUpAsOftenAsTheFraction) {
  for (const std::string from : {"f16", "bf16"}) {
    for (const double value : {2.25, -2.25, 0.0078125, -7.5, 100.875}) {
      const std::string text = fmt::format(
          "HloModule m\n\nENTRY main {{\n  x = {0}[65536] parameter(0)\n  r = u16[65536] "
          "parameter(1)\n  ROOT y = s32[65536] stochastic-convert(x, r)\n}}\n",
          from);
      auto module = ir::ParseModule(text);
      ASSERT_TRUE(module.ok()) << module.error().ToString();
      const auto parameters = (*module)->entry()->parameters();
      Tensor x = Tensor::Zeros(parameters[0]->shape()).value();
      Tensor bits = Tensor::Zeros(parameters[1]->shape()).value();
      for (int64_t i = 0; i < 65536; ++i) {
        x.SetDouble(i, value);
        bits.SetBits(i, static_cast<uint64_t>(i));
      }
      const std::vector<Tensor> inputs = {x, bits};
      Expected<Tensor> fast = Interpreter({}, {}).RunEntry(**module, inputs);
      ASSERT_TRUE(fast.ok()) << fast.error().ToString();
      // The value as the type holds it (100.875 is 101 in bf16).
      const double magnitude = std::abs(x.GetDouble(0));
      const double fraction = magnitude - std::floor(magnitude);
      int64_t up = 0;
      for (int64_t i = 0; i < 65536; ++i) {
        const int64_t y = fast->GetInt(i);
        const int64_t truncated = static_cast<int64_t>(std::floor(magnitude));
        ASSERT_TRUE(std::abs(y) == truncated || std::abs(y) == truncated + 1) << value << " " << y;
        ASSERT_TRUE(y == 0 || (y < 0) == (value < 0)) << value << " " << y;
        up += std::abs(y) == truncated + 1;
      }
      EXPECT_EQ(up, static_cast<int64_t>(fraction * 65536)) << from << " " << value;
    }
  }
}

// XLA decomposes stochastic-convert to signed integers only; to a float it
// is refused by name on both backends.
TEST(ExecutorDifferential, StochasticConvertToAFloatIsRefusedByName) {
  auto module = ir::ParseModule(
      "HloModule m\n\nENTRY main {\n  x = f32[4] parameter(0)\n  r = u32[4] parameter(1)\n"
      "  ROOT y = bf16[4] stochastic-convert(x, r)\n}\n");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  ASSERT_TRUE(ir::VerifyModule(**module).ok());
  const auto parameters = (*module)->entry()->parameters();
  const std::vector<Tensor> inputs = {Tensor::Zeros(parameters[0]->shape()).value(),
                                      Tensor::Zeros(parameters[1]->shape()).value()};
  for (const bool reference : {true, false}) {
    Expected<Tensor> result = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                        : Interpreter({}, {}).RunEntry(**module, inputs);
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.error().ToString().find("stochastic-convert to bf16 is not executable"),
              std::string::npos)
        << result.error().ToString();
  }
}

TEST(ExecutorDifferential, DotsEveryLayoutAndType) {
  uint32_t seed = 600;
  for (const std::string type : {"f32", "f64", "bf16", "f16", "s32", "s8"}) {
    const std::string out = type == "s8" ? "s32" : type;
    auto same = [&](const std::string& what, const std::string& body) {
      ExpectSame(what + " " + type, fmt::format(fmt::runtime(body), type, out), seed++);
    };
    same("dot",
         "  p0 = {0}[37,29] parameter(0)\n  p1 = {0}[29,41] parameter(1)\n"
         "  ROOT r = {1}[37,41] dot(p0, p1), lhs_contracting_dims={{1}}, "
         "rhs_contracting_dims={{0}}\n");
    same("dot both transposed",
         "  p0 = {0}[29,37] parameter(0)\n  p1 = {0}[41,29] parameter(1)\n"
         "  ROOT r = {1}[37,41] dot(p0, p1), lhs_contracting_dims={{0}}, "
         "rhs_contracting_dims={{1}}\n");
    same("dot batch",
         "  p0 = {0}[3,5,6,7] parameter(0)\n  p1 = {0}[3,7,6,4] parameter(1)\n"
         "  ROOT r = {1}[3,6,5,4] dot(p0, p1), lhs_batch_dims={{0,2}}, rhs_batch_dims={{0,2}}, "
         "lhs_contracting_dims={{3}}, rhs_contracting_dims={{1}}\n");
    same("dot two contracting dims",
         "  p0 = {0}[4,3,5] parameter(0)\n  p1 = {0}[5,3,6] parameter(1)\n"
         "  ROOT r = {1}[4,6] dot(p0, p1), lhs_contracting_dims={{1,2}}, "
         "rhs_contracting_dims={{1,0}}\n");
    same("dot empty contraction",
         "  p0 = {0}[4,0] parameter(0)\n  p1 = {0}[0,3] parameter(1)\n"
         "  ROOT r = {1}[4,3] dot(p0, p1), lhs_contracting_dims={{1}}, "
         "rhs_contracting_dims={{0}}\n");
  }
  ExpectSame(
      "dot bf16 x bf16 -> f32",
      "  p0 = bf16[130,70] parameter(0)\n  p1 = bf16[70,90] parameter(1)\n"
      "  ROOT r = f32[130,90] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n",
      seed++);
}

TEST(ExecutorDifferential, ConvolutionsEveryWindowAndGrouping) {
  uint32_t seed = 700;
  for (const std::string type : {"f32", "f64", "bf16", "f16", "s32", "s8"}) {
    auto same = [&](const std::string& what, const std::string& body) {
      ExpectSame(what + " " + type, fmt::format(fmt::runtime(body), type), seed++, "",
                 /*must_run=*/true);
    };
    same("2-D, strided, padded unevenly",
         "  p0 = {0}[3,9,8,5] parameter(0)\n  p1 = {0}[3,2,5,7] parameter(1)\n"
         "  ROOT r = {0}[3,5,5,7] convolution(p0, p1), window={{size=3x2 stride=2x2 "
         "pad=1_1x0_2}}, dim_labels=b01f_01io->b01f\n");
    same("dilated both ways, reversed, cut by negative padding",
         "  p0 = {0}[2,4,11] parameter(0)\n  p1 = {0}[6,4,3] parameter(1)\n"
         "  ROOT r = {0}[2,6,16] convolution(p0, p1), window={{size=3 pad=-1_2 lhs_dilate=2 "
         "rhs_dilate=3 rhs_reversal=1}}, dim_labels=bf0_oi0->bf0\n");
    same("depthwise, a multiplier of 3",
         "  p0 = {0}[2,10,4] parameter(0)\n  p1 = {0}[3,1,12] parameter(1)\n"
         "  ROOT r = {0}[2,10,12] convolution(p0, p1), window={{size=3 pad=1_1}}, "
         "dim_labels=b0f_0io->b0f, feature_group_count=4\n");
    same("grouped, two groups",
         "  p0 = {0}[2,10,6] parameter(0)\n  p1 = {0}[3,3,8] parameter(1)\n"
         "  ROOT r = {0}[2,8,8] convolution(p0, p1), window={{size=3}}, "
         "dim_labels=b0f_0io->b0f, feature_group_count=2\n");
    same("batch groups (a depthwise weight gradient)",
         "  p0 = {0}[8,3,10] parameter(0)\n  p1 = {0}[10,3,16] parameter(1)\n"
         "  ROOT r = {0}[3,1,16] convolution(p0, p1), window={{size=10 pad=1_1}}, "
         "dim_labels=bf0_0io->0bf, batch_group_count=8\n");
    same("no spatial dimension (a product)",
         "  p0 = {0}[5,37] parameter(0)\n  p1 = {0}[37,19] parameter(1)\n"
         "  ROOT r = {0}[5,19] convolution(p0, p1), dim_labels=bf_io->bf\n");
    same("the corpus's: spatial first, batch last",
         "  p0 = {0}[16,6,20] parameter(0)\n  p1 = {0}[16,6,20] parameter(1)\n"
         "  ROOT r = {0}[16,20,20] convolution(p0, p1), window={{size=16 stride=15 "
         "lhs_dilate=16}}, dim_labels=0fb_0io->0fb\n");
  }
  ExpectSame("bf16 -> f32",
             "  p0 = bf16[2,12,12,16] parameter(0)\n  p1 = bf16[3,3,16,24] parameter(1)\n"
             "  ROOT r = f32[2,12,12,24] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, "
             "dim_labels=b01f_01io->b01f\n",
             seed++, "", /*must_run=*/true);
  // 21 output positions of 1080 taps x 64 features: the kernel lowers the
  // input 16 rows (4 MiB) at a time, so the product runs in two blocks.
  ExpectSame("a lowered input of two blocks",
             "  p0 = f32[1,1100,64] parameter(0)\n  p1 = f32[1080,64,2] parameter(1)\n"
             "  ROOT r = f32[1,21,2] convolution(p0, p1), window={size=1080}, "
             "dim_labels=b0f_0io->b0f\n",
             seed++, "", /*must_run=*/true);
}

// The window's arithmetic by hand, on x = 1 2 3 4 and a kernel w0 w1 w2 =
// 1 10 100: both sides read it through one definition, so the numbers
// check that definition.
TEST(ExecutorDifferential, ConvolutionWindowsAreTheHandComputedSums) {
  const auto run = [](const std::string& window, const std::vector<int64_t>& out) {
    SCOPED_TRACE(window);
    const std::string text = fmt::format(
        "HloModule conv\nENTRY main {{\n  x = f32[1,1,4] parameter(0)\n"
        "  w = f32[1,1,3] parameter(1)\n  ROOT y = f32[1,1,{}] convolution(x, w), "
        "window={{size=3 {}}}, dim_labels=bf0_oi0->bf0\n}}\n",
        out.size(), window);
    auto module = ir::ParseModule(text);
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    ASSERT_TRUE(ir::VerifyModule(**module).ok()) << text;
    std::vector<Tensor> inputs = {Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {1, 1, 4})).value(),
                                  Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {1, 1, 3})).value()};
    for (int64_t i = 0; i < 4; ++i) inputs[0].SetDouble(i, static_cast<double>(i + 1));
    for (int64_t t = 0; t < 3; ++t) inputs[1].SetDouble(t, std::pow(10.0, static_cast<double>(t)));
    for (const bool reference : {false, true}) {
      Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                     : Interpreter({}, {}).RunEntry(**module, inputs);
      ASSERT_TRUE(y.ok()) << y.error().ToString();
      std::vector<int64_t> got;
      for (int64_t i = 0; i < y->ElementCount(); ++i) got.push_back(llround(y->GetDouble(i)));
      EXPECT_EQ(got, out) << (reference ? "reference" : "executor");
    }
  };
  run("pad=1_1", {10 + 200, 1 + 20 + 300, 2 + 30 + 400, 3 + 40});
  run("pad=1_1 rhs_reversal=1", {10 + 2, 100 + 20 + 3, 200 + 30 + 4, 300 + 40});
  // 1 _ 2 _ 3 _ 4, windows of 3 at stride 2.
  run("stride=2 lhs_dilate=2", {1 + 200, 2 + 300, 3 + 400});
  // Taps 0, 2, 4 of the padded _ 1 2 3 4 _.
  run("pad=1_1 rhs_dilate=2", {20 + 400, 1 + 30});
}

// A tap that lands in the padding adds nothing, not 0 · w: with an infinity
// or NaN in the kernel the first output, whose tap 0 reads the padding, is
// still the sum of the other two (which a product over the zero-padded input
// would make NaN).
TEST(ExecutorDifferential, AConvolutionsPaddingMeetsNoneOfTheKernel) {
  for (const double bad :
       {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    auto module = ir::ParseModule(
        "HloModule conv\nENTRY main {\n  x = f32[1,1,4] parameter(0)\n"
        "  w = f32[1,1,3] parameter(1)\n  ROOT y = f32[1,1,4] convolution(x, w), "
        "window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0\n}\n");
    ASSERT_TRUE(module.ok()) << module.error().ToString();
    std::vector<Tensor> inputs = {Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {1, 1, 4})).value(),
                                  Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {1, 1, 3})).value()};
    for (int64_t i = 0; i < 4; ++i) inputs[0].SetDouble(i, static_cast<double>(i + 1));
    for (int64_t t = 0; t < 3; ++t) inputs[1].SetDouble(t, t == 0 ? bad : std::pow(10.0, t));
    for (const bool reference : {false, true}) {
      Expected<Tensor> y = reference ? ReferenceInterpreter({}, {}).RunEntry(**module, inputs)
                                     : Interpreter({}, {}).RunEntry(**module, inputs);
      ASSERT_TRUE(y.ok()) << y.error().ToString();
      EXPECT_EQ(y->GetDouble(0), 10 + 200) << (reference ? "reference" : "executor");
      for (int64_t i = 1; i < 4; ++i) {
        EXPECT_EQ(std::isnan(y->GetDouble(i)), std::isnan(bad));
        EXPECT_TRUE(!std::isfinite(y->GetDouble(i)));
      }
    }
  }
}

TEST(ExecutorDifferential, ControlFlowAndTuples) {
  ExpectSame("while loop accumulating in place",
             "  p0 = f32[4,8] parameter(0)\n  zero = s32[] constant(0)\n"
             "  init = (s32[], f32[4,8]) tuple(zero, p0)\n"
             "  ROOT w = (s32[], f32[4,8]) while(init), condition=%cond, body=%body\n",
             700,
             "\n%cond (c: (s32[], f32[4,8])) -> pred[] {\n  %c = (s32[], f32[4,8]) parameter(0)\n"
             "  %i = s32[] get-tuple-element(%c), index=0\n  %n = s32[] constant(4)\n"
             "  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}\n"
             "\n%body (b: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {\n"
             "  %b = (s32[], f32[4,8]) parameter(0)\n  %i = s32[] get-tuple-element(%b), index=0\n"
             "  %x = f32[4,8] get-tuple-element(%b), index=1\n  %one = s32[] constant(1)\n"
             "  %next = s32[] add(%i, %one)\n  %z = s32[] constant(0)\n"
             "  %row = f32[1,8] dynamic-slice(%x, %i, %z), dynamic_slice_sizes={1,8}\n"
             "  %twice = f32[1,8] add(%row, %row)\n"
             "  %y = f32[4,8] dynamic-update-slice(%x, %twice, %i, %z)\n"
             "  ROOT %t = (s32[], f32[4,8]) tuple(%next, %y)\n}\n");
  ExpectSame("conditional by index, out of range",
             "  p0 = f32[5] parameter(0)\n  k = s32[] constant(7)\n"
             "  ROOT r = f32[5] conditional(k, p0, p0), branch_computations={%neg, %ex}\n",
             701,
             "\n%neg (a: f32[5]) -> f32[5] {\n  %a = f32[5] parameter(0)\n"
             "  ROOT %r = f32[5] negate(%a)\n}\n"
             "\n%ex (a: f32[5]) -> f32[5] {\n  %a = f32[5] parameter(0)\n  ROOT %r = f32[5] "
             "exponential(%a)\n}\n");
}

}  // namespace
}  // namespace loom::exec
