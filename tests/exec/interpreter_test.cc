// The interpreter op by op on hand-written HLO, against closed forms or a
// naive reference computed here: size-0 and size-1 dimensions, clamped
// dynamic-slice indices, every comparison direction, rounding, dot against a
// naive loop, control flow, and the errors for what it cannot run.
#include "exec/interpreter.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom::exec {
namespace {

using ir::PrimitiveType;

// Parses, verifies and runs the entry computation of `text`.
Expected<Tensor> RunHlo(const std::string& text, const std::vector<Tensor>& arguments,
                        InterpreterOptions options = {}, DeviceContext device = {}) {
  Expected<std::unique_ptr<ir::Module>> module = ir::ParseModule(text);
  if (!module.ok()) return Error{"parse: " + module.error().ToString(), SourceLoc{}};
  Expected<ir::VerifyReport> report = ir::VerifyModule(**module);
  if (!report.ok()) return Error{"verify: " + report.error().ToString(), SourceLoc{}};
  return Interpreter(device, options).RunEntry(**module, arguments);
}

Tensor Make(PrimitiveType type, std::vector<int64_t> dims, const std::vector<double>& values) {
  Tensor tensor = *Tensor::Zeros(ir::Shape(type, std::move(dims)));
  for (size_t i = 0; i < values.size(); ++i) tensor.SetDouble(static_cast<int64_t>(i), values[i]);
  return tensor;
}

std::vector<double> Values(const Tensor& tensor) {
  std::vector<double> values;
  for (int64_t i = 0; i < tensor.ElementCount(); ++i) values.push_back(tensor.GetDouble(i));
  return values;
}

// Runs a module and returns its result's values (empty on error, with a
// test failure).
std::vector<double> RunValues(const std::string& text, const std::vector<Tensor>& arguments) {
  Expected<Tensor> result = RunHlo(text, arguments);
  EXPECT_TRUE(result.ok()) << result.error().ToString();
  return result.ok() ? Values(*result) : std::vector<double>{};
}

std::string Module(const std::string& entry) {
  return "HloModule m\n\nENTRY main {\n" + entry + "}\n";
}

using V = std::vector<double>;

TEST(InterpElementwise, FloatAndWrappingIntegerArithmetic) {
  EXPECT_EQ(RunValues(Module(R"(  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  ROOT r = f32[3] multiply(a, b)
)"),
                      {Make(PrimitiveType::kF32, {3}, {1, 2, 3}),
                       Make(PrimitiveType::kF32, {3}, {4, -5, 0.5})}),
            (V{4, -10, 1.5}));
  EXPECT_EQ(RunValues(Module(R"(  a = s32[2] parameter(0)
  b = s32[2] parameter(1)
  ROOT r = s32[2] add(a, b)
)"),
                      {Make(PrimitiveType::kS32, {2}, {2147483647, -5}),
                       Make(PrimitiveType::kS32, {2}, {1, 3})}),
            (V{-2147483648.0, -2}));
}

TEST(InterpElementwise, IntegerDivisionByZeroFollowsXla) {
  const std::vector<Tensor> args = {Make(PrimitiveType::kS32, {3}, {7, -7, -2147483648.0}),
                                    Make(PrimitiveType::kS32, {3}, {0, 0, -1})};
  EXPECT_EQ(RunValues(Module("  a = s32[3] parameter(0)\n  b = s32[3] parameter(1)\n"
                             "  ROOT r = s32[3] divide(a, b)\n"),
                      args),
            (V{-1, -1, -2147483648.0}));
  EXPECT_EQ(RunValues(Module("  a = s32[3] parameter(0)\n  b = s32[3] parameter(1)\n"
                             "  ROOT r = s32[3] remainder(a, b)\n"),
                      args),
            (V{7, -7, 0}));
  EXPECT_EQ(RunValues(Module("  a = u32[1] parameter(0)\n  b = u32[1] parameter(1)\n"
                             "  ROOT r = u32[1] divide(a, b)\n"),
                      {Make(PrimitiveType::kU32, {1}, {7}), Make(PrimitiveType::kU32, {1}, {0})}),
            (V{4294967295.0}));
}

TEST(InterpElementwise, ShiftsPastTheWidth) {
  const std::vector<Tensor> args = {Make(PrimitiveType::kS32, {2}, {1, -8}),
                                    Make(PrimitiveType::kS32, {2}, {32, 40})};
  const std::string head = "  a = s32[2] parameter(0)\n  b = s32[2] parameter(1)\n";
  EXPECT_EQ(RunValues(Module(head + "  ROOT r = s32[2] shift-left(a, b)\n"), args), (V{0, 0}));
  EXPECT_EQ(RunValues(Module(head + "  ROOT r = s32[2] shift-right-arithmetic(a, b)\n"), args),
            (V{0, -1}));
  EXPECT_EQ(RunValues(Module(head + "  ROOT r = s32[2] shift-right-logical(a, b)\n"),
                      {Make(PrimitiveType::kS32, {2}, {-8, -8}),
                       Make(PrimitiveType::kS32, {2}, {28, 0})}),
            (V{15, -8}));
}

TEST(InterpElementwise, Bf16ArithmeticRoundsToEven) {
  // 1 + 2^-8 is a tie between bf16 1.0 and 1 + 2^-7: it rounds to 1.0.
  Expected<Tensor> sum =
      RunHlo(Module(R"(  a = bf16[2] parameter(0)
  b = bf16[2] parameter(1)
  ROOT r = bf16[2] add(a, b)
)"),
             {Make(PrimitiveType::kBF16, {2}, {1, 1 + std::ldexp(1.0, -7)}),
              Make(PrimitiveType::kBF16, {2}, {std::ldexp(1.0, -8), std::ldexp(1.0, -8)})});
  ASSERT_TRUE(sum.ok()) << sum.error().ToString();
  EXPECT_EQ(sum->GetBits(0), 0x3F80u);
  EXPECT_EQ(sum->GetBits(1), 0x3F82u);  // (1 + 3*2^-8) ties up to the even 1 + 2^-6
}

TEST(InterpElementwise, ConvertRoundsAndSaturates) {
  Expected<Tensor> bf16 = RunHlo(
      Module("  a = f32[2] parameter(0)\n  ROOT r = bf16[2] convert(a)\n"),
      {Make(PrimitiveType::kF32, {2}, {1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8)})});
  ASSERT_TRUE(bf16.ok()) << bf16.error().ToString();
  EXPECT_EQ(bf16->GetBits(0), 0x3F80u);
  EXPECT_EQ(bf16->GetBits(1), 0x3F82u);
  EXPECT_EQ(RunValues(Module("  a = f32[4] parameter(0)\n  ROOT r = s32[4] convert(a)\n"),
                      {Make(PrimitiveType::kF32, {4}, {-2.9, 1e10, NAN, -1e10})}),
            (V{-2, 2147483647, 0, -2147483648.0}));
  Expected<Tensor> f8 =
      RunHlo(Module("  a = f32[2] parameter(0)\n  ROOT r = f8e4m3fn[2] convert(a)\n"),
             {Make(PrimitiveType::kF32, {2}, {448, 500})});
  ASSERT_TRUE(f8.ok());
  EXPECT_EQ(f8->GetDouble(0), 448);
  EXPECT_TRUE(std::isnan(f8->GetDouble(1)));
  EXPECT_EQ(RunValues(Module("  a = s32[2] parameter(0)\n  ROOT r = u8[2] convert(a)\n"),
                      {Make(PrimitiveType::kS32, {2}, {300, -1})}),
            (V{44, 255}));
}

