// A deep copy of a module, for passes that try a rewrite and keep it only if
// it pays. Instruction for instruction: names, shapes, attributes (their
// called computations and control predecessors pointing into the copy),
// source locations and order are the original's, so the copy prints as the
// original does (the corpus test checks both on every corpus module).
#pragma once

#include <memory>

#include "ir/module.h"
#include "support/status.h"

namespace loom::ir {

// Fails (an internal error naming the instruction) only where the module
// is malformed: an operand, callee or control predecessor outside it.
Expected<std::unique_ptr<Module>> CloneModule(const Module& module);

}  // namespace loom::ir
