// reduce-window: its window, read from the instruction's attributes, and
// which input elements each result element folds, in one place for the
// verifier, the executor's kernels and the reference interpreter.
//
//   %pool = f32[8,16,16,64] reduce-window(f32[8,32,32,64] %x, f32[] %init),
//       window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}, to_apply=%max
//
// The window has one entry per dimension of the inputs (ir/window.h; no
// rhs_reversal). With N inputs and N init values, result element y of
// each of the N results (a tuple of them where N > 1) starts at its init
// value and folds, for every tap of its window in row-major order whose
// position lands on an input element (not the padding, nor a hole of the
// base dilation), the N inputs' elements there: accumulators =
// to_apply(accumulators..., elements...). This is StableHLO's
// reduce_window with XLA's evaluator's order; padding adds nothing, which
// equals StableHLO's padding with the init value wherever the init is the
// reducer's identity, as every real program's is.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "ir/window.h"
#include "support/status.h"

namespace loom::ir {

// The window of a reduce-window (or a select-and-scatter, whose window is
// written alike); an error at the attribute (or the instruction, where it
// is missing) otherwise.
Expected<std::vector<WindowDimension>> ReduceWindowOf(const Instruction& reduce_window);

// The result dimensions of the window over `input`, or what is wrong (no
// location: the verifier adds it).
Expected<std::vector<int64_t>> InferReduceWindowDims(const Shape& input,
                                                     const std::vector<WindowDimension>& window);

// Per dimension d and output position y along it, the input positions
// y's taps read that land, in tap order: taps[d][y]. A result element's
// input elements are the row-major product of its positions' lists.
using WindowTaps = std::vector<std::vector<std::vector<int64_t>>>;
WindowTaps LandingTaps(const std::vector<WindowDimension>& window,
                       const std::vector<int64_t>& input_dims,
                       const std::vector<int64_t>& output_dims);

// Calls visit(output element, input element), both row-major linear
// indices, for every result element in row-major order and within it for
// every input element it folds, in fold order.
template <typename Visit>
void ForEachWindowElement(const WindowTaps& taps, const std::vector<int64_t>& input_dims,
                          const std::vector<int64_t>& output_dims, Visit&& visit) {
  const size_t rank = output_dims.size();
  if (rank == 0) {
    visit(int64_t{0}, int64_t{0});
    return;
  }
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * input_dims[d];
  int64_t elements = 1;
  for (int64_t extent : output_dims) elements *= extent;
  const size_t last = rank - 1;
  std::vector<int64_t> out(rank, 0), tap(rank, 0);
  for (int64_t linear = 0; linear < elements; ++linear) {
    // An odometer over the lists of the leading dimensions (the last
    // dimension's list walked inside it); an empty list: no tap lands.
    bool empty = false;
    for (size_t d = 0; d < rank; ++d) {
      empty = empty || taps[d][static_cast<size_t>(out[d])].empty();
      tap[d] = 0;
    }
    const std::vector<int64_t>& row = taps[last][static_cast<size_t>(out[last])];
    while (!empty) {
      int64_t base = 0;
      for (size_t d = 0; d < last; ++d) {
        base += taps[d][static_cast<size_t>(out[d])][static_cast<size_t>(tap[d])] * strides[d];
      }
      for (const int64_t position : row) visit(linear, base + position * strides[last]);
      size_t d = last;
      for (; d-- > 0;) {
        if (++tap[d] < static_cast<int64_t>(taps[d][static_cast<size_t>(out[d])].size())) break;
        tap[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    for (size_t d = rank; d-- > 0;) {
      if (++out[d] < output_dims[d]) break;
      out[d] = 0;
    }
  }
}

}  // namespace loom::ir
