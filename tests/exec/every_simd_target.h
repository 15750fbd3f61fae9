// A fixture that runs a check once on every SIMD target Highway compiled and
// this CPU supports (the run-time dispatch of the kernels that use it), and
// restores the dispatch afterwards.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

namespace loom::exec::testing {

class EverySimdTarget : public ::testing::Test {
 protected:
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }

  template <typename Check>
  void ForEachTarget(Check&& check) {
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      SCOPED_TRACE(hwy::TargetName(target));
      hwy::SetSupportedTargetsForTest(target);
      check();
    }
    hwy::SetSupportedTargetsForTest(0);
  }
};

}  // namespace loom::exec::testing
