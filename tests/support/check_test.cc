// Invariants stop the process with a message naming the place, and the
// standard library's allocation failures become errors where work starts.
#include "support/check.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <vector>

#include "support/saturating.h"
#include "support/status.h"

namespace loom {
namespace {

TEST(OutOfMemoryAsError, TurnsAllocationFailuresIntoErrors) {
  Status status = OutOfMemoryAsError([]() -> Status { throw std::bad_alloc(); });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message, "out of memory");
  Expected<int> expected = OutOfMemoryAsError([]() -> Expected<int> {
    std::vector<char> huge;
    huge.reserve(huge.max_size() + 1);  // std::length_error
    return 1;
  });
  ASSERT_FALSE(expected.ok());
  EXPECT_NE(expected.error().message.find("out of memory"), std::string::npos);
  Expected<int> fine = OutOfMemoryAsError([]() -> Expected<int> { return 7; });
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(*fine, 7);
}

TEST(Saturating, StopsAtTheMaximum) {
  EXPECT_EQ(SaturatingAdd(2, 3), 5);
  EXPECT_EQ(SaturatingAdd(kSaturated, 1), kSaturated);
  EXPECT_EQ(SaturatingMul(int64_t{1} << 59, 16), kSaturated);
  EXPECT_EQ(SaturatingMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
}

using CheckDeathTest = testing::Test;

TEST_F(CheckDeathTest, ABrokenInvariantStopsWithItsPlace) {
  EXPECT_DEATH(LOOM_CHECK(1 + 1 == 3, "arithmetic"),
               "loom: internal error at .*check_test.cc:[0-9]+: arithmetic");
}

TEST_F(CheckDeathTest, ReadingTheValueOfAnErrorStops) {
  Expected<int> failed = Error{"the reason"};
  EXPECT_DEATH((void)failed.value(), "the value of an Expected that holds the error: the reason");
  Expected<int> held = 1;
  EXPECT_DEATH((void)held.error(), "the error of an Expected that holds a value");
}

}  // namespace
}  // namespace loom
