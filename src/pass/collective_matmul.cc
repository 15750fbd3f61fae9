#include "pass/collective_matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "analysis/flops.h"
#include "ir/async.h"
#include "ir/builder.h"
#include "ir/reduction.h"
#include "ir/verifier.h"
#include "pass/ring/all_to_all_exchange.h"
#include "pass/ring/block_ops.h"
#include "pass/ring/chunked_reduction.h"
#include "pass/ring/dimension_trace.h"
#include "pass/ring/dot_geometry.h"
#include "pass/ring/ring_group.h"
#include "pass/ring/ring_steps.h"
#include "support/units.h"

namespace loom::pass {

namespace {

using ir::Builder;
using ir::Instruction;
using ir::Opcode;

// ---------------------------------------------------------------------------
// Matching

// all-gather [-> traceable ops] -> operand `operand` of a dot.
struct GatherMatch {
  Instruction* gather = nullptr;
  std::vector<Instruction*> chain;  // the gather's user first, the dot's operand last
  std::vector<int64_t> chain_dims;  // the gathered dimension in each chain result
  Instruction* dot = nullptr;
  int64_t operand = 0;      // 0: lhs, 1: rhs
  int64_t operand_dim = 0;  // the gathered dimension of the dot's operand
  OperandDim dim;
  bool other_users = false;  // the gather or a chain value has other users
  RingGroup ring;
  // Whether each window may travel as pieces of its gathered dimension: the
  // chain keeps every dimension in place and the dimension is not
  // contracted (a piece's product is then a block of the output).
  bool step_chunks_allowed = false;
  // Where the gathered value feeds other dots too (each through a chain of
  // its own): those dots' matches, after this one in the computation's
  // order. Each gets a ring of its own from the same shard, and the
  // all-gather goes once none is left.
  std::vector<GatherMatch> siblings;
  // Whether the ring also writes each window into the gathered value, which
  // then replaces the all-gather for its other users (GatherOtherUsers::kCache).
  bool cache = false;
};

// dot [-> traceable ops] -> reduce-scatter or all-reduce.
struct ScatterMatch {
  Instruction* dot = nullptr;
  std::vector<Instruction*> chain;  // the dot's user first, the collective's operand last
  std::vector<int64_t> chain_dims;  // the scattered dimension in each chain result
  Instruction* collective = nullptr;
  int64_t output_dim = 0;      // of the dot
  int64_t collective_dim = 0;  // of the collective's operand
  OutputDim dim;
  Opcode combine = Opcode::kAdd;  // the reduction, as an elementwise op
  RingGroup ring;
  // The blocks are what the executor's collective folds (exec/collectives.h):
  // a reduce-scatter's always; an all-reduce's when they are its contiguous
  // chunks, every dimension before the split being 1.
  bool blocks_are_chunks = true;
  // The dot's output dimension a chunked form would cut, when the chain
  // keeps dimensions in place (pass/ring/chunked_reduction.h).
  std::optional<int64_t> chunk_dim;
  // The dot's output dimension (not the split one) along which each ring
  // step may be cut into pieces, when the chain keeps dimensions in place.
  std::optional<int64_t> step_chunk_dim;
};

// A collective next to a dot, matched or declined.
template <typename Match>
struct Found {
  Instruction* collective = nullptr;
  Expected<Match> match;
};

std::optional<Found<GatherMatch>> MatchGather(Instruction& dot, int64_t operand,
                                              RingGroups& rings) {
  auto [value, chain] = TraceableChainAbove(dot.operand(operand));
  if (ir::CollectiveOpcodeOfDone(*value) == Opcode::kAllGather) {
    return Found<GatherMatch>{value, Error{"the all-gather is already asynchronous (start/done); "
                                           "run collective-matmul before async-collectives"}};
  }
  if (value->opcode() != Opcode::kAllGather) return std::nullopt;
  Found<GatherMatch> found{value, Error{}};
  const auto decline = [&](std::string reason) {
    found.match = Error{std::move(reason)};
    return found;
  };
  Instruction& gather = *value;
  if (gather.operand_count() != 1 || !IsPlainArray(gather.shape()) || !gather.attrs().dimensions ||
      gather.attrs().dimensions->size() != 1) {
    return decline("the all-gather is not a single array gathered along one dimension");
  }
  Expected<RingGroup> ring = rings.Of(gather);
  if (!ring.ok()) return decline(ring.error().message);
  const int64_t gathered = gather.attrs().dimensions->front();
  ChainTrace trace = TraceChain(chain, gathered, ring->size());
  if (trace.stuck != nullptr) {
    return decline(fmt::format("the gathered dimension cannot be traced through %{} ({})",
                               trace.stuck->name(), ir::OpcodeName(trace.stuck->opcode())));
  }
  if (HasControlDependencies(gather) || HasControlDependencies(dot)) {
    return decline("the all-gather or the dot has control dependencies");
  }
  const int64_t dim = trace.dims.empty() ? gathered : trace.dims.back();
  GatherMatch match{&gather,
                    chain,
                    std::move(trace.dims),
                    &dot,
                    operand,
                    dim,
                    {},
                    ChainHasOtherUsers(gather, chain, dot),
                    *ring};
  match.dim = ClassifyOperandDim(dot, operand, dim);
  match.step_chunks_allowed = match.dim.dim_class != DimClass::kContracting &&
                              std::all_of(chain.begin(), chain.end(), [](const Instruction* op) {
                                return KeepsDimensions(*op);
                              });
  found.match = std::move(match);
  return found;
}

// Every dot the all-gather of `primary` feeds, each through a chain of
// traceable ops that nothing else reads, matched (MatchGather) and in the
// computation's order; an error naming what else reads the gathered value
// when something does.
Expected<std::vector<GatherMatch>> FindGatherConsumers(const GatherMatch& primary,
                                                       RingGroups& rings) {
  Instruction& gather = *primary.gather;
  ir::Computation& computation = *gather.parent();
  const auto other_user = [](const Instruction& user) {
    return Error{fmt::format("the gathered value has other users (%{}, {}) than dots", user.name(),
                             ir::OpcodeName(user.opcode()))};
  };
  const auto uses_once = [](const Instruction& user, const Instruction& value) {
    return std::count(user.operands().begin(), user.operands().end(), &value) == 1;
  };
  if (computation.root() == &gather) return other_user(gather);
  std::vector<GatherMatch> consumers;
  for (Instruction* user : computation.Users(&gather)) {
    if (!uses_once(*user, gather)) return other_user(*user);
    Instruction* value = &gather;
    Instruction* next = user;
    while (IsTraceableOp(*next)) {
      const std::vector<Instruction*> users = computation.Users(next);
      if (computation.root() == next || users.size() != 1 || !uses_once(*users.front(), *next)) {
        return other_user(*next);
      }
      value = next;
      next = users.front();
    }
    if (next->opcode() != Opcode::kDot) return other_user(*next);
    const int64_t operand = next->operand(0) == value ? 0 : 1;
    std::optional<Found<GatherMatch>> found = MatchGather(*next, operand, rings);
    if (!found || !found->match.ok()) {
      return Error{fmt::format("the gathered value also feeds %{}, which cannot take a ring ({})",
                               next->name(),
                               found ? found->match.error().message : "no all-gather above it")};
    }
    consumers.push_back(std::move(*found->match));
  }
  std::unordered_map<const Instruction*, size_t> position;
  for (const auto& instruction : computation.instructions()) {
    position.emplace(instruction.get(), position.size());
  }
  std::sort(consumers.begin(), consumers.end(), [&](const GatherMatch& a, const GatherMatch& b) {
    return position.at(a.dot) < position.at(b.dot);
  });
  for (size_t i = 1; i < consumers.size(); ++i) {
    if (consumers[i].dot == consumers[i - 1].dot) {
      return Error{
          fmt::format("the gathered value feeds both operands of %{}", consumers[i].dot->name())};
    }
  }
  return consumers;
}

// The elementwise op a reduction computation applies, when it is one
// commutative binary op of its two parameters.
std::optional<Opcode> ReductionOp(const Instruction& collective) {
  const ir::Computation* reducer = collective.called("to_apply");
  if (reducer == nullptr) return std::nullopt;
  return ir::CommutativeBinaryReducer(*reducer);
}

bool IsScatterChainOp(const Instruction& op) {
  return IsTraceableOp(op) && op.opcode() != Opcode::kTranspose;
}

// Traces dot output dimension `output_dim` down the chain; the dimension of
// the collective's operand it becomes, or nullopt.
std::optional<int64_t> TraceDown(const ScatterMatch& match, int64_t output_dim,
                                 std::vector<int64_t>& chain_dims) {
  const int64_t n = match.ring.size();
  if (match.dot->shape().dim(output_dim) % n != 0) return std::nullopt;
  ChainTrace trace = TraceChain(match.chain, output_dim, n);
  if (trace.stuck != nullptr) return std::nullopt;
  chain_dims = std::move(trace.dims);
  return chain_dims.empty() ? output_dim : chain_dims.back();
}

std::optional<Found<ScatterMatch>> MatchScatter(Instruction& dot, RingGroups& rings) {
  std::vector<Instruction*> chain;
  Instruction* value = &dot;
  const ir::Computation& computation = *dot.parent();
  Instruction* collective = nullptr;
  while (collective == nullptr) {
    const auto users = computation.Users(value);
    if (users.size() > 1) {
      // A collective among several users: the whole product is needed anyway.
      for (Instruction* user : users) {
        if (user->opcode() == Opcode::kReduceScatter || user->opcode() == Opcode::kAllReduce) {
          return Found<ScatterMatch>{
              user, Error{fmt::format("%{} has other users: the whole product is needed anyway",
                                      value->name())}};
        }
      }
    }
    if (users.size() != 1 || computation.root() == value) return std::nullopt;
    Instruction* user = users.front();
    if (const auto started = ir::CollectiveOpcodeOfStart(*user);
        started == Opcode::kAllReduce || started == Opcode::kReduceScatter) {
      return Found<ScatterMatch>{user, Error{"the collective is already asynchronous "
                                             "(start/done); run collective-matmul before "
                                             "async-collectives"}};
    }
    if (user->opcode() == Opcode::kReduceScatter || user->opcode() == Opcode::kAllReduce) {
      collective = user;
    } else if (IsScatterChainOp(*user)) {
      chain.push_back(user);
      value = user;
    } else {
      return std::nullopt;
    }
  }
  Found<ScatterMatch> found{collective, Error{}};
  const auto decline = [&](std::string reason) {
    found.match = Error{std::move(reason)};
    return found;
  };
  const bool all_reduce = collective->opcode() == Opcode::kAllReduce;
  if (collective->operand_count() != 1 || !IsPlainArray(collective->shape()) ||
      !IsPlainArray(dot.shape())) {
    return decline("the collective is not over a single array");
  }
  if (!all_reduce && collective->attrs().dimensions->size() != 1) {
    return decline("the reduce-scatter does not scatter exactly one dimension");
  }
  std::optional<Opcode> combine = ReductionOp(*collective);
  if (!combine) return decline("its reduction is not a single elementwise binary op");
  Expected<RingGroup> ring = rings.Of(*collective);
  if (!ring.ok()) return decline(ring.error().message);
  if (HasControlDependencies(*collective) || HasControlDependencies(dot)) {
    return decline("the dot or the collective has control dependencies");
  }
  ScatterMatch match{&dot, chain, {}, collective, 0, 0, {}, *combine, *ring};
  const ir::Shape& reduced = collective->operand(0)->shape();
  // A split: the dot's output dimension, the collective operand's, and the
  // dimension in every chain op between them.
  struct Split {
    int64_t output_dim;
    int64_t collective_dim;
    std::vector<int64_t> chain_dims;
  };
  std::optional<Split> chosen;
  for (int64_t d = 0; d < dot.shape().rank(); ++d) {
    std::vector<int64_t> dims;
    std::optional<int64_t> traced = TraceDown(match, d, dims);
    if (!traced) continue;
    if (!all_reduce) {
      if (*traced != collective->attrs().dimensions->front()) continue;
      chosen = Split{d, *traced, std::move(dims)};
      break;
    }
    // An all-reduce may be split along any dimension the group size divides.
    // Prefer one whose blocks are contiguous in memory: they are then the
    // chunks the executor's all-reduce folds (exec/collectives.h), so the
    // split is bitwise exact.
    const bool contiguous = ElementsBefore(reduced.dims(), *traced) == 1;
    if (!chosen || contiguous) chosen = Split{d, *traced, std::move(dims)};
    if (contiguous) break;
  }
  if (chosen) {
    match.output_dim = chosen->output_dim;
    match.collective_dim = chosen->collective_dim;
    match.chain_dims = std::move(chosen->chain_dims);
    match.dim = ClassifyOutputDim(dot, match.output_dim);
    match.blocks_are_chunks =
        !all_reduce || ElementsBefore(reduced.dims(), match.collective_dim) == 1;
    if (std::all_of(match.chain.begin(), match.chain.end(),
                    [](const Instruction* op) { return KeepsDimensions(*op); })) {
      if (!IsChunk(*collective)) {
        match.chunk_dim = ChunkDimension(dot, all_reduce ? -1 : match.output_dim);
      }
      match.step_chunk_dim = ChunkDimension(dot, match.output_dim);
    }
    found.match = std::move(match);
    return found;
  }
  return decline(all_reduce
                     ? fmt::format("no output dimension of the dot is divisible by the group "
                                   "size {} and traceable to the all-reduce",
                                   ring->size())
                     : "the scattered dimension cannot be traced back to an output dimension "
                       "of the dot");
}

// ---------------------------------------------------------------------------
// Emission helpers

bool IsNarrowFloat(ir::PrimitiveType type) {
  return ir::IsFloatingPoint(type) && ir::PrimitiveTypeBits(type) < 32;
}

std::string_view DirectionName(RingDirection direction) {
  return direction == RingDirection::kBidirectional ? "bidirectional" : "unidirectional";
}

std::string_view FormName(RingForm form) { return form == RingForm::kLoop ? "loop" : "unrolled"; }

// ---------------------------------------------------------------------------
// all-gather -> dot

// How many pieces each window travels in: `step_chunks` where the match
// allows it and it divides the shard's gathered dimension, else 1.
int64_t PiecesPerWindow(const GatherMatch& match, int64_t step_chunks) {
  if (step_chunks < 2 || !match.step_chunks_allowed) return 1;
  const int64_t extent =
      match.gather->operand(0)->shape().dim(match.gather->attrs().dimensions->front());
  return extent % step_chunks == 0 ? step_chunks : 1;
}

class GatherRing {
 public:
  GatherRing(const GatherMatch& match, int64_t step_chunks, ir::NameTable& names)
      : m_(match), n_(match.ring.size()), k_(PiecesPerWindow(match, step_chunks)), names_(names) {}

