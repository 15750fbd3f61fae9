// An HLO module: computations (one of them the entry) plus the header's
// attributes and the debug-info sections of newer dumps.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/attributes.h"
#include "ir/computation.h"

namespace loom::ir {

// `FileNames`, `FunctionNames`, `FileLocations`, `StackFrames`: kept verbatim.
struct DebugSection {
  std::string title;
  std::vector<std::string> lines;
  friend bool operator==(const DebugSection&, const DebugSection&) = default;
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  // Where the `HloModule` header starts in the text it was parsed from.
  SourceLoc loc() const { return loc_; }
  void set_loc(SourceLoc loc) { loc_ = loc; }

  Computation* AddComputation(std::unique_ptr<Computation> computation);
  // Inserts before `before` (a computation of this module), so that a new
  // callee prints ahead of its caller.
  Computation* InsertComputationBefore(std::unique_ptr<Computation> computation,
                                       const Computation* before);
  const std::vector<std::unique_ptr<Computation>>& computations() const { return computations_; }
  Computation* FindComputation(std::string_view name) const;
  Computation* entry() const { return entry_; }
  void set_entry(Computation* entry) { entry_ = entry; }

  // `num_partitions=` and `replica_count=` from the header, when present.
  std::optional<int64_t> num_partitions() const { return num_partitions_; }
  void set_num_partitions(std::optional<int64_t> n) { num_partitions_ = n; }
  std::optional<int64_t> replica_count() const { return replica_count_; }
  void set_replica_count(std::optional<int64_t> n) { replica_count_ = n; }
  bool is_scheduled() const { return is_scheduled_; }
  void set_is_scheduled(bool scheduled) { is_scheduled_ = scheduled; }

  // Header attributes Loom does not interpret (entry_computation_layout,
  // input_output_alias, ...), in order.
  const std::vector<RawAttribute>& header_attributes() const { return header_attributes_; }
  void AddHeaderAttribute(RawAttribute attribute) {
    header_attributes_.push_back(std::move(attribute));
  }

  const std::vector<DebugSection>& debug_sections() const { return debug_sections_; }
  void AddDebugSection(DebugSection section) { debug_sections_.push_back(std::move(section)); }

  // The computations in an order where every computation comes after the
  // computations it calls (callees first, entry last).
  std::vector<Computation*> PostOrder() const;

  // Instructions in all computations (each computation's text, not its
  // executions).
  int64_t instruction_count() const;

 private:
  std::string name_;
  SourceLoc loc_;
  std::vector<std::unique_ptr<Computation>> computations_;
  Computation* entry_ = nullptr;
  std::optional<int64_t> num_partitions_;
  std::optional<int64_t> replica_count_;
  bool is_scheduled_ = false;
  std::vector<RawAttribute> header_attributes_;
  std::vector<DebugSection> debug_sections_;
};

}  // namespace loom::ir
