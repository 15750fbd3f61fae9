// convolution: its dimension numbers and window, read from the instruction's
// attributes, and what they mean, in one place for the verifier, the
// executor's kernel, the reference interpreter and the cost model.
//
//   %y = f32[8,32,32,64] convolution(f32[8,32,32,16] %x, f32[3,3,16,64] %w),
//       window={size=3x3 stride=1x1 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
//
// dim_labels names each dimension of the input (b batch, f feature, 0 1 ..
// spatial), the kernel (i input feature, o output feature, 0 1 ..) and the
// output (like the input). The window has one entry per spatial dimension:
// its size (the kernel's extent there), stride, padding low_high (may be
// negative), lhs_dilate (holes between the input's elements), rhs_dilate
// (between the kernel's taps) and rhs_reversal (the kernel read backwards).
//
// StableHLO's semantics, which XLA's evaluator implements: output element
// (b, o, y) is the sum over the taps t of the window (row-major over the
// spatial dimensions) and the input features i of its group of
//
//   input[b', g·I + i, y·stride − pad_low + t·rhs_dilate (÷ lhs_dilate)]
//     · kernel[o, i, t (reversed where rhs_reversal)]
//
// where a position that falls in a hole of the dilated input or outside it
// adds nothing. With feature_group_count G the input's features and the
// kernel's output features are cut into G groups (g = o ÷ (O/G), I the
// features of a group); with batch_group_count B the input's batch is cut
// into B groups of N/B and the kernel's output features into B, output
// feature o reading batch group o ÷ (O/B) (b' = that group's start + b).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "ir/window.h"
#include "support/status.h"

namespace loom::ir {

// Which dimension of each array plays which part; spatial[k] is the
// dimension of spatial index k (window dimension k).
struct ConvolutionDimensions {
  int64_t input_batch = 0;
  int64_t input_feature = 0;
  std::vector<int64_t> input_spatial;
  int64_t kernel_input_feature = 0;
  int64_t kernel_output_feature = 0;
  std::vector<int64_t> kernel_spatial;
  int64_t output_batch = 0;
  int64_t output_feature = 0;
  std::vector<int64_t> output_spatial;
  friend bool operator==(const ConvolutionDimensions&, const ConvolutionDimensions&) = default;
};

struct Convolution {
  ConvolutionDimensions dims;
  std::vector<WindowDimension> window;  // one per spatial dimension
  int64_t feature_groups = 1;
  int64_t batch_groups = 1;
};

// `dim_labels=b01f_01io->b01f`, or what is wrong with it.
Expected<ConvolutionDimensions> ParseDimLabels(std::string_view text);

// The convolution's attributes; an error at the attribute (or the
// instruction, where one is missing) otherwise.
Expected<Convolution> ConvolutionOf(const Instruction& convolution);

// The result dimensions of convolving `input` with `kernel`, or what is
// wrong (no location: the verifier adds it). The element type is the
// caller's: XLA lets the result take a preferred type.
Expected<std::vector<int64_t>> InferConvolutionDims(const Shape& input, const Shape& kernel,
                                                    const Convolution& convolution);

}  // namespace loom::ir