  Status Emit(RingDirection direction, RingForm form) {
    Builder builder(*m_.dot->parent(), names_, m_.dot);
    RingValues values;
    LOOM_ASSIGN_OR_RETURN(values.position, m_.ring.EmitPosition(builder));
    values.invariants = {m_.dot->operand(1 - m_.operand)};
    const ir::PrimitiveType type = ResultType();
    LOOM_ASSIGN_OR_RETURN(Instruction * result,
                          builder.Zeros(ir::Shape(type, m_.dot->shape().dims())));
    LOOM_ASSIGN_OR_RETURN(std::vector<Instruction*> pieces, ShardPieces(builder));
    // The state after the windows: [the cache,] the result.
    std::vector<Instruction*> results = {result};
    if (m_.cache) {
      LOOM_ASSIGN_OR_RETURN(Instruction * cache, builder.Zeros(m_.gather->shape()));
      results.insert(results.begin(), cache);
    }
    if (direction == RingDirection::kBidirectional && n_ >= 3) {
      LOOM_RETURN_IF_ERROR(EmitBidirectional(builder, form, pieces, results, values));
    } else {
      LOOM_RETURN_IF_ERROR(EmitUnidirectional(builder, form, pieces, results, values));
    }
    Instruction* out = values.state.back();
    if (out->shape().type() != m_.dot->shape().type()) {
      LOOM_ASSIGN_OR_RETURN(out, builder.Convert(out, m_.dot->shape().type()));
    }
    ReplaceByRewrite(builder, m_.dot, out, m_.chain.empty() ? m_.gather : m_.chain.back());
    if (m_.cache) return ServeOtherUsersFromCache(values.state[values.state.size() - 2]);
    return Status{};
  }