// Every direction on floats with a NaN, and on signed and unsigned integers.
TEST(InterpCompare, EveryDirection) {
  struct Case {
    const char* direction;
    V floats;    // {1,2,3,nan} vs {2,2,2,1}
    V integers;  // s32 {-1,1} vs {1,1}; u32 {4294967295,1} vs {1,1}
    V unsigned_integers;
  };
  const Case cases[] = {
      {"EQ", {0, 1, 0, 0}, {0, 1}, {0, 1}}, {"NE", {1, 0, 1, 1}, {1, 0}, {1, 0}},
      {"LT", {1, 0, 0, 0}, {1, 0}, {0, 0}}, {"LE", {1, 1, 0, 0}, {1, 1}, {0, 1}},
      {"GT", {0, 0, 1, 0}, {0, 0}, {1, 0}}, {"GE", {0, 1, 1, 0}, {0, 1}, {1, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.direction);
    EXPECT_EQ(RunValues(Module(fmt::format("  a = f32[4] parameter(0)\n  b = f32[4] parameter(1)\n"
                                           "  ROOT r = pred[4] compare(a, b), direction={}\n",
                                           c.direction)),
                        {Make(PrimitiveType::kF32, {4}, {1, 2, 3, NAN}),
                         Make(PrimitiveType::kF32, {4}, {2, 2, 2, 1})}),
              c.floats);
    EXPECT_EQ(RunValues(Module(fmt::format("  a = s32[2] parameter(0)\n  b = s32[2] parameter(1)\n"
                                           "  ROOT r = pred[2] compare(a, b), direction={}\n",
                                           c.direction)),
                        {Make(PrimitiveType::kS32, {2}, {-1, 1}),
                         Make(PrimitiveType::kS32, {2}, {1, 1})}),
              c.integers);
    EXPECT_EQ(RunValues(Module(fmt::format("  a = u32[2] parameter(0)\n  b = u32[2] parameter(1)\n"
                                           "  ROOT r = pred[2] compare(a, b), direction={}\n",
                                           c.direction)),
                        {Make(PrimitiveType::kU32, {2}, {4294967295.0, 1}),
                         Make(PrimitiveType::kU32, {2}, {1, 1})}),
              c.unsigned_integers);
  }
}

// TOTALORDER: -0 < +0, and a positive NaN is above everything.
TEST(InterpCompare, TotalOrder) {
  EXPECT_EQ(RunValues(Module(R"(  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  ROOT r = pred[3] compare(a, b), direction=LT, type=TOTALORDER
)"),
                      {Make(PrimitiveType::kF32, {3}, {-0.0, NAN, 1}),
                       Make(PrimitiveType::kF32, {3}, {0, 1, NAN})}),
            (V{1, 0, 1}));
}

TEST(InterpElementwise, SelectAndClamp) {
  EXPECT_EQ(RunValues(Module(R"(  p = pred[3] parameter(0)
  a = f32[3] parameter(1)
  b = f32[3] parameter(2)
  ROOT r = f32[3] select(p, a, b)
)"),
                      {Make(PrimitiveType::kPred, {3}, {1, 0, 1}),
                       Make(PrimitiveType::kF32, {3}, {1, 2, 3}),
                       Make(PrimitiveType::kF32, {3}, {-1, -2, -3})}),
            (V{1, -2, 3}));
  EXPECT_EQ(RunValues(Module(R"(  lo = f32[] constant(0)
  hi = f32[] constant(1)
  x = f32[4] parameter(0)
  ROOT r = f32[4] clamp(lo, x, hi)
)"),
                      {Make(PrimitiveType::kF32, {4}, {-5, 0.5, 7, 1})}),
            (V{0, 0.5, 1, 1}));
}

TEST(InterpShapes, BroadcastTransposeReshapeReverse) {
  EXPECT_EQ(
      RunValues(
          Module("  a = f32[2] parameter(0)\n  ROOT r = f32[2,3] broadcast(a), dimensions={0}\n"),
          {Make(PrimitiveType::kF32, {2}, {1, 2})}),
      (V{1, 1, 1, 2, 2, 2}));
  // A size-1 dimension broadcast along a new one.
  EXPECT_EQ(
      RunValues(
          Module("  a = f32[1] parameter(0)\n  ROOT r = f32[3,1] broadcast(a), dimensions={1}\n"),
          {Make(PrimitiveType::kF32, {1}, {9})}),
      (V{9, 9, 9}));
  EXPECT_EQ(
      RunValues(
          Module(
              "  a = f32[2,3] parameter(0)\n  ROOT r = f32[3,2] transpose(a), dimensions={1,0}\n"),
          {Make(PrimitiveType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6})}),
      (V{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(RunValues(Module("  a = f32[2,3] parameter(0)\n  ROOT r = f32[3,2] reshape(a)\n"),
                      {Make(PrimitiveType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6})}),
            (V{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(
      RunValues(
          Module("  a = f32[2,3] parameter(0)\n  ROOT r = f32[2,3] reverse(a), dimensions={1}\n"),
          {Make(PrimitiveType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6})}),
      (V{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(RunValues(Module("  ROOT r = s32[2,3] iota(), iota_dimension=1\n"), {}),
            (V{0, 1, 2, 0, 1, 2}));
}

TEST(InterpShapes, SliceConcatenatePad) {
  EXPECT_EQ(
      RunValues(Module("  a = f32[6] parameter(0)\n  ROOT r = f32[2] slice(a), slice={[1:6:3]}\n"),
                {Make(PrimitiveType::kF32, {6}, {0, 1, 2, 3, 4, 5})}),
      (V{1, 4}));
  EXPECT_EQ(RunValues(Module(R"(  a = f32[0] parameter(0)
  b = f32[2] parameter(1)
  c = f32[1] parameter(2)
  ROOT r = f32[3] concatenate(a, b, c), dimensions={0}
)"),
                      {Make(PrimitiveType::kF32, {0}, {}), Make(PrimitiveType::kF32, {2}, {1, 2}),
                       Make(PrimitiveType::kF32, {1}, {3})}),
            (V{1, 2, 3}));
  // low -1 cuts the first element; interior 1 puts a zero between the rest.
  EXPECT_EQ(RunValues(Module(R"(  a = f32[3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[5] pad(a, z), padding=-1_1_1
)"),
                      {Make(PrimitiveType::kF32, {3}, {1, 2, 3})}),
            (V{0, 2, 0, 3, 0}));
  EXPECT_EQ(RunValues(Module(R"(  a = f32[2,2] parameter(0)
  z = f32[] constant(-1)
  ROOT r = f32[3,3] pad(a, z), padding=1_0x0_1
)"),
                      {Make(PrimitiveType::kF32, {2, 2}, {1, 2, 3, 4})}),
            (V{-1, -1, -1, 1, 2, -1, 3, 4, -1}));
}

TEST(InterpShapes, SizeZeroDimensions) {
  Expected<Tensor> empty =
      RunHlo(Module("  a = f32[0,3] parameter(0)\n  ROOT r = f32[0,3] negate(a)\n"),
             {Make(PrimitiveType::kF32, {0, 3}, {})});
  ASSERT_TRUE(empty.ok()) << empty.error().ToString();
  EXPECT_EQ(empty->ElementCount(), 0);
}

// XLA clamps start indices into [0, dim - size].
TEST(InterpDynamicSlice, StartIndicesAreClamped) {
  const std::string text = Module(R"(  a = s32[5] iota(), iota_dimension=0
  i = s32[] parameter(0)
  ROOT r = s32[2] dynamic-slice(a, i), dynamic_slice_sizes={2}
)");
  auto slice_at = [&](double start) {
    return RunValues(text, {Make(PrimitiveType::kS32, {}, {start})});
  };
  EXPECT_EQ(slice_at(1), (V{1, 2}));
  EXPECT_EQ(slice_at(-3), (V{0, 1}));
  EXPECT_EQ(slice_at(4), (V{3, 4}));
  EXPECT_EQ(slice_at(100), (V{3, 4}));
  EXPECT_EQ(slice_at(-2147483648.0), (V{0, 1}));
}

TEST(InterpDynamicSlice, UpdateIndicesAreClamped) {
  const std::string text = Module(R"(  a = f32[4] parameter(0)
  u = f32[2] parameter(1)
  i = s32[] parameter(2)
  ROOT r = f32[4] dynamic-update-slice(a, u, i)
)");
  auto update_at = [&](double start) {
    return RunValues(
        text, {Make(PrimitiveType::kF32, {4}, {0, 0, 0, 0}), Make(PrimitiveType::kF32, {2}, {7, 8}),
               Make(PrimitiveType::kS32, {}, {start})});
  };
  EXPECT_EQ(update_at(1), (V{0, 7, 8, 0}));
  EXPECT_EQ(update_at(3), (V{0, 0, 7, 8}));
  EXPECT_EQ(update_at(-1), (V{7, 8, 0, 0}));
  // A 2-d update with one index out of range on each side.
  EXPECT_EQ(
      RunValues(Module(R"(  a = f32[3,3] parameter(0)
  u = f32[2,1] parameter(1)
  i = s32[] constant(-7)
  j = s32[] constant(9)
  ROOT r = f32[3,3] dynamic-update-slice(a, u, i, j)
)"),
                {Make(PrimitiveType::kF32, {3, 3}, {}), Make(PrimitiveType::kF32, {2, 1}, {5, 6})}),
      (V{0, 0, 5, 0, 0, 6, 0, 0, 0}));
}

const char kAdd[] = R"(add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

)";

TEST(InterpReduce, SumMaxAndACalledReducer) {
  const Tensor input = Make(PrimitiveType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(RunValues(std::string("HloModule m\n\n") + kAdd + R"(ENTRY main {
  a = f32[2,3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2] reduce(a, z), dimensions={1}, to_apply=add
}
)",
                      {input}),
            (V{6, 15}));
  EXPECT_EQ(RunValues(std::string("HloModule m\n\n") + kAdd + R"(ENTRY main {
  a = f32[2,3] parameter(0)
  z = f32[] constant(10)
  ROOT r = f32[] reduce(a, z), dimensions={0,1}, to_apply=add
}
)",
                      {input}),
            (V{31}));
  // Not a plain binary op: the reducer is called for every element.
  EXPECT_EQ(RunValues(R"(HloModule m

sum_squares {
  acc = f32[] parameter(0)
  x = f32[] parameter(1)
  sq = f32[] multiply(x, x)
  ROOT s = f32[] add(acc, sq)
}

ENTRY main {
  a = f32[2,3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce(a, z), dimensions={0}, to_apply=sum_squares
}
)",
                      {input}),
            (V{17, 29, 45}));
  // Reducing a size-0 dimension leaves the init value.
  EXPECT_EQ(RunValues(std::string("HloModule m\n\n") + kAdd + R"(ENTRY main {
  a = f32[0,2] parameter(0)
  z = f32[] constant(3)
  ROOT r = f32[2] reduce(a, z), dimensions={0}, to_apply=add
}
)",
                      {Make(PrimitiveType::kF32, {0, 2}, {})}),
            (V{3, 3}));
}

// A variadic reduce: argmax along dimension 1, the reducer returning a tuple.
TEST(InterpReduce, VariadicArgmax) {
  Expected<Tensor> result = RunHlo(R"(HloModule m

argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(b, a), direction=GT
  v = f32[] select(gt, b, a)
  i = s32[] select(gt, bi, ai)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  x = f32[2,3] parameter(0)
  idx = s32[2,3] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, idx, ninf, zero), dimensions={1}, to_apply=argmax
}
)",
                                   {Make(PrimitiveType::kF32, {2, 3}, {1, 5, 3, 9, 2, 9})});
  ASSERT_TRUE(result.ok()) << result.error().ToString();
  ASSERT_TRUE(result->IsTuple());
  EXPECT_EQ(Values(result->tuple_elements()[0]), (V{5, 9}));
  EXPECT_EQ(Values(result->tuple_elements()[1]), (V{1, 0}));
}

