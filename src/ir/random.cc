#include "ir/random.h"

#include <fmt/format.h>

namespace loom::ir {

Expected<RngAlgorithm> RngAlgorithmOf(const Instruction& rng) {
  const RawAttribute* algorithm = rng.attrs().FindRaw("algorithm");
  if (algorithm == nullptr) {
    return Error{fmt::format("%{}: rng-bit-generator needs algorithm=rng_three_fry, rng_philox "
                             "or rng_default",
                             rng.name()),
                 rng.loc()};
  }
  if (algorithm->value == "rng_three_fry") return RngAlgorithm::kThreeFry;
  if (algorithm->value == "rng_philox" || algorithm->value == "rng_default") {
    return RngAlgorithm::kPhilox;
  }
  return Error{fmt::format("%{}: unknown algorithm={} (rng_three_fry, rng_philox or rng_default)",
                           rng.name(), algorithm->value),
               algorithm->loc};
}

Expected<Shape> InferRngBitGeneratorShape(const Shape& state, const Shape& declared,
                                          RngAlgorithm algorithm) {
  const bool philox = algorithm == RngAlgorithm::kPhilox;
  const bool state_ok = state.IsArray() && state.type() == PrimitiveType::kU64 &&
                        state.rank() == 1 &&
                        (state.dims()[0] == 2 || (philox && state.dims()[0] == 3));
  if (!state_ok) {
    return Error{fmt::format("rng-bit-generator's {} state is u64[2]{}, got {}",
                             philox ? "Philox" : "ThreeFry", philox ? " or u64[3]" : "",
                             state.ToString(false))};
  }
  if (!declared.IsTuple() || declared.tuple_size() != 2 || !declared.tuple_element(1).IsArray()) {
    return Error{fmt::format("rng-bit-generator returns (state, bits), declared {}",
                             declared.ToString(false))};
  }
  const Shape& bits = declared.tuple_element(1);
  const PrimitiveType type = bits.type();
  const int width = PrimitiveTypeBits(type);
  const bool type_ok = (IsInteger(type) || IsFloatingPoint(type)) &&
                       (width == 8 || width == 16 || width == 32 || width == 64);
  if (!type_ok) {
    return Error{fmt::format(
        "rng-bit-generator draws integers or floating point of 8, 16, 32 or 64 bits, not {}",
        PrimitiveTypeName(type))};
  }
  return Shape::Tuple({state, bits});
}

}  // namespace loom::ir
