// The counter-based generators behind rng-bit-generator (ir/random.h), and
// what one draw reads from its state and leaves in it, as XLA's
// RngBitGeneratorExpander and prng.cc define them. The reference
// interpreter draws element by element; the CPU kernel block by block;
// both from these.
//
// ThreeFry-2x32-20 and Philox-4x32-10 are Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3" (SC 2011); the known-answer vectors of
// their Random123 library test them here.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "ir/random.h"
#include "support/status.h"

namespace loom::exec::random {

using ThreeFryWords = std::array<uint32_t, 2>;
using PhiloxWords = std::array<uint32_t, 4>;

inline uint32_t RotateLeft(uint32_t v, int distance) {
  return (v << distance) | (v >> (32 - distance));
}

// ThreeFry-2x32 with 20 rounds (a key injection after every 4).
inline ThreeFryWords ThreeFry2x32(ThreeFryWords x, ThreeFryWords key) {
  constexpr int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {key[0], key[1], 0x1BD11BDAu ^ key[0] ^ key[1]};
  x[0] += ks[0];
  x[1] += ks[1];
  for (uint32_t injection = 1; injection <= 5; ++injection) {
    const int* rotations = kRotations + ((injection - 1) % 2) * 4;
    for (int r = 0; r < 4; ++r) {
      x[0] += x[1];
      x[1] = RotateLeft(x[1], rotations[r]) ^ x[0];
    }
    x[0] += ks[injection % 3];
    x[1] += ks[(injection + 1) % 3] + injection;
  }
  return x;
}

// Philox-4x32 with 10 rounds.
inline PhiloxWords Philox4x32(PhiloxWords x, std::array<uint32_t, 2> key) {
  constexpr uint64_t kMultiplierA = 0xD2511F53u, kMultiplierB = 0xCD9E8D57u;
  constexpr uint32_t kWeylA = 0x9E3779B9u, kWeylB = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t a = kMultiplierA * x[0];
    const uint64_t b = kMultiplierB * x[2];
    x = {static_cast<uint32_t>(b >> 32) ^ x[1] ^ key[0], static_cast<uint32_t>(b),
         static_cast<uint32_t>(a >> 32) ^ x[3] ^ key[1], static_cast<uint32_t>(a)};
    key[0] += kWeylA;
    key[1] += kWeylB;
  }
  return x;
}

inline std::array<uint32_t, 2> Words(uint64_t v) {
  return {static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32)};
}
inline uint64_t Join(uint32_t low, uint32_t high) { return low | (uint64_t{high} << 32); }

// A 128-bit counter, low word first.
struct Counter128 {
  uint64_t low = 0;
  uint64_t high = 0;
  Counter128 Plus(uint64_t n) const {
    const uint64_t sum = low + n;
    return {sum, high + (sum < low ? 1 : 0)};
  }
  PhiloxWords Words() const {
    return {static_cast<uint32_t>(low), static_cast<uint32_t>(low >> 32),
            static_cast<uint32_t>(high), static_cast<uint32_t>(high >> 32)};
  }
};

// One draw of an array of `dims` and `width` bits from a state.
struct Draw {
  ir::RngAlgorithm algorithm = ir::RngAlgorithm::kThreeFry;
  int width = 32;
  uint64_t key = 0;
  // ThreeFry: element (or pair) c is counted from counter.low + c (mod
  // 2^64); Philox: block b from counter.Plus(b).
  Counter128 counter;
  // ThreeFry at 32 bits or fewer: one block gives two elements, neighbours
  // along this dimension (XLA's SplitShapeIntoHalves); -1 for a scalar.
  int64_t split_dimension = -1;
  std::vector<uint64_t> next_state;
};
Expected<Draw> PlanDraw(ir::RngAlgorithm algorithm, std::span<const uint64_t> state,
                        const std::vector<int64_t>& dims, int width);

}  // namespace loom::exec::random