// A deterministic pseudo-random fill (no dependence on <random>'s
// distributions, which differ between standard libraries).
std::vector<double> Fill(int64_t count, uint64_t seed) {
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    values.push_back(static_cast<double>(static_cast<int64_t>(seed >> 40) % 2001 - 1000) / 337.0);
  }
  return values;
}

// lhs [4,B,3] (contracting 0, batch 1) x rhs [5,B,4] (contracting 2, batch 1)
// -> [B,3,5], with operands laid out so that both need transposing.
const char kBatchDot[] = R"(HloModule m

ENTRY main {
  a = {T}[4,2,3] parameter(0)
  b = {T}[5,2,4] parameter(1)
  ROOT d = {T}[2,3,5] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={1}, rhs_contracting_dims={2}
}
)";

// The naive reference: k ascending, accumulated in double, rounded once.
Tensor NaiveBatchDot(const Tensor& a, const Tensor& b) {
  Tensor out = *Tensor::Zeros(ir::Shape(a.type(), {2, 3, 5}));
  for (int64_t batch = 0; batch < 2; ++batch) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 5; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < 4; ++k) {
          sum += a.GetDouble((k * 2 + batch) * 3 + i) * b.GetDouble((j * 2 + batch) * 4 + k);
        }
        out.SetDouble((batch * 3 + i) * 5 + j, sum);
      }
    }
  }
  return out;
}

