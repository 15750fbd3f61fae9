// rng-bit-generator (ir/random.h) a block at a time: each ThreeFry block
// gives an element (64 bits) or two neighbours along the split dimension,
// each Philox block four 32-bit words (two 64-bit ones), written where
// XLA's expansion concatenates and reshapes them.
#include <cstring>
#include <vector>

#include "exec/cpu/kernels.h"
#include "exec/random_bits.h"

namespace loom::exec::cpu {
namespace {

using random::Draw;

template <typename T>
void DrawThreeFry(const Draw& draw, const std::vector<int64_t>& dims, T* out) {
  const random::ThreeFryWords key = random::Words(draw.key);
  const auto block = [&](uint64_t c) {
    return random::ThreeFry2x32(random::Words(draw.counter.low + c), key);
  };
  int64_t elements = 1;
  for (int64_t d : dims) elements *= d;
  if (draw.width == 64) {
    for (int64_t i = 0; i < elements; ++i) {
      const random::ThreeFryWords w = block(static_cast<uint64_t>(i));
      out[i] = static_cast<T>(random::Join(w[0], w[1]));
    }
    return;
  }
  if (draw.split_dimension < 0) {
    out[0] = static_cast<T>(block(0)[0]);
    return;
  }
  const auto s = static_cast<size_t>(draw.split_dimension);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d < s) outer *= dims[d];
    if (d > s) inner *= dims[d];
  }
  const int64_t length = dims[s], half = (length + 1) / 2;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t h = 0; h < half; ++h) {
      const bool pair = 2 * h + 1 < length;
      T* first = out + (o * length + 2 * h) * inner;
      const auto counter = static_cast<uint64_t>((o * half + h) * inner);
      for (int64_t r = 0; r < inner; ++r) {
        const random::ThreeFryWords w = block(counter + static_cast<uint64_t>(r));
        first[r] = static_cast<T>(w[0]);
        if (pair) first[inner + r] = static_cast<T>(w[1]);
      }
    }
  }
}

template <typename T>
void DrawPhilox(const Draw& draw, int64_t elements, T* out) {
  const std::array<uint32_t, 2> key = random::Words(draw.key);
  const int per_block = draw.width == 64 ? 2 : 4;
  const int64_t blocks = (elements + per_block - 1) / per_block;
  for (int64_t b = 0; b < blocks; ++b) {
    const random::PhiloxWords w =
        random::Philox4x32(draw.counter.Plus(static_cast<uint64_t>(b)).Words(), key);
    const int64_t first = b * per_block;
    const int64_t count = std::min<int64_t>(per_block, elements - first);
    for (int64_t j = 0; j < count; ++j) {
      out[first + j] = static_cast<T>(per_block == 2 ? random::Join(w[2 * j], w[2 * j + 1]) : w[j]);
    }
  }
}

}  // namespace

Status RngBitGenerator(const ir::Instruction& op, const HostArray& state,
                       const HostArray& next_state, const HostArray& bits) {
  Expected<ir::RngAlgorithm> algorithm = ir::RngAlgorithmOf(op);
  if (!algorithm.ok()) return algorithm.error();
  if (state.type() != ir::PrimitiveType::kU64 || next_state.type() != ir::PrimitiveType::kU64 ||
      next_state.elements() != state.elements()) {
    return KernelError(op, "rng-bit-generator takes and returns a u64 state");
  }
  const std::span<const uint64_t> words(state.as<const uint64_t>(),
                                        static_cast<size_t>(state.elements()));
  const int width = static_cast<int>(bits.element_bytes()) * 8;
  Expected<Draw> draw = random::PlanDraw(*algorithm, words, bits.shape->dims(), width);
  if (!draw.ok()) return KernelError(op, draw.error().message);
  const auto fill = [&]<typename T>(T* out) {
    if (draw->algorithm == ir::RngAlgorithm::kThreeFry) {
      DrawThreeFry(*draw, bits.shape->dims(), out);
    } else {
      DrawPhilox(*draw, bits.elements(), out);
    }
  };
  switch (width) {
    case 8:
      fill(bits.as<uint8_t>());
      break;
    case 16:
      fill(bits.as<uint16_t>());
      break;
    case 32:
      fill(bits.as<uint32_t>());
      break;
    case 64:
      fill(bits.as<uint64_t>());
      break;
    default:
      return KernelError(op, "rng-bit-generator draws 8, 16, 32 or 64 bits an element");
  }
  // Last: the next state may take the state's buffer.
  std::memcpy(next_state.data, draw->next_state.data(), draw->next_state.size() * sizeof(uint64_t));
  return OkStatus();
}

}  // namespace loom::exec::cpu
