// A pipeline runs passes in order and verifies the module after each one, so
// a pass that breaks the IR is named at once rather than blamed downstream.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pass/pass.h"

namespace loom::pass {

class Pipeline {
 public:
  void Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  const std::vector<std::unique_ptr<Pass>>& passes() const { return passes_; }

  // Called after pass number `index` (from 0) ran and the module verified,
  // with the module as that pass left it (loom opt --print-after-all,
  // --dump-dir).
  using AfterPass = std::function<void(size_t index, const Pass& pass, const ir::Module& module)>;

  // Runs every pass; true when any changed the module. An error from a pass,
  // or from the verifier after it, names the pass.
  Expected<bool> Run(ir::Module& module, const AfterPass& after_pass = {}) const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace loom::pass
