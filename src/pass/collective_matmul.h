// collective-matmul: decomposes a collective that feeds a matrix product, or
// is fed by one, into a ring of collective-permutes interleaved with partial
// products, so that a device multiplies one shard while the next is in
// flight (Wang et al., ASPLOS 2023; ../shared/BRIEF.md section 2).
//
// all-gather -> dot (the operand travels). Before, on 4 devices:
//
//   %x.full = f32[256,128] all-gather(f32[64,128] %x), dimensions={0},
//             replica_groups={{0,1,2,3}}, channel_id=1, use_global_device_ids=true
//   %y = f32[256,96] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
//
// after (unidirectional, unrolled; r is the device's position in its group):
//
//   %p0 = f32[64,96] dot(%x, %w)                          // block (r+0)%4
//   %x1 = f32[64,128] collective-permute(%x), source_target_pairs={{1,0},{2,1},{3,2},{0,3}}
//   %y0 = f32[256,96] dynamic-update-slice(%zeros, %p0, ((r+0)%4)*64, 0)
//   %p1 = f32[64,96] dot(%x1, %w)                         // block (r+1)%4
//   %x2 = ... collective-permute(%x1) ...
//   ...
//   %y  = f32[256,96] dynamic-update-slice(%y2, %p3, ((r+3)%4)*64, 0)
//
// The loop form puts the repeated steps in a while loop
// (windowed_dot_general_body_ag / _rs, as XLA names them) whose state is
// (step, r, loop invariants, windows, result). A gathered dimension that is
// a batch dimension slices the other operand's batch dimension at the same
// block; a contracting one slices its contracting dimension and sums the N
// partial products (in f32 for narrower float types).
//
// An all-gather whose value feeds several dots (a layer's gathered input
// read by the recomputed forward's product and by the weight gradient's,
// which contracts the gathered rows) gets a ring for each dot, each from the
// same shard, built before its dot; the all-gather goes with the last. The
// shard crosses the network once per dot instead of once, each time behind
// that dot's product. Before:
//
//   %g  = f32[8,3] all-gather(f32[2,3] %x), dimensions={0}, ...
//   %y  = f32[8,4] dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
//   %dw = f32[3,5] dot(%g, %dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
//
// after: %y's ring (as above, the windows updating blocks of %y), then
// %dw's (the windows' partial products of %dw summed), no all-gather.
// Unless told (ring_per_dot), a gate tries this against a ring that caches
// its windows for the other dots (other-users=cache) and keeps the faster.
//
// Any other user of the gathered value (or of a value between it and a
// dot), or with dot-users=decline every other dot, is served as
// other_users says: the pair is declined (kDecline, as XLA's SPMD
// partitioner does), the all-gather kept for them (kKeep: the shard then
// crosses the network twice), or the ring caches what it gathers (kCache,
// XLA's activation caching in its GPU windowed einsum): it writes each
// window into the gathered value as it arrives, and that value replaces the
// all-gather for every other user, which runs after the ring. The shard
// crosses the network once; only the first dot overlaps it. Before:
//
//   %g  = f32[8,3] all-gather(f32[2,3] %x), dimensions={0}, ...
//   %y  = f32[8,4] dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
//   %n  = f32[8,3] negate(%g)
//
// after (unrolled; the cache is a second result of each step):
//
//   %p0 = f32[2,4] dot(%x, %w)
//   %c0 = f32[8,3] dynamic-update-slice(%zeros, %x, r*2, 0)
//   %x1 = f32[2,3] collective-permute(%x), ...
//   ...
//   %c3 = f32[8,3] dynamic-update-slice(%c2, %x3, ((r+3)%4)*2, 0)
//   %n  = f32[8,3] negate(%c3)
//
// A dot whose other operand reads another user of the gathered value (it
// would wait for the ring that waits for it) is declined.
//
// dot -> reduce-scatter (the accumulator travels). Before:
//
//   %p = f32[256,96] dot(%a, %b), ...
//   %out = f32[64,96] reduce-scatter(%p), dimensions={0}, to_apply=%add, ...
//
// after: at step i each device computes only block q = (r-1-i)%N of its
// product (slicing the operand that supplies that output dimension), adds
// it to the partial sum received from its ring predecessor and passes the
// sum on to its successor; after N-1 transfers block r is home, summed in
// the order r+1, r+2, ..., r (the executor's ring order, so the result is
// bitwise the same in deterministic mode).
//
//   %c0 = f32[64,96] dot(dynamic-slice(%a, ((r+3)%4)*64, 0), %b)
//   %s1 = f32[64,96] collective-permute(%c0), source_target_pairs={{0,1},...}
//   %c1 = f32[64,96] dot(dynamic-slice(%a, ((r+2)%4)*64, 0), %b)
//   %a1 = f32[64,96] add(%s1, %c1)
//   ...
//   %out = f32[64,96] add(%s3, %c3)                       // block r
//
// all-to-all -> dot and dot -> all-to-all (a mixture-of-experts dispatch and
// combine) become a pairwise exchange of N-1 collective-permutes, one block
// each, interleaved with the products of the blocks already exchanged:
// pass/ring/all_to_all_exchange.h shows that rewrite.
//
// dot -> all-reduce becomes a reduce-scatter ring followed by an all-gather
// of the result, which this pass then decomposes against the dot that
// consumes it, when there is one.
//
// A reduce-side pair can instead be cut into k chunks along a dimension of
// the product, each chunk reduced by its own collective, so that chunk i's
// transfer overlaps chunk i+1's product (CoCoNet's chunked MatMul and
// AllReduce): pass/ring/chunked_reduction.h shows that rewrite. `chunks=K`
// asks for it without a target; with one, the gate tries k among the
// divisors of the dimension up to 16, beside the rings.
//
// A ring's steps can themselves be cut into k chunks (`step-chunks=K`, or
// the gate's choice): the all-gather ring sends each window as k pieces of
// its gathered dimension and multiplies each piece as it arrives; the
// reduce-scatter ring computes and sends its partial sum in k pieces of a
// dimension it does not scatter. Every element is computed, and every sum
// folded, exactly as in the whole-step ring. An all-reduce's ring whose
// result no dot reads then gathers each piece back by its own all-gather,
// started as soon as the last step has summed it.
//
// Bidirectional rings send half the windows (or partial sums) each way
// round the ring, for any N >= 3: the critical path has ceil((N-1)/2)
// transfers instead of N-1, each carrying one shard.
//
// The collective may reach the dot through reshape, bitcast, convert, copy
// and transpose (and the dot reach the reduce-scatter through convert,
// reshape, bitcast and copy) while the collective's dimension can be traced
// through them; the chain is replayed on each shard.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/collective_groups.h"
#include "pass/pass.h"

