// Recognising the reduction computations collectives and reduce apply.
#pragma once

#include <optional>

#include "ir/computation.h"

namespace loom::ir {

// The opcode of a reducer `(a, b) -> op(a, b)` over its two scalar
// parameters when op is commutative and associative (add, multiply,
// maximum, minimum, and, or, xor), so that it can be applied elementwise
// and in any grouping without calling the computation; nullopt otherwise.
std::optional<Opcode> CommutativeBinaryReducer(const Computation& reducer);

// Whether `combiner` `(a, b) -> b` returns its second parameter: a scatter
// that overwrites (JAX's .at[].set) rather than combines.
bool ReturnsSecondParameter(const Computation& combiner);

}  // namespace loom::ir
