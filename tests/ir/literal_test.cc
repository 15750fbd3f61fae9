// ir::ReadLiteral: the syntax, the order elements come in, and the range of
// every element type, at its edges.
#include "ir/literal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace loom::ir {
namespace {

Shape Of(PrimitiveType type, std::vector<int64_t> dims = {}) {
  return Shape(type, std::move(dims));
}

// The elements as integers (integer and pred types) or doubles.
std::vector<double> Values(std::string_view text, const Shape& shape) {
  std::vector<double> values(static_cast<size_t>(shape.ElementCount()), -12345);
  const bool integral = IsInteger(shape.type()) || shape.type() == PrimitiveType::kPred;
  auto form = ReadLiteral(text, shape, [&](int64_t index, const LiteralElement& element) {
    values[static_cast<size_t>(index)] =
        integral ? static_cast<double>(element.integer) : element.floating;
  });
  EXPECT_TRUE(form.ok()) << text << ": " << form.error().message;
  return values;
}

bool Accepts(std::string_view text, const Shape& shape) { return ReadLiteral(text, shape).ok(); }

TEST(Literal, NestedBracesInRowMajorOrder) {
  EXPECT_EQ(Values("{ {1, 2, 3}, {4, 5, 6} }", Of(PrimitiveType::kS32, {2, 3})),
            (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Values("{}", Of(PrimitiveType::kF32, {0})), std::vector<double>{});
  EXPECT_FALSE(Accepts("{1, 2}", Of(PrimitiveType::kF32, {3})));
  EXPECT_FALSE(Accepts("{1, 2, 3, 4}", Of(PrimitiveType::kF32, {3})));
  EXPECT_FALSE(Accepts("{{1, 2}, {3}}", Of(PrimitiveType::kF32, {2, 2})));
  EXPECT_FALSE(Accepts("{1, 2} x", Of(PrimitiveType::kF32, {2})));
  EXPECT_FALSE(Accepts("{1 2}", Of(PrimitiveType::kF32, {2})));
}

TEST(Literal, OneScalarForAWholeArray) {
  auto form = ReadLiteral("0.5", Of(PrimitiveType::kBF16, {4, 4}));
  ASSERT_TRUE(form.ok());
  EXPECT_EQ(*form, LiteralForm::kScalarForAll);
  EXPECT_FALSE(Accepts("1", Of(PrimitiveType::kF32, {0})));
  auto elided = ReadLiteral("{...}", Of(PrimitiveType::kF32, {4}));
  ASSERT_TRUE(elided.ok());
  EXPECT_EQ(*elided, LiteralForm::kElided);
}

TEST(Literal, IntegersWithinTheirTypesRange) {
  EXPECT_EQ(Values("127", Of(PrimitiveType::kS8)), std::vector<double>{127});
  EXPECT_EQ(Values("-128", Of(PrimitiveType::kS8)), std::vector<double>{-128});
  EXPECT_FALSE(Accepts("128", Of(PrimitiveType::kS8)));
  EXPECT_FALSE(Accepts("-129", Of(PrimitiveType::kS8)));
  EXPECT_EQ(Values("255", Of(PrimitiveType::kU8)), std::vector<double>{255});
  EXPECT_FALSE(Accepts("256", Of(PrimitiveType::kU8)));
  EXPECT_FALSE(Accepts("-1", Of(PrimitiveType::kU32)));
  EXPECT_TRUE(Accepts("4294967295", Of(PrimitiveType::kU32)));
  EXPECT_FALSE(Accepts("4294967296", Of(PrimitiveType::kU32)));
  EXPECT_TRUE(Accepts("-2147483648", Of(PrimitiveType::kS32)));
  EXPECT_FALSE(Accepts("2147483648", Of(PrimitiveType::kS32)));
  EXPECT_TRUE(Accepts("18446744073709551615", Of(PrimitiveType::kU64)));
  EXPECT_FALSE(Accepts("18446744073709551616", Of(PrimitiveType::kU64)));
  EXPECT_TRUE(Accepts("-9223372036854775808", Of(PrimitiveType::kS64)));
  EXPECT_FALSE(Accepts("9223372036854775808", Of(PrimitiveType::kS64)));
  EXPECT_TRUE(Accepts("+7", Of(PrimitiveType::kS32)));
  for (const char* bad : {"1.5", "1e3", "abc", "+", "-", "true", "0x10"}) {
    EXPECT_FALSE(Accepts(bad, Of(PrimitiveType::kS32))) << bad;
  }
}

TEST(Literal, PredIsTrueFalseZeroOrOne) {
  EXPECT_EQ(Values("{true, false, 1, 0}", Of(PrimitiveType::kPred, {4})),
            (std::vector<double>{1, 0, 1, 0}));
  EXPECT_FALSE(Accepts("2", Of(PrimitiveType::kPred)));
  EXPECT_FALSE(Accepts("-1", Of(PrimitiveType::kPred)));
}

TEST(Literal, FloatsAreDecimalsInfinitiesAndNans) {
  const std::vector<double> values =
      Values("{1e-05, -0.5, .25, inf, -inf, 1e400}", Of(PrimitiveType::kF32, {6}));
  EXPECT_EQ(values[0], 1e-05);
  EXPECT_EQ(values[1], -0.5);
  EXPECT_EQ(values[2], 0.25);
  EXPECT_EQ(values[3], std::numeric_limits<double>::infinity());
  EXPECT_EQ(values[4], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(values[5], std::numeric_limits<double>::infinity());  // out of range: inf
  EXPECT_TRUE(std::isnan(Values("nan", Of(PrimitiveType::kF32))[0]));
  EXPECT_TRUE(std::isnan(Values("-nan(0x7fffff)", Of(PrimitiveType::kF32))[0]));
  for (const char* bad : {"abc", "0x1p3", "infinity", "1.5.2", "", "+", "nan(", "--1"}) {
    EXPECT_FALSE(Accepts(bad, Of(PrimitiveType::kF32))) << "'" << bad << "'";
  }
}

TEST(Literal, ErrorsSayWhatAndWhere) {
  auto result = ReadLiteral("{1, x}", Of(PrimitiveType::kF32, {2}));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().message, "literal of f32[2]: 'x' is not a number at offset 4");
}

}  // namespace
}  // namespace loom::ir