 private:
  // Contracting windows sum N partial products: in f32 when the dot's
  // result is a narrower float, as the dot itself accumulates.
  ir::PrimitiveType ResultType() const {
    const ir::PrimitiveType type = m_.dot->shape().type();
    if (m_.dim.dim_class == DimClass::kContracting && IsNarrowFloat(type)) {
      return ir::PrimitiveType::kF32;
    }
    return type;
  }

  // The device's shard as the k pieces of its gathered dimension that
  // travel separately (the shard itself when steps are whole).
  Expected<std::vector<Instruction*>> ShardPieces(Builder& builder) const {
    Instruction* shard = m_.gather->operand(0);
    if (k_ == 1) return std::vector<Instruction*>{shard};
    const int64_t gathered = m_.gather->attrs().dimensions->front();
    std::vector<Instruction*> pieces;
    for (int64_t c = 0; c < k_; ++c) {
      LOOM_ASSIGN_OR_RETURN(Instruction * piece,
                            SliceBlock(builder, shard, gathered, builder.S32(c), k_));
      pieces.push_back(piece);
    }
    return pieces;
  }

  // The gathered value the ring cached replaces the all-gather for its
  // other users, which move after the ring (the match checked that the
  // ring's inputs read none of them).
  Status ServeOtherUsersFromCache(Instruction* cache) const {
    ir::Computation& computation = *cache->parent();
    const std::string gather = m_.gather->name();
    computation.ReplaceAllUsesWith(m_.gather, cache);
    computation.RemoveInstruction(m_.gather);
    if (!computation.OrderDefinitionsFirst()) {
      return Error{fmt::format("internal: caching %{}'s windows made a cycle in {}", gather,
                               computation.name())};
    }
    return Status{};
  }

  // Multiplies `window` (piece `piece` of shard `block` of the gathered
  // operand) into the result (the state's last value) and, when caching,
  // writes it into the cache (the one before).
  Status Multiply(Builder& builder, RingValues& v, Instruction* window, Instruction* block,
                  int64_t piece) const {
    const int64_t blocks = n_ * k_;
    LOOM_ASSIGN_OR_RETURN(Instruction * index, Piece(builder, block, k_, piece));
    if (m_.cache) {
      Instruction*& cache = v.state[v.state.size() - 2];
      LOOM_ASSIGN_OR_RETURN(cache, UpdateBlock(builder, cache, window,
                                               m_.gather->attrs().dimensions->front(), index));
    }
    Instruction* other = v.invariants[0];
    Instruction* result = v.state.back();
    LOOM_ASSIGN_OR_RETURN(window,
                          ReplayChainOnBlock(builder, m_.chain, m_.chain_dims, window, blocks));
    if (m_.dim.other_operand_dim) {
      LOOM_ASSIGN_OR_RETURN(other,
                            SliceBlock(builder, other, *m_.dim.other_operand_dim, index, blocks));
    }
    Instruction* lhs = m_.operand == 0 ? window : other;
    Instruction* rhs = m_.operand == 0 ? other : window;
    LOOM_ASSIGN_OR_RETURN(Instruction * partial,
                          PartialDot(builder, *m_.dot, lhs, rhs, result->shape().type()));
    if (m_.dim.dim_class == DimClass::kContracting) {
      LOOM_ASSIGN_OR_RETURN(v.state.back(), builder.Binary(Opcode::kAdd, result, partial));
    } else {
      LOOM_ASSIGN_OR_RETURN(v.state.back(),
                            UpdateBlock(builder, result, partial, *m_.dim.output_dim, index));
    }
    return Status{};
  }

  // Step i: multiply window (r+i) mod N, passing it to the predecessor
  // first unless it is the last step. State: (window pieces, [cache,]
  // result).
  Status EmitUnidirectional(Builder& builder, RingForm form, std::vector<Instruction*> pieces,
                            const std::vector<Instruction*>& results, RingValues& values) const {
    values.state = std::move(pieces);
    values.state.insert(values.state.end(), results.begin(), results.end());
    const auto step = [this](bool send) {
      return [this, send](Builder& b, Instruction* i, RingValues& v) -> Status {
        Instruction* block = nullptr;
        for (int64_t c = 0; c < k_; ++c) {
          Instruction* window = v.state[static_cast<size_t>(c)];
          if (send) {
            LOOM_ASSIGN_OR_RETURN(v.state[static_cast<size_t>(c)],
                                  m_.ring.EmitShift(b, window, true));
          }
          if (block == nullptr) {
            LOOM_ASSIGN_OR_RETURN(block, Block(b, v.position, i, n_));
          }
          LOOM_RETURN_IF_ERROR(Multiply(b, v, window, block, c));
        }
        return Status{};
      };
    };
    LOOM_RETURN_IF_ERROR(EmitSteps(builder, form, "ag", 0, n_ - 1, step(true), values));
    return EmitSteps(builder, RingForm::kUnrolled, "ag", n_ - 1, 1, step(false), values);
  }

