// The arithmetic of an instruction, for statistics, cost models and the
// simulator alike.
#pragma once

#include <cstdint>

#include "ir/instruction.h"

namespace loom::analysis {

// A dot's FLOPs: 2 x output elements x contracted size (0 for anything
// that is not a dot with dimension numbers).
int64_t DotFlops(const ir::Instruction& dot);

}  // namespace loom::analysis
