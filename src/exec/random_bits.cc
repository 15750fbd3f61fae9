#include "exec/random_bits.h"

#include <fmt/format.h>

namespace loom::exec::random {
namespace {

// The first even dimension, else the largest (the first of equals).
int64_t ThreeFrySplitDimension(const std::vector<int64_t>& dims) {
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] % 2 == 0) return static_cast<int64_t>(d);
  }
  int64_t split = dims.empty() ? -1 : 0;
  for (size_t d = 1; d < dims.size(); ++d) {
    if (dims[d] > dims[static_cast<size_t>(split)]) split = static_cast<int64_t>(d);
  }
  return split;
}

int64_t ElementCount(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

Expected<Draw> PlanDraw(ir::RngAlgorithm algorithm, std::span<const uint64_t> state,
                        const std::vector<int64_t>& dims, int width) {
  const bool philox = algorithm == ir::RngAlgorithm::kPhilox;
  if (state.size() != 2 && !(philox && state.size() == 3)) {
    return Error{fmt::format("rng-bit-generator: a state of {} words", state.size())};
  }
  Draw draw;
  draw.algorithm = algorithm;
  draw.width = width;
  draw.key = state[0];
  const int64_t elements = ElementCount(dims);
  if (!philox) {
    draw.counter.low = state[1];
    int64_t blocks = elements;
    if (width <= 32) {
      draw.split_dimension = ThreeFrySplitDimension(dims);
      std::vector<int64_t> halved = dims;
      if (draw.split_dimension >= 0) {
        int64_t& d = halved[static_cast<size_t>(draw.split_dimension)];
        d = (d + 1) / 2;
      }
      blocks = ElementCount(halved);  // a scalar's one block too
    }
    draw.next_state = {state[0], state[1] + static_cast<uint64_t>(blocks)};
    return draw;
  }
  // A u64[2] state counts from (state[1], state[0]) and keeps only the
  // counter's low word; a u64[3] state keeps both.
  draw.counter =
      state.size() == 3 ? Counter128{state[1], state[2]} : Counter128{state[1], state[0]};
  const int64_t words = width == 64 ? 2 * elements : elements;
  const Counter128 next = draw.counter.Plus(static_cast<uint64_t>((words + 3) / 4));
  draw.next_state = state.size() == 3 ? std::vector<uint64_t>{state[0], next.low, next.high}
                                      : std::vector<uint64_t>{state[0], next.low};
  return draw;
}

}  // namespace loom::exec::random
