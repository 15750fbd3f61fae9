// Builds new instructions into a computation for passes: each factory infers
// the result shape with the verifier's own rules, gives the instruction a
// name no other instruction of the module has, and inserts it at the
// builder's insertion point (before a given instruction, or at the end).
//
// Shape inference failing here means the pass asked for something ill-typed;
// the factories return that as an error rather than build a broken module.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/module.h"
#include "support/status.h"

namespace loom::ir {

// Unique instruction names and channel ids for one module, shared by every
// builder a pass creates on it.
class NameTable {
 public:
  explicit NameTable(const Module& module);
  // `base` when no instruction has that name yet, else `base.N`.
  std::string Unique(std::string_view base);
  // A computation name no computation of the module has.
  std::string UniqueComputation(std::string_view base, const Module& module);
  int64_t NextChannelId() { return next_channel_id_++; }

 private:
  std::unordered_set<std::string> names_;
  std::unordered_map<std::string, int64_t> next_suffix_;
  int64_t next_channel_id_ = 1;
};

class Builder {
 public:
  // Inserts before `before`, or appends when it is nullptr.
  Builder(Computation& computation, NameTable& names, const Instruction* before = nullptr)
      : computation_(computation), names_(names), before_(before) {}

  Computation& computation() const { return computation_; }
  NameTable& names() const { return names_; }

  Instruction* Parameter(int64_t number, Shape shape, std::string_view name);
  // A scalar s32 constant (one per value and builder).
  Instruction* S32(int64_t value);
  // A rank-1 s32 constant.
  Instruction* S32Array(const std::vector<int64_t>& values);
  // A scalar zero of `type`, broadcast to `shape` when it is not a scalar.
  Expected<Instruction*> Zeros(const Shape& shape);
  Instruction* PartitionId();
  Instruction* ReplicaId();

  Expected<Instruction*> Unary(Opcode opcode, Instruction* operand);
  Expected<Instruction*> Binary(Opcode opcode, Instruction* lhs, Instruction* rhs);
  Expected<Instruction*> Compare(Instruction* lhs, Instruction* rhs, ComparisonDirection direction);
  Expected<Instruction*> Convert(Instruction* operand, PrimitiveType type);
  Expected<Instruction*> Reshape(Instruction* operand, std::vector<int64_t> dims);
  Expected<Instruction*> Transpose(Instruction* operand, std::vector<int64_t> permutation);
  Expected<Instruction*> DynamicSlice(Instruction* operand, const std::vector<Instruction*>& starts,
                                      std::vector<int64_t> sizes);
  Expected<Instruction*> DynamicUpdateSlice(Instruction* operand, Instruction* update,
                                            const std::vector<Instruction*>& starts);
  // `operands` (at least one) joined along `dimension`.
  Expected<Instruction*> Concatenate(const std::vector<Instruction*>& operands, int64_t dimension);
  Expected<Instruction*> Dot(Instruction* lhs, Instruction* rhs, const DotDimensions& dimensions,
                             PrimitiveType result_type);
  // A collective-permute over `pairs`; with a channel id its pairs are
  // partition ids, without one replica ids.
  Expected<Instruction*> CollectivePermute(Instruction* operand,
                                           std::vector<std::pair<int64_t, int64_t>> pairs,
                                           std::optional<int64_t> channel_id);
  Instruction* Tuple(const std::vector<Instruction*>& elements);
  Expected<Instruction*> GetTupleElement(Instruction* tuple, int64_t index);
  Instruction* While(Instruction* init, Computation* condition, Computation* body);

  // A new instruction like `prototype` (same opcode and attributes) applied
  // to `operand`, with result shape `shape`: how a pass replays a reshape,
  // convert, copy, ... on a slice of the value it first applied to.
  Instruction* CloneUnaryWithShape(const Instruction& prototype, Instruction* operand, Shape shape);

  // Removes the s32 constants this builder made that nothing ended up using
  // (index arithmetic of unrolled steps folds some of them away).
  void RemoveUnusedConstants();

  // Inserts `instruction` with a unique name derived from its current one.
  Instruction* Insert(std::unique_ptr<Instruction> instruction);

 private:
  Instruction* Make(Opcode opcode, Shape shape, const std::vector<Instruction*>& operands,
                    std::string_view name);

  Computation& computation_;
  NameTable& names_;
  const Instruction* before_;
  // Every constant this builder made precedes its insertion point, so later
  // instructions it inserts may share them.
  std::unordered_map<int64_t, Instruction*> s32_constants_;
};

}  // namespace loom::ir
