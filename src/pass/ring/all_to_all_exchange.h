// The all-to-all forms of collective-matmul: an all-to-all that feeds a dot
// (a mixture-of-experts dispatch: tokens travel to their expert before the
// expert's product) or is fed by one (the combine after it), split per peer
// into a pairwise exchange so that the product of the blocks already here
// runs while the rest are in flight.
//
// An all-to-all along dimension d over a group of N cuts each device's
// operand into N blocks along d and sends block j to the group's j-th
// member; block s of the result is what member s sent. At round k (k = 0 is
// the device's own block, then k = 1 .. N-1) position r sends block
// (r+k) mod N to position r+k and receives, from position r-k, block s =
// (r-k) mod N of its result. Each round is one collective-permute with
// pairs r -> r+k: N-1 transfers of one block each, the bytes the all-to-all
// moves, and no block crosses the network twice.
//
// all-to-all -> dot, d a free or batch dimension of the dot's operand (on 4
// devices; r is the device's position in its group):
//
//   %x.a2a = f32[8,16] all-to-all(f32[8,16] %x), dimensions={0}, ...
//   %y = f32[8,32] dot(%x.a2a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
//
// after:
//
//   %b0 = f32[2,16] dynamic-slice(%x, r*2, 0)                 // own block
//   %b1 = f32[2,16] dynamic-slice(%x, ((r+1)%4)*2, 0)
//   %r1 = f32[2,16] collective-permute(%b1), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
//   %p0 = f32[2,32] dot(%b0, %w)
//   %y0 = f32[8,32] dynamic-update-slice(%zeros, %p0, r*2, 0)
//   ... round k: block (r+k)%4 out, pairs r -> r+k, result block (r-k)%4 ...
//   %y  = f32[8,32] dynamic-update-slice(%y2, %p3, ((r+1)%4)*2, 0)
//
// dot -> all-to-all, d traced back to an output dimension of the dot: round
// k computes only block (r+k) mod N of the product (slicing the operand, or
// both for a batch dimension, that supplies it) and sends it to r+k, so the
// product of round k+1 overlaps the transfer of round k; the received block
// goes to (r-k) mod N of the result.
//
// Every output element is the same dot product as before, of the same
// operands, so the rewrite is bitwise exact when the dot kernel does not
// change its summation order with the shape (the executor's deterministic
// kernels). A dimension d that is contracting is declined: its rounds would
// sum partial products in a new order.
//
// One round's block holds C = D/N rows of the exchanged dimension D; with a
// large N the rounds' products get too thin to run at the device's peak (a
// product of C rows reads the whole other operand, so its arithmetic
// intensity falls with C). Rounds are therefore multiplied in groups of g
// (a divisor of N, a gate choice): the g blocks of a group are joined
// (concatenate) into one product, whose g row blocks then go to their
// places (before the dot) or to their peers (after it). g = 1 is the
// exchange above; every g computes the same dot products.
//
// The exchange reaches the dot through reshape, bitcast, convert, copy and
// transpose (in either direction) while d can be traced through them; the
// chain is replayed on each block. The rounds are straight-line code (each
// round's pairs differ, so there is no loop form) and one-directional.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/collective_groups.h"
#include "pass/ring/dot_geometry.h"
#include "pass/ring/ring_group.h"
#include "support/status.h"

namespace loom::pass {

struct AllToAllMatch {
  bool before_dot = true;  // all-to-all -> dot; false: dot -> all-to-all
  ir::Instruction* exchange = nullptr;
  ir::Instruction* dot = nullptr;
  // The ops between them in data-flow order, and the exchanged dimension
  // in each one's result.
  std::vector<ir::Instruction*> chain;
  std::vector<int64_t> chain_dims;
  // Before the dot: the operand (0 lhs, 1 rhs) and its exchanged dimension.
  int64_t operand = 0;
  int64_t operand_dim = 0;
  OperandDim operand_class;
  // After it: the dot's output dimension that becomes the exchanged one.
  int64_t output_dim = 0;
  OutputDim output_class;
  RingGroup ring;
};

// A pair found next to a dot: the all-to-all, and the match or the reason
// it is declined.
struct AllToAllFound {
  ir::Instruction* exchange = nullptr;
  Expected<AllToAllMatch> match;
};

// all-to-all [-> traceable ops] -> operand `operand` of `dot`, if any.
std::optional<AllToAllFound> MatchAllToAllBeforeDot(ir::Instruction& dot, int64_t operand,
                                                    const ir::DeviceGrid& grid);
// dot [-> traceable ops, each the only user] -> all-to-all, if any.
std::optional<AllToAllFound> MatchAllToAllAfterDot(ir::Instruction& dot,
                                                   const ir::DeviceGrid& grid);

// "all-to-all -> dot (lhs free dimension 1, N=4)" or "dot -> all-to-all
// (output dimension 1, lhs free, N=4)".
std::string DescribeAllToAll(const AllToAllMatch& match);

// Replaces the pair by the pairwise exchange (removes the dot and the
// all-to-all, and the chain between them), with `rounds_per_product`
// consecutive rounds (a divisor of N) multiplied in one product.
Status EmitPairwiseExchange(const AllToAllMatch& match, int64_t rounds_per_product,
                            ir::NameTable& names);

}  // namespace loom::pass