std::string WithType(std::string text, const std::string& type) {
  for (size_t pos; (pos = text.find("{T}")) != std::string::npos;) text.replace(pos, 3, type);
  return text;
}

TEST(InterpDot, BatchDimsMatchANaiveLoop) {
  for (PrimitiveType type : {PrimitiveType::kF32, PrimitiveType::kF64, PrimitiveType::kBF16}) {
    SCOPED_TRACE(std::string(ir::PrimitiveTypeName(type)));
    const Tensor a = Make(type, {4, 2, 3}, Fill(24, 1));
    const Tensor b = Make(type, {5, 2, 4}, Fill(40, 2));
    const Tensor expected = NaiveBatchDot(a, b);
    const std::string text = WithType(kBatchDot, std::string(ir::PrimitiveTypeName(type)));
    // Deterministic mode is the reference loop: bitwise equal.
    Expected<Tensor> exact = RunHlo(text, {a, b}, InterpreterOptions{.deterministic = true});
    ASSERT_TRUE(exact.ok()) << exact.error().ToString();
    EXPECT_TRUE(exact->BitwiseEqual(expected)) << exact->ToString() << "\n" << expected.ToString();
    // BLAS (f32, f64) sums in its own order: equal within rounding.
    Expected<Tensor> fast = RunHlo(text, {a, b});
    ASSERT_TRUE(fast.ok()) << fast.error().ToString();
    for (int64_t i = 0; i < expected.ElementCount(); ++i) {
      EXPECT_NEAR(fast->GetDouble(i), expected.GetDouble(i),
                  1e-5 * (1 + std::fabs(expected.GetDouble(i))));
    }
  }
}

