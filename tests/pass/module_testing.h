// What pass tests share: parsing HLO text (failing the test on an error),
// checking that a module verifies, and running two modules on every device
// of the threads backend to compare their outputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>

#include "exec/runner.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace loom::test {

inline std::unique_ptr<ir::Module> ParseOrFail(std::string_view text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return module.ok() ? std::move(module).value() : nullptr;
}

inline void ExpectVerifies(const ir::Module& module) {
  Expected<ir::VerifyReport> verified = ir::VerifyModule(module);
  EXPECT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << ir::PrintModule(module);
}

// Runs both modules on every device (threads, reference dot kernels, the
// same seeded inputs) and expects bitwise-equal outputs, or, with a
// tolerance, |a - b| <= tolerance * max(1, |a|) per element.
inline void ExpectSameResults(std::string_view before, std::string_view after, int64_t devices,
                              double tolerance = 0, uint64_t seed = 7) {
  auto a = ParseOrFail(before);
  auto b = ParseOrFail(after);
  ASSERT_TRUE(a && b);
  Expected<ir::DeviceGrid> grid = exec::GridFor(*a, devices);
  ASSERT_TRUE(grid.ok()) << grid.error().message;
  exec::RunOptions options;
  options.seed = seed;
  options.deterministic = true;
  auto ra = exec::RunOnThreads(*a, *grid, options);
  auto rb = exec::RunOnThreads(*b, *grid, options);
  ASSERT_TRUE(ra.ok()) << ra.error().message;
  ASSERT_TRUE(rb.ok()) << rb.error().message;
  for (size_t d = 0; d < ra->size(); ++d) {
    const auto la = exec::OutputLeaves((*ra)[d].output);
    const auto lb = exec::OutputLeaves((*rb)[d].output);
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) {
      ASSERT_EQ(la[i]->shape(), lb[i]->shape());
      if (tolerance == 0) {
        EXPECT_EQ(0,
                  std::memcmp(la[i]->bytes().data(), lb[i]->bytes().data(), la[i]->bytes().size()))
            << "device " << d << " output " << i << " differs";
        continue;
      }
      for (int64_t e = 0; e < la[i]->ElementCount(); ++e) {
        const double x = la[i]->GetDouble(e);
        const double y = lb[i]->GetDouble(e);
        ASSERT_LE(std::abs(x - y), tolerance * std::max(1.0, std::abs(x)))
            << "device " << d << " output " << i << " element " << e;
      }
    }
  }
}

}  // namespace loom::test