  // Step 0 multiplies the own shard and sends it both ways; step j then
  // multiplies shard r+j (clockwise, from the successor) and r-j (from the
  // predecessor). N-1 shards: ceil((N-1)/2) clockwise, the rest the other
  // way. State: (clockwise window pieces, counter-clockwise window pieces,
  // [cache,] result).
  Status EmitBidirectional(Builder& builder, RingForm form, std::vector<Instruction*> pieces,
                           const std::vector<Instruction*>& results, RingValues& values) const {
    const int64_t clockwise = n_ / 2;      // ceil((N-1)/2)
    const int64_t counter = (n_ - 1) / 2;  // floor((N-1)/2)
    const size_t ccw_slot = static_cast<size_t>(k_);
    values.state = pieces;
    values.state.insert(values.state.end(), pieces.begin(), pieces.end());
    values.state.insert(values.state.end(), results.begin(), results.end());
    const auto first = [this, ccw_slot](Builder& b, Instruction* i, RingValues& v) -> Status {
      Instruction* block = nullptr;
      for (int64_t c = 0; c < k_; ++c) {
        const size_t cw = static_cast<size_t>(c);
        Instruction* own = v.state[cw];
        LOOM_ASSIGN_OR_RETURN(v.state[cw], m_.ring.EmitShift(b, own, true));
        LOOM_ASSIGN_OR_RETURN(v.state[ccw_slot + cw], m_.ring.EmitShift(b, own, false));
        if (block == nullptr) {
          LOOM_ASSIGN_OR_RETURN(block, Block(b, v.position, i, n_));
        }
        LOOM_RETURN_IF_ERROR(Multiply(b, v, own, block, c));
      }
      return Status{};
    };
    const auto step = [=, this](bool send_cw, bool cw, bool send_ccw, bool ccw) {
      return [=, this](Builder& b, Instruction* j, RingValues& v) -> Status {
        Instruction* cw_block = nullptr;
        Instruction* ccw_block = nullptr;
        for (int64_t c = 0; c < k_; ++c) {
          const size_t cw_slot = static_cast<size_t>(c);
          Instruction* cw_window = v.state[cw_slot];
          Instruction* ccw_window = v.state[ccw_slot + cw_slot];
          if (send_cw) {
            LOOM_ASSIGN_OR_RETURN(v.state[cw_slot], m_.ring.EmitShift(b, cw_window, true));
          }
          if (send_ccw) {
            LOOM_ASSIGN_OR_RETURN(v.state[ccw_slot + cw_slot],
                                  m_.ring.EmitShift(b, ccw_window, false));
          }
          if (cw) {
            if (cw_block == nullptr) {
              LOOM_ASSIGN_OR_RETURN(cw_block, Block(b, v.position, j, n_));
            }
            LOOM_RETURN_IF_ERROR(Multiply(b, v, cw_window, cw_block, c));
          }
          if (ccw) {
            if (ccw_block == nullptr) {
              LOOM_ASSIGN_OR_RETURN(Instruction * back, Backwards(b, j, n_));
              LOOM_ASSIGN_OR_RETURN(ccw_block, Block(b, v.position, back, n_));
            }
            LOOM_RETURN_IF_ERROR(Multiply(b, v, ccw_window, ccw_block, c));
          }
        }
        return Status{};
      };
    };
    LOOM_RETURN_IF_ERROR(EmitSteps(builder, RingForm::kUnrolled, "ag", 0, 1, first, values));
    // Steps 1 .. counter-1 send and multiply both ways: the loop.
    const int64_t middle = std::max<int64_t>(counter - 1, 0);
    LOOM_RETURN_IF_ERROR(
        EmitSteps(builder, form, "ag", 1, middle, step(true, true, true, true), values));
    for (int64_t j = std::max<int64_t>(counter, 1); j <= clockwise; ++j) {
      LOOM_RETURN_IF_ERROR(EmitSteps(builder, RingForm::kUnrolled, "ag", j, 1,
                                     step(j < clockwise, true, j < counter, j <= counter), values));
    }
    return Status{};
  }

  const GatherMatch& m_;
  const int64_t n_;
  const int64_t k_;  // pieces per window
  ir::NameTable& names_;
};

// ---------------------------------------------------------------------------
// dot -> reduce-scatter / all-reduce

// How many pieces each step's partial sum travels in: `step_chunks` where
// the match has a piece dimension that it divides, else 1.
int64_t PiecesPerStep(const ScatterMatch& match, int64_t step_chunks) {
  if (step_chunks < 2 || !match.step_chunk_dim) return 1;
  return match.dot->shape().dim(*match.step_chunk_dim) % step_chunks == 0 ? step_chunks : 1;
}

class ScatterRing {
 public:
  ScatterRing(const ScatterMatch& match, int64_t step_chunks, ir::NameTable& names)
      : m_(match), n_(match.ring.size()), k_(PiecesPerStep(match, step_chunks)), names_(names) {}

  Status Emit(RingDirection direction, RingForm form) {
    Builder builder(*m_.collective->parent(), names_, m_.collective);
    RingValues values;
    LOOM_ASSIGN_OR_RETURN(values.position, m_.ring.EmitPosition(builder));
    LOOM_RETURN_IF_ERROR(OperandPieces(builder, values));
    if (direction == RingDirection::kBidirectional && n_ >= 3) {
      LOOM_RETURN_IF_ERROR(EmitBidirectional(builder, form, values));
    } else {
      LOOM_RETURN_IF_ERROR(EmitUnidirectional(builder, form, values));
    }
    Instruction* out = values.state.back();
    if (m_.collective->opcode() == Opcode::kAllReduce && !gathered_by_piece_) {
      LOOM_ASSIGN_OR_RETURN(out, GatherBack(builder, out));
    }
    ReplaceByRewrite(builder, m_.collective, out, m_.chain.empty() ? m_.dot : m_.chain.back());
    return Status{};
  }

