#include "ir/clone.h"

#include "ir/parser.h"
#include "ir/printer.h"

namespace loom::ir {

Expected<std::unique_ptr<Module>> CloneModule(const Module& module) {
  Expected<std::unique_ptr<Module>> copy = ParseModule(PrintModule(module));
  if (!copy.ok()) {
    return Error{"internal error: module " + module.name() +
                 " does not parse back from its print: " + copy.error().ToString()};
  }
  return copy;
}

}  // namespace loom::ir
