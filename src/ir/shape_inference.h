// Shape inference: the result shape of an op from its operand shapes and
// attributes, following XLA's rules (xla/service/shape_inference.cc and the
// operation-semantics page).
//
// Every function is pure and total: any input, however malformed (dimension
// numbers out of range, sizes near INT64_MAX, empty tuples), yields either a
// shape or an Error whose message says what is wrong. Messages carry no
// location and do not name the instruction; the verifier adds both.
//
// Where the text fixes part of the result that the operands cannot (the
// output dimensions of broadcast/reshape/iota, the element type of dot or
// convert), the caller passes the declared shape or type and the function
// checks that the operands are consistent with it.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/attributes.h"
#include "ir/opcode.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

// Checks that a shape is representable: its bit size fits in int64_t (so that
// element counts and byte sizes can be computed without overflow).
Status ValidateShape(const Shape& shape);

// The number of elements of an array shape, or an error if it overflows.
Expected<int64_t> CheckedElementCount(const Shape& shape);

// --- elementwise ---------------------------------------------------------------
// abs, negate, exponential, is-finite (-> pred), real/imag (complex -> real), copy
// (any shape, tuples included), ...
Expected<Shape> InferElementwiseUnaryShape(Opcode opcode, const Shape& operand);
// add, multiply, and, shift-left, complex (-> c64/c128), ...: equal shapes and
// element types.
Expected<Shape> InferElementwiseBinaryShape(Opcode opcode, const Shape& lhs, const Shape& rhs);
Expected<Shape> InferCompareShape(const Shape& lhs, const Shape& rhs);
// `pred` is pred-typed and either a scalar or shaped like `on_true`.
Expected<Shape> InferSelectShape(const Shape& pred, const Shape& on_true, const Shape& on_false);
// `min` and `max` are scalars or shaped like `operand`.
Expected<Shape> InferClampShape(const Shape& min, const Shape& operand, const Shape& max);
// Operands of map share one shape; the result has it with `result_type`.
Expected<Shape> InferMapShape(const std::vector<const Shape*>& operands, PrimitiveType result_type);

// --- shape manipulation --------------------------------------------------------
// `dimensions[i]` is the output dimension that operand dimension i maps to.
Expected<Shape> InferBroadcastShape(const Shape& operand, const Shape& output,
                                    const std::vector<int64_t>& dimensions);
Expected<Shape> InferReshapeShape(const Shape& operand, const Shape& output);
// A bitcast may reinterpret anything of the same size in bits.
Expected<Shape> InferBitcastShape(const Shape& operand, const Shape& output);
// Output dimension i is operand dimension permutation[i].
Expected<Shape> InferTransposeShape(const Shape& operand, const std::vector<int64_t>& permutation);
Expected<Shape> InferReverseShape(const Shape& operand, const std::vector<int64_t>& dimensions);
Expected<Shape> InferSliceShape(const Shape& operand, const std::vector<SliceDim>& slice);
// `indices`: one integer scalar per operand dimension, or (the older form) a
// single integer vector with one element per operand dimension.
Expected<Shape> InferDynamicSliceShape(const Shape& operand,
                                       const std::vector<const Shape*>& indices,
                                       const std::vector<int64_t>& sizes);
Expected<Shape> InferDynamicUpdateSliceShape(const Shape& operand, const Shape& update,
                                             const std::vector<const Shape*>& indices);
Expected<Shape> InferConcatenateShape(const std::vector<const Shape*>& operands, int64_t dimension);
// out = low + high + size + interior * (size - 1); low and high may be negative.
Expected<Shape> InferPadShape(const Shape& operand, const Shape& padding_value,
                              const std::vector<PadDim>& padding);
Expected<Shape> InferConvertShape(const Shape& operand, PrimitiveType type);
// stochastic-convert(operand, random): a floating-point operand, random
// bits of an unsigned type of its width and dimensions; the operand's
// dimensions in `type` (XLA's rule).
Expected<Shape> InferStochasticConvertShape(const Shape& operand, const Shape& random,
                                            PrimitiveType type);
// Same bit width: same dimensions. A narrower result type adds a minor
// dimension of size (operand bits / result bits); a wider one removes it.
Expected<Shape> InferBitcastConvertShape(const Shape& operand, PrimitiveType type);
Expected<Shape> InferIotaShape(const Shape& output, int64_t iota_dimension);
Expected<Shape> InferGetTupleElementShape(const Shape& operand, int64_t index);
Shape InferTupleShape(const std::vector<const Shape*>& operands);
Expected<Shape> InferGetDimensionSizeShape(const Shape& operand, int64_t dimension);

// --- reductions and contractions ----------------------------------------------
// Removes `dimensions` from every input (all inputs share their dimensions);
// input i's result has element type accumulator_types[i]. One input gives an
// array, several a tuple.
Expected<Shape> InferReduceShape(const std::vector<const Shape*>& inputs,
                                 const std::vector<PrimitiveType>& accumulator_types,
                                 const std::vector<int64_t>& dimensions);
// Output dimensions: batch, then lhs free, then rhs free, in operand order.
// The element type is `result_type` (dot may change precision).
Expected<Shape> InferDotShape(const Shape& lhs, const Shape& rhs, const DotDimensions& dimensions,
                              PrimitiveType result_type);

// --- collectives (shard_count: the size of a replica group) -------------------
// Dimension `dimension` grows by shard_count; several operands give a tuple.
Expected<Shape> InferAllGatherShape(const std::vector<const Shape*>& operands, int64_t dimension,
                                    int64_t shard_count);
// Dimension `dimension` shrinks by shard_count, which must divide it.
Expected<Shape> InferReduceScatterShape(const std::vector<const Shape*>& operands,
                                        int64_t dimension, int64_t shard_count);
// all-reduce, collective-permute, collective-broadcast: the operand's shape, or
// the tuple of the operands' shapes.
Expected<Shape> InferSameAsOperandsShape(const std::vector<const Shape*>& operands);
// all-to-all with dimensions={d}: shape unchanged, dimension d divisible by
// split_count.
Expected<Shape> InferAllToAllShape(const Shape& operand, int64_t dimension, int64_t split_count);

}  // namespace loom::ir