 private:
  // The dot's operands as the ring's invariants: whole when steps are
  // whole; else, for the operand (or both, for a batch dimension) that
  // supplies the piece dimension, its k slices along it. lhs_[c] and rhs_[c]
  // index piece c's operands among them.
  Status OperandPieces(Builder& builder, RingValues& values) {
    const OutputDim piece_dim =
        k_ == 1 ? OutputDim{} : ClassifyOutputDim(*m_.dot, *m_.step_chunk_dim);
    const auto add = [&](int64_t operand, int64_t dim, std::vector<size_t>& index) -> Status {
      Instruction* value = m_.dot->operand(operand);
      for (int64_t c = 0; c < k_; ++c) {
        if (dim < 0 && c > 0) {
          index.push_back(index.back());
          continue;
        }
        if (dim >= 0) {
          LOOM_ASSIGN_OR_RETURN(
              value, SliceBlock(builder, m_.dot->operand(operand), dim, builder.S32(c), k_));
        }
        index.push_back(values.invariants.size());
        values.invariants.push_back(value);
      }
      return Status{};
    };
    LOOM_RETURN_IF_ERROR(add(0, k_ == 1 ? -1 : piece_dim.lhs_dim, lhs_));
    return add(1, k_ == 1 ? -1 : piece_dim.rhs_dim, rhs_);
  }

  // Block slices of the invariants already made for the step being
  // emitted: an operand that pieces do not cut is sliced once per block.
  using SliceCache = std::map<Instruction*, Instruction*>;

  // Piece `piece` of block `block` of this device's contribution: the dot
  // of the operand slices that produce it, then the chain.
  Expected<Instruction*> Contribution(Builder& builder, const RingValues& values,
                                      Instruction* block, int64_t piece, SliceCache& cache) const {
    Instruction* lhs = values.invariants[lhs_[static_cast<size_t>(piece)]];
    Instruction* rhs = values.invariants[rhs_[static_cast<size_t>(piece)]];
    if (k_ == 1) {
      return ProductBlock(builder, *m_.dot, lhs, rhs, m_.dim, m_.chain, m_.chain_dims, block, n_);
    }
    const auto slice = [&](Instruction* operand, int64_t dim) -> Expected<Instruction*> {
      if (dim < 0) return operand;
      Instruction*& sliced = cache[operand];
      if (sliced == nullptr) {
        LOOM_ASSIGN_OR_RETURN(sliced, SliceBlock(builder, operand, dim, block, n_));
      }
      return sliced;
    };
    LOOM_ASSIGN_OR_RETURN(lhs, slice(lhs, m_.dim.lhs_dim));
    LOOM_ASSIGN_OR_RETURN(rhs, slice(rhs, m_.dim.rhs_dim));
    LOOM_ASSIGN_OR_RETURN(Instruction * part,
                          PartialDot(builder, *m_.dot, lhs, rhs, m_.dot->shape().type()));
    // Pieces exist only where the chain keeps every dimension in place.
    return ReplayKeepingShape(builder, m_.chain, part);
  }

  // One stream's step, piece by piece: contribute piece c of block `block`,
  // combined with the partial sum of that piece received (state[first_slot
  // + c]) unless this is the stream's first step, and send the sum on.
  Status StreamStep(Builder& b, RingValues& v, size_t first_slot, Instruction* block, bool first,
                    bool to_predecessor) const {
    SliceCache cache;
    for (int64_t c = 0; c < k_; ++c) {
      const size_t slot = first_slot + static_cast<size_t>(c);
      LOOM_ASSIGN_OR_RETURN(Instruction * sum, Contribution(b, v, block, c, cache));
      if (!first) {
        LOOM_ASSIGN_OR_RETURN(sum, b.Binary(m_.combine, v.state[slot], sum));
      }
      LOOM_ASSIGN_OR_RETURN(v.state[slot], m_.ring.EmitShift(b, sum, to_predecessor));
    }
    return Status{};
  }

  // The device's own block plus what arrived (every stream's sum, in stream
  // order): the result, its pieces put together.
  Status Finish(Builder& b, RingValues& v) const {
    const size_t streams = v.state.size() / static_cast<size_t>(k_);
    std::vector<Instruction*> pieces;
    SliceCache cache;
    for (int64_t c = 0; c < k_; ++c) {
      LOOM_ASSIGN_OR_RETURN(Instruction * out, Contribution(b, v, v.position, c, cache));
      for (size_t stream = 0; stream < streams; ++stream) {
        Instruction* received = v.state[stream * static_cast<size_t>(k_) + static_cast<size_t>(c)];
        LOOM_ASSIGN_OR_RETURN(out, b.Binary(m_.combine, received, out));
      }
      if (gathered_by_piece_) {
        LOOM_ASSIGN_OR_RETURN(out, GatherBack(b, out));
      }
      pieces.push_back(out);
    }
    if (k_ == 1) {
      v.state = {pieces.front()};
      return Status{};
    }
    LOOM_ASSIGN_OR_RETURN(Instruction * whole, b.Concatenate(pieces, *m_.step_chunk_dim));
    v.state = {whole};
    return Status{};
  }

  // An all-reduce whose result no dot reads (through traceable ops) gathers
  // each piece of its block back as soon as the last step has summed it,
  // so that piece c's gather is in flight while piece c+1 is computed. One
  // whole gather is kept where a dot reads it: collective-matmul then
  // decomposes that all-gather against the dot.
  bool GathersByPiece() const {
    if (k_ == 1 || m_.collective->opcode() != Opcode::kAllReduce) return false;
    std::vector<const Instruction*> values = {m_.collective};
    while (!values.empty()) {
      const Instruction* value = values.back();
      values.pop_back();
      for (const Instruction* user : value->parent()->Users(value)) {
        if (user->opcode() == Opcode::kDot) return false;
        if (IsTraceableOp(*user)) values.push_back(user);
      }
    }
    return true;
  }

  // Step i contributes block (r-1-i) mod N and passes the sum to the
  // successor; after N-1 steps block r arrives home, summed in the order
  // r+1, r+2, ..., r: the ring order of the executor's reduce-scatter, so
  // the two agree bitwise when the partial products do. State: (received,
  // per piece).
  Status EmitUnidirectional(Builder& builder, RingForm form, RingValues& values) const {
    values.state.assign(static_cast<size_t>(k_), nullptr);
    const auto step = [this](bool first) {
      return [this, first](Builder& b, Instruction* i, RingValues& v) -> Status {
        LOOM_ASSIGN_OR_RETURN(Instruction * back, Backwards(b, i, n_ - 1));
        LOOM_ASSIGN_OR_RETURN(Instruction * block, Block(b, v.position, back, n_));
        return StreamStep(b, v, 0, block, first, false);
      };
    };
    LOOM_RETURN_IF_ERROR(EmitSteps(builder, RingForm::kUnrolled, "rs", 0, 1, step(true), values));
    LOOM_RETURN_IF_ERROR(EmitSteps(builder, form, "rs", 1, n_ - 2, step(false), values));
    return Finish(builder, values);
  }

