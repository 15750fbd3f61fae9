#include "ir/printer.h"

#include <fmt/format.h>

namespace loom::ir {
namespace {

std::string Ints(const std::vector<int64_t>& values) {
  return fmt::format("{{{}}}", fmt::join(values, ","));
}

std::string ComputationList(const CalledAttribute& called) {
  std::vector<std::string> names;
  for (const Computation* computation : called.computations) {
    names.push_back("%" + computation->name());
  }
  if (called.braced) return fmt::format("{{{}}}", fmt::join(names, ", "));
  return names.empty() ? "{}" : names.front();
}

std::string SliceText(const std::vector<SliceDim>& dims) {
  std::vector<std::string> parts;
  for (const SliceDim& dim : dims) {
    parts.push_back(dim.stride == 1 ? fmt::format("[{}:{}]", dim.start, dim.limit)
                                    : fmt::format("[{}:{}:{}]", dim.start, dim.limit, dim.stride));
  }
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

std::string PaddingText(const std::vector<PadDim>& dims) {
  std::vector<std::string> parts;
  for (const PadDim& dim : dims) {
    parts.push_back(dim.interior == 0 ? fmt::format("{}_{}", dim.low, dim.high)
                                      : fmt::format("{}_{}_{}", dim.low, dim.high, dim.interior));
  }
  return fmt::format("{}", fmt::join(parts, "x"));
}

std::string PairsText(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<std::string> parts;
  for (const auto& [source, target] : pairs)
    parts.push_back(fmt::format("{{{},{}}}", source, target));
  return fmt::format("{{{}}}", fmt::join(parts, ","));
}

// The typed attributes in one fixed order, then the kept ones as written.
std::vector<std::string> AttributeTexts(const Instruction& instruction) {
  const Attributes& a = instruction.attrs();
  std::vector<std::string> out;
  if (a.dimensions) out.push_back("dimensions=" + Ints(*a.dimensions));
  if (a.dot) {
    if (!a.dot->lhs_batch.empty()) out.push_back("lhs_batch_dims=" + Ints(a.dot->lhs_batch));
    out.push_back("lhs_contracting_dims=" + Ints(a.dot->lhs_contracting));
    if (!a.dot->rhs_batch.empty()) out.push_back("rhs_batch_dims=" + Ints(a.dot->rhs_batch));
    out.push_back("rhs_contracting_dims=" + Ints(a.dot->rhs_contracting));
  }
  if (a.slice) out.push_back("slice=" + SliceText(*a.slice));
  if (a.dynamic_slice_sizes) out.push_back("dynamic_slice_sizes=" + Ints(*a.dynamic_slice_sizes));
  if (a.padding) out.push_back("padding=" + PaddingText(*a.padding));
  if (a.direction)
    out.push_back(fmt::format("direction={}", ComparisonDirectionName(*a.direction)));
  if (a.tuple_index) out.push_back(fmt::format("index={}", *a.tuple_index));
  if (a.iota_dimension) out.push_back(fmt::format("iota_dimension={}", *a.iota_dimension));
  if (a.channel_id) out.push_back(fmt::format("channel_id={}", *a.channel_id));
  if (a.replica_groups) out.push_back("replica_groups=" + a.replica_groups->ToString());
  if (a.use_global_device_ids) {
    out.push_back(fmt::format("use_global_device_ids={}", *a.use_global_device_ids));
  }
  if (a.source_target_pairs)
    out.push_back("source_target_pairs=" + PairsText(*a.source_target_pairs));
  if (a.custom_call_target) {
    out.push_back(fmt::format("custom_call_target=\"{}\"", *a.custom_call_target));
  }
  for (const CalledAttribute& called : a.called) {
    out.push_back(called.key + "=" + ComputationList(called));
  }
  if (!a.control_predecessors.empty()) {
    std::vector<std::string> names;
    for (const Instruction* predecessor : a.control_predecessors) {
      names.push_back("%" + predecessor->name());
    }
    out.push_back(fmt::format("control-predecessors={{{}}}", fmt::join(names, ", ")));
  }
  for (const RawAttribute& raw : a.raw) out.push_back(raw.key + "=" + raw.value);
  return out;
}

std::string OperandText(const Instruction& instruction) {
  if (instruction.opcode() == Opcode::kConstant) return instruction.literal();
  if (instruction.opcode() == Opcode::kParameter) {
    return std::to_string(instruction.parameter_number().value_or(0));
  }
  std::vector<std::string> names;
  for (const Instruction* operand : instruction.operands()) names.push_back("%" + operand->name());
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string Signature(const Computation& computation) {
  std::vector<std::string> params;
  for (const Instruction* param : computation.parameters()) {
    if (param) params.push_back(fmt::format("{}: {}", param->name(), param->shape().ToString()));
  }
  const std::string result =
      computation.root() ? computation.root()->shape().ToString() : std::string("()");
  return fmt::format("({}) -> {}", fmt::join(params, ", "), result);
}

}  // namespace

std::string PrintInstruction(const Instruction& instruction) {
  std::string out =
      fmt::format("%{} = {} {}({})", instruction.name(), instruction.shape().ToString(),
                  OpcodeName(instruction.opcode()), OperandText(instruction));
  for (const std::string& attribute : AttributeTexts(instruction)) out += ", " + attribute;
  return out;
}

std::string PrintComputation(const Computation& computation, bool is_entry) {
  std::string out = fmt::format("{}%{} {} {{\n", is_entry ? "ENTRY " : "", computation.name(),
                                Signature(computation));
  for (const auto& instruction : computation.instructions()) {
    out += instruction.get() == computation.root() ? "  ROOT " : "  ";
    out += PrintInstruction(*instruction) + "\n";
  }
  return out + "}\n";
}

std::string PrintModule(const Module& module) {
  std::string out = "HloModule " + module.name();
  if (module.is_scheduled()) out += ", is_scheduled=true";
  if (module.num_partitions()) out += fmt::format(", num_partitions={}", *module.num_partitions());
  if (module.replica_count()) out += fmt::format(", replica_count={}", *module.replica_count());
  for (const RawAttribute& attribute : module.header_attributes()) {
    out += ", " + attribute.key + "=" + attribute.value;
  }
  out += "\n";
  for (const DebugSection& section : module.debug_sections()) {
    out += "\n" + section.title + "\n";
    for (const std::string& line : section.lines) out += line + "\n";
  }
  for (const auto& computation : module.computations()) {
    out += "\n" + PrintComputation(*computation, computation.get() == module.entry());
  }
  return out;
}

}  // namespace loom::ir
