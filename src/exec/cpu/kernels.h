// The CPU device's kernels: one function per kind of op, on packed row-major
// host arrays. Each dispatches on the element type once and runs a typed
// loop (or memcpy, or one BLAS call); types without a typed loop take the
// generic path through exec/scalar_ops.h, element by element, which gives
// the reference interpreter's bits. `out` may be the same memory as an
// operand where the op allows it (see Device::Run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "ir/sort.h"
#include "support/status.h"

namespace loom::exec::cpu {

// Packed row-major bytes of `shape`, in host memory.
struct HostArray {
  std::byte* data = nullptr;
  const ir::Shape* shape = nullptr;

  ir::PrimitiveType type() const { return shape->type(); }
  int64_t elements() const { return shape->ElementCount(); }
  int64_t element_bytes() const { return ir::PrimitiveTypeBits(shape->type()) / 8; }
  int64_t bytes() const { return shape->ByteSize(); }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data);
  }
};

// Element strides of a packed row-major array of `dims`.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims);

// "WHAT (%name) at line L", located at the instruction.
Error KernelError(const ir::Instruction& op, const std::string& what);

// Element-wise: every unary and binary arithmetic op, compare, select,
// clamp, convert, bitcast-convert.
Status Unary(const ir::Instruction& op, const HostArray& x, const HostArray& out);
Status Binary(const ir::Instruction& op, const HostArray& a, const HostArray& b,
              const HostArray& out);
Status Compare(const ir::Instruction& op, const HostArray& a, const HostArray& b,
               const HostArray& out);
Status Select(const HostArray& predicate, const HostArray& on_true, const HostArray& on_false,
              const HostArray& out);
Status Clamp(const ir::Instruction& op, const HostArray& low, const HostArray& x,
             const HostArray& high, const HostArray& out);
Status Convert(const HostArray& x, const HostArray& out);
// stochastic-convert to a signed integer type (scalar::StochasticConvert).
Status StochasticConvert(const ir::Instruction& op, const HostArray& x, const HostArray& random,
                         const HostArray& out);

// Moving elements: the op's attributes say where each goes.
Status Broadcast(const ir::Instruction& op, const HostArray& x, const HostArray& out);
Status Transpose(const ir::Instruction& op, const HostArray& x, const HostArray& out);
Status Reverse(const ir::Instruction& op, const HostArray& x, const HostArray& out);
Status Slice(const ir::Instruction& op, const HostArray& x, const HostArray& out);
// The start indices of dynamic-slice (operands 1..) and dynamic-update-slice
// (operands 2..), clamped as XLA clamps them.
Expected<std::vector<int64_t>> ClampedStarts(const ir::Instruction& op,
                                             std::span<const HostArray> operands, int64_t first,
                                             const std::vector<int64_t>& sizes);
Status DynamicSlice(const ir::Instruction& op, std::span<const HostArray> operands,
                    const HostArray& out);
// `out` may be operand 0's memory (the update is then written in place).
Status DynamicUpdateSlice(const ir::Instruction& op, std::span<const HostArray> operands,
                          const HostArray& out);
Status Concatenate(const ir::Instruction& op, std::span<const HostArray> operands,
                   const HostArray& out);
Status Pad(const ir::Instruction& op, const HostArray& x, const HostArray& padding_value,
           const HostArray& out);
Status Iota(const ir::Instruction& op, const HostArray& out);
// gather and scatter (ir/gather_scatter.h). Scatter runs with one operand
// and a combiner that is one commutative binary op or returns the update
// (ScatterRuns); `out` may be operand 0's memory.
Status Gather(const ir::Instruction& op, const HostArray& operand, const HostArray& indices,
              const HostArray& out);
bool ScatterRuns(const ir::Instruction& op);
Status Scatter(const ir::Instruction& op, std::span<const HostArray> operands,
               const HostArray& out);
// Every update element of a scatter of `operand`-shaped arrays at `indices`
// whose window fits, as visit(update element, operand element), in the
// order Scatter combines them: for scatters it does not run (several
// operands, or a combiner of more than one op), which the executor runs a
// combiner call per element.
Status ForEachScatterElement(const ir::Instruction& op, const ir::Shape& operand,
                             const HostArray& indices, const ir::Shape& updates,
                             const std::function<Status(int64_t, int64_t)>& visit);

// reduce with a reducer that is one commutative binary op (ir/reduction.h):
// each result element folds its inputs in row-major order of the reduced
// dimensions, starting from the init value.
Status Reduce(const ir::Instruction& op, ir::Opcode reducer, const HostArray& x,
              const HostArray& init, const HostArray& out);
// reduce-window with such a reducer (ir/reduce_window.h): each result
// element folds its window's landing taps in row-major order from the init
// value, one rounding per step, as the reference does.
Status ReduceWindow(const ir::Instruction& op, ir::Opcode reducer, const HostArray& x,
                    const HostArray& init, const HostArray& out);
// select-and-scatter (ir/select_and_scatter.h) whose select is one compare
// of its parameters in `select`'s direction and whose scatter is one
// commutative op: the reference's selection and order.
Status SelectAndScatter(const ir::Instruction& op, ir::ComparisonDirection select,
                        ir::Opcode scatter, const HostArray& operand, const HostArray& source,
                        const HostArray& init, const HostArray& out);
// sort (ir/sort.h) whose comparator is one compare of operand key.operand's
// elements: each slice stably by its keys, all operands permuted alike
// into `outs` (new arrays); the reference's order.
Status Sort(const ir::Instruction& op, const ir::SortKey& key, std::span<const HostArray> operands,
            std::span<const HostArray> outs);
// topk (ir/sort.h): the k first of each last-dimension slice of `operand`
// by `key` (GT or LT, TOTALORDER) into `values`, their positions into
// `positions` (s32); the reference's.
Status TopK(const ir::Instruction& op, int64_t k, const ir::SortKey& key, const HostArray& operand,
            const HostArray& values, const HostArray& positions);
// rng-bit-generator (ir/random.h): XLA's bits into `bits`, the advanced
// state into `next_state` (which may be `state`'s buffer).
Status RngBitGenerator(const ir::Instruction& op, const HostArray& state,
                       const HostArray& next_state, const HostArray& bits);
// batch-norm-training, -inference and -grad (exec/batch_norm.h): operands
// and results in the op's order (a tuple's elements for training and grad).
Status BatchNorm(const ir::Instruction& op, std::span<const HostArray> operands,
                 std::span<const HostArray> outs);
// triangular-solve(a, b) and cholesky(a) (exec/linear_algebra.h); out
// must not share memory with an operand.
Status TriangularSolve(const ir::Instruction& op, const HostArray& a, const HostArray& b,
                       const HostArray& out);
Status Cholesky(const ir::Instruction& op, const HostArray& a, const HostArray& out);
// out = reducer(a, b) element-wise, in place when out is a (collectives).
Status Combine(ir::Opcode reducer, const HostArray& a, const HostArray& b, const HostArray& out);

// convolution (ir/convolution.h): every element sums its taps, row-major,
// and in each its group's input features in increasing order, in double
// (int64, wrapping, for integers), rounded once to the result's type: the
// same bits on every CPU, deterministic or not.
Status Convolution(const ir::Instruction& op, const HostArray& input, const HostArray& kernel,
                   const HostArray& out);

// dot: OpenBLAS on the operands' own memory (transpose flags and leading
// dimensions), or the deterministic kernel (exec/cpu/deterministic_gemm.h).
Status Dot(const ir::Instruction& op, const HostArray& lhs, const HostArray& rhs,
           const HostArray& out, bool deterministic);

}  // namespace loom::exec::cpu