  // Two streams: the one sent to predecessors collects block q from devices
  // q+a .. q+1, the other from q-b .. q-1 (a = ceil((N-1)/2), b the rest);
  // block r is then the own contribution plus both. Round j contributes
  // block r-a+j to the first stream and r+b-j to the second.
  // State: (received from successor, per piece; from predecessor, per piece).
  Status EmitBidirectional(Builder& builder, RingForm form, RingValues& values) const {
    const int64_t a = n_ / 2;
    const int64_t b_count = (n_ - 1) / 2;
    values.state.assign(2 * static_cast<size_t>(k_), nullptr);
    const auto round = [this, a, b_count](bool first, bool second_stream) {
      return [=, this](Builder& b, Instruction* j, RingValues& v) -> Status {
        LOOM_ASSIGN_OR_RETURN(Instruction * p_block, BlockAt(b, v.position, n_ - a, j, n_));
        LOOM_RETURN_IF_ERROR(StreamStep(b, v, 0, p_block, first, true));
        if (second_stream) {
          LOOM_ASSIGN_OR_RETURN(Instruction * back, Backwards(b, j, n_ + b_count));
          LOOM_ASSIGN_OR_RETURN(Instruction * s_block, Block(b, v.position, back, n_));
          LOOM_RETURN_IF_ERROR(StreamStep(b, v, static_cast<size_t>(k_), s_block, first, false));
        }
        return Status{};
      };
    };
    LOOM_RETURN_IF_ERROR(
        EmitSteps(builder, RingForm::kUnrolled, "rs", 0, 1, round(true, true), values));
    // Rounds 1 .. b-1 feed both streams: the loop.
    const int64_t middle = std::max<int64_t>(b_count - 1, 0);
    LOOM_RETURN_IF_ERROR(EmitSteps(builder, form, "rs", 1, middle, round(false, true), values));
    for (int64_t j = std::max<int64_t>(b_count, 1); j < a; ++j) {
      LOOM_RETURN_IF_ERROR(
          EmitSteps(builder, RingForm::kUnrolled, "rs", j, 1, round(false, false), values));
    }
    return Finish(builder, values);
  }

  // The all-reduce's second half: gather the reduced blocks back.
  // (Of one piece, when gathered by piece.)
  Expected<Instruction*> GatherBack(Builder& builder, Instruction* block) const {
    const Instruction& all_reduce = *m_.collective;
    std::vector<int64_t> dims = all_reduce.shape().dims();
    if (gathered_by_piece_) dims[static_cast<size_t>(*m_.step_chunk_dim)] /= k_;
    auto gather = std::make_unique<Instruction>(all_reduce.name() + ".gather", Opcode::kAllGather,
                                                ir::Shape(all_reduce.shape().type(), dims));
    gather->AppendOperand(block);
    ir::Attributes& attrs = gather->mutable_attrs();
    attrs.dimensions = std::vector<int64_t>{m_.collective_dim};
    attrs.replica_groups = all_reduce.attrs().replica_groups;
    attrs.use_global_device_ids = all_reduce.attrs().use_global_device_ids;
    if (all_reduce.attrs().channel_id) attrs.channel_id = names_.NextChannelId();
    return builder.Insert(std::move(gather));
  }

  const ScatterMatch& m_;
  const int64_t n_;
  const int64_t k_;  // pieces per step
  ir::NameTable& names_;
  std::vector<size_t> lhs_, rhs_;  // piece -> index among the invariants
  const bool gathered_by_piece_ = GathersByPiece();
};

// ---------------------------------------------------------------------------
// Driver

using AnyMatch = std::variant<GatherMatch, ScatterMatch, AllToAllMatch>;

struct Pending {
  Candidate candidate;
  AnyMatch match;
  GateVerdict verdict;
};

std::string DescribeGather(const GatherMatch& m) {
  std::string text =
      fmt::format("all-gather -> dot ({} {} dimension {}, N={})", m.operand == 0 ? "lhs" : "rhs",
                  DimClassName(m.dim.dim_class), m.operand_dim, m.ring.size());
  for (const GatherMatch& sibling : m.siblings) {
    text += fmt::format(" and -> %{} ({} {} dimension {})", sibling.dot->name(),
                        sibling.operand == 0 ? "lhs" : "rhs", DimClassName(sibling.dim.dim_class),
                        sibling.operand_dim);
  }
  if (m.cache) text += ", its windows cached for the gathered value's other users";
  return text;
}

std::string DescribeScatter(const ScatterMatch& m) {
  const bool all_reduce = m.collective->opcode() == Opcode::kAllReduce;
  return fmt::format("dot -> {} (output dimension {}, {}, N={})",
                     all_reduce ? "all-reduce" : "reduce-scatter", m.output_dim,
                     OutputDimName(m.dim), m.ring.size());
}

// What every candidate states about its pair.
Candidate CandidateOf(CandidateKind kind, const Instruction& collective, const Instruction& dot,
                      const RingGroup& ring, int64_t collective_bytes,
                      std::string_view dimension_class) {
  Candidate c;
  c.kind = kind;
  c.computation = dot.parent()->name();
  c.collective = collective.name();
  c.dot = dot.name();
  c.group_size = ring.size();
  c.collective_bytes = collective_bytes;
  c.dot_flops = analysis::DotFlops(dot);
  c.dimension_class = dimension_class;
  return c;
}

Candidate DescribeCandidate(const AnyMatch& any) {
  if (const auto* g = std::get_if<GatherMatch>(&any)) {
    Candidate c = CandidateOf(CandidateKind::kAllGather, *g->gather, *g->dot, g->ring,
                              g->gather->shape().ByteSize(), DimClassName(g->dim.dim_class));
    bool step_chunks_allowed = g->step_chunks_allowed;
    for (const GatherMatch& sibling : g->siblings) {
      c.dot_flops += analysis::DotFlops(*sibling.dot);
      step_chunks_allowed &= sibling.step_chunks_allowed;
    }
    if (step_chunks_allowed) {
      c.step_chunk_extent =
          g->gather->operand(0)->shape().dim(g->gather->attrs().dimensions->front());
    }
    return c;
  }
  if (const auto* x = std::get_if<AllToAllMatch>(&any)) {
    return CandidateOf(
        CandidateKind::kAllToAll, *x->exchange, *x->dot, x->ring, x->exchange->shape().ByteSize(),
        x->before_dot ? DimClassName(x->operand_class.dim_class) : OutputDimName(x->output_class));
  }
  const auto& s = std::get<ScatterMatch>(any);
  Candidate c =
      CandidateOf(s.collective->opcode() == Opcode::kAllReduce ? CandidateKind::kAllReduce
                                                               : CandidateKind::kReduceScatter,
                  *s.collective, *s.dot, s.ring, s.collective->operand(0)->shape().ByteSize(),
                  OutputDimName(s.dim));
  if (s.chunk_dim) c.chunk_extent = s.dot->shape().dim(*s.chunk_dim);
  if (s.step_chunk_dim) c.step_chunk_extent = s.dot->shape().dim(*s.step_chunk_dim);
  return c;
}

}  // namespace

std::string_view CandidateKindName(CandidateKind kind) {
  switch (kind) {
    case CandidateKind::kAllGather:
      return "all-gather";
    case CandidateKind::kReduceScatter:
      return "reduce-scatter";
    case CandidateKind::kAllReduce:
      return "all-reduce";
    case CandidateKind::kAllToAll:
      return "all-to-all";
  }
  return "?";
}

std::string FormatDecision(const Decision& d) {
  return fmt::format("{} %{} / %{} in {}: {}: {}", d.rewritten ? "rewritten" : "declined",
                     d.collective, d.dot, d.computation, d.form, d.reason);
}

std::string RewriteSummary(const GateVerdict& verdict, CandidateKind kind, int64_t group_size) {
  if (verdict.chunks >= 2) {
    return fmt::format("{} chunks, each reduced by its own {}", verdict.chunks,
                       CandidateKindName(kind));
  }
  if (kind == CandidateKind::kAllToAll) {
    return fmt::format("pairwise exchange of {} permutes, {} round(s) per product", group_size - 1,
                       verdict.rounds_per_product);
  }
  const bool bidirectional = verdict.direction == RingDirection::kBidirectional && group_size >= 3;
  return fmt::format(
      "{} {} ring{}",
      DirectionName(bidirectional ? RingDirection::kBidirectional : RingDirection::kUnidirectional),
      FormName(verdict.form),
      verdict.step_chunks >= 2 ? fmt::format(", each step in {} chunks", verdict.step_chunks) : "");
}

namespace {

class Rewriter {
 public:
  Rewriter(ir::Module& module, const CollectiveMatmulOptions& options, const ir::DeviceGrid& grid,
           std::vector<Decision>& decisions)
      : options_(options), grid_(grid), rings_(grid), names_(module), decisions_(decisions) {}

