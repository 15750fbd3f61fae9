// Statistics of a module for `loom stats`: instruction counts by opcode, the
// bytes each kind of collective moves, and the FLOPs of dots.
//
// Static numbers count each instruction once: a loop body is not multiplied
// by its trip count. Dynamic numbers (ModuleStats::dynamic) follow one run of
// the entry computation, so that a module whose all-gather became a loop of
// collective-permutes can be compared with the original.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ir/module.h"
#include "ir/verifier.h"

namespace loom::analysis {

struct CollectiveStats {
  int64_t count = 0;
  int64_t result_bytes = 0;  // sum of the result sizes (per device)
  // Bytes each device sends with the ring algorithm: (N-1)/N of the gathered
  // or scattered buffer, 2(N-1)/N for all-reduce, the whole operand for a
  // collective-permute.
  int64_t ring_bytes_per_device = 0;
};

// Per-device totals over one run of the entry computation. The walk starts at
// the entry and goes into
//   - while bodies, times the loop's trip count (KnownTripCount), and their
//     conditions, times the trip count plus one; a loop whose trip count is
//     unknown counts once and is counted in `unknown_trip_count_loops`;
//   - call and async-start callees, once per execution;
//   - conditional branches: each number is the largest over the branches,
//     taken separately, so the result bounds every branch but may mix them;
//   - fusion bodies, for their dots and convolutions only.
// It does not go into reducers (`to_apply` of collectives, reduce, map, ...)
// or other called computations (sort comparators, custom-call callees): a
// reducer combines elements on one device and moves no data between devices.
struct DynamicStats {
  // By collective kind: `count` is executions, the byte fields are the static
  // fields summed over executions (the same ring rule).
  std::map<std::string, CollectiveStats> collectives;
  int64_t bytes_sent_per_device = 0;  // ring bytes, summed over the kinds
  int64_t dot_count = 0;              // executions
  int64_t dot_flops = 0;
  int64_t convolution_count = 0;  // executions
  int64_t convolution_flops = 0;
  // While loops reached whose trip count is unknown (each loop once, however
  // often it runs): their bodies counted once per execution of the loop.
  int64_t unknown_trip_count_loops = 0;
};

struct ModuleStats {
  int64_t computation_count = 0;
  int64_t instruction_count = 0;
  std::map<std::string, int64_t> opcode_counts;        // by opcode name
  std::map<std::string, CollectiveStats> collectives;  // by collective kind
  int64_t dot_count = 0;
  int64_t dot_flops = 0;  // 2 x output elements x contracted size, per device
  int64_t convolution_count = 0;
  int64_t convolution_flops = 0;  // 2 x the multiply-adds that land (analysis/flops.h)
  int64_t entry_parameter_bytes = 0;
  int64_t devices = 1;
  DynamicStats dynamic;
  // Sums stop at the int64_t maximum instead of wrapping (nested loops'
  // trip counts multiply); true when any number above stopped there, so
  // that it reads as "at least", not as a count.
  bool saturated = false;
};

// The module must have passed the verifier (which gives the device counts).
ModuleStats ComputeStats(const ir::Module& module, const ir::VerifyReport& report);

}  // namespace loom::analysis
