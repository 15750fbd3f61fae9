// The verifier: structural checks (names, parameters, roots, definition
// before use, no cycles, called computations' signatures) and shape
// inference for every op Loom interprets. An op Loom cannot infer (for
// example sort or a custom-call) keeps its declared shape: the
// verifier trusts it and says so in VerifyReport::trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/collective_groups.h"
#include "ir/module.h"
#include "support/status.h"

namespace loom::ir {

// How many computations deep calls (call, while, conditional, fusion,
// async ops, reducers) may nest in a verified module: the one bound every
// tool that walks into callees relies on (the executor, the simulator, the
// analyses).
inline constexpr int64_t kMaxCallDepth = 256;
// The most instructions a computation may hold with every call inlined
// (callees counted once per call site, loop bodies once): the tools that
// walk calls (stats, the estimate, the simulator's tape, the executor) then
// stay bounded where calls that call twice at every level would double
// their work per level.
inline constexpr int64_t kMaxInlinedInstructions = int64_t{1} << 24;

struct VerifyReport {
  // How many devices the module runs on: num_partitions x replica_count.
  // Each count comes from the header when it gives one greater than 1 (XLA
  // cannot tell an explicit 1 from its default, so neither does Loom);
  // otherwise it is inferred from the largest device id the module names.
  // What an id numbers follows XLA's CollectiveOpGroupMode:
  //  - no channel_id: replicas;
  //  - channel_id on all-to-all, collective-permute, collective-broadcast:
  //    partitions;
  //  - channel_id on all-gather, all-reduce, reduce-scatter: replicas, each
  //    group spanning every partition (cross-replica-and-partition), unless
  //  - use_global_device_ids=true: flattened ids over replicas x partitions
  //    (growing the partition count when inferred).
  // `{}` groups of all-gather and reduce-scatter count as the group size
  // their shapes imply.
  int64_t partition_count = 1;
  int64_t replica_count = 1;
  DeviceGrid grid() const { return DeviceGrid{replica_count, partition_count}; }
  // One line per instruction whose shape was trusted, not inferred:
  // "%sort.1: sort (shape trusted as declared)".
  std::vector<std::string> trusted;
  // What is allowed but probably not meant (an attribute name XLA does not
  // define): the CLI prints these as "FILE:LINE:COL: warning: ...".
  std::vector<Error> warnings;
};

// The first problem found, located at the offending instruction (or
// computation, or the module header), or a report on success.
Expected<VerifyReport> VerifyModule(const Module& module);

// The devices `module` runs on: the one home of that fact, for passes,
// cost models, the simulator and the executor (VerifyReport above says how
// it is found). Fails when the module does not verify.
Expected<DeviceGrid> DeviceGridOf(const Module& module);
// `known` where the caller has it (a pass trying many rewrites of one
// module, which leave it on the same devices), else DeviceGridOf(module).
Expected<DeviceGrid> DeviceGridOf(const Module& module, const std::optional<DeviceGrid>& known);

}  // namespace loom::ir
