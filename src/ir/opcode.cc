#include "ir/opcode.h"

#include <algorithm>
#include <array>

namespace loom::ir {
namespace {

struct OpcodeInfo {
  Opcode opcode;
  std::string_view name;
};

constexpr std::array kOpcodes = {
#define LOOM_INFO(e, name) OpcodeInfo{Opcode::e, name},
    LOOM_OPCODES(LOOM_INFO)
#undef LOOM_INFO
};

template <size_t N>
bool OneOf(Opcode opcode, const Opcode (&set)[N]) {
  return std::find(std::begin(set), std::end(set), opcode) != std::end(set);
}

}  // namespace

std::string_view OpcodeName(Opcode opcode) { return kOpcodes[static_cast<size_t>(opcode)].name; }

std::optional<Opcode> ParseOpcode(std::string_view name) {
  for (const OpcodeInfo& info : kOpcodes) {
    if (info.name == name) return info.opcode;
  }
  // Older dumps spell count-leading-zeros as "clz".
  if (name == "clz") return Opcode::kClz;
  return std::nullopt;
}

bool IsElementwiseUnary(Opcode opcode) {
  static constexpr Opcode kUnary[] = {Opcode::kAbs,
                                      Opcode::kCbrt,
                                      Opcode::kCeil,
                                      Opcode::kClz,
                                      Opcode::kCos,
                                      Opcode::kErf,
                                      Opcode::kExp,
                                      Opcode::kExpm1,
                                      Opcode::kFloor,
                                      Opcode::kImag,
                                      Opcode::kIsFinite,
                                      Opcode::kLog,
                                      Opcode::kLog1p,
                                      Opcode::kLogistic,
                                      Opcode::kNegate,
                                      Opcode::kNot,
                                      Opcode::kPopulationCount,
                                      Opcode::kReal,
                                      Opcode::kRoundNearestAfz,
                                      Opcode::kRoundNearestEven,
                                      Opcode::kRsqrt,
                                      Opcode::kSign,
                                      Opcode::kSin,
                                      Opcode::kSqrt,
                                      Opcode::kTan,
                                      Opcode::kTanh,
                                      Opcode::kCopy,
                                      Opcode::kReducePrecision};
  return OneOf(opcode, kUnary);
}

bool IsElementwiseBinary(Opcode opcode) {
  static constexpr Opcode kBinary[] = {Opcode::kAdd,
                                       Opcode::kAnd,
                                       Opcode::kAtan2,
                                       Opcode::kComplex,
                                       Opcode::kDivide,
                                       Opcode::kMaximum,
                                       Opcode::kMinimum,
                                       Opcode::kMultiply,
                                       Opcode::kOr,
                                       Opcode::kPower,
                                       Opcode::kRemainder,
                                       Opcode::kShiftLeft,
                                       Opcode::kShiftRightArithmetic,
                                       Opcode::kShiftRightLogical,
                                       Opcode::kSubtract,
                                       Opcode::kXor};
  return OneOf(opcode, kBinary);
}

bool IsCollective(Opcode opcode) {
  static constexpr Opcode kCollectives[] = {
      Opcode::kAllGather,         Opcode::kAllGatherStart,         Opcode::kAllReduce,
      Opcode::kAllReduceStart,    Opcode::kReduceScatter,          Opcode::kAllToAll,
      Opcode::kCollectivePermute, Opcode::kCollectivePermuteStart, Opcode::kCollectiveBroadcast,
      Opcode::kRaggedAllToAll};
  return OneOf(opcode, kCollectives);
}

bool IsAsyncStart(Opcode opcode) {
  static constexpr Opcode kStarts[] = {Opcode::kAllGatherStart, Opcode::kAllReduceStart,
                                       Opcode::kCollectivePermuteStart, Opcode::kAsyncStart,
                                       Opcode::kCopyStart};
  return OneOf(opcode, kStarts);
}

bool IsAsyncDone(Opcode opcode) {
  static constexpr Opcode kDones[] = {Opcode::kAllGatherDone, Opcode::kAllReduceDone,
                                      Opcode::kCollectivePermuteDone, Opcode::kAsyncDone,
                                      Opcode::kCopyDone};
  return OneOf(opcode, kDones);
}

int64_t MinimumOperandCount(Opcode op) {
  if (IsElementwiseBinary(op)) return 2;
  if (IsElementwiseUnary(op)) return 1;
  switch (op) {
    case Opcode::kBatchNormInference:
    case Opcode::kBatchNormGrad:
      return 5;
    case Opcode::kSelect:
    case Opcode::kClamp:
    case Opcode::kBatchNormTraining:
      return 3;
    case Opcode::kPad:
    case Opcode::kDot:
    case Opcode::kTriangularSolve:
    case Opcode::kStochasticConvert:
    case Opcode::kReduce:
    case Opcode::kDynamicUpdateSlice:
      return 2;
    case Opcode::kCopy:
    case Opcode::kCholesky:
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
    case Opcode::kReshape:
    case Opcode::kBitcast:
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kReverse:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
    case Opcode::kGetTupleElement:
    case Opcode::kWhile:
    case Opcode::kConditional:
    case Opcode::kOptimizationBarrier:
    case Opcode::kAddDependency:
    case Opcode::kAsyncUpdate:
    case Opcode::kAsyncDone:
    case Opcode::kTopK:
    case Opcode::kRngBitGenerator:
      return 1;
    default:
      return 0;
  }
}

}  // namespace loom::ir
