// rng-bit-generator: its algorithm read, and the shapes it takes and makes,
// in one place for the verifier and both executors.
//
//   %r = (u64[2], u32[8,128]) rng-bit-generator(u64[2] %state), algorithm=rng_three_fry
//
// The state goes in and comes back advanced with a tensor of random bits
// (JAX's rbg and unsafe_rbg keys lower to it). The bits are XLA's, as its
// RngBitGeneratorExpander writes them out (xla/hlo/builder/lib/prng.cc):
// state[0] is the key; ThreeFry-2x32 (20 rounds) counts from state[1];
// Philox-4x32 (10 rounds) counts from the 128-bit (state[1], state[2]), or
// from (state[1], state[0]) for a u64[2] state. rng_default is Philox, the
// algorithm XLA's CPU and GPU compilers give it (a TPU's own generator is
// its hardware's and is not reproduced). Types narrower than 32 bits take
// the low bits of a 32-bit draw; a floating-point result holds the drawn
// bit patterns.
#pragma once

#include <cstdint>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

enum class RngAlgorithm : uint8_t { kThreeFry, kPhilox };

// The algorithm rng-bit-generator runs (rng_default resolved to Philox).
Expected<RngAlgorithm> RngAlgorithmOf(const Instruction& rng);

// (state, declared bits) for a u64 state of [2] (ThreeFry) or [2] or [3]
// (Philox) and bits of an integer or floating-point type of 8, 16, 32 or
// 64 bits; the bits' dimensions are the program's choice.
Expected<Shape> InferRngBitGeneratorShape(const Shape& state, const Shape& declared,
                                          RngAlgorithm algorithm);

}  // namespace loom::ir
