// A computation lowered once for a device: a flat list of steps, one per
// instruction in text order (the schedule), each reading slots (slot i holds
// instruction i's value) and naming the slots it is the last reader of, so
// that the executor drops a buffer right after its last use, as XLA's buffer
// assignment does. Lowering also decides, per step, what needs no device work
// (reshape, bitcast, copy, tuple, get-tuple-element and contiguous slices
// name their operand's bytes), which operand's buffer the result may take
// over when nothing else holds it (element-wise ops, convert of one width,
// dynamic-update-slice: in place), and it uploads constants once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/device/device.h"
#include "ir/computation.h"

namespace loom::exec {

// A value of the executor: an array on the device, or a tuple of values.
class Value {
 public:
  Value() = default;
  static Value OfArray(Array array) {
    Value value;
    value.shape_ = array.shape;
    value.array_ = std::move(array);
    return value;
  }
  static Value OfTuple(const ir::Shape* shape, std::vector<Value> elements) {
    Value value;
    value.shape_ = shape;
    value.tuple_ = true;
    value.elements_ = std::move(elements);
    return value;
  }

  bool defined() const { return shape_ != nullptr; }
  bool is_tuple() const { return tuple_; }
  const ir::Shape* shape() const { return shape_; }
  const Array& array() const { return array_; }
  const std::vector<Value>& elements() const { return elements_; }

 private:
  const ir::Shape* shape_ = nullptr;
  bool tuple_ = false;
  Array array_;
  std::vector<Value> elements_;
};

enum class StepKind : uint8_t {
  kParameter,
  kConstant,
  kDeviceOp,    // one Device::Run
  kAlias,       // the operand's bytes under the result's shape
  kSliceAlias,  // a contiguous piece of the operand's bytes
  kTuple,
  kGetTupleElement,
  kWhile,
  kConditional,
  kCall,              // call, fusion
  kReduce,            // reduce with a reducer computation the device cannot run
  kReduceWindow,      // reduce-window, likewise
  kSelectAndScatter,  // select-and-scatter, likewise
  kSort,              // sort, likewise (several operands, or a comparator of more ops)
  kScatter,           // scatter with a combiner (or of operands) the device cannot run
  kTopK,              // topk: values and positions, a tuple no device op returns
  kRngBitGenerator,   // rng-bit-generator: (state, bits), likewise
  kBatchNorm,         // batch-norm-training, -inference, -grad (two of them tuples)
  kArrayKernel,       // triangular-solve, cholesky, stochastic-convert: a CPU kernel, a fresh array
  kTopKByCalls,       // custom-call TopK whose comparator is more than one compare
  kCopyStart,         // copy-start: (the copy, the operand, a context), the copy an alias
  kCopyDone,          // copy-done: the copy
  kAsyncStart,        // a generic async-start: runs its callee at once
  kAsyncUpdate,
  kAsyncDone,
  kCollective,       // a synchronous collective
  kCollectiveStart,  // posts a collective (its -start, or an async-start wrapping one)
  kCollectiveDone,
  kPartitionId,
  kReplicaId,
  kToken,
  kUnsupported,  // fails when reached, with `error`
};

struct Program;

struct Step {
  const ir::Instruction* instruction = nullptr;
  StepKind kind = StepKind::kUnsupported;
  std::vector<int32_t> operands;  // slots
  std::vector<int32_t> release;   // slots whose last reader this step is
  // The operand (index into `operands`) whose buffer the result may take
  // when this step is its last reader and nothing else holds it; -1: none.
  int32_t reuse_operand = -1;
  int64_t alias_offset = 0;            // kSliceAlias: bytes into the operand
  std::shared_ptr<const Value> value;  // kConstant
  std::vector<const Program*> called;  // while: condition, body; conditional: branches; ...
  std::string error;                   // kUnsupported
};

struct Program {
  const ir::Computation* computation = nullptr;
  std::vector<Step> steps;
  int32_t root = -1;
  std::vector<int32_t> parameter_slots;  // by parameter number
};

}  // namespace loom::exec
