// dot -> all-reduce and dot -> reduce-scatter cut into k chunks along a
// dimension of the product, each chunk reduced by a collective of its own
// (CoCoNet's overlap of MatMul and AllReduce, Jangda et al., ASPLOS 2022):
// once async-collectives and schedule have run, chunk i's collective is in
// flight while chunk i+1 is multiplied. Where a ring needs N steps for a
// group of N (a single overlapped step on two devices), k is free.
//
// Before (4 devices, row-parallel product, k = 2):
//
//   %p = f32[8,96] dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
//   %s = f32[8,96] all-reduce(%p), replica_groups={{0,1,2,3}}, to_apply=%add
//
// after:
//
//   %a.0 = f32[4,32] dynamic-slice(%a, 0, 0), dynamic_slice_sizes={4,32}
//   %p.0 = f32[4,96] dot(%a.0, %w), ...
//   %s.0 = f32[4,96] all-reduce(%p.0), replica_groups={{0,1,2,3}}, to_apply=%add,
//          frontend_attributes={_loom_chunk="0/2"}
//   %a.1 = f32[4,32] dynamic-slice(%a, 4, 0), dynamic_slice_sizes={4,32}
//   %p.1 = f32[4,96] dot(%a.1, %w), ...
//   %s.1 = f32[4,96] all-reduce(%p.1), ...
//   %s = f32[8,96] concatenate(%s.0, %s.1), dimensions={0}
//
// The chunks cut a dimension of the product that reaches the collective
// unchanged: through elementwise chain ops only (convert, copy), and for a
// reduce-scatter not its scattered dimension. Each output element is the
// same dot product as before. A reduce-scatter's chunk folds every element
// in the order the whole one does (the executor's ring order is per block
// of the scattered dimension), so it is bitwise the original's; an
// all-reduce's chunk folds its own contiguous pieces, so over three or more
// devices the sums are reordered (within rounding; bitwise on two, where a
// sum of two terms is one addition either way).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/builder.h"
#include "ir/instruction.h"
#include "pass/ring/dot_geometry.h"
#include "support/status.h"

namespace loom::pass {

struct ChunkedReduction {
  ir::Instruction* dot = nullptr;
  std::vector<ir::Instruction*> chain;  // elementwise: convert or copy
  ir::Instruction* collective = nullptr;
  int64_t output_dim = 0;  // of the dot, and of everything after it
  OutputDim dim;
};

// Each chunk's collective carries frontend_attributes={_loom_chunk="i/k"}:
// it may still get a ring of its own, but is not chunked again.
bool IsChunk(const ir::Instruction& collective);

// Whether an op between the dot and the collective keeps every dimension
// where it was.
bool KeepsDimensions(const ir::Instruction& op);

// The dimension of the dot's product to chunk, if there is one: the most
// major one of at least two elements that is not `scattered` (-1: none).
std::optional<int64_t> ChunkDimension(const ir::Instruction& dot, int64_t scattered);

// Replaces the pair by `chunks` products and collectives (chunks divides
// the dimension's size) and their concatenation.
Status EmitChunkedReduction(const ChunkedReduction& match, int64_t chunks, ir::NameTable& names);

}  // namespace loom::pass