TEST(InterpDot, MatrixProductIntegersAndEmptyContraction) {
  EXPECT_EQ(RunValues(Module(R"(  a = s32[2,2] parameter(0)
  b = s32[2,2] parameter(1)
  ROOT d = s32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
)"),
                      {Make(PrimitiveType::kS32, {2, 2}, {1, 2, 3, 4}),
                       Make(PrimitiveType::kS32, {2, 2}, {5, 6, 7, 8})}),
            (V{19, 22, 43, 50}));
  EXPECT_EQ(
      RunValues(Module(R"(  a = f32[2,0] parameter(0)
  b = f32[0,3] parameter(1)
  ROOT d = f32[2,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
)"),
                {Make(PrimitiveType::kF32, {2, 0}, {}), Make(PrimitiveType::kF32, {0, 3}, {})}),
      (V{0, 0, 0, 0, 0, 0}));
}

TEST(InterpControlFlow, WhileLoopSums) {
  // sum of i for i = 0..9
  EXPECT_EQ(RunValues(R"(HloModule m

cond {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  s = f32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  fi = f32[] convert(i)
  sum = f32[] add(s, fi)
  ROOT t = (s32[], f32[]) tuple(next, sum)
}

ENTRY main {
  zero = s32[] constant(0)
  z = f32[] constant(0)
  init = (s32[], f32[]) tuple(zero, z)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=1
}
)",
                      {}),
            (V{45}));
}

