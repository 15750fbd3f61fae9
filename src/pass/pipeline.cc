#include "pass/pipeline.h"

#include <fmt/format.h>

#include "ir/verifier.h"

namespace loom::pass {

Expected<bool> Pipeline::Run(ir::Module& module, const AfterPass& after_pass) const {
  bool changed = false;
  for (size_t index = 0; index < passes_.size(); ++index) {
    const auto& pass = passes_[index];
    Expected<bool> pass_changed = pass->Run(module);
    if (!pass_changed.ok()) {
      Error error = pass_changed.error();
      error.message = fmt::format("pass {}: {}", pass->name(), error.message);
      return error;
    }
    Expected<ir::VerifyReport> verified = ir::VerifyModule(module);
    if (!verified.ok()) {
      return Error{fmt::format("module fails verification after pass {}: {}", pass->name(),
                               verified.error().ToString())};
    }
    changed = changed || *pass_changed;
    if (after_pass) after_pass(index, *pass, module);
  }
  return changed;
}

}  // namespace loom::pass
