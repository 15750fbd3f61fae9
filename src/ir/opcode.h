// XLA's whole opcode list, so the parser can tell an opcode Loom does not
// interpret (convolution, sort, ...) from a word that is no opcode at all.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom::ir {

#define LOOM_OPCODES(X)                                  \
  X(kAbs, "abs")                                         \
  X(kAdd, "add")                                         \
  X(kAddDependency, "add-dependency")                    \
  X(kAfterAll, "after-all")                              \
  X(kAllGather, "all-gather")                            \
  X(kAllGatherDone, "all-gather-done")                   \
  X(kAllGatherStart, "all-gather-start")                 \
  X(kAllReduce, "all-reduce")                            \
  X(kAllReduceDone, "all-reduce-done")                   \
  X(kAllReduceStart, "all-reduce-start")                 \
  X(kAllToAll, "all-to-all")                             \
  X(kAnd, "and")                                         \
  X(kAsyncDone, "async-done")                            \
  X(kAsyncStart, "async-start")                          \
  X(kAsyncUpdate, "async-update")                        \
  X(kAtan2, "atan2")                                     \
  X(kBatchNormGrad, "batch-norm-grad")                   \
  X(kBatchNormInference, "batch-norm-inference")         \
  X(kBatchNormTraining, "batch-norm-training")           \
  X(kBitcast, "bitcast")                                 \
  X(kBitcastConvert, "bitcast-convert")                  \
  X(kBroadcast, "broadcast")                             \
  X(kCall, "call")                                       \
  X(kCbrt, "cbrt")                                       \
  X(kCeil, "ceil")                                       \
  X(kCholesky, "cholesky")                               \
  X(kClamp, "clamp")                                     \
  X(kClz, "count-leading-zeros")                         \
  X(kCollectiveBroadcast, "collective-broadcast")        \
  X(kCollectivePermute, "collective-permute")            \
  X(kCollectivePermuteDone, "collective-permute-done")   \
  X(kCollectivePermuteStart, "collective-permute-start") \
  X(kCompare, "compare")                                 \
  X(kComplex, "complex")                                 \
  X(kConcatenate, "concatenate")                         \
  X(kConditional, "conditional")                         \
  X(kConstant, "constant")                               \
  X(kConvert, "convert")                                 \
  X(kConvolution, "convolution")                         \
  X(kCopy, "copy")                                       \
  X(kCopyDone, "copy-done")                              \
  X(kCopyStart, "copy-start")                            \
  X(kCos, "cosine")                                      \
  X(kCustomCall, "custom-call")                          \
  X(kDivide, "divide")                                   \
  X(kDomain, "domain")                                   \
  X(kDot, "dot")                                         \
  X(kDynamicReshape, "dynamic-reshape")                  \
  X(kDynamicSlice, "dynamic-slice")                      \
  X(kDynamicUpdateSlice, "dynamic-update-slice")         \
  X(kErf, "erf")                                         \
  X(kExp, "exponential")                                 \
  X(kExpm1, "exponential-minus-one")                     \
  X(kFft, "fft")                                         \
  X(kFloor, "floor")                                     \
  X(kFusion, "fusion")                                   \
  X(kGather, "gather")                                   \
  X(kGetDimensionSize, "get-dimension-size")             \
  X(kGetTupleElement, "get-tuple-element")               \
  X(kImag, "imag")                                       \
  X(kInfeed, "infeed")                                   \
  X(kIota, "iota")                                       \
  X(kIsFinite, "is-finite")                              \
  X(kLog, "log")                                         \
  X(kLog1p, "log-plus-one")                              \
  X(kLogistic, "logistic")                               \
  X(kMap, "map")                                         \
  X(kMaximum, "maximum")                                 \
  X(kMinimum, "minimum")                                 \
  X(kMultiply, "multiply")                               \
  X(kNegate, "negate")                                   \
  X(kNot, "not")                                         \
  X(kOptimizationBarrier, "opt-barrier")                 \
  X(kOr, "or")                                           \
  X(kOutfeed, "outfeed")                                 \
  X(kPad, "pad")                                         \
  X(kParameter, "parameter")                             \
  X(kPartitionId, "partition-id")                        \
  X(kPopulationCount, "popcnt")                          \
  X(kPower, "power")                                     \
  X(kRaggedAllToAll, "ragged-all-to-all")                \
  X(kRaggedDot, "ragged-dot")                            \
  X(kReal, "real")                                       \
  X(kRecv, "recv")                                       \
  X(kRecvDone, "recv-done")                              \
  X(kReduce, "reduce")                                   \
  X(kReducePrecision, "reduce-precision")                \
  X(kReduceScatter, "reduce-scatter")                    \
  X(kReduceWindow, "reduce-window")                      \
  X(kRemainder, "remainder")                             \
  X(kReplicaId, "replica-id")                            \
  X(kReshape, "reshape")                                 \
  X(kReverse, "reverse")                                 \
  X(kRng, "rng")                                         \
  X(kRngBitGenerator, "rng-bit-generator")               \
  X(kRngGetAndUpdateState, "rng-get-and-update-state")   \
  X(kRoundNearestAfz, "round-nearest-afz")               \
  X(kRoundNearestEven, "round-nearest-even")             \
  X(kRsqrt, "rsqrt")                                     \
  X(kScatter, "scatter")                                 \
  X(kSelect, "select")                                   \
  X(kSelectAndScatter, "select-and-scatter")             \
  X(kSend, "send")                                       \
  X(kSendDone, "send-done")                              \
  X(kSetDimensionSize, "set-dimension-size")             \
  X(kShiftLeft, "shift-left")                            \
  X(kShiftRightArithmetic, "shift-right-arithmetic")     \
  X(kShiftRightLogical, "shift-right-logical")           \
  X(kSign, "sign")                                       \
  X(kSin, "sine")                                        \
  X(kSlice, "slice")                                     \
  X(kSort, "sort")                                       \
  X(kSqrt, "sqrt")                                       \
  X(kStochasticConvert, "stochastic-convert")            \
  X(kSubtract, "subtract")                               \
  X(kTan, "tan")                                         \
  X(kTanh, "tanh")                                       \
  X(kTopK, "topk")                                       \
  X(kTranspose, "transpose")                             \
  X(kTriangularSolve, "triangular-solve")                \
  X(kTuple, "tuple")                                     \
  X(kWhile, "while")                                     \
  X(kXor, "xor")

enum class Opcode {
#define LOOM_ENUM(e, name) e,
  LOOM_OPCODES(LOOM_ENUM)
#undef LOOM_ENUM
};

std::string_view OpcodeName(Opcode opcode);
std::optional<Opcode> ParseOpcode(std::string_view name);

bool IsElementwiseUnary(Opcode opcode);
bool IsElementwiseBinary(Opcode opcode);
// all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute and
// their -start forms, collective-broadcast, ragged-all-to-all.
bool IsCollective(Opcode opcode);
bool IsAsyncStart(Opcode opcode);
bool IsAsyncDone(Opcode opcode);
// The fewest operands an op of this opcode reads when it runs, so that an
// interpreter given a module that skipped the verifier can refuse it
// instead of reading past its operands (the verifier's arity checks are
// stricter).
int64_t MinimumOperandCount(Opcode opcode);

}  // namespace loom::ir
