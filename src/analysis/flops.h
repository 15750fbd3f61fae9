// The arithmetic of an instruction, for statistics, cost models and the
// simulator alike.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/collective_groups.h"
#include "ir/instruction.h"
#include "ir/module.h"

namespace loom::analysis {

// A dot's FLOPs: 2 x output elements x contracted size (0 for anything
// that is not a dot with dimension numbers).
int64_t DotFlops(const ir::Instruction& dot);

// A dot as a matrix unit sees it: `batch` products of [m, k] x [k, n], m
// the lhs's dimensions neither batch nor contracted, n the rhs's, k the
// contracted ones (each a product of sizes; 1 where there are none).
struct DotDims {
  int64_t batch = 1;
  int64_t m = 1;
  int64_t n = 1;
  int64_t k = 1;
};
DotDims DotDimsOf(const ir::Instruction& dot);

// A convolution as a matrix unit runs it (an implicit GEMM, one per group
// of ir/convolution.h): m the output batch times its positions, n a
// group's output features, k a group's input features times the taps an
// output position reads (those that land on an input element, as XLA's
// cost analysis counts them: the mean over the positions, rounded up);
// its FLOPs 2 x the multiply-adds that land, exactly. Nothing for a
// convolution whose attributes do not parse.
struct ConvolutionWork {
  DotDims dims;
  int64_t flops = 0;
};
std::optional<ConvolutionWork> ConvolutionWorkOf(const ir::Instruction& convolution);
// Its FLOPs alone (0 for anything that is not a convolution that parses).
int64_t ConvolutionFlops(const ir::Instruction& convolution);

// triangular-solve's and cholesky's arithmetic (0 for any other op): a
// solve against m x m triangles costs m^2 FLOPs per right-hand vector (half
// multiplies, half subtractions; the m divisions left out), a
// factorization of n x n matrices n^3 / 3 each, as LAPACK counts them.
int64_t LinearAlgebraFlops(const ir::Instruction& instruction);

// The dots one kernel runs: a dot or a convolution itself, or those of a
// fusion's computation (and of the fusions it runs in turn); their FLOPs, their
// shapes, and the element type of the first one's operands (what its peak
// is read for).
struct KernelDots {
  int64_t flops = 0;
  std::optional<ir::PrimitiveType> type;  // none: no dot
  std::vector<DotDims> dims;              // one per dot
};
KernelDots KernelDotsOf(const ir::Instruction& instruction);

// How many terms one element of `instruction`'s result sums: a dot's
// contracted size, a convolution's taps times a group's input features, a
// reduce's reduced size, a reduce-window's window size, the windows that
// overlap in a select-and-scatter, a reducing collective's group size (on `grid`); 1 for everything
// else.
int64_t SumLength(const ir::Instruction& instruction, const ir::DeviceGrid& grid);
// The longest sum of any instruction of `module`: what bounds the rounding
// by which two orders of the same sums can differ.
int64_t LongestSum(const ir::Module& module, const ir::DeviceGrid& grid);

}  // namespace loom::analysis
