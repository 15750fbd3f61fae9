// The pass interface: a pass has a name and rewrites a module in place,
// answering whether it changed anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/module.h"
#include "support/status.h"

namespace loom::pass {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Rewrites `module`; true when anything changed.
  virtual Expected<bool> Run(ir::Module& module) = 0;
  // What the last Run decided and why, a line each (`loom opt --explain`).
  virtual std::vector<std::string> Explain() const { return {}; }
};

}  // namespace loom::pass
