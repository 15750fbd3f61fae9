// Typed forms of the instruction attributes Loom interprets. Everything else
// is kept as raw text (RawAttribute) and printed back unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/status.h"

namespace loom::ir {

class Computation;
class Instruction;

// For attributes Loom reads from their raw text on demand (windows,
// dim_labels, group counts): the whole of `text` as a decimal integer, or
// none; `text` cut at every `separator` (empty parts kept).
std::optional<int64_t> ParseInteger(std::string_view text);
std::vector<std::string_view> SplitText(std::string_view text, char separator);

// lhs_batch_dims, rhs_batch_dims, lhs_contracting_dims, rhs_contracting_dims.
struct DotDimensions {
  std::vector<int64_t> lhs_batch;
  std::vector<int64_t> rhs_batch;
  std::vector<int64_t> lhs_contracting;
  std::vector<int64_t> rhs_contracting;
  friend bool operator==(const DotDimensions&, const DotDimensions&) = default;
};

// The dimensions of a rank-`rank` dot operand that are neither batch nor
// contracting, in increasing order: the order they take in the output.
std::vector<int64_t> FreeDimensions(int64_t rank, const std::vector<int64_t>& batch,
                                    const std::vector<int64_t>& contracting);

// The iota form of replica groups: `[G,S]<=[d0,d1,...]T(p0,p1,...)` lists the
// device ids 0..prod(d)-1 reshaped to d, transposed by p, flattened and cut
// into G groups of S.
struct IotaReplicaGroups {
  int64_t num_groups = 0;
  int64_t group_size = 0;
  std::vector<int64_t> reshape_dims;  // empty: [G*S]
  std::vector<int64_t> transpose;     // empty: identity
  friend bool operator==(const IotaReplicaGroups&, const IotaReplicaGroups&) = default;
};

// Replica groups in explicit (`{{0,1},{2,3}}`, `{}` for "all devices") or
// iota form. Both forms print back as they were written.
class ReplicaGroups {
 public:
  ReplicaGroups() = default;  // `{}`: one group of every device
  static ReplicaGroups Explicit(std::vector<std::vector<int64_t>> groups);
  static ReplicaGroups Iota(IotaReplicaGroups iota);

  bool is_iota() const { return iota_.has_value(); }
  const std::optional<IotaReplicaGroups>& iota() const { return iota_; }
  const std::vector<std::vector<int64_t>>& explicit_groups() const { return groups_; }
  // True for `{}`: the whole device set forms one group.
  bool IsAllDevices() const { return !iota_ && groups_.empty(); }
  // The groups as lists of ids. `{}` expands to one group of `device_count`
  // ids. The iota form must already be valid (see ValidateIota).
  std::vector<std::vector<int64_t>> Groups(int64_t device_count) const;
  // Why the iota form is inconsistent, or "" when it is fine.
  std::string ValidateIota() const;
  std::string ToString() const;
  friend bool operator==(const ReplicaGroups&, const ReplicaGroups&) = default;

 private:
  std::vector<std::vector<int64_t>> groups_;
  std::optional<IotaReplicaGroups> iota_;
};

// One dimension of `slice={[start:limit:stride], ...}`.
struct SliceDim {
  int64_t start = 0;
  int64_t limit = 0;
  int64_t stride = 1;
  friend bool operator==(const SliceDim&, const SliceDim&) = default;
};

// One dimension of `padding=low_high_interior x ...`.
struct PadDim {
  int64_t low = 0;
  int64_t high = 0;
  int64_t interior = 0;
  friend bool operator==(const PadDim&, const PadDim&) = default;
};

enum class ComparisonDirection { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view ComparisonDirectionName(ComparisonDirection direction);
std::optional<ComparisonDirection> ParseComparisonDirection(std::string_view name);
// The direction that compares (b, a) as `direction` compares (a, b).
ComparisonDirection SwappedDirection(ComparisonDirection direction);

// `to_apply=%add`, `calls=%fused`, `condition=%c`, `body=%b`,
// `branch_computations={%a, %b}`, `true_computation=`, `false_computation=`.
struct CalledAttribute {
  std::string key;
  std::vector<Computation*> computations;
  bool braced = false;  // printed as `{%a, %b}`
};

// An attribute Loom keeps but does not interpret: `metadata={...}`,
// `backend_config=...`, `sharding=...`, `frontend_attributes=...`, ...
struct RawAttribute {
  std::string key;
  std::string value;
  SourceLoc loc;  // of the key, where parsed; not part of what it says
  friend bool operator==(const RawAttribute& a, const RawAttribute& b) {
    return a.key == b.key && a.value == b.value;
  }
};

// Every attribute an instruction may carry. Absent ones are empty optionals.
struct Attributes {
  std::optional<std::vector<int64_t>> dimensions;
  std::optional<DotDimensions> dot;
  std::optional<ReplicaGroups> replica_groups;
  std::optional<std::vector<std::pair<int64_t, int64_t>>> source_target_pairs;
  std::optional<int64_t> channel_id;
  std::optional<bool> use_global_device_ids;
  std::optional<std::vector<SliceDim>> slice;
  std::optional<std::vector<int64_t>> dynamic_slice_sizes;
  std::optional<std::vector<PadDim>> padding;
  std::optional<ComparisonDirection> direction;
  std::optional<int64_t> tuple_index;  // get-tuple-element's `index=`
  std::optional<int64_t> iota_dimension;
  std::optional<std::string> custom_call_target;
  std::vector<CalledAttribute> called;
  std::vector<Instruction*> control_predecessors;
  std::vector<RawAttribute> raw;

  const RawAttribute* FindRaw(std::string_view key) const;
};

}  // namespace loom::ir
