// How two results of the same computation differ: bitwise, only by the
// rounding of sums taken in another order, or by more than that.
//
// Two programs that compute the same sums in different orders (a ring that
// adds the partial products of a split contraction, a BLAS that blocks a
// product by its size and CPU) round differently. Such differences are small
// relative to the output as a whole even where they are large relative to an
// element that cancelled to near zero, so Loom measures them normwise, in
// units of the output type's unit roundoff u (2^-24 for f32, 2^-8 for bf16):
//
//   error = max_e |a(e) - b(e)| / (u * max_e |b(e)|)
//
// and calls the difference rounding when error is within an envelope of two
// parts, in the same units:
//  - the sums themselves: two orders of a sum of n terms accumulated with
//    unit roundoff u_acc (f32 for f32 and narrower types, as the BLAS and the
//    rings accumulate; f64 for f64) differ by about sqrt(n) u_acc relative
//    to the terms (Higham and Mary's statistical rule; the worst case is n):
//    2 sqrt(n) u_acc / u, n the longest sum in the programs
//    (analysis::LongestSum);
//  - the roundings to the output type (and to narrow intermediates: bf16
//    activations between two dots) that such a difference can flip by one
//    unit: 8 u.
// The envelope is their maximum. It is an envelope of what rounding does,
// not a proof for every input; a wrong block, a missed or a doubled
// contribution changes the output by the order of its own size, 1/u: 2^8 u
// for bf16 and 2^24 u for f32, far outside it.
#pragma once

#include <cstdint>
#include <string>

#include "exec/tensor.h"

namespace loom::exec {

struct TensorDifference {
  bool shapes_match = true;
  bool bitwise = true;
  int64_t elements = 0;
  int64_t elements_differing = 0;
  double max_abs = 0;  // max |a - b|; NaN against a number is infinite
  double max_rel = 0;  // max |a - b| / max(|a|, |b|) over differing elements
  // Largest distance in units in the last place of the element type (for
  // integers, |a - b|); NaN against a number is infinite.
  double max_ulps = 0;
  // max |a - b| / max(1, |a|, |b|): what an absolute-or-relative tolerance
  // is compared with.
  double max_scaled = 0;
  double max_magnitude = 0;  // max |b|
  // The normwise error above, in units of the type's unit roundoff; 0 for
  // integers that are equal, infinite for any other difference of integers.
  double error_in_u = 0;
};

// The difference of `a` from the reference `b`, element by element; tuples
// are compared leaf by leaf and must have the same structure.
TensorDifference CompareTensors(const Tensor& a, const Tensor& b);

// The unit roundoff of a floating-point type: 2^-p for p significant bits
// (f64 2^-53, f32 2^-24, f16 2^-11, bf16 2^-8, f8e4m3fn 2^-4, f8e5m2 2^-3);
// 0 for other types.
double UnitRoundoff(ir::PrimitiveType type);

// The envelope above, in units of the unit roundoff of `type`, for sums of
// up to `longest_sum` terms.
double RoundingEnvelope(ir::PrimitiveType type, int64_t longest_sum);

// Whether `difference` (of two tensors of `type`) is only rounding: not
// bitwise equal, floats, and error_in_u within RoundingEnvelope.
bool IsRoundingDifference(const TensorDifference& difference, ir::PrimitiveType type,
                          int64_t longest_sum);

}  // namespace loom::exec
