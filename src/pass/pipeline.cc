#include "pass/pipeline.h"

#include <fmt/format.h>

#include "ir/verifier.h"

namespace loom::pass {

Expected<bool> Pipeline::Run(ir::Module& module) const {
  bool changed = false;
  for (const auto& pass : passes_) {
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
  }
  return changed;
}

}  // namespace loom::pass
