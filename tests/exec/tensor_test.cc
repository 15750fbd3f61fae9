// Tensor storage and the rounding of every executable element type, against
// hand-computed bit patterns; and constant literals.
#include "exec/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "exec/literal.h"

namespace loom::exec {
namespace {

using ir::PrimitiveType;

TEST(TensorRounding, Bf16TiesToEven) {
  EXPECT_EQ(EncodeFloat(1.0, PrimitiveType::kBF16), 0x3F80u);
  // 1 + 2^-8 lies halfway between 1 (mantissa 0, even) and 1 + 2^-7.
  EXPECT_EQ(EncodeFloat(1.0 + std::ldexp(1.0, -8), PrimitiveType::kBF16), 0x3F80u);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(EncodeFloat(1.0 + 3 * std::ldexp(1.0, -8), PrimitiveType::kBF16), 0x3F82u);
  // Just above the tie rounds up.
  EXPECT_EQ(EncodeFloat(static_cast<float>(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)),
                        PrimitiveType::kBF16),
            0x3F81u);
  EXPECT_EQ(EncodeFloat(-2.0, PrimitiveType::kBF16), 0xC000u);
  // f32's largest finite value rounds up past bf16's largest: inf.
  EXPECT_EQ(EncodeFloat(std::numeric_limits<float>::max(), PrimitiveType::kBF16), 0x7F80u);
  EXPECT_TRUE(
      std::isnan(DecodeFloat(EncodeFloat(NAN, PrimitiveType::kBF16), PrimitiveType::kBF16)));
}

TEST(TensorRounding, F16OverflowAndSubnormals) {
  EXPECT_EQ(EncodeFloat(65504.0, PrimitiveType::kF16), 0x7BFFu);
  EXPECT_EQ(EncodeFloat(65519.0, PrimitiveType::kF16), 0x7BFFu);
  EXPECT_EQ(EncodeFloat(65520.0, PrimitiveType::kF16), 0x7C00u);  // tie, to even: inf
  EXPECT_EQ(EncodeFloat(-1e6, PrimitiveType::kF16), 0xFC00u);
  EXPECT_EQ(EncodeFloat(std::ldexp(1.0, -24), PrimitiveType::kF16), 0x0001u);
  EXPECT_EQ(EncodeFloat(std::ldexp(1.0, -25), PrimitiveType::kF16), 0x0000u);      // tie to 0
  EXPECT_EQ(EncodeFloat(3 * std::ldexp(1.0, -25), PrimitiveType::kF16), 0x0002u);  // tie to 2
  EXPECT_EQ(EncodeFloat(-0.0, PrimitiveType::kF16), 0x8000u);
  EXPECT_EQ(DecodeFloat(0x3C00, PrimitiveType::kF16), 1.0);
}

TEST(TensorRounding, F8E4M3FnOverflowIsNaN) {
  EXPECT_EQ(EncodeFloat(1.0, PrimitiveType::kF8E4M3FN), 0x38u);
  EXPECT_EQ(EncodeFloat(448.0, PrimitiveType::kF8E4M3FN), 0x7Eu);
  EXPECT_EQ(EncodeFloat(464.0, PrimitiveType::kF8E4M3FN), 0x7Eu);  // tie to 448 (even)
  EXPECT_EQ(EncodeFloat(465.0, PrimitiveType::kF8E4M3FN), 0x7Fu);  // NaN
  EXPECT_EQ(EncodeFloat(500.0, PrimitiveType::kF8E4M3FN), 0x7Fu);
  EXPECT_EQ(EncodeFloat(-500.0, PrimitiveType::kF8E4M3FN), 0xFFu);
  EXPECT_EQ(EncodeFloat(INFINITY, PrimitiveType::kF8E4M3FN), 0x7Fu);
  EXPECT_EQ(EncodeFloat(std::ldexp(1.0, -9), PrimitiveType::kF8E4M3FN), 0x01u);
  EXPECT_EQ(EncodeFloat(std::ldexp(1.0, -10), PrimitiveType::kF8E4M3FN), 0x00u);
  EXPECT_EQ(EncodeFloat(3 * std::ldexp(1.0, -10), PrimitiveType::kF8E4M3FN), 0x02u);
  EXPECT_EQ(DecodeFloat(0x7E, PrimitiveType::kF8E4M3FN), 448.0);
  EXPECT_TRUE(std::isnan(DecodeFloat(0x7F, PrimitiveType::kF8E4M3FN)));
  EXPECT_EQ(DecodeFloat(0x78, PrimitiveType::kF8E4M3FN), 256.0);  // exponent 15 is finite
}

TEST(TensorRounding, F8E5M2IsIeeeLike) {
  EXPECT_EQ(EncodeFloat(1.0, PrimitiveType::kF8E5M2), 0x3Cu);
  EXPECT_EQ(EncodeFloat(1.125, PrimitiveType::kF8E5M2), 0x3Cu);  // tie to 1.0
  EXPECT_EQ(EncodeFloat(1.375, PrimitiveType::kF8E5M2), 0x3Eu);  // tie to 1.5
  EXPECT_EQ(EncodeFloat(57344.0, PrimitiveType::kF8E5M2), 0x7Bu);
  EXPECT_EQ(EncodeFloat(61439.0, PrimitiveType::kF8E5M2), 0x7Bu);
  EXPECT_EQ(EncodeFloat(61440.0, PrimitiveType::kF8E5M2), 0x7Cu);  // tie, to even: inf
  EXPECT_EQ(DecodeFloat(0x7C, PrimitiveType::kF8E5M2), INFINITY);
  EXPECT_TRUE(std::isnan(DecodeFloat(0x7E, PrimitiveType::kF8E5M2)));
}

// Every non-NaN pattern of the small formats survives decode then encode.
TEST(TensorRounding, SmallFormatsRoundTripEveryPattern) {
  for (PrimitiveType type : {PrimitiveType::kF8E4M3FN, PrimitiveType::kF8E5M2, PrimitiveType::kF16,
                             PrimitiveType::kBF16}) {
    const int bits = ir::PrimitiveTypeBits(type);
    for (uint64_t pattern = 0; pattern < (uint64_t{1} << bits); ++pattern) {
      const double value = DecodeFloat(pattern, type);
      if (std::isnan(value)) continue;
      ASSERT_EQ(EncodeFloat(value, type), pattern) << ir::PrimitiveTypeName(type) << " " << value;
    }
  }
}

Tensor Scalar(PrimitiveType type) { return *Tensor::Zeros(ir::Shape(type, {})); }

TEST(TensorElements, IntegersWrapAndFloatsSaturate) {
  Tensor s8 = Scalar(PrimitiveType::kS8);
  s8.SetInt(0, 200);
  EXPECT_EQ(s8.GetInt(0), -56);
  Tensor u8 = Scalar(PrimitiveType::kU8);
  u8.SetInt(0, -1);
  EXPECT_EQ(u8.GetInt(0), 255);
  Tensor s32 = Scalar(PrimitiveType::kS32);
  s32.SetDouble(0, 3e9);
  EXPECT_EQ(s32.GetInt(0), 2147483647);
  s32.SetDouble(0, -3e9);
  EXPECT_EQ(s32.GetInt(0), -2147483648LL);
  s32.SetDouble(0, NAN);
  EXPECT_EQ(s32.GetInt(0), 0);
  s32.SetDouble(0, -2.7);
  EXPECT_EQ(s32.GetInt(0), -2);
  Tensor u32 = Scalar(PrimitiveType::kU32);
  u32.SetDouble(0, -5.0);
  EXPECT_EQ(u32.GetInt(0), 0);
  Tensor u64 = Scalar(PrimitiveType::kU64);
  u64.SetInt(0, -1);
  EXPECT_EQ(u64.GetDouble(0), 18446744073709551615.0);
  Tensor pred = Scalar(PrimitiveType::kPred);
  pred.SetDouble(0, 0.5);
  EXPECT_EQ(pred.GetInt(0), 1);
  Tensor f32 = Scalar(PrimitiveType::kF32);
  f32.SetDouble(0, 0.1);
  EXPECT_EQ(f32.GetDouble(0), static_cast<double>(0.1f));
}

TEST(TensorElements, ShapesAndTuples) {
  Expected<Tensor> empty = Tensor::Zeros(ir::Shape(PrimitiveType::kF32, {0, 3}));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->ElementCount(), 0);
  EXPECT_TRUE(empty->bytes().empty());
  Expected<Tensor> bf16 = Tensor::Zeros(ir::Shape(PrimitiveType::kBF16, {2, 3}));
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->bytes().size(), 12u);
  EXPECT_FALSE(Tensor::Zeros(ir::Shape(PrimitiveType::kC64, {2})).ok());
  Tensor tuple = Tensor::Tuple({*empty, *bf16});
  EXPECT_TRUE(tuple.IsTuple());
  EXPECT_EQ(tuple.shape().ToString(false), "(f32[0,3], bf16[2,3])");
  EXPECT_TRUE(tuple.BitwiseEqual(Tensor::Tuple({*empty, *bf16})));
}

