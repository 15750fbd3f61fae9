// The literal of a `constant(...)`, read against the constant's shape: the
// one reader the verifier checks literals with and the executor builds
// tensors from.
//
// The syntax is XLA's: a scalar (`0`, `-7`, `1e-05`, `-inf`, `nan`,
// `nan(0x7fffff)`, `true`) for a rank-0 shape, or for a whole array (XLA's
// parser broadcasts it: `bf16[512,128] constant(0)`); otherwise nested
// braces with exactly one level per dimension and dims[d] entries at level d
// (`{ {1, 2}, {3, 4} }`). Each element must fit the element type: an integer
// type takes integers within its range (`s8[] constant(1000)`,
// `u32[] constant(-1)` and `s32[] constant(1.5)` are errors), pred takes
// true, false, 0 and 1, a floating-point type any number (out of range
// rounds to infinity, as XLA does). Complex literals are not read.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

// One element: integer types and pred give `integer` (u64 above 2^63 as its
// bit pattern), floating types `floating`.
struct LiteralElement {
  int64_t integer = 0;
  double floating = 0;
};

// How the literal covers the shape.
enum class LiteralForm {
  kElements,      // one element per index, in row-major order
  kScalarForAll,  // one scalar (index 0) for every element
  kElided,        // `{...}`: the printer left the values out
  kNotRead,       // complex, tuple or token: not checked
};

// Reads `text` against `shape`, handing each element to `sink` (which may
// be empty: then it only checks). Errors say what is wrong and at which
// offset of the literal.
using LiteralSink = std::function<void(int64_t index, const LiteralElement& element)>;
Expected<LiteralForm> ReadLiteral(std::string_view text, const Shape& shape,
                                  const LiteralSink& sink = {});

}  // namespace loom::ir
