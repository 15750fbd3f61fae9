// Writes HLO text for programs Loom builds itself (model.h): each op
// computes its result shape as XLA's shape rules do and prints one
// instruction line. The text is then parsed and verified like any input,
// so the emitter need not be a second verifier: a mistake here is a verify
// error with a line and column in the generated module.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::model {

// A value of the computation being written: its name and shape (element
// type name, dims), or a tuple of values.
struct Value {
  std::string name;
  std::string type;  // "f32", "bf16", "s32", "pred"; empty for a tuple
  std::vector<int64_t> dims;
  std::vector<Value> elements;  // a tuple's
  // For a lossless widening convert (bf16 to f32, say): the value it
  // widened, which converting back to its type returns instead of a
  // second convert (XLA's algebraic simplifier folds the pair so).
  std::vector<Value> widened_from;

  bool is_tuple() const { return type.empty(); }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t dim(int64_t i) const { return dims[static_cast<size_t>(i)]; }
  std::string ShapeText() const;
};

struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
};

// Device groups of a collective, in global device ids (the module uses
// use_global_device_ids with one replica and many partitions).
using Groups = std::vector<std::vector<int64_t>>;

class ModuleEmitter;

// One computation's instructions, in order.
class ComputationEmitter {
 public:
  ComputationEmitter(std::string name, ModuleEmitter& module)
      : name_(std::move(name)), module_(module) {}

  const std::string& name() const { return name_; }

  Value Parameter(std::string_view type, std::vector<int64_t> dims, std::string_view name);
  Value TupleParameter(const std::vector<Value>& like, std::string_view name);
  Value Scalar(std::string_view type, double value);
  Value ScalarInt(int64_t value);
  // An s32 vector constant of `values` (a table the program indexes).
  Value IntVector(const std::vector<int64_t>& values);
  // `value` of `type` broadcast to `dims`.
  Value Full(std::string_view type, double value, std::vector<int64_t> dims);
  // `x` broadcast to `dims`, its dimension i becoming dims[mapped[i]].
  Value Broadcast(const Value& x, std::vector<int64_t> dims, std::vector<int64_t> mapped);
  // `x` (of the same rank minus the dims not in `mapped`) broadcast like `like`.
  Value BroadcastLike(const Value& x, const Value& like, std::vector<int64_t> mapped);

  Value Unary(std::string_view op, const Value& x);
  Value Binary(std::string_view op, const Value& a, const Value& b);
  Value Add(const Value& a, const Value& b) { return Binary("add", a, b); }
  Value Sub(const Value& a, const Value& b) { return Binary("subtract", a, b); }
  Value Mul(const Value& a, const Value& b) { return Binary("multiply", a, b); }
  Value Div(const Value& a, const Value& b) { return Binary("divide", a, b); }
  // x * s for a scalar constant s.
  Value Scale(const Value& x, double s);
  Value Compare(const Value& a, const Value& b, std::string_view direction);
  Value Select(const Value& predicate, const Value& a, const Value& b);
  Value Convert(const Value& x, std::string_view type);
  Value Iota(std::string_view type, std::vector<int64_t> dims, int64_t dimension);

  Value Dot(const Value& lhs, const Value& rhs, const DotDims& dims, std::string_view result_type);
  // The sum (or max) of `x` over `dims`.
  Value ReduceSum(const Value& x, std::vector<int64_t> dims);
  Value ReduceMax(const Value& x, std::vector<int64_t> dims);
  Value Transpose(const Value& x, std::vector<int64_t> permutation);
  Value Reshape(const Value& x, std::vector<int64_t> dims);
  Value DynamicSlice(const Value& x, const std::vector<Value>& starts, std::vector<int64_t> sizes);
  // x[..., begin:begin+size, ...] along `dimension` (a static slice).
  Value Slice(const Value& x, int64_t dimension, int64_t begin, int64_t size);
  // The parts joined along `dimension`.
  Value Concatenate(const std::vector<Value>& parts, int64_t dimension);
  Value DynamicUpdateSlice(const Value& x, const Value& update, const std::vector<Value>& starts);
  // Rows table[ids[i]] of a [V, M] table at s32 ids [n]: [n, M] (an id
  // outside [0, V) clamps, as gather's starts do).
  Value TakeRows(const Value& table, const Value& ids);
  // base [V, M] with rows [n, M] added into rows ids [n] of it, in order; a
  // row whose id is outside [0, V) is dropped.
  Value ScatterAddRows(const Value& base, const Value& ids, const Value& rows);

