// gather and scatter: their dimension numbers, read from the instruction's
// attributes, and what they mean, in one place for the verifier, the
// executor's kernels, the reference interpreter and the cost model.
//
// XLA's semantics (operation-semantics, "Gather" and "Scatter"):
//
//   %rows = f32[6,64] gather(f32[512,64] %table, s32[6] %ids),
//       offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},
//       index_vector_dim=1, slice_sizes={1,64}
//
// Output index Out splits into batch dimensions (those not in offset_dims)
// and offset dimensions. The batch part picks an index vector out of the
// start indices (along index_vector_dim; when that equals the indices'
// rank the vector is the one element there); entry k of it is the start in
// operand dimension start_index_map[k], every other start 0, each clamped
// so that the slice fits. The offset part, in order, indexes the operand's
// dimensions that are not collapsed. The element read is start + offset.
//
//   %grad = f32[512,64] scatter(f32[512,64] %zeros, s32[6] %ids,
//       f32[6,64] %rows), update_window_dims={1}, inserted_window_dims={0},
//       scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
//
// is its transpose: each update element is combined by to_apply into the
// operand element at start + window offset, in row-major order of the
// updates. Where an update's window does not fit in the operand it is
// skipped whole (what XLA's CPU and GPU backends do and what JAX's
// mode="drop" relies on); the starts are not clamped.
//
// Newer XLA's batching dimensions pair operand dimensions with dimensions
// of the start indices (operand_batching_dims[i] with
// start_indices_batching_dims[i]; for scatter input_batching_dims and
// scatter_indices_batching_dims) of the same size: the batch element at
// coordinate c of that indices dimension reads (or writes) the operand at
// c in its paired dimension, which no window walks, as a vmapped gather
// (jnp.take_along_axis under vmap) does per batch row:
//
//   %picked = f32[4,3] gather(f32[4,10] %rows, s32[4,3,1] %at),
//       offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},
//       operand_batching_dims={0}, start_indices_batching_dims={0},
//       index_vector_dim=2, slice_sizes={1,1}
#pragma once

#include <cstdint>
#include <vector>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

struct GatherDimensions {
  std::vector<int64_t> offset_dims;
  std::vector<int64_t> collapsed_slice_dims;
  std::vector<int64_t> start_index_map;
  int64_t index_vector_dim = 0;
  std::vector<int64_t> slice_sizes;
  std::vector<int64_t> operand_batching_dims;
  std::vector<int64_t> start_indices_batching_dims;

  // The operand dimensions no window walks, increasing: the collapsed and
  // the batching ones.
  std::vector<int64_t> UnwalkedOperandDims() const;
};

struct ScatterDimensions {
  std::vector<int64_t> update_window_dims;
  std::vector<int64_t> inserted_window_dims;
  std::vector<int64_t> scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
  std::vector<int64_t> input_batching_dims;
  std::vector<int64_t> scatter_indices_batching_dims;

  // The operand dimensions no window walks, increasing: the inserted and
  // the batching ones.
  std::vector<int64_t> UnwalkedOperandDims() const;
};

// The dimension numbers of a gather or scatter instruction; an error at the
// attribute (or the instruction, where one is missing) otherwise.
Expected<GatherDimensions> GatherDimensionsOf(const Instruction& gather);
Expected<ScatterDimensions> ScatterDimensionsOf(const Instruction& scatter);

// The result shape of a gather of `operand` at `indices`, or what is wrong
// (no location: the verifier adds it).
Expected<Shape> InferGatherShape(const Shape& operand, const Shape& indices,
                                 const GatherDimensions& dims);
// Whether `updates` fit a scatter into `operand` at `indices`.
Status CheckScatterShapes(const Shape& operand, const Shape& indices, const Shape& updates,
                          const ScatterDimensions& dims);

// The operand dimensions a window walks, in order: those not in `skipped`
// (UnwalkedOperandDims of the dimension numbers). Window
// dimension j of the result (gather's offset_dims[j]) or of the updates
// (scatter's update_window_dims[j]) walks entry j.
std::vector<int64_t> WindowOperandDims(int64_t rank, const std::vector<int64_t>& skipped);

// The index vectors of `indices` (an integer array) in row-major order of
// the batch dimensions, each as `length` entries: the shape the batch
// dimensions take is the indices' shape without index_vector_dim.
struct IndexVectors {
  std::vector<int64_t> batch_dims;  // sizes, in order
  int64_t length = 1;               // entries per vector
  int64_t vector_stride = 0;        // elements between a vector's entries
  int64_t index_vector_dim = 0;
  // The linear element of entry 0 of vector `batch` (row-major over
  // batch_dims).
  std::vector<int64_t> first_element;

  // The coordinate of vector `batch` in the indices' dimension
  // `indices_dim` (a batch dimension, not index_vector_dim): the operand
  // coordinate of a batching dimension paired with it.
  int64_t Coordinate(int64_t batch, int64_t indices_dim) const;
};
IndexVectors IndexVectorsOf(const Shape& indices, int64_t index_vector_dim);

}  // namespace loom::ir