TEST(TensorLiteral, ScalarsAndNestedBraces) {
  Expected<Tensor> matrix =
      ParseLiteral("{ { 1, 2 }, { 3, -4 } }", ir::Shape(PrimitiveType::kS32, {2, 2}));
  ASSERT_TRUE(matrix.ok()) << matrix.error().ToString();
  EXPECT_EQ(matrix->GetInt(0), 1);
  EXPECT_EQ(matrix->GetInt(3), -4);
  Expected<Tensor> minus_inf = ParseLiteral("-inf", ir::Shape(PrimitiveType::kF32, {}));
  ASSERT_TRUE(minus_inf.ok());
  EXPECT_EQ(minus_inf->GetDouble(0), -INFINITY);
  Expected<Tensor> nan = ParseLiteral("nan", ir::Shape(PrimitiveType::kBF16, {}));
  ASSERT_TRUE(nan.ok());
  EXPECT_TRUE(std::isnan(nan->GetDouble(0)));
  Expected<Tensor> flag = ParseLiteral("true", ir::Shape(PrimitiveType::kPred, {}));
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->GetInt(0), 1);
  Expected<Tensor> half = ParseLiteral("{0.5, 1e-05, -0}", ir::Shape(PrimitiveType::kF32, {3}));
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->GetDouble(0), 0.5);
  EXPECT_EQ(half->GetDouble(1), static_cast<double>(1e-05f));
  EXPECT_TRUE(std::signbit(half->GetDouble(2)));
  Expected<Tensor> big = ParseLiteral("18446744073709551615", ir::Shape(PrimitiveType::kU64, {}));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->GetBits(0), ~uint64_t{0});
  EXPECT_TRUE(ParseLiteral("{}", ir::Shape(PrimitiveType::kF32, {0})).ok());
}

TEST(TensorLiteral, Errors) {
  EXPECT_FALSE(ParseLiteral("{...}", ir::Shape(PrimitiveType::kF32, {8})).ok());
  EXPECT_FALSE(ParseLiteral("{1, 2}", ir::Shape(PrimitiveType::kS32, {3})).ok());
  EXPECT_FALSE(ParseLiteral("{1, 2, 3, 4}", ir::Shape(PrimitiveType::kS32, {3})).ok());
  EXPECT_FALSE(ParseLiteral("{1, 2}", ir::Shape(PrimitiveType::kS32, {})).ok());
  EXPECT_FALSE(ParseLiteral("1.5x", ir::Shape(PrimitiveType::kF32, {})).ok());
  EXPECT_FALSE(ParseLiteral("1.5", ir::Shape(PrimitiveType::kS32, {})).ok());
}

}  // namespace
}  // namespace loom::exec