  // This device's partition id, as s32.
  Value PartitionId();
  // min(max(x, lo), hi), all of one shape.
  Value Clamp(const Value& lo, const Value& x, const Value& hi);
  // `x` sent from each pair's source to its target; a device no pair
  // targets receives zeros.
  Value CollectivePermute(const Value& x, const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // Each group's elementwise `kind` ("add", "max") of its devices' x.
  Value AllReduce(const Value& x, const Groups& groups, std::string_view kind = "add");
  Value AllGather(const Value& x, int64_t dimension, const Groups& groups);
  Value ReduceScatter(const Value& x, int64_t dimension, const Groups& groups);
  // One variadic reduce-scatter (or all-reduce) of `xs`, all of one type,
  // as XLA's combiners make of independent ones: their results, in order.
  std::vector<Value> ReduceScatter(const std::vector<Value>& xs, int64_t dimension,
                                   const Groups& groups);
  std::vector<Value> AllReduce(const std::vector<Value>& xs, const Groups& groups);
  // `x` cut into a group's size of blocks along `dimension`, block i sent
  // to the group's device i, the blocks received joined along it in the
  // group's order.
  Value AllToAll(const Value& x, int64_t dimension, const Groups& groups);

  Value Tuple(const std::vector<Value>& elements);
  Value Element(const Value& tuple, int64_t index);
  std::vector<Value> Elements(const Value& tuple);
  Value While(const Value& init, const ComputationEmitter& condition,
              const ComputationEmitter& body);
  // One kernel computing `callee` (whose parameters take `operands`) on
  // `operands`: a fusion of kind kCustom, as XLA writes a fused kernel it
  // did not derive itself (its cuDNN and Triton attention kernels).
  Value Fusion(const std::vector<Value>& operands, const ComputationEmitter& callee);

  void SetRoot(const Value& root) { root_ = root; }
  const Value& root() const { return root_; }
  std::string Text(bool entry) const;

 private:
  Value Emit(std::string_view base, Value shape, const std::string& expression);
  Value Reduce(const Value& x, std::vector<int64_t> dims, std::string_view kind);

  std::string name_;
  ModuleEmitter& module_;
  std::vector<std::string> lines_;
  std::vector<Value> parameters_;
  Value root_;
  std::map<std::string, int64_t> counts_;
};

class ModuleEmitter {
 public:
  ModuleEmitter(std::string name, int64_t partitions)
      : name_(std::move(name)), partitions_(partitions) {}

  // A new computation; the module prints them in creation order, the
  // entry last. A name already taken gets a suffix: "forward_layer.1".
  ComputationEmitter& AddComputation(std::string_view name);
  ComputationEmitter& Entry();

  // The scalar reducer `%add.TYPE` / `%max.TYPE`, written once.
  std::string Reducer(std::string_view kind, std::string_view type);
  int64_t NextChannel() { return next_channel_++; }

  std::string Text() const;

 private:
  std::string name_;
  int64_t partitions_;
  std::vector<std::unique_ptr<ComputationEmitter>> computations_;
  std::unique_ptr<ComputationEmitter> entry_;
  std::map<std::string, std::string> reducers_;
  std::map<std::string, int64_t, std::less<>> computation_names_;
  std::vector<std::string> reducer_text_;
  int64_t next_channel_ = 1;
};

}  // namespace loom::model
