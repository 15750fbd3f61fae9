// The convolution's attributes as XLA prints them, and the window's
// arithmetic: the counted (position, tap) pairs against a walk over every
// one of them.
#include "ir/convolution.h"

#include <gtest/gtest.h>

#include <random>

namespace loom::ir {
namespace {

TEST(Convolution, ReadsEveryWindowField) {
  const Expected<std::vector<WindowDimension>> window = ParseWindow(
      "{size=3x2 stride=2x1 pad=-1_2x0_0 lhs_dilate=1x4 rhs_dilate=3x1 rhs_reversal=0x1}");
  ASSERT_TRUE(window.ok()) << window.error().message;
  ASSERT_EQ(window->size(), 2u);
  EXPECT_EQ((*window)[0], (WindowDimension{.size = 3,
                                           .stride = 2,
                                           .pad_low = -1,
                                           .pad_high = 2,
                                           .lhs_dilate = 1,
                                           .rhs_dilate = 3,
                                           .reversal = false}));
  EXPECT_EQ((*window)[1], (WindowDimension{.size = 2,
                                           .stride = 1,
                                           .pad_low = 0,
                                           .pad_high = 0,
                                           .lhs_dilate = 4,
                                           .rhs_dilate = 1,
                                           .reversal = true}));
  EXPECT_TRUE(ParseWindow("{}").value().empty());
  EXPECT_EQ(ParseWindow("{size=3 pad=1}").error().message,
            "window pad=1: '1' is not LOW_HIGH (two integers)");
  EXPECT_EQ(ParseWindow("{size=3x3 stride=2}").error().message,
            "window stride=2 has 1 entries where the window has 2 dimensions");
  EXPECT_EQ(ParseWindow("{stride=2}").error().message, "window {stride=2} has no size=");
  EXPECT_EQ(ParseWindow("{size=3 step=1}").error().message,
            "window entry 'step=1' is not one of size, stride, pad, lhs_dilate, rhs_dilate, "
            "rhs_reversal =AxB...");
}

TEST(Convolution, ReadsDimLabels) {
  const Expected<ConvolutionDimensions> dims = ParseDimLabels("b01f_01io->b01f");
  ASSERT_TRUE(dims.ok()) << dims.error().message;
  EXPECT_EQ(dims->input_batch, 0);
  EXPECT_EQ(dims->input_feature, 3);
  EXPECT_EQ(dims->input_spatial, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(dims->kernel_input_feature, 2);
  EXPECT_EQ(dims->kernel_output_feature, 3);
  EXPECT_EQ(dims->kernel_spatial, (std::vector<int64_t>{0, 1}));
  const Expected<ConvolutionDimensions> swapped = ParseDimLabels("f10b_o10i->10bf");
  ASSERT_TRUE(swapped.ok()) << swapped.error().message;
  EXPECT_EQ(swapped->input_spatial, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(swapped->output_batch, 2);
  EXPECT_EQ(swapped->output_spatial, (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(ParseDimLabels("b0f_0io").ok());
  EXPECT_FALSE(ParseDimLabels("b0f_0io->b0").ok());
  EXPECT_FALSE(ParseDimLabels("b0f_0ii->b0f").ok());
}

TEST(Convolution, ValidTapPairsCountsWhatAWalkFinds) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto draw = [&](int lo, int hi) {
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    const WindowDimension w{.size = draw(1, 6),
                            .stride = draw(1, 5),
                            .pad_low = draw(-4, 6),
                            .pad_high = draw(-4, 6),
                            .lhs_dilate = draw(1, 5),
                            .rhs_dilate = draw(1, 4)};
    const int64_t input = draw(0, 12), output = draw(0, 14);
    int64_t walked = 0;
    for (int64_t y = 0; y < output; ++y) {
      for (int64_t t = 0; t < w.size; ++t) walked += InputPosition(w, input, y, t) >= 0;
    }
    ASSERT_EQ(ValidTapPairs(w, input, output), walked)
        << "size " << w.size << " stride " << w.stride << " pad " << w.pad_low << "_" << w.pad_high
        << " lhs_dilate " << w.lhs_dilate << " rhs_dilate " << w.rhs_dilate << " input " << input
        << " output " << output;
  }
}

TEST(Convolution, ExtentsThatOverflowAreErrors) {
  Convolution c;
  c.dims = ParseDimLabels("b0f_0io->b0f").value();
  c.window = {{.size = 3, .lhs_dilate = int64_t{1} << 62}};
  const Shape input(PrimitiveType::kF32, {1, 9, 2}), kernel(PrimitiveType::kF32, {3, 2, 4});
  EXPECT_EQ(InferConvolutionDims(input, kernel, c).error().message,
            "spatial dimension 0: the dilated, padded extents overflow");
  c.window = {{.size = 3, .pad_high = INT64_MAX}};
  EXPECT_FALSE(InferConvolutionDims(input, kernel, c).ok());
  c.window = {{.size = 3, .pad_low = 1, .pad_high = 1}};
  EXPECT_EQ(InferConvolutionDims(input, kernel, c).value(), (std::vector<int64_t>{1, 9, 4}));
}

}  // namespace
}  // namespace loom::ir
