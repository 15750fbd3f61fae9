// sort: its comparator read, and what it means, in one place for the
// verifier and both executors.
//
//   %s = (f32[8,128], s32[8,128]) sort(f32[8,128] %keys, s32[8,128] %ids),
//       dimensions={1}, is_stable=true, to_apply=%less
//
// Every 1-D slice of the operands along `dimensions` is sorted: the
// comparator takes 2N scalars, operand k's elements of two positions as
// parameters 2k and 2k+1, and says whether the first goes before the
// second; all N operands are permuted alike. Loom sorts stably (XLA does
// where is_stable=true; where it is not, any order of equivalent elements
// is XLA's answer, and the stable one is Loom's on every backend). A
// comparator that is not a strict weak order (LT without TOTALORDER over
// NaNs) gives an order std::stable_sort makes of it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/attributes.h"
#include "ir/computation.h"
#include "ir/instruction.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

// A comparator that is one compare of one operand's two elements:
// compare(p2k, p2k+1) (or the other way round, its direction swapped).
struct SortKey {
  int64_t operand = 0;
  ComparisonDirection direction = ComparisonDirection::kLt;
  bool total_order = false;  // type=TOTALORDER
};
std::optional<SortKey> SimpleSortComparator(const Computation& comparator);

// The 1-D slices along `dimension` of a row-major array of `dims`: element
// j of slice s is at linear index Start(s) + j * stride.
struct SortSlices {
  int64_t count = 0;   // slices
  int64_t length = 0;  // elements of each
  int64_t stride = 1;
  int64_t Start(int64_t s) const { return s / stride * length * stride + s % stride; }
};
SortSlices SlicesAlong(const std::vector<int64_t>& dims, int64_t dimension);

// topk: along the last dimension, the k largest (largest=false: smallest)
// elements and their positions.
//
//   %t = (f32[8,2], s32[8,2]) topk(f32[8,128] %x), k=2, largest=true
//
// It is the sort XLA's TopkDecomposer makes of it: the operand and an iota
// of positions sorted stably by GT (LT) TOTALORDER of the operand, each
// sliced to its first k. So the order is the total one (-NaN < -inf < ... <
// -0 < +0 < ... < inf < NaN, larger first for largest), equal elements in
// increasing position, and any k elements of a slice have one answer.
struct TopK {
  int64_t k = 0;
  bool largest = true;  // XLA's default
};
Expected<TopK> TopKOf(const Instruction& topk);
// The comparison topk sorts by, as a sort's comparator would say it.
SortKey TopKSortKey(const TopK& topk);
// (operand's type [..., k], s32[..., k]) for an array of rank >= 1 whose
// last dimension holds k.
Expected<Shape> InferTopKShape(const Shape& operand, int64_t k);

// XLA's GPU form of topk, as its TopkRewriter writes it:
//
//   %t = (f32[8,2], s32[8,2]) custom-call(f32[8,128] %x), custom_call_target="TopK",
//       to_apply=%greater
//
// k is the result's last dimension. The comparator is the one of the sort
// the rewriter replaced: over values and positions (4 parameters) or over
// values alone (2); without one (the older form) it is GT in TOTALORDER.
// XLA's TopkDecomposer turns it back into that stable sort of the operand
// and an iota of positions along the last dimension, sliced to k.
struct CustomTopK {
  int64_t k = 0;
  const Computation* comparator = nullptr;  // none: GT TOTALORDER
};
bool IsTopKCustomCall(const Instruction& instruction);
// k and the comparator, the shapes checked (the comparator's parameters
// and result too).
Expected<CustomTopK> CustomTopKOf(const Instruction& topk);
// The compare a custom-call TopK sorts by when it is one compare of the
// two values in a strict order (GT or LT, TOTALORDER or of integers), so
// that any selection of its k first gives the stable sort's; nullopt for
// any other comparator.
std::optional<SortKey> CustomTopKSortKey(const Instruction& topk, const CustomTopK& custom);

}  // namespace loom::ir