  // Whether `dot` was replaced by a ring made at another dot's visit.
  bool Removed(const Instruction* dot) const { return removed_dots_.count(dot) > 0; }

  // Rewrites at most one candidate of `dot`; true when it did.
  Expected<bool> VisitDot(Instruction& dot) {
    std::vector<Pending> pending;
    for (int64_t operand : {1, 0}) {  // XLA tries the rhs first
      if (!options_.all_gather) break;
      if (auto found = MatchGather(dot, operand, rings_)) Consider(dot, std::move(*found), pending);
    }
    if (options_.all_to_all) {
      for (int64_t operand : {1, 0}) {
        if (auto found = MatchAllToAllBeforeDot(dot, operand, grid_)) {
          Consider(dot, Found<AllToAllMatch>{found->exchange, std::move(found->match)}, pending);
        }
      }
      if (auto found = MatchAllToAllAfterDot(dot, grid_)) {
        Consider(dot, Found<AllToAllMatch>{found->exchange, std::move(found->match)}, pending);
      }
    }
    if (options_.reduce_scatter || options_.all_reduce) {
      if (auto found = MatchScatter(dot, rings_)) {
        const bool all_reduce = found->collective->opcode() == Opcode::kAllReduce;
        if (all_reduce ? options_.all_reduce : options_.reduce_scatter) {
          Consider(dot, std::move(*found), pending);
        }
      }
    }
    if (pending.empty()) return false;
    auto best = std::max_element(pending.begin(), pending.end(), [](const auto& a, const auto& b) {
      return a.verdict.benefit < b.verdict.benefit;
    });
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it == best) continue;
      Record(it->candidate, it->match, false,
             fmt::format("%{} of the same dot is the better candidate ({})",
                         best->candidate.collective, it->verdict.reason));
    }
    // Described before the rewrite, which removes the instructions the
    // match points at.
    std::string form = Describe(best->match);
    const std::vector<std::string> siblings = SiblingDots(best->match);
    LOOM_RETURN_IF_ERROR(Apply(*best));
    RecordDescribed(
        best->candidate, form, true,
        fmt::format("{}; {}",
                    RewriteSummary(best->verdict, best->candidate.kind, best->candidate.group_size),
                    best->verdict.reason));
    for (const std::string& sibling : siblings) {
      decisions_.push_back(
          {best->candidate.computation, best->candidate.collective, sibling, form, true,
           fmt::format("its own ring from the all-gather's shard, rewritten with %{}",
                       best->candidate.dot)});
    }
    return true;
  }

 private:
  template <typename Match>
  void Consider(Instruction& dot, Found<Match> found, std::vector<Pending>& pending) {
    if (!found.match.ok()) {
      decisions_.push_back({dot.parent()->name(), found.collective->name(), dot.name(),
                            std::string(ir::OpcodeName(found.collective->opcode())) + " / dot",
                            false, found.match.error().message});
      return;
    }
    AnyMatch match = std::move(*found.match);
    if (auto* g = std::get_if<GatherMatch>(&match); g != nullptr && g->other_users) {
      if (!ServeOtherUsers(dot, match)) return;
    }
    Candidate candidate = DescribeCandidate(match);
    if (options_.deterministic) {
      if (std::optional<std::string> reason = ReordersASum(match)) {
        Record(candidate, match, false, *reason);
        return;
      }
    }
    GateVerdict verdict = Judge(candidate);
    if (options_.deterministic && candidate.SumsAlongTheRing()) {
      verdict.direction = RingDirection::kUnidirectional;
      if (candidate.ChunksReorderSums()) verdict.chunks = 0;
    }
    if (!verdict.rewrite) {
      Record(candidate, match, false, verdict.reason);
      return;
    }
    pending.push_back({std::move(candidate), std::move(match), std::move(verdict)});
  }

  // An all-gather whose value has other users than `dot` (GatherMatch::
  // other_users): every dot a ring of its own where they are all dots and
  // ring_per_dot allows it (the candidate is the first dot's), else as
  // other_users says. False, with the decision recorded, when declined.
  bool ServeOtherUsers(const Instruction& dot, AnyMatch& match) {
    auto& g = std::get<GatherMatch>(match);
    const GatherOtherUsers other_users = options_.other_users.value_or(GatherOtherUsers::kDecline);
    if (other_users == GatherOtherUsers::kKeep) return true;
    const bool ring_per_dot = options_.ring_per_dot.value_or(true);
    Expected<std::vector<GatherMatch>> consumers =
        ring_per_dot ? FindGatherConsumers(g, rings_) : Error{"the gathered value has other users"};
    if (consumers.ok()) {
      if (consumers->front().dot != &dot) {
        Record(DescribeCandidate(match), match, false,
               fmt::format("the gathered value feeds %{} too: a ring for each dot is the "
                           "candidate there",
                           consumers->front().dot->name()));
        return false;
      }
      GatherMatch shared = std::move(consumers->front());
      shared.siblings.assign(std::make_move_iterator(consumers->begin() + 1),
                             std::make_move_iterator(consumers->end()));
      match = std::move(shared);
      return true;
    }
    if (other_users == GatherOtherUsers::kCache) {
      if (std::optional<std::string> reason = WaitsForTheCache(g)) {
        Record(DescribeCandidate(match), match, false, *reason);
        return false;
      }
      g.cache = true;
      return true;
    }
    Record(DescribeCandidate(match), match, false,
           fmt::format("{} (other-users=decline{})", consumers.error().message,
                       ring_per_dot ? "" : ", dot-users=decline"));
    return false;
  }