namespace loom::pass {

enum class RingDirection { kUnidirectional, kBidirectional };
// What serves the other users of an all-gather a ring replaces (above).
enum class GatherOtherUsers { kDecline, kKeep, kCache };
enum class RingForm { kLoop, kUnrolled };

// What a candidate decomposes.
enum class CandidateKind { kAllGather, kReduceScatter, kAllReduce, kAllToAll };
std::string_view CandidateKindName(CandidateKind kind);
// Whether direction and form choose between rings; not for an all-to-all,
// whose pairwise exchange has one form.
inline bool HasRingForms(CandidateKind kind) { return kind != CandidateKind::kAllToAll; }

// One collective/dot pair the pass could rewrite, as the gate sees it.
struct Candidate {
  CandidateKind kind = CandidateKind::kAllGather;
  bool HasRingForms() const { return pass::HasRingForms(kind); }
  // Whether the ring carries partial sums (a reduce-scatter or all-reduce
  // after the dot), so that its direction fixes their order.
  bool SumsAlongTheRing() const {
    return kind == CandidateKind::kReduceScatter || kind == CandidateKind::kAllReduce;
  }
  // Whether its chunked form folds sums in another order than the whole
  // collective: an all-reduce's chunks over three or more devices.
  bool ChunksReorderSums() const { return kind == CandidateKind::kAllReduce && group_size >= 3; }
  std::string computation;
  std::string collective;  // the all-gather, reduce-scatter, all-reduce or all-to-all
  std::string dot;
  int64_t group_size = 0;
  // Bytes of the whole buffer the collective gathers or reduces (per device).
  int64_t collective_bytes = 0;
  // A reduce-side pair that can be chunked (pass/ring/chunked_reduction.h):
  // the size of the product's dimension the chunks cut; 0 when it cannot.
  int64_t chunk_extent = 0;
  // A ring whose every step can be cut into chunks, each with its own
  // transfer (GateVerdict::step_chunks): the size of the dimension those
  // chunks cut; 0 when they cannot.
  int64_t step_chunk_extent = 0;
  int64_t dot_flops = 0;  // of every dot the rewrite replaces
  // How the collective's dimension enters the dot: "free", "batch" or
  // "contracting" (all-gather, or an all-to-all before the dot); "lhs
  // free", "rhs free" or "batch" (the output dimension a reduce-scatter,
  // all-reduce or all-to-all after the dot splits).
  std::string dimension_class;
};

// The gate's answer for one candidate: rewrite or not, with which ring, and
// why, in words `loom opt --explain` prints.
struct GateVerdict {
  bool rewrite = false;
  RingDirection direction = RingDirection::kUnidirectional;
  RingForm form = RingForm::kLoop;
  // Larger is better when one dot offers two candidates.
  double benefit = 0;
  std::string reason;
  // An all-to-all's exchange: how many consecutive rounds one product
  // multiplies (a divisor of the group size; pass/ring/all_to_all_exchange.h).
  int64_t rounds_per_product = 1;
  // A reduce-side pair: at least 2 cuts it into that many chunks, each with
  // its collective, instead of a ring (pass/ring/chunked_reduction.h).
  int64_t chunks = 0;
  // A ring: at least 2 cuts each of its steps into that many chunks along a
  // free dimension of the product, each chunk's window or partial sum sent
  // by its own collective-permute, so that chunk j's transfer is in flight
  // while chunk j+1 of the same step is multiplied (FLUX's finer tiles).
  int64_t step_chunks = 0;
};
using Gate = std::function<GateVerdict(const Candidate&)>;

struct CollectiveMatmulOptions {
  bool all_gather = true;
  bool reduce_scatter = true;
  bool all_reduce = true;
  bool all_to_all = true;
  // Rings only: an all-to-all's exchange is always straight-line rounds.
  RingDirection direction = RingDirection::kUnidirectional;
  RingForm form = RingForm::kLoop;
  // An all-to-all's exchange without a gate: rounds per product, used when
  // it divides the group size (else 1).
  int64_t rounds_per_product = 1;
  // Without a gate: at least 2 chunks every dot -> reduce-scatter or
  // all-reduce whose chunk dimension it divides into that many (the others
  // get the ring).
  int64_t chunks = 0;
  // Without a gate: at least 2 cuts every ring step into this many chunks
  // where the ring's chunk dimension divides into that many (the others get
  // whole steps).
  int64_t step_chunks = 0;
  // Collectives whose whole buffer is smaller than this are left alone (a
  // stand-in for a cost model when no gate is given).
  int64_t min_bytes = 1 << 20;
  // An all-gather (or a value between it and the dot) with other users than
  // the dots that get rings: decline the pair, keep the gather for them, or
  // cache the ring's windows for them (see above). Unset: kCache under a
  // gate (GatedCollectiveMatmul), which judges whether the ring pays for
  // the other users' wait; kDecline without one.
  std::optional<GatherOtherUsers> other_users;
  // An all-gather whose every user is a dot (each through a chain nothing
  // else reads): when true each dot gets a ring (see above); when false the
  // pairs are treated as having other users. Unset: true; a gate
  // (GatedCollectiveMatmul) tries both, a ring for each dot and one ring
  // caching its windows for the others, and keeps the faster.
  std::optional<bool> ring_per_dot;
  // Only rewrites whose every sum is folded in the order the original
  // program folds it on the executor (exec/collectives.h: the ring order of
  // its reduce-scatter and all-reduce; the dot kernels' order within a
  // product), so that with the deterministic dot kernels the result is
  // bitwise the original's whatever the schedule (dataflow fixes each
  // fold's order). Rings that carry partial sums go one way only (the
  // bidirectional ring folds half the blocks backwards); an all-gather
  // along a contracting dimension is declined (it adds N partial products
  // where the dot sums once); an all-reduce is split only into the
  // contiguous chunks the executor's ring folds, and chunked only when that
  // keeps the order (a reduce-scatter; an all-reduce on two devices). The
  // gather side, an all-to-all's exchange and the unidirectional rings are
  // exact anyway.
  bool deterministic = false;
  // When set, decides each candidate instead of min_bytes, direction and form.
  Gate gate;
  // The device grid, where the caller knows it (the gate, for each of its
  // trials, which a rewrite leaves on the same devices); by default the
  // verifier's.
  std::optional<ir::DeviceGrid> grid;
};

// How `verdict` rewrites a pair of `kind` over `group_size` devices, in
// words: "bidirectional loop ring", "pairwise exchange of 3 permutes, 2
// round(s) per product".
std::string RewriteSummary(const GateVerdict& verdict, CandidateKind kind, int64_t group_size);

// One decision as a line of --explain.
std::string FormatDecision(const Decision& decision);

class CollectiveMatmul : public Pass {
 public:
  explicit CollectiveMatmul(CollectiveMatmulOptions options = {}) : options_(std::move(options)) {}
  std::string_view name() const override { return "collective-matmul"; }
  Expected<bool> Run(ir::Module& module) override;

  std::vector<std::string> Explain() const override;
  std::vector<Decision> Decisions() const override { return decisions_; }

 private:
  CollectiveMatmulOptions options_;
  std::vector<Decision> decisions_;
};

}  // namespace loom::pass
