// Comparing results: ulps across zero and for narrow types, the normwise
// error in units of u, the rounding envelope, and what is never rounding
// (NaN against a number, integers that differ, shapes that differ, a wrong
// block).
#include "exec/tensor_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace loom::exec {
namespace {

using ir::PrimitiveType;

Tensor Make(PrimitiveType type, const std::vector<double>& values) {
  Tensor tensor = *Tensor::Zeros(ir::Shape(type, {static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) tensor.SetDouble(static_cast<int64_t>(i), values[i]);
  return tensor;
}

TEST(CompareTensors, EqualBitsAreBitwiseWithNoError) {
  const Tensor a = Make(PrimitiveType::kF32, {1, -2, 3.5});
  const TensorDifference d = CompareTensors(a, a);
  EXPECT_TRUE(d.bitwise);
  EXPECT_EQ(d.elements, 3);
  EXPECT_EQ(d.elements_differing, 0);
  EXPECT_EQ(d.max_ulps, 0);
  EXPECT_EQ(d.error_in_u, 0);
  EXPECT_EQ(d.max_magnitude, 3.5);
}

TEST(CompareTensors, OneUlpIsOneUlpAndHalfAUnitRoundoffOfTheLargest) {
  const float one_up = std::nextafter(1.0f, 2.0f);
  const TensorDifference d =
      CompareTensors(Make(PrimitiveType::kF32, {one_up, 0.5}), Make(PrimitiveType::kF32, {1, 0.5}));
  EXPECT_FALSE(d.bitwise);
  EXPECT_EQ(d.elements_differing, 1);
  EXPECT_EQ(d.max_ulps, 1);
  // |a-b| = 2^-23 = 2u (u = 2^-24), max|b| = 1.
  EXPECT_DOUBLE_EQ(d.error_in_u, 2);
  EXPECT_TRUE(IsRoundingDifference(d, PrimitiveType::kF32, 16));
}

TEST(CompareTensors, UlpsCountAcrossZeroAndInNarrowTypes) {
  const double tiny = std::numeric_limits<float>::denorm_min();
  const TensorDifference across =
      CompareTensors(Make(PrimitiveType::kF32, {tiny}), Make(PrimitiveType::kF32, {-tiny}));
  EXPECT_EQ(across.max_ulps, 2);
  EXPECT_EQ(
      CompareTensors(Make(PrimitiveType::kF32, {0.0}), Make(PrimitiveType::kF32, {-0.0})).max_ulps,
      0);
  // bf16 has 8 significant bits: 1 + 2^-7 is the next value after 1.
  const TensorDifference bf16 =
      CompareTensors(Make(PrimitiveType::kBF16, {1 + 1.0 / 128}), Make(PrimitiveType::kBF16, {1}));
  EXPECT_EQ(bf16.max_ulps, 1);
  EXPECT_DOUBLE_EQ(bf16.error_in_u, 2);  // 2^-7 / 2^-8
}

TEST(CompareTensors, CancellationIsLargeRelativelyButSmallNormwise) {
  // An element that cancelled to near zero differs by 100% of itself, by
  // far less than one unit of the output's scale.
  const TensorDifference d = CompareTensors(Make(PrimitiveType::kF32, {1000, 2e-5}),
                                            Make(PrimitiveType::kF32, {1000, 1e-5}));
  EXPECT_GT(d.max_rel, 0.4);
  EXPECT_LT(d.error_in_u, 1.0);
  EXPECT_TRUE(IsRoundingDifference(d, PrimitiveType::kF32, 1));
}

TEST(CompareTensors, WrongValuesNaNsIntegersAndShapesAreNeverRounding) {
  const TensorDifference wrong =
      CompareTensors(Make(PrimitiveType::kF32, {1, 2, 3}), Make(PrimitiveType::kF32, {1, 2, 4}));
  EXPECT_GT(wrong.error_in_u, 1e6);
  EXPECT_FALSE(IsRoundingDifference(wrong, PrimitiveType::kF32, 1 << 20));

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const TensorDifference nans =
      CompareTensors(Make(PrimitiveType::kF32, {nan}), Make(PrimitiveType::kF32, {1}));
  EXPECT_TRUE(std::isinf(nans.max_ulps));
  EXPECT_FALSE(IsRoundingDifference(nans, PrimitiveType::kF32, 1 << 20));
  EXPECT_EQ(
      CompareTensors(Make(PrimitiveType::kF32, {nan}), Make(PrimitiveType::kF32, {nan})).error_in_u,
      0);

  const TensorDifference ints =
      CompareTensors(Make(PrimitiveType::kS32, {5, 7}), Make(PrimitiveType::kS32, {5, 8}));
  EXPECT_EQ(ints.max_ulps, 1);
  EXPECT_FALSE(IsRoundingDifference(ints, PrimitiveType::kS32, 1 << 20));

  const TensorDifference shapes =
      CompareTensors(Make(PrimitiveType::kF32, {1, 2}), Make(PrimitiveType::kF32, {1, 2, 3}));
  EXPECT_FALSE(shapes.shapes_match);
  EXPECT_FALSE(IsRoundingDifference(shapes, PrimitiveType::kF32, 1));
}

TEST(RoundingEnvelope, GrowsWithTheSquareRootOfTheSumAboveEightUnits) {
  EXPECT_EQ(UnitRoundoff(PrimitiveType::kF32), std::ldexp(1.0, -24));
  EXPECT_EQ(UnitRoundoff(PrimitiveType::kBF16), std::ldexp(1.0, -8));
  EXPECT_EQ(UnitRoundoff(PrimitiveType::kS32), 0);
  EXPECT_DOUBLE_EQ(RoundingEnvelope(PrimitiveType::kF32, 1), 8);
  EXPECT_DOUBLE_EQ(RoundingEnvelope(PrimitiveType::kF32, 1024), 64);
  EXPECT_DOUBLE_EQ(RoundingEnvelope(PrimitiveType::kF64, 4096), 128);
  // bf16 outputs of f32 sums: the output's own rounding dominates.
  EXPECT_DOUBLE_EQ(RoundingEnvelope(PrimitiveType::kBF16, 1 << 20), 8);
  EXPECT_EQ(RoundingEnvelope(PrimitiveType::kS32, 100), 0);
}

}  // namespace
}  // namespace loom::exec
