// The arithmetic of an instruction, for statistics, cost models and the
// simulator alike.
#pragma once

#include <cstdint>

#include "ir/collective_groups.h"
#include "ir/instruction.h"
#include "ir/module.h"

namespace loom::analysis {

// A dot's FLOPs: 2 x output elements x contracted size (0 for anything
// that is not a dot with dimension numbers).
int64_t DotFlops(const ir::Instruction& dot);

// How many terms one element of `instruction`'s result sums: a dot's
// contracted size, a reduce's reduced size, a reducing collective's group
// size (on `grid`); 1 for everything else.
int64_t SumLength(const ir::Instruction& instruction, const ir::DeviceGrid& grid);
// The longest sum of any instruction of `module`: what bounds the rounding
// by which two orders of the same sums can differ.
int64_t LongestSum(const ir::Module& module, const ir::DeviceGrid& grid);

}  // namespace loom::analysis
