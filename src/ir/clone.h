// A deep copy of a module, for passes that try a rewrite and keep it only if
// it pays: printed and parsed back, which the round-trip tests show to give
// the same module (names, attributes, order and all).
#pragma once

#include <memory>

#include "ir/module.h"
#include "support/status.h"

namespace loom::ir {

Expected<std::unique_ptr<Module>> CloneModule(const Module& module);

}  // namespace loom::ir
