// A window over an array's dimensions, as convolution and reduce-window
// write it (`window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1
// rhs_dilate=1x1}`), and which input element each tap of each output
// position reads, in one place for the verifier, the kernels and the
// cost model.
//
// Along one dimension of an input of extent n, the input is dilated
// (lhs_dilate - 1 holes between its elements: XLA's base dilation), padded
// by pad_low and pad_high (either may be negative), and the window of
// `size` taps, rhs_dilate apart (window dilation), slides over it by
// `stride`: output position y's tap t reads dilated position
// y·stride − pad_low + t·rhs_dilate, an input element where that is in
// range and a multiple of lhs_dilate, else padding or a hole.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace loom::ir {

struct WindowDimension {
  int64_t size = 1;
  int64_t stride = 1;
  int64_t pad_low = 0;
  int64_t pad_high = 0;
  int64_t lhs_dilate = 1;
  int64_t rhs_dilate = 1;
  bool reversal = false;  // rhs_reversal: the taps read backwards
  friend bool operator==(const WindowDimension&, const WindowDimension&) = default;
};

// `window={...}` as written ("{size=3x3 stride=2x2 pad=0_1x0_1}"), or what
// is wrong with it.
Expected<std::vector<WindowDimension>> ParseWindow(std::string_view text);

// The number of output positions of `w` over an input of `extent`: the
// window's positions that fit in the dilated, padded input (0 where none
// does), or an error (no location) where the extents overflow.
Expected<int64_t> WindowOutputExtent(const WindowDimension& w, int64_t extent);

// The input position tap `tap` of output position `out` reads in a
// dimension of an input of `extent`, or -1 where it falls in a hole
// or outside the input.
int64_t InputPosition(const WindowDimension& w, int64_t extent, int64_t out, int64_t tap);

// How many (output position, tap) pairs of one dimension read an input
// element: the product over the dimensions counts the input elements the
// whole window reduces (what XLA's cost analysis counts).
int64_t ValidTapPairs(const WindowDimension& w, int64_t input_extent, int64_t output_extent);

}  // namespace loom::ir
