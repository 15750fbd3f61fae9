// Static statistics of a module for `loom stats`: instruction counts by
// opcode, the bytes each kind of collective moves, and the FLOPs of dots.
// Static means each instruction counts once: a loop body is not multiplied
// by its trip count.
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

struct ModuleStats {
  int64_t computation_count = 0;
  int64_t instruction_count = 0;
  std::map<std::string, int64_t> opcode_counts;        // by opcode name
  std::map<std::string, CollectiveStats> collectives;  // by collective kind
  int64_t dot_count = 0;
  int64_t dot_flops = 0;  // 2 x output elements x contracted size, per device
  int64_t entry_parameter_bytes = 0;
  int64_t devices = 1;
};

// The module must have passed the verifier (which gives the device counts).
ModuleStats ComputeStats(const ir::Module& module, const ir::VerifyReport& report);

}  // namespace loom::analysis
