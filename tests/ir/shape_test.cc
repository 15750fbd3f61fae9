// Shapes, layouts and replica-group expansion against hand-computed values.
#include "ir/shape.h"

#include <gtest/gtest.h>

#include "ir/attributes.h"

namespace loom::ir {
namespace {

TEST(ShapeTest, ByteSizesOfEveryWidth) {
  EXPECT_EQ(Shape(PrimitiveType::kBF16, {512, 1024}).ByteSize(), 512 * 1024 * 2);
  EXPECT_EQ(Shape(PrimitiveType::kF8E4M3FN, {3, 5}).ByteSize(), 15);
  EXPECT_EQ(Shape(PrimitiveType::kS4, {3}).ByteSize(), 2);  // 12 bits round up
  EXPECT_EQ(Shape(PrimitiveType::kPred, {}).ByteSize(), 1);
  EXPECT_EQ(Shape(PrimitiveType::kF32, {0, 7}).ByteSize(), 0);
  EXPECT_EQ(
      Shape::Tuple({Shape(PrimitiveType::kF64, {2}), Shape(PrimitiveType::kU8, {3})}).ByteSize(),
      19);
  EXPECT_EQ(Shape::Token().ByteSize(), 0);
}

TEST(ShapeTest, PrintsLikeXla) {
  Shape shape(PrimitiveType::kF32, {8, 16});
  shape.set_layout(Layout{{1, 0}, {{"T", "(8,128)"}}});
  EXPECT_EQ(shape.ToString(), "f32[8,16]{1,0:T(8,128)}");
  EXPECT_EQ(shape.ToString(false), "f32[8,16]");
  EXPECT_EQ(Shape::Tuple({}).ToString(), "()");
  EXPECT_EQ(Shape::Token().ToString(), "token[]");
}

TEST(ShapeTest, CompatibleIgnoresLayouts) {
  Shape a(PrimitiveType::kF32, {2, 3});
  Shape b = a;
  b.set_layout(Layout{{0, 1}, {}});
  EXPECT_TRUE(a.Compatible(b));
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a.Compatible(Shape(PrimitiveType::kF32, {3, 2})));
  EXPECT_FALSE(a.Compatible(Shape(PrimitiveType::kBF16, {2, 3})));
}

TEST(ShapeTest, ParsesEveryTypeName) {
  for (std::string_view name : {"pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16",
                                "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2", "token"}) {
    std::optional<PrimitiveType> type = ParsePrimitiveType(name);
    ASSERT_TRUE(type.has_value()) << name;
    EXPECT_EQ(PrimitiveTypeName(*type), name);
  }
  EXPECT_FALSE(ParsePrimitiveType("f33").has_value());
  EXPECT_FALSE(ParsePrimitiveType("tuple").has_value());
}

TEST(ReplicaGroupsTest, IotaExpansion) {
  // [2,4]<=[8]: two groups of four consecutive ids.
  EXPECT_EQ(ReplicaGroups::Iota({2, 4, {}, {}}).Groups(8),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // [3,10]<=[6,5]T(1,0): the transpose of a 6x5 iota, row-major, in threes of ten.
  auto groups = ReplicaGroups::Iota({3, 10, {6, 5}, {1, 0}}).Groups(30);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0], (std::vector<int64_t>{0, 5, 10, 15, 20, 25, 1, 6, 11, 16}));
  EXPECT_EQ(groups[1], (std::vector<int64_t>{21, 26, 2, 7, 12, 17, 22, 27, 3, 8}));
  EXPECT_EQ(groups[2], (std::vector<int64_t>{13, 18, 23, 28, 4, 9, 14, 19, 24, 29}));
  // 3-D mesh: [2,2,2] transposed (2,0,1), groups of two.
  auto mesh = ReplicaGroups::Iota({4, 2, {2, 2, 2}, {2, 0, 1}}).Groups(8);
  EXPECT_EQ(mesh, (std::vector<std::vector<int64_t>>{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
}

TEST(ReplicaGroupsTest, EmptyMeansAllDevices) {
  EXPECT_EQ(ReplicaGroups().Groups(3), (std::vector<std::vector<int64_t>>{{0, 1, 2}}));
  EXPECT_EQ(ReplicaGroups().ToString(), "{}");
}

TEST(ReplicaGroupsTest, ValidatesIota) {
  EXPECT_EQ(ReplicaGroups::Iota({2, 4, {2, 4}, {1, 0}}).ValidateIota(), "");
  EXPECT_NE(ReplicaGroups::Iota({2, 4, {3, 3}, {}}).ValidateIota(), "");
  EXPECT_NE(ReplicaGroups::Iota({2, 4, {2, 4}, {0, 0}}).ValidateIota(), "");
  EXPECT_NE(ReplicaGroups::Iota({0, 4, {}, {}}).ValidateIota(), "");
}

}  // namespace
}  // namespace loom::ir