const char kEndlessLoop[] = R"(HloModule m

cond {
  p = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}

body {
  p = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT n = s32[] add(p, one)
}

ENTRY main {
  zero = s32[] constant(0)
  ROOT w = s32[] while(zero), condition=cond, body=body
}
)";

// A loop that never ends is an error after the loop timeout, naming the
// loop, and so is a run past its budget of instructions.
TEST(InterpControlFlow, AnEndlessLoopEndsAtTheTimeoutOrTheStepBudget) {
  DeviceContext timed;
  timed.loop_timeout = std::chrono::milliseconds(50);
  Expected<Tensor> timed_out = RunHlo(kEndlessLoop, {}, {}, timed);
  ASSERT_FALSE(timed_out.ok());
  EXPECT_NE(timed_out.error().message.find("the while loop ran longer than the timeout of 50 ms"),
            std::string::npos)
      << timed_out.error().message;
  EXPECT_EQ(timed_out.error().loc.line, 16);

  DeviceContext budgeted;
  budgeted.max_steps = 1000;
  Expected<Tensor> over = RunHlo(kEndlessLoop, {}, {}, budgeted);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("exceeds its budget of 1000 instructions"), std::string::npos)
      << over.error().message;
}

const char kBranches[] = R"(HloModule m

neg {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}

twice {
  x = f32[] parameter(0)
  ROOT t = f32[] add(x, x)
}

)";

