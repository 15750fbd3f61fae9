// One HLO instruction: a named value computed by an opcode from operands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/attributes.h"
#include "ir/opcode.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

class Computation;

class Instruction {
 public:
  Instruction(std::string name, Opcode opcode, Shape shape)
      : name_(std::move(name)), opcode_(opcode), shape_(std::move(shape)) {}
  Instruction(const Instruction&) = delete;
  Instruction& operator=(const Instruction&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  Opcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  void set_shape(Shape shape) { shape_ = std::move(shape); }

  // Where the instruction was defined in the text it was parsed from.
  SourceLoc loc() const { return loc_; }
  void set_loc(SourceLoc loc) { loc_ = loc; }

  const std::vector<Instruction*>& operands() const { return operands_; }
  Instruction* operand(int64_t i) const {
    LOOM_CHECK(i >= 0 && i < operand_count(), "operand " + std::to_string(i) + " of " + name_);
    return operands_[static_cast<size_t>(i)];
  }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  void AppendOperand(Instruction* operand) { operands_.push_back(operand); }
  void ReplaceOperand(int64_t i, Instruction* operand) {
    LOOM_CHECK(i >= 0 && i < operand_count(), "operand " + std::to_string(i) + " of " + name_);
    operands_[static_cast<size_t>(i)] = operand;
  }

  const Attributes& attrs() const { return attrs_; }
  Attributes& mutable_attrs() { return attrs_; }

  // `parameter(N)`.
  std::optional<int64_t> parameter_number() const { return parameter_number_; }
  void set_parameter_number(int64_t n) { parameter_number_ = n; }
  // The literal of `constant(...)`, as written (whitespace normalised).
  const std::string& literal() const { return literal_; }
  void set_literal(std::string literal) { literal_ = std::move(literal); }

  // The computation named by `key` (`to_apply`, `calls`, `condition`,
  // `body`, ...), or nullptr.
  Computation* called(std::string_view key) const;
  // Every computation this instruction calls, in attribute order.
  std::vector<Computation*> called_computations() const;

  Computation* parent() const { return parent_; }
  void set_parent(Computation* parent) { parent_ = parent; }

 private:
  std::string name_;
  Opcode opcode_;
  Shape shape_;
  SourceLoc loc_;
  std::vector<Instruction*> operands_;
  Attributes attrs_;
  std::optional<int64_t> parameter_number_;
  std::string literal_;
  Computation* parent_ = nullptr;
};

}  // namespace loom::ir
