// The pass interface: a pass has a name and rewrites a module in place,
// answering whether it changed anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/module.h"
#include "support/status.h"

namespace loom::pass {

// One rewrite a pass made or declined, with its reason, for tools
// (`loom opt --json`): which instructions of which computation, in what
// form.
struct Decision {
  std::string computation;
  std::string collective;
  std::string dot;
  std::string form;  // "all-gather -> dot, bidirectional loop, N=4", or what was matched
  bool rewritten = false;
  std::string reason;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Rewrites `module`; true when anything changed.
  virtual Expected<bool> Run(ir::Module& module) = 0;
  // What the last Run decided and why, a line each (`loom opt --explain`).
  virtual std::vector<std::string> Explain() const { return {}; }
  // The same decisions as records, for passes that decide per candidate.
  virtual std::vector<Decision> Decisions() const { return {}; }
};

}  // namespace loom::pass