TEST(InterpControlFlow, ConditionalCallAndFusion) {
  const std::string by_pred = std::string(kBranches) + R"(ENTRY main {
  p = pred[] parameter(0)
  x = f32[] constant(3)
  ROOT c = f32[] conditional(p, x, x), true_computation=neg, false_computation=twice
}
)";
  EXPECT_EQ(RunValues(by_pred, {Make(PrimitiveType::kPred, {}, {1})}), (V{-3}));
  EXPECT_EQ(RunValues(by_pred, {Make(PrimitiveType::kPred, {}, {0})}), (V{6}));
  const std::string by_index = std::string(kBranches) + R"(ENTRY main {
  i = s32[] parameter(0)
  x = f32[] constant(3)
  ROOT c = f32[] conditional(i, x, x), branch_computations={neg, twice}
}
)";
  EXPECT_EQ(RunValues(by_index, {Make(PrimitiveType::kS32, {}, {0})}), (V{-3}));
  EXPECT_EQ(RunValues(by_index, {Make(PrimitiveType::kS32, {}, {1})}), (V{6}));
  // Out of range runs the last branch.
  EXPECT_EQ(RunValues(by_index, {Make(PrimitiveType::kS32, {}, {-4})}), (V{6}));
  EXPECT_EQ(RunValues(std::string(kBranches) + R"(ENTRY main {
  x = f32[] constant(4)
  c = f32[] call(x), to_apply=neg
  ROOT f = f32[] fusion(c), kind=kLoop, calls=twice
}
)",
                      {}),
            (V{-8}));
}

TEST(InterpControlFlow, AsyncWrappedComputationAndScalarLiteralForAnArray) {
  EXPECT_EQ(RunValues(std::string(kBranches) + R"(ENTRY main {
  x = f32[] constant(5)
  s = ((f32[]), f32[], u32[]) async-start(x), calls=twice
  ROOT d = f32[] async-done(s)
}
)",
                      {}),
            (V{10}));
  // XLA's parser broadcasts a scalar literal over an array constant.
  EXPECT_EQ(RunValues(Module("  ROOT c = bf16[2,2] constant(0.5)\n"), {}), (V{0.5, 0.5, 0.5, 0.5}));
}

TEST(InterpDevice, PartitionAndReplicaIds) {
  Expected<Tensor> ids = RunHlo(Module(R"(  p = u32[] partition-id()
  r = u32[] replica-id()
  ROOT t = (u32[], u32[]) tuple(p, r)
)"),
                                {}, {}, DeviceContext{.replica_id = 2, .partition_id = 5});
  ASSERT_TRUE(ids.ok()) << ids.error().ToString();
  EXPECT_EQ(ids->tuple_elements()[0].GetInt(0), 5);
  EXPECT_EQ(ids->tuple_elements()[1].GetInt(0), 2);
}

TEST(InterpErrors, UnsupportedOpsAndBadInputs) {
  Expected<Tensor> custom = RunHlo(Module(R"(  a = f32[2] parameter(0)
  ROOT c = f32[2] custom-call(a), custom_call_target="MyKernel"
)"),
                                   {Make(PrimitiveType::kF32, {2}, {1, 2})});
  ASSERT_FALSE(custom.ok());
  EXPECT_NE(custom.error().message.find("unsupported custom-call MyKernel at line 5"),
            std::string::npos)
      << custom.error().message;
  Expected<Tensor> collective = RunHlo(std::string("HloModule m\n\n") + kAdd + R"(ENTRY main {
  a = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(a), replica_groups={}, to_apply=add
}
)",
                                       {Make(PrimitiveType::kF32, {2}, {1, 2})});
  ASSERT_FALSE(collective.ok());
  EXPECT_NE(collective.error().message.find("collective all-reduce needs a communicator"),
            std::string::npos)
      << collective.error().message;
  Expected<Tensor> elided = RunHlo(Module("  ROOT c = f32[8] constant({...})\n"), {});
  ASSERT_FALSE(elided.ok());
  EXPECT_NE(elided.error().message.find("%c"), std::string::npos) << elided.error().message;
  Expected<Tensor> wrong =
      RunHlo(Module("  ROOT a = f32[2] parameter(0)\n"), {Make(PrimitiveType::kS32, {2}, {1, 2})});
  ASSERT_FALSE(wrong.ok());
  EXPECT_FALSE(RunHlo(Module("  ROOT a = f32[2] parameter(0)\n"), {}).ok());
}

}  // namespace
}  // namespace loom::exec