  // Why the ring of `g` cannot cache its windows for the other users, if it
  // cannot: its dot's other operand reads one of them, which would wait for
  // the ring.
  static std::optional<std::string> WaitsForTheCache(const GatherMatch& g) {
    const Instruction& other = *g.dot->operand(1 - g.operand);
    if (!g.gather->parent()->DependsOn(other, *g.gather)) return std::nullopt;
    return fmt::format(
        "the gathered value has other users, and the dot's other operand %{} reads one of them "
        "(a cached ring would wait for itself)",
        other.name());
  }

  // Deterministic mode: why the rewrite of `match` would sum in another
  // order than the original program on the executor, if it would.
  static std::optional<std::string> ReordersASum(const AnyMatch& match) {
    if (const auto* g = std::get_if<GatherMatch>(&match); g != nullptr) {
      bool contracting = g->dim.dim_class == DimClass::kContracting;
      for (const GatherMatch& sibling : g->siblings) {
        contracting |= sibling.dim.dim_class == DimClass::kContracting;
      }
      if (contracting) {
        return "deterministic: a ring along a contracting dimension adds N partial products "
               "where the dot sums its contraction in one order";
      }
    }
    if (const auto* s = std::get_if<ScatterMatch>(&match); s != nullptr && !s->blocks_are_chunks) {
      return fmt::format(
          "deterministic: the all-reduce splits along dimension {} of {}, whose blocks are not "
          "the contiguous chunks the executor's ring folds",
          s->collective_dim, s->collective->operand(0)->shape().ToString());
    }
    return std::nullopt;
  }

  GateVerdict Judge(const Candidate& candidate) const {
    if (options_.gate) return options_.gate(candidate);
    GateVerdict verdict;
    verdict.direction = options_.direction;
    verdict.form = options_.form;
    if (options_.chunks >= 2 && candidate.chunk_extent > 0 &&
        candidate.chunk_extent % options_.chunks == 0) {
      verdict.chunks = options_.chunks;
    }
    if (options_.step_chunks >= 2 && candidate.HasRingForms() &&
        candidate.step_chunk_extent % options_.step_chunks == 0 &&
        candidate.step_chunk_extent > 0) {
      verdict.step_chunks = options_.step_chunks;
    }
    if (!candidate.HasRingForms() && options_.rounds_per_product > 0 &&
        candidate.group_size % options_.rounds_per_product == 0) {
      verdict.rounds_per_product = options_.rounds_per_product;
    }
    verdict.benefit = static_cast<double>(candidate.collective_bytes);
    if (candidate.collective_bytes < options_.min_bytes) {
      verdict.reason =
          fmt::format("{} is below min_bytes ({})", FormatBytes(candidate.collective_bytes),
                      FormatBytes(options_.min_bytes));
      return verdict;
    }
    verdict.rewrite = true;
    verdict.reason =
        fmt::format("a {} collective; no cost model given, size threshold {}",
                    FormatBytes(candidate.collective_bytes), FormatBytes(options_.min_bytes));
    return verdict;
  }

  Status Apply(const Pending& p) {
    if (const auto* g = std::get_if<GatherMatch>(&p.match)) {
      // Each dot its own ring, built before it (its other operand is
      // defined there); the gather goes with the last.
      LOOM_RETURN_IF_ERROR(
          GatherRing(*g, p.verdict.step_chunks, names_).Emit(p.verdict.direction, p.verdict.form));
      for (const GatherMatch& sibling : g->siblings) {
        removed_dots_.insert(sibling.dot);
        LOOM_RETURN_IF_ERROR(GatherRing(sibling, p.verdict.step_chunks, names_)
                                 .Emit(p.verdict.direction, p.verdict.form));
      }
      return Status{};
    }
    if (const auto* x = std::get_if<AllToAllMatch>(&p.match)) {
      return EmitPairwiseExchange(*x, p.verdict.rounds_per_product, names_);
    }
    const auto& s = std::get<ScatterMatch>(p.match);
    if (p.verdict.chunks >= 2 && s.chunk_dim) {
      const ChunkedReduction chunked{s.dot, s.chain, s.collective, *s.chunk_dim,
                                     ClassifyOutputDim(*s.dot, *s.chunk_dim)};
      return EmitChunkedReduction(chunked, p.verdict.chunks, names_);
    }
    return ScatterRing(s, p.verdict.step_chunks, names_).Emit(p.verdict.direction, p.verdict.form);
  }

  // The other dots a shared all-gather's rings replace (GatherMatch::siblings).
  static std::vector<std::string> SiblingDots(const AnyMatch& match) {
    std::vector<std::string> names;
    if (const auto* g = std::get_if<GatherMatch>(&match)) {
      for (const GatherMatch& sibling : g->siblings) names.push_back(sibling.dot->name());
    }
    return names;
  }

  static std::string Describe(const AnyMatch& match) {
    if (const auto* g = std::get_if<GatherMatch>(&match)) return DescribeGather(*g);
    if (const auto* x = std::get_if<AllToAllMatch>(&match)) return DescribeAllToAll(*x);
    return DescribeScatter(std::get<ScatterMatch>(match));
  }

  void Record(const Candidate& c, const AnyMatch& match, bool rewritten, std::string reason) {
    RecordDescribed(c, Describe(match), rewritten, std::move(reason));
  }

  void RecordDescribed(const Candidate& c, std::string form, bool rewritten, std::string reason) {
    decisions_.push_back(
        {c.computation, c.collective, c.dot, std::move(form), rewritten, std::move(reason)});
  }

  const CollectiveMatmulOptions& options_;
  const ir::DeviceGrid grid_;
  RingGroups rings_;
  ir::NameTable names_;
  std::vector<Decision>& decisions_;
  // Dots a shared gather's rings replaced before their own visit.
  std::unordered_set<const Instruction*> removed_dots_;
};

}  // namespace

std::vector<std::string> CollectiveMatmul::Explain() const {
  std::vector<std::string> lines;
  for (const Decision& decision : decisions_) lines.push_back(FormatDecision(decision));
  return lines;
}

Expected<bool> CollectiveMatmul::Run(ir::Module& module) {
  decisions_.clear();
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module, options_.grid));
  Rewriter rewriter(module, options_, grid, decisions_);
  bool changed = false;
  std::vector<ir::Computation*> computations;
  for (const auto& computation : module.computations()) computations.push_back(computation.get());
  for (ir::Computation* computation : computations) {
    std::vector<Instruction*> dots;
    for (const auto& instruction : computation->instructions()) {
      if (instruction->opcode() == Opcode::kDot) dots.push_back(instruction.get());
    }
    for (Instruction* dot : dots) {
      if (rewriter.Removed(dot)) continue;
      LOOM_ASSIGN_OR_RETURN(bool rewritten, rewriter.VisitDot(*dot));
      changed |= rewritten;
    }
  }
  return changed;
}

}  // namespace loom::pass
