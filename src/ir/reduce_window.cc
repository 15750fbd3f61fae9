#include "ir/reduce_window.h"

#include <fmt/format.h>

namespace loom::ir {

Expected<std::vector<WindowDimension>> ReduceWindowOf(const Instruction& reduce_window) {
  const RawAttribute* raw = reduce_window.attrs().FindRaw("window");
  if (raw == nullptr) {
    return Error{fmt::format("%{}: {} needs window={{size=...}}", reduce_window.name(),
                             OpcodeName(reduce_window.opcode())),
                 reduce_window.loc()};
  }
  Expected<std::vector<WindowDimension>> window = ParseWindow(raw->value);
  if (!window.ok()) {
    return Error{fmt::format("%{}: {}", reduce_window.name(), window.error().message), raw->loc};
  }
  for (const WindowDimension& w : *window) {
    if (w.reversal) {
      return Error{fmt::format("%{}: {} takes no rhs_reversal", reduce_window.name(),
                               OpcodeName(reduce_window.opcode())),
                   raw->loc};
    }
  }
  return window;
}

Expected<std::vector<int64_t>> InferReduceWindowDims(const Shape& input,
                                                     const std::vector<WindowDimension>& window) {
  if (!input.IsArray() || input.rank() != static_cast<int64_t>(window.size())) {
    return Error{fmt::format("the window has {} dimensions but the input {} has {}", window.size(),
                             input.ToString(false), input.IsArray() ? input.rank() : 0),
                 {}};
  }
  std::vector<int64_t> dims;
  for (size_t d = 0; d < window.size(); ++d) {
    const Expected<int64_t> extent = WindowOutputExtent(window[d], input.dim(d));
    if (!extent.ok()) {
      return Error{fmt::format("dimension {}: {}", d, extent.error().message), {}};
    }
    dims.push_back(*extent);
  }
  return dims;
}

WindowTaps LandingTaps(const std::vector<WindowDimension>& window,
                       const std::vector<int64_t>& input_dims,
                       const std::vector<int64_t>& output_dims) {
  WindowTaps taps(window.size());
  for (size_t d = 0; d < window.size(); ++d) {
    taps[d].resize(static_cast<size_t>(output_dims[d]));
    for (int64_t y = 0; y < output_dims[d]; ++y) {
      for (int64_t t = 0; t < window[d].size; ++t) {
        const int64_t position = InputPosition(window[d], input_dims[d], y, t);
        if (position >= 0) taps[d][static_cast<size_t>(y)].push_back(position);
      }
    }
  }
  return taps;
}

}  // namespace loom::ir
