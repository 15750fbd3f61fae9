#include "ir/reduce_precision.h"

#include <fmt/format.h>

namespace loom::ir {
namespace {

Expected<int> BitsAttribute(const Instruction& instruction, std::string_view key, int minimum) {
  const RawAttribute* raw = instruction.attrs().FindRaw(key);
  const std::optional<int64_t> parsed = raw == nullptr ? std::nullopt : ParseInteger(raw->value);
  if (!parsed || *parsed < minimum || *parsed > 64) {
    return Error{fmt::format("%{}: reduce-precision needs {}=N, {} <= N <= 64", instruction.name(),
                             key, minimum),
                 raw == nullptr ? instruction.loc() : raw->loc};
  }
  return static_cast<int>(*parsed);
}

}  // namespace

Expected<ReducePrecision> ReducePrecisionOf(const Instruction& reduce_precision) {
  ReducePrecision result;
  LOOM_ASSIGN_OR_RETURN(result.exponent_bits, BitsAttribute(reduce_precision, "exponent_bits", 1));
  LOOM_ASSIGN_OR_RETURN(result.mantissa_bits, BitsAttribute(reduce_precision, "mantissa_bits", 0));
  return result;
}

}  // namespace loom::ir
