#include "ir/compare.h"

#include <fmt/format.h>

namespace loom::ir {
namespace {

std::vector<std::string> Names(const std::vector<Instruction*>& instructions) {
  std::vector<std::string> names;
  for (const Instruction* instruction : instructions) {
    names.push_back(instruction ? instruction->name() : std::string("<null>"));
  }
  return names;
}

std::vector<std::string> CalledNames(const Instruction& instruction) {
  std::vector<std::string> names;
  for (const CalledAttribute& called : instruction.attrs().called) {
    for (const Computation* computation : called.computations) {
      names.push_back(called.key + "=" + (computation ? computation->name() : "<null>"));
    }
  }
  return names;
}

// The attributes that hold values rather than references; with
// `any_channel`, a channel id only where the other has one, whatever its
// number (copies of a computation each number their collectives' channels).
bool ValueAttributesEqual(const Attributes& a, const Attributes& b, bool any_channel) {
  const bool channels = any_channel ? a.channel_id.has_value() == b.channel_id.has_value()
                                    : a.channel_id == b.channel_id;
  return a.dimensions == b.dimensions && a.dot == b.dot && a.replica_groups == b.replica_groups &&
         a.source_target_pairs == b.source_target_pairs && channels &&
         a.use_global_device_ids == b.use_global_device_ids && a.slice == b.slice &&
         a.dynamic_slice_sizes == b.dynamic_slice_sizes && a.padding == b.padding &&
         a.direction == b.direction && a.tuple_index == b.tuple_index &&
         a.iota_dimension == b.iota_dimension && a.custom_call_target == b.custom_call_target &&
         a.raw == b.raw;
}

// Whether `a` and `b` call the same computations (CalledNames), or, with
// `callees_as_bodies` (comparing bodies), copies of them (BodyDifference).
bool SameCallees(const Instruction& a, const Instruction& b, bool callees_as_bodies) {
  if (!callees_as_bodies) return CalledNames(a) == CalledNames(b);
  const std::vector<CalledAttribute>& x = a.attrs().called;
  const std::vector<CalledAttribute>& y = b.attrs().called;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].key != y[i].key || x[i].computations.size() != y[i].computations.size()) return false;
    for (size_t j = 0; j < x[i].computations.size(); ++j) {
      const Computation* p = x[i].computations[j];
      const Computation* q = y[i].computations[j];
      if (p == q) continue;
      if (p == nullptr || q == nullptr || !BodyDifference(*p, *q).empty()) return false;
    }
  }
  return true;
}

std::string InstructionDifference(const Instruction& a, const Instruction& b,
                                  bool callees_as_bodies) {
  const std::string where = "%" + a.name();
  if (a.name() != b.name()) return fmt::format("instruction %{} vs %{}", a.name(), b.name());
  if (a.opcode() != b.opcode()) return where + ": opcode differs";
  if (!(a.shape() == b.shape())) {
    return fmt::format("{}: shape {} vs {}", where, a.shape().ToString(), b.shape().ToString());
  }
  if (Names(a.operands()) != Names(b.operands())) return where + ": operands differ";
  if (a.parameter_number() != b.parameter_number()) return where + ": parameter number differs";
  if (a.literal() != b.literal()) {
    return fmt::format("{}: literal '{}' vs '{}'", where, a.literal(), b.literal());
  }
  if (!ValueAttributesEqual(a.attrs(), b.attrs(), callees_as_bodies)) {
    return where + ": attributes differ";
  }
  if (!SameCallees(a, b, callees_as_bodies)) return where + ": called computations differ";
  if (Names(a.attrs().control_predecessors) != Names(b.attrs().control_predecessors)) {
    return where + ": control predecessors differ";
  }
  return "";
}

// With `as_bodies`, BodyDifference: the names of the two computations and
// of their callees do not count.
std::string ComputationDifference(const Computation& a, const Computation& b,
                                  bool as_bodies = false) {
  if (!as_bodies && a.name() != b.name()) {
    return fmt::format("computation %{} vs %{}", a.name(), b.name());
  }
  if (a.instruction_count() != b.instruction_count()) {
    return fmt::format("computation %{}: {} vs {} instructions", a.name(), a.instruction_count(),
                       b.instruction_count());
  }
  for (int64_t i = 0; i < a.instruction_count(); ++i) {
    std::string difference =
        InstructionDifference(*a.instructions()[static_cast<size_t>(i)],
                              *b.instructions()[static_cast<size_t>(i)], as_bodies);
    if (!difference.empty()) return fmt::format("computation %{}: {}", a.name(), difference);
  }
  if ((a.root() ? a.root()->name() : "") != (b.root() ? b.root()->name() : "")) {
    return fmt::format("computation %{}: root differs", a.name());
  }
  return "";
}

}  // namespace

std::string BodyDifference(const Computation& a, const Computation& b) {
  return ComputationDifference(a, b, /*as_bodies=*/true);
}

std::string FirstDifference(const Module& a, const Module& b) {
  if (a.name() != b.name()) return fmt::format("module name {} vs {}", a.name(), b.name());
  if (a.num_partitions() != b.num_partitions()) return "num_partitions differs";
  if (a.replica_count() != b.replica_count()) return "replica_count differs";
  if (a.is_scheduled() != b.is_scheduled()) return "is_scheduled differs";
  if (a.header_attributes() != b.header_attributes()) return "header attributes differ";
  if (a.debug_sections() != b.debug_sections()) return "debug sections differ";
  if (a.computations().size() != b.computations().size()) return "computation count differs";
  for (size_t i = 0; i < a.computations().size(); ++i) {
    std::string difference = ComputationDifference(*a.computations()[i], *b.computations()[i]);
    if (!difference.empty()) return difference;
  }
  if ((a.entry() ? a.entry()->name() : "") != (b.entry() ? b.entry()->name() : "")) {
    return "entry computation differs";
  }
  return "";
}

}  // namespace loom::ir
