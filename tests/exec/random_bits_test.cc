// The generators behind rng-bit-generator against the known-answer vectors
// of Random123 (kat_vectors: threefry2x32_20, philox4x32_10), and the
// state each draw leaves as XLA's expander leaves it.
#include "exec/random_bits.h"

#include <gtest/gtest.h>

namespace loom::exec::random {
namespace {

TEST(RandomBits, ThreeFry2x32MatchesRandom123) {
  EXPECT_EQ(ThreeFry2x32({0, 0}, {0, 0}), (ThreeFryWords{0x6b200159, 0x99ba4efe}));
  EXPECT_EQ(ThreeFry2x32({0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (ThreeFryWords{0x1cb996fc, 0xbb002be7}));
  EXPECT_EQ(ThreeFry2x32({0x243f6a88, 0x85a308d3}, {0x13198a2e, 0x03707344}),
            (ThreeFryWords{0xc4923a9c, 0x483df7a0}));
}

TEST(RandomBits, Philox4x32MatchesRandom123) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxWords{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxWords{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxWords{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// ThreeFry counts a block per element at 64 bits, else a block per pair of
// neighbours along the first even dimension (the largest, if none is).
TEST(RandomBits, ThreeFryAdvancesTheCounterByItsBlocks) {
  const uint64_t state[] = {7, 10};
  const auto next = [&](const std::vector<int64_t>& dims, int width) {
    Expected<Draw> draw = PlanDraw(ir::RngAlgorithm::kThreeFry, state, dims, width);
    EXPECT_TRUE(draw.ok());
    EXPECT_EQ(draw->next_state[0], 7u);
    return std::pair{draw->next_state[1] - 10, draw->split_dimension};
  };
  EXPECT_EQ(next({3, 2}, 32), std::pair(uint64_t{3}, int64_t{1}));
  EXPECT_EQ(next({5}, 32), std::pair(uint64_t{3}, int64_t{0}));
  EXPECT_EQ(next({3, 5}, 16), std::pair(uint64_t{9}, int64_t{1}));
  EXPECT_EQ(next({7, 3, 5}, 8), std::pair(uint64_t{4 * 3 * 5}, int64_t{0}));
  EXPECT_EQ(next({}, 32), std::pair(uint64_t{1}, int64_t{-1}));
  EXPECT_EQ(next({3, 2}, 64).first, 6u);
  EXPECT_EQ(next({0, 4}, 32).first, 0u);
  const uint64_t three[] = {1, 2, 3};
  EXPECT_FALSE(PlanDraw(ir::RngAlgorithm::kThreeFry, three, {4}, 32).ok());
}

// Philox counts a block per four words; a u64[2] state counts from
// (state[1], state[0]) and keeps the low word only, a u64[3] state carries.
TEST(RandomBits, PhiloxAdvancesA128BitCounter) {
  const uint64_t two[] = {5, ~uint64_t{0}};
  Expected<Draw> draw = PlanDraw(ir::RngAlgorithm::kPhilox, two, {10}, 32);
  ASSERT_TRUE(draw.ok());
  EXPECT_EQ(draw->counter.low, ~uint64_t{0});
  EXPECT_EQ(draw->counter.high, 5u);
  EXPECT_EQ(draw->next_state, (std::vector<uint64_t>{5, 2}));
  const uint64_t three[] = {5, ~uint64_t{0} - 1, 9};
  draw = PlanDraw(ir::RngAlgorithm::kPhilox, three, {3, 1}, 64);
  ASSERT_TRUE(draw.ok());
  EXPECT_EQ(draw->next_state, (std::vector<uint64_t>{5, 0, 10}));
  EXPECT_EQ(Counter128({~uint64_t{0}, 3}).Plus(2).low, 1u);
  EXPECT_EQ(Counter128({~uint64_t{0}, 3}).Plus(2).high, 4u);
}

}  // namespace
}  // namespace loom::exec::random
