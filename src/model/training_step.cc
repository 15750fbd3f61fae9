#include "model/training_step.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <optional>
#include <queue>
#include <tuple>

#include "ir/shape.h"
#include "model/hlo_emitter.h"
#include "support/check.h"

namespace loom::model {

PipelineLayout LayoutOf(int64_t blocks, const ParallelPlan& plan) {
  PipelineLayout layout;
  layout.chunks = plan.pipeline * plan.virtual_stages;
  layout.slots = (blocks + layout.chunks - 1) / layout.chunks;
  const int64_t empty = layout.slots * layout.chunks - blocks;
  layout.short_first = (empty + 1) / 2;
  layout.short_last = empty / 2;
  return layout;
}

int64_t PipelineLayout::FirstBlock(int64_t chunk) const {
  return chunk * slots - std::min(chunk, short_first) -
         std::max<int64_t>(0, chunk - (chunks - short_last));
}

namespace {

// Where sequence parallelism splits the residual stream over the model
// axis: by rows (Megatron's), or by d_model (GSPMD's).
bool SplitsRows(const ParallelPlan& plan) {
  return plan.sequence_parallel && plan.tensor > 1 && plan.residual_split == "tokens";
}
bool SplitsFeatures(const ParallelPlan& plan) {
  return plan.sequence_parallel && plan.tensor > 1 && plan.residual_split == "d_model";
}

}  // namespace

int64_t ModelSplitDim(const WeightInfo& weight, const ParallelPlan& plan) {
  if (weight.split_dim >= 0) return weight.split_dim;
  return SplitsFeatures(plan) ? weight.residual_dim : -1;
}

namespace {

// Sizes of one device's part of the step: b sequences (T tokens) per
// micro-batch, n micro-batches (Tb tokens in all), L layers per stage; S
// positions of each sequence (its chunk under context parallelism), whose
// queries attend over Sk positions (the whole sequence); V ids of the
// vocabulary (its slice: the model axis splits it).
struct LocalSizes {
  int64_t b, S, Sk, T, M, H, K, G, hd, F, V, L, n, Tb;
  int64_t R;  // rows of the residual stream: T, or T / tensor under sequence parallelism
  int64_t W;  // its width: M, or M / tensor where sequence parallelism splits d_model
  // With experts: a device's experts of a layer, an expert's capacity per
  // routing group, and a group's positions.
  int64_t E = 0, Cap = 0, Gs = 0;
};

// The devices that sum one weight's gradient, as groups, and where a
// device stands in its group: (partition / inner) % extent.
struct ReductionGroups {
  const std::vector<std::vector<int64_t>>* groups = nullptr;
  int64_t inner = 1, extent = 1;
};

// The bytes of one element of an HLO type ("bf16": 2).
int64_t TypeBytes(std::string_view type) {
  const std::optional<ir::PrimitiveType> parsed = ir::ParsePrimitiveType(type);
  return parsed ? ir::PrimitiveTypeBits(*parsed) / 8 : 4;
}

// How many devices sum a weight's gradient: the
// weights every stage holds over the pipeline, data and context axes, the
// stacked ones over the data and context axes, and under sequence
// parallelism what the model axis does not split over the model axis too
// (each device saw its own rows; the head reads every row of the model
// axis, so its split weights' gradients are whole there).
int64_t GradientSummers(const ParallelPlan& p, const WeightInfo& w) {
  const int64_t model = (SplitsRows(p) || w.partial_over_model) && p.tensor > 1 ? p.tensor : 1;
  const int64_t replicas = p.data * p.context;
  if (w.expert_dim >= 0) return 1;  // its device's experts, which every token reaches
  return (w.stacked ? 1 : p.pipeline) * replicas * (ModelSplitDim(w, p) < 0 ? model : 1);
}

// Multi-query attention: one k and v head, from a weight of its own that
// every device of the model axis holds whole.
bool MultiQuery(const ModelConfig& model) { return model.kv_heads == 1 && model.heads > 1; }

// The layers one iteration of the layer loop runs (a block): one, or with
// experts moe_every, the last of which has the experts.
int64_t BlockLayers(const ModelConfig& model) { return model.experts > 0 ? model.moe_every : 1; }
bool IsMoeLayer(const ModelConfig& model, int64_t j) {
  return model.experts > 0 && j == BlockLayers(model) - 1;
}
// The positions of a routing group, and an expert's capacity in one.
int64_t RoutingGroup(const ModelConfig& model) {
  return model.expert_group > 0 ? model.expert_group : model.seq;
}
// The slots per expert of a routing group of `group` tokens.
int64_t ExpertCapacity(const ModelConfig& model, int64_t group) {
  const double slots = model.capacity_factor * static_cast<double>(model.top_k) *
                       static_cast<double>(group) / static_cast<double>(model.experts);
  // (Less a hair, so that a whole number of slots computed inexactly stays whole.)
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(slots - 1e-9)));
}

struct LayerWeights {
  Value g1, wqkv, wo, g2, w1, w3, w2;  // w3 only with SwiGLU
  Value wq, wkv;                       // multi-query: instead of wqkv
  // A layer with experts: the router and this device's experts, instead of w1, w3, w2.
  bool moe = false;
  Value router, we1, we3, we2;
  // Whether the layer's self-attention is causal (an encoder's is not).
  bool causal = true;
  // An encoder-decoder's decoder layer: cross-attention to the encoder's
  // output `memory` [T, M] (every row, in the activation type) between its
  // self-attention and its MLP.
  bool cross = false;
  Value gc, wqc, wkvc, woc, memory;
};

struct NormActs {
  Value n, r;  // normalised input and 1/rms (per row)
};

// What backward needs of one layer's forward.
struct LayerActs {
  Value h, q, k, v, p, o, x1, h2, u, z, act, out;
  // In flash attention's form (ring attention, fused kernels): each query's
  // log-sum-exp [b,H,S], from which p = exp(score - lse).
  Value lse;
  // With experts: the router's probabilities [T, E] (in P); this device's
  // experts' inputs [E_local, X, M], their pre-activations and activation
  // [E_local, X, F]; and their outputs back at the tokens' device [Ng, E,
  // C, M] (X = the group of devices x Ng x C slots).
  Value probs, xe, ue, ze, acte, yb;
  bool causal = true;  // as the layer's weights say
  bool cross = false;  // likewise
  // Cross-attention: its norm, input, q [b,S,H,hd], the memory's k and v,
  // the probabilities [b,H,S,S] and the output [T, H*hd].
  NormActs normc;
  Value hc, qc, kx, vx, pc, oc;
  Value kc, vc;  // k and v before the kv heads are shared out: [b,S,K,hd], what a cache holds
  NormActs norm1, norm2;
};

// A device's shard of a weight: its split dimension over the model axis,
// a stacked layer weight's blocks over the pipeline axis (its stage's
// slots).
std::vector<int64_t> LocalDims(const WeightInfo& w, const ParallelPlan& plan) {
  std::vector<int64_t> dims = w.dims;
  if (const int64_t split = ModelSplitDim(w, plan); split >= 0) {
    dims[static_cast<size_t>(split)] /= plan.tensor;
  }
  if (w.expert_dim >= 0) dims[static_cast<size_t>(w.expert_dim)] /= plan.data * plan.context;
  if (w.stacked) dims[0] = LayoutOf(dims[0], plan).slots * plan.virtual_stages;
  return dims;
}

// How ZeRO cuts a local weight shard into `parts`: along the first
// dimension that many divides, past the layer dimension of a stacked weight
// (so that each layer's weight is cut, and gathers back whole under stage
// 3); where none does, along the largest, padded with zeros to `padded`, a
// multiple of `parts` (as Megatron's distributed optimizer pads its buffer
// to a multiple of the data-parallel size). Zeros stay zeros under Adam and
// SGD, and the gathers drop them. None for a weight with no such dimension.
struct ZeroCut {
  int64_t dim = 0;
  int64_t size = 0;    // the dimension's extent
  int64_t padded = 0;  // its extent padded (= size where parts divides it)
};
std::optional<ZeroCut> ZeroCutOf(const WeightInfo& w, const ParallelPlan& plan, int64_t parts) {
  const std::vector<int64_t> dims = LocalDims(w, plan);
  std::optional<ZeroCut> largest;
  for (size_t d = w.stacked ? 1 : 0; d < dims.size(); ++d) {
    const ZeroCut cut{static_cast<int64_t>(d), dims[d], (dims[d] + parts - 1) / parts * parts};
    if (cut.padded == cut.size) return cut;
    if (!largest || cut.size > largest->size) largest = cut;
  }
  return largest;
}
// The dims of the ZeRO shard of weight `w`'s local shard over `parts`
// devices (its padding included).
std::vector<int64_t> ZeroShardDims(const WeightInfo& w, const ParallelPlan& plan, int64_t parts) {
  std::vector<int64_t> dims = LocalDims(w, plan);
  const ZeroCut cut = *ZeroCutOf(w, plan, parts);
  dims[static_cast<size_t>(cut.dim)] = cut.padded / parts;
  return dims;
}

// The dimension of Adafactor state `state` (AdafactorState's order) of `w`
// that is w's dimension `dim`: a matrix's row means drop its last
// dimension, its column means the one before; a vector's state is its
// shape. None where the state's mean dropped `dim`.
std::optional<int64_t> AdafactorStateDim(const WeightInfo& w, size_t state, int64_t dim) {
  const auto rank = static_cast<int64_t>(w.dims.size());
  if (rank - (w.stacked ? 1 : 0) < 2) return dim;
  const int64_t dropped = state == 0 ? rank - 1 : rank - 2;
  if (dim == dropped) return std::nullopt;
  return dim > dropped ? dim - 1 : dim;
}

// The dims of Adafactor state `state` of `w` on a device: its local dims,
// under ZeRO over `parts` devices cut where the weight is (ZeroCutOf), when
// it keeps that dimension. `parts` 1: not cut.
std::vector<int64_t> AdafactorStateDims(const WeightInfo& w, const WeightInfo& state_info,
                                        size_t state, const ParallelPlan& plan, int64_t parts) {
  std::vector<int64_t> dims = LocalDims(state_info, plan);
  if (plan.zero_stage == 0 || parts == 1 || w.expert_dim >= 0) return dims;
  const ZeroCut cut = *ZeroCutOf(w, plan, parts);
  if (const std::optional<int64_t> d = AdafactorStateDim(w, state, cut.dim)) {
    dims[static_cast<size_t>(*d)] = cut.padded / parts;
  }
  return dims;
}

// The mesh's axes, outermost first: device = ((stage * data + d) *
// context + c) * model + j.
constexpr size_t kMeshAxes = 4;
using MeshAxes = std::array<int64_t, kMeshAxes>;

// The groups of the mesh `sizes` (pipeline, data, context, model) whose
// devices differ only along the `varying` axes: one group per position on
// the other axes, in the order of their first device, each group's devices
// in increasing order.
std::vector<std::vector<int64_t>> MeshGroups(const MeshAxes& sizes,
                                             const std::array<bool, kMeshAxes>& varying) {
  std::vector<std::vector<int64_t>> groups;
  std::map<MeshAxes, size_t> index;  // fixed coordinates -> group
  const int64_t devices = sizes[0] * sizes[1] * sizes[2] * sizes[3];
  for (int64_t device = 0; device < devices; ++device) {
    MeshAxes at{};
    int64_t rest = device;
    for (size_t axis = kMeshAxes; axis-- > 0;) {
      at[axis] = rest % sizes[axis];
      rest /= sizes[axis];
    }
    for (size_t axis = 0; axis < kMeshAxes; ++axis) {
      if (varying[axis]) at[axis] = 0;
    }
    auto [it, fresh] = index.try_emplace(at, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(device);
  }
  return groups;
}

bool EncoderDecoder(const ModelConfig& model) { return model.encoder_layers > 0; }
bool RingAttention(const ParallelPlan& plan) {
  return plan.context > 1 && plan.context_form == "ring";
}
bool FusedAttention(const ModelConfig& model) { return model.attention == "fused"; }
// Attention in flash attention's form, which keeps each query's
// log-sum-exp rather than its probabilities: ring attention runs it block
// by block, and a fused kernel runs it so.
bool KeepsLogSumExp(const ModelConfig& model, const ParallelPlan& plan) {
  return RingAttention(plan) || FusedAttention(model);
}

bool OneFOneB(const ParallelPlan& plan) { return plan.pipeline > 1 && plan.schedule == "1f1b"; }
// Under the 1F1B schedule, a stage's ring of saved chunks (what forward
// work f saves, kept until its backward): how many slots it has and which
// slot each forward work's chunk takes. Stage 0 keeps each chunk longest,
// from iteration f to its backward's (StepWriter's 1F1B schedule); stage p
// keeps it from p iterations later to p sooner, so slots that never
// collide on stage 0 collide on no stage. The slots are dealt in forward
// order, each chunk the lowest slot whose chunk's backward has run: an
// interval graph's colouring, which takes as many slots as chunks are ever
// live at once, min(n v, P v + P - 1), Megatron's first rank's count
// under its interleaved schedule (2 (P - 1) + (v - 1) P warm-up forwards
// and one more). Slot f mod K would need K = 2 P v - 1: pass 0's chunks
// live longest, pass v - 1's least. Without virtual stages every chunk
// lives as long, and the slots are f mod K, K = min(n, 2 P - 1).
struct SavedRing {
  int64_t slots = 0;
  std::vector<int64_t> slot_of;  // forward work f's slot
  // Whether slot_of[f] = f mod slots for every f (no table needed).
  bool Cyclic() const {
    for (size_t f = 0; f < slot_of.size(); ++f) {
      if (slot_of[f] != static_cast<int64_t>(f) % slots) return false;
    }
    return true;
  }
};
SavedRing SavedRingOf(const ParallelPlan& plan) {
  const int64_t stages = plan.pipeline, passes = plan.virtual_stages;
  const int64_t block = stages * passes, works = plan.micro_batches * passes;
  // The iteration of stage 0's backward of forward work f: its backward
  // work k (the group's passes in reverse) runs at k + (P v - 1) + (P - 1).
  const auto backward_at = [&](int64_t f) {
    const int64_t pass = f % block / stages, lane = f % stages;
    const int64_t k = f / block * block + (passes - 1 - pass) * stages + lane;
    return k + block - 1 + stages - 1;
  };
  using Busy = std::pair<int64_t, int64_t>;  // (the backward's iteration, the slot)
  std::priority_queue<Busy, std::vector<Busy>, std::greater<>> busy;
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free;
  SavedRing ring;
  for (int64_t f = 0; f < works; ++f) {
    // A slot read by a backward at iteration f is still in use there: the
    // iteration's forward writes before its backward reads.
    while (!busy.empty() && busy.top().first < f) {
      free.push(busy.top().second);
      busy.pop();
    }
    int64_t slot = ring.slots;
    if (free.empty()) {
      ++ring.slots;
    } else {
      slot = free.top();
      free.pop();
    }
    ring.slot_of.push_back(slot);
    busy.emplace(backward_at(f), slot);
  }
  return ring;
}
int64_t RingSlots(const ParallelPlan& plan) { return SavedRingOf(plan).slots; }

LocalSizes SizesOf(const ModelConfig& model, const ParallelPlan& plan) {
  const int64_t t = plan.tensor;
  LocalSizes s{};
  s.n = plan.micro_batches;
  s.b = model.batch / plan.data / s.n;
  s.S = model.seq / plan.context;
  s.Sk = model.seq;
  s.T = s.b * s.S;
  s.Tb = s.T * s.n;
  s.R = SplitsRows(plan) ? s.T / t : s.T;
  s.M = model.d_model;
  s.W = SplitsFeatures(plan) ? s.M / t : s.M;
  s.H = model.heads / t;
  s.K = MultiQuery(model) ? 1 : model.kv_heads / t;
  s.G = s.H / s.K;
  s.hd = model.head_dim;
  s.F = model.d_ff / t;
  s.V = model.vocab / t;  // this device's slice of the vocabulary
  s.L = LayoutOf(model.layers / BlockLayers(model), plan).slots *
        plan.virtual_stages;  // a stage's slots of blocks
  if (model.experts > 0) {
    s.E = model.experts / (plan.data * plan.context);
    s.Cap = ExpertCapacity(model, RoutingGroup(model));
    s.Gs = RoutingGroup(model);
  }
  return s;
}

// What the forward keeps of one layer for the backward (one micro-batch),
// by the plan's recomputation (Korthikanti et al. 2022), each in the
// activation type: "full" the layer's input, from which the backward
// recomputes the layer; "selective" the norms' outputs and 1/rms (of this
// device's rows), q, k and v as cached, the MLP's pre-activations and
// activation, from which it makes the products' inputs again (times the
// gains; gathered again under sequence parallelism) and recomputes the
// attention core softmax(q k^T) v; "none" the attention's probabilities
// (in flash attention's form their log-sum-exp, kept in the parameter type
// as flash attention keeps it) and output too, and recomputes nothing else.
// A layer with cross-attention (`cross`: an encoder-decoder's decoder) keeps
// the same of it after the rest: its norm's output and 1/rms, q and the
// memory's k and v, and with none its probabilities and output.
struct SavedShape {
  std::vector<int64_t> dims;
  bool in_param_type = false;  // else in the activation type
};
std::vector<SavedShape> SavedShapes(const LocalSizes& s, const ModelConfig& model,
                                    const ParallelPlan& plan, bool cross = false) {
  if (plan.recompute == "full") return {{{s.R, s.W}}};
  std::vector<SavedShape> dims;
  for (int64_t j = 0; j < BlockLayers(model); ++j) {
    dims.insert(dims.end(), {{{s.R, s.W}},
                             {{s.R}},
                             {{s.b, s.S, s.H, s.hd}},
                             {{s.b, s.S, s.K, s.hd}},
                             {{s.b, s.S, s.K, s.hd}},
                             {{s.R, s.W}},
                             {{s.R}}});
    if (IsMoeLayer(model, j)) {
      // The router's probabilities, the experts' inputs, pre-activations
      // and activation (of every device's slots for this device's
      // experts), and their outputs back at the tokens' device. Under
      // sequence parallelism the probabilities are of the device's own
      // rows, and the experts' slots those of every device of the model
      // axis.
      const int64_t rows = SplitsRows(plan) ? s.R : s.T, groups = rows / s.Gs, E = model.experts;
      const int64_t slots = E / s.E * groups * s.Cap * (SplitsRows(plan) ? plan.tensor : 1);
      dims.insert(dims.end(), {{{rows, E}, true}, {{s.E, slots, s.M}}, {{s.E, slots, s.F}}});
      if (model.mlp == "swiglu") dims.push_back({{s.E, slots, s.F}});
      dims.insert(dims.end(), {{{s.E, slots, s.F}}, {{groups, E, s.Cap, s.M}}});
    } else {
      dims.push_back({{s.T, s.F}});
      if (model.mlp == "swiglu") dims.push_back({{s.T, s.F}});
      dims.push_back({{s.T, s.F}});
    }
    if (plan.recompute == "none") {
      // Flash attention's form keeps the log-sum-exp of each query's
      // scores, from which its backward makes each block's probabilities
      // again.
      dims.push_back(KeepsLogSumExp(model, plan) ? SavedShape{{s.b, s.H, s.S}, true}
                                                 : SavedShape{{s.b, s.H, s.S, s.Sk}});
      dims.push_back({{s.T, s.H * s.hd}});
    }
    if (cross) {
      dims.insert(dims.end(), {{{s.R, s.W}},
                               {{s.R}},
                               {{s.b, s.S, s.H, s.hd}},
                               {{s.b, s.S, s.H, s.hd}},
                               {{s.b, s.S, s.H, s.hd}}});
      if (plan.recompute == "none")
        dims.insert(dims.end(), {{{s.b, s.H, s.S, s.S}}, {{s.T, s.H * s.hd}}});
    }
  }
  return dims;
}

// A stack of layers the step's loops run: the decoder's (the only one, but
// for an encoder-decoder) or an encoder-decoder's encoder, from weight
// `first` (Weights order) on; the decoder of an encoder-decoder reads the
// encoder's output, `memory`, in every layer.
struct LayerStack {
  size_t first = 3;
  bool encoder = false;
  std::optional<Value> memory;
};

class StepWriter {
 public:
  // `kind`: the module name's last part ("train_step", "prefill", "decode").
  StepWriter(const ModelConfig& model, const ParallelPlan& plan, std::string_view kind)
      : m_(model),
        plan_(plan),
        serving_(kind != "train_step"),
        module_(ModuleName(model, plan, kind), Devices(plan)),
        s_(SizesOf(model, plan)),
        layout_(LayoutOf(model.layers / BlockLayers(model), plan)),
        ring_(OneFOneB(plan) ? SavedRingOf(plan) : SavedRing{}),
        infos_(Weights(model)) {
    // A decode step's tokens, one a sequence, are one routing group per
    // micro-batch (GShard routes what a step has; a group of positions of
    // one sequence has a single token here).
    if (kind == "decode" && model.experts > 0) {
      s_.Gs = s_.b;
      s_.Cap = ExpertCapacity(model, s_.b);
    }
    const int64_t t = plan.tensor;
    P_ = model.param_type;
    C_ = model.compute_type;
    A_ = ActivationType(model);
    const int64_t dp = plan.data, cp = plan.context, pp = plan.pipeline;
    // The mesh's axes: pipeline, data, context, model. What sums over the
    // data axis (the gradients, the loss) sums over the context axis too.
    const MeshAxes mesh = {pp, dp, cp, t};
    tensor_groups_ = MeshGroups(mesh, {false, false, false, true});
    data_groups_ = MeshGroups(mesh, {false, true, true, false});
    context_groups_ = MeshGroups(mesh, {false, false, true, false});
    head_groups_ = MeshGroups(mesh, {true, true, true, false});
    pipeline_groups_ = MeshGroups(mesh, {true, false, false, false});
    data_and_model_groups_ = MeshGroups(mesh, {false, true, true, true});
    head_and_model_groups_ = MeshGroups(mesh, {true, true, true, true});
    // A device's place along an axis moves by `step` (mod the axis's
    // size when `wrap`), the others staying: the pairs of every device that
    // has a place to move to.
    const auto moved = [&](size_t axis, int64_t step, bool wrap) {
      std::vector<std::pair<int64_t, int64_t>> pairs;
      int64_t inner = 1;
      for (size_t a = axis + 1; a < kMeshAxes; ++a) inner *= mesh[a];
      for (int64_t device = 0; device < Devices(plan); ++device) {
        const int64_t at = device / inner % mesh[axis];
        int64_t to = at + step;
        if (wrap) to = (to % mesh[axis] + mesh[axis]) % mesh[axis];
        if (to < 0 || to >= mesh[axis]) continue;
        pairs.emplace_back(device, device + (to - at) * inner);
      }
      return pairs;
    };
    to_next_stage_ = moved(0, 1, false);
    to_previous_stage_ = moved(0, -1, false);
    around_stages_ = moved(0, 1, true);
    around_stages_back_ = moved(0, -1, true);
    around_context_ = moved(2, 1, true);
  }

  std::string Write();
  // Inference (training_step.h): the prompt's forward with its caches, or
  // one token against caches of `context` positions.
  std::string WritePrefill();
  std::string WriteDecode(int64_t context);

 private:
  // The weights' parameters (their local shards).
  std::vector<Value> WeightParameters(ComputationEmitter& e) {
    std::vector<Value> weights;
    for (size_t i = 0; i < infos_.size(); ++i) {
      const std::string type = serving_              ? ServedWeightType(m_, infos_[i])
                               : HoldsMasterShard(i) ? C_
                                                     : P_;
      weights.push_back(e.Parameter(type, IsShard(i) ? StateDims(i) : LocalDims(infos_[i], plan_),
                                    infos_[i].name));
    }
    return weights;
  }
  // The output projection of x [rows, M]: logits [rows, vocab], each
  // device's slice of the vocabulary gathered over the model axis (as
  // Megatron's serving gathers them to draw the next token).
  Value Logits(ComputationEmitter& e, const Value& x, const Value& gf, const Value& wout) {
    const NormActs norm = NormForward(e, Math(e, x));
    const Value slice = MatMul(e, e.Mul(norm.n, PerColumn(e, gf, x)), wout);
    return plan_.tensor > 1 ? e.AllGather(slice, 1, tensor_groups_) : slice;
  }
  // A stage's layers, each with its KV caches: its slots of blocks, each
  // block's layers (moe_every with experts, else one).
  int64_t CachedLayerCount() const { return s_.L * BlockLayers(m_); }
  // One KV cache of `positions` per layer: [L, b, positions, K, hd] (b and
  // L a micro-batch's and a stage's).
  std::vector<int64_t> CacheDims(int64_t positions) const {
    return {CachedLayerCount(), s_.b, positions, s_.K, s_.hd};
  }

  // One layer with the caches of all the stage's layers ([L, b, positions,
  // K, hd] each; those it writes, then those it only reads): (out, its new
  // entry of each cache it writes).
  using CachedLayer = std::function<std::pair<Value, std::vector<Value>>(
      ComputationEmitter&, const Value& x, const LayerWeights& w, const Value& layer,
      const std::vector<Value>& caches)>;

  // The stage's layers of `stack` on x, each writing its entry of the
  // caches `written` and reading `read` (an encoder-decoder's decode: the
  // memory's k and v): (out, the written caches). Where a stage is a layer
  // short (uneven stages), its empty slot runs a layer on whatever weights
  // it holds and hands its input on; its entries of the caches hold what
  // that layer wrote, which only that slot reads again. With interleaved
  // stages, `chunk` (the local layer its chunk starts at) runs that chunk's
  // layers, the caches its chunk's.
  std::pair<Value, std::vector<Value>> CachedLayers(
      ComputationEmitter& e, std::string_view name, const Value& x,
      const std::vector<Value>& written, const std::vector<Value>& stacked,
      const CachedLayer& layer, const std::optional<Value>& chunk, const LayerStack& stack = {},
      const std::vector<Value>& read = {}) {
    std::vector<Value> init = {x};
    init.insert(init.end(), written.begin(), written.end());
    init.insert(init.end(), read.begin(), read.end());
    init.insert(init.end(), stacked.begin(), stacked.end());
    const std::vector<Value> extras = Extras(chunk, stack);
    init.insert(init.end(), extras.begin(), extras.end());
    const auto writes = static_cast<long>(written.size());
    const auto caches = writes + static_cast<long>(read.size());
    const auto weights = static_cast<long>(stacked.size());
    const int64_t trips = chunk ? ChunkLayers() : StackLayers(stack);
    const std::vector<Value> done =
        Loop(e, name, init, trips, [&](ComputationEmitter& c, const std::vector<Value>& in) {
          const std::vector<Value> w(in.begin() + 2 + caches, in.begin() + 2 + caches + weights);
          const std::vector<Value> carried(in.begin() + 2 + caches + weights, in.end());
          const Value slot = chunk ? c.Add(carried[0], in[0]) : in[0];
          LayerStack here = stack;
          if (stack.memory) here.memory = carried.back();
          // A block's layers one after another, each with its caches' entry.
          Value out = in[1];
          std::vector<Value> held(in.begin() + 2, in.begin() + 2 + caches);
          const std::vector<LayerWeights> block = SliceLayer(c, w, slot, here);
          for (size_t j = 0; j < block.size(); ++j) {
            const auto layers = static_cast<int64_t>(block.size());
            const Value at = layers == 1 ? in[0]
                                         : c.Add(c.Mul(in[0], c.ScalarInt(layers)),
                                                 c.ScalarInt(static_cast<int64_t>(j)));
            const auto [y, entries] = layer(c, out, block[j], at, held);
            out = y;
            for (long k = 0; k < writes; ++k) held[k] = Store(c, held[k], entries[k], at);
          }
          const std::optional<Value> empty = EmptySlot(c, slot, stack);
          std::vector<Value> next = {empty ? Where(c, *empty, in[1], out) : out};
          next.insert(next.end(), held.begin(), held.end());
          next.insert(next.end(), in.begin() + 2 + caches, in.end());
          return next;
        });
    return {done[1], std::vector<Value>(done.begin() + 2, done.begin() + 2 + writes)};
  }

  // Prefill's layers on x [b*S, M]: every layer's k and v stored (and, in
  // an encoder-decoder's decoder, the k and v of the memory its
  // cross-attention reads).
  std::pair<Value, std::vector<Value>> PrefillLayers(ComputationEmitter& e, const Value& x,
                                                     const std::vector<Value>& caches,
                                                     const std::vector<Value>& stacked,
                                                     const std::optional<Value>& chunk = {},
                                                     const LayerStack& stack = {}) {
    return CachedLayers(
        e, "prefill_layer", x, caches, stacked,
        [&](ComputationEmitter& c, const Value& in, const LayerWeights& w, const Value&,
            const std::vector<Value>&) {
          const LayerActs a = LayerForward(c, in, w);
          std::vector<Value> entries = {Held(c, a.kc), Held(c, a.vc)};
          if (a.cross) entries.insert(entries.end(), {Held(c, a.kx), Held(c, a.vx)});
          return std::pair{a.out, entries};
        },
        chunk, stack);
  }

  // Decode's layers on x [b, M] at position `context` of the caches k and v
  // (in an encoder-decoder's decoder, reading `memory_kv`, the memory's k
  // and v of each layer, as its prefill cached them).
  std::pair<Value, std::vector<Value>> DecodeLayers(ComputationEmitter& e, const Value& x,
                                                    const std::vector<Value>& caches,
                                                    const std::vector<Value>& stacked,
                                                    int64_t context,
                                                    const std::optional<Value>& chunk = {},
                                                    const std::vector<Value>& memory_kv = {}) {
    return CachedLayers(
        e, "decode_layer", x, caches, stacked,
        [&](ComputationEmitter& c, const Value& in, const LayerWeights& w, const Value& layer,
            const std::vector<Value>& held) {
          std::vector<Value> loaded;
          for (const Value& cache : held) loaded.push_back(Load(c, cache, layer));
          const auto [out, keys, values] = DecodeLayer(c, in, w, loaded, context);
          return std::pair{out, std::vector<Value>{keys, values}};
        },
        chunk, LayerStack{}, memory_kv);
  }

  // A stage's caches [L, n*b, ...] as n micro-batches [n, L, b, ...], and back.
  Value ByMicroBatch(ComputationEmitter& e, const Value& cache) {
    std::vector<int64_t> split = {CachedLayerCount(), s_.n, s_.b};
    split.insert(split.end(), cache.dims.begin() + 2, cache.dims.end());
    return e.Transpose(e.Reshape(cache, split), {1, 0, 2, 3, 4, 5});
  }
  Value ByLayer(ComputationEmitter& e, const Value& micro) {
    const Value layers = e.Transpose(micro, {1, 0, 2, 3, 4, 5});
    std::vector<int64_t> joined = {CachedLayerCount(), s_.n * s_.b};
    joined.insert(joined.end(), micro.dims.begin() + 3, micro.dims.end());
    return e.Reshape(layers, joined);
  }

  // What a stage does with its micro-batch x in a forward pipeline: its
  // output, and the entries it writes at `at` (its micro-batch) of `stacks`
  // (which it may read); with interleaved stages, for its chunk of layers
  // from local layer `chunk` on (the entries of those layers).
  using StageStep = std::function<std::pair<Value, std::vector<Value>>(
      ComputationEmitter&, const Value& x, const std::vector<Value>& stacks, const Value& at,
      const std::optional<Value>& chunk, const std::vector<Value>& weights)>;

  // Micro-batches of x0 [n*rows, M] through the stages: a loop of n + P - 1
  // iterations in which stage p takes micro-batch i - p (stage 0 from x0,
  // the others from the stage before by collective-permute; bubbles compute
  // on masked data and write nothing), runs `stage` and hands its output on.
  // With v interleaved stages (JAX's circular pipeline) each micro-batch
  // passes around the stages v times, stage p taking its work j = i - p
  // (pass j / n, micro-batch j % n) in n v + P - 1 iterations, and the last
  // stage hands on to stage 0 too, which keeps what comes round for its
  // next pass (it comes n - P + 1 iterations early: n >= P).
  // Returns the last stage's outputs [n*rows, M] (meaningful there) and the
  // stacks, each entry written by the stage that took its micro-batch (a
  // stack of `per_layer` entries a local layer: LoadChunk).
  std::pair<Value, std::vector<Value>> MicroBatchPipeline(ComputationEmitter& e,
                                                          std::string_view name, const Value& x0,
                                                          int64_t rows, std::vector<Value> stacks,
                                                          const std::vector<Value>& stacked,
                                                          const StageStep& stage_step,
                                                          int64_t per_layer = 1) {
    const int64_t n = s_.n, stages = plan_.pipeline, passes = Passes();
    const size_t count = stacks.size();
    const long fixed = passes > 1 ? 5 : 4;  // the counter, received, outputs, micro[, round]
    std::vector<Value> init = {e.Full(A_, 0, {rows, s_.W}), e.Full(A_, 0, {n, rows, s_.W}),
                               e.Reshape(x0, {n, rows, s_.W})};
    if (passes > 1) init.push_back(e.Full(A_, 0, {n, rows, s_.W}));
    init.insert(init.end(), stacks.begin(), stacks.end());
    init.insert(init.end(), stacked.begin(), stacked.end());
    const auto step = [&](ComputationEmitter& c, const std::vector<Value>& in) {
      const Value &i = in[0], &received = in[1], &outputs = in[2], &micro = in[3];
      const std::vector<Value> mine_stacks(in.begin() + fixed,
                                           in.begin() + fixed + static_cast<long>(count));
      const std::vector<Value> weights(in.begin() + fixed + static_cast<long>(count), in.end());
      const Value stage = StageIndex(c);
      const Value mine = c.Sub(i, stage);  // this stage's work
      const Value valid = InRange(c, mine, n * passes);
      const PipelineWork work = WorkOf(c, ClampIndex(c, mine, n * passes));
      Value first;
      std::vector<Value> next_round;
      if (passes == 1) {
        first = Load(c, micro, ClampIndex(c, i, n));
      } else {
        // What the last stage handed round (its work i - P) comes back to
        // stage 0 for its next pass, then stage 0 takes its own work's.
        const Value came = c.Sub(i, c.ScalarInt(stages));
        const Value round =
            StoreIf(c, in[4], received, WorkOf(c, ClampIndex(c, came, n * passes)).micro,
                    c.Binary("and", Is(c, stage, 0), InRange(c, came, n * (passes - 1))));
        first =
            Where(c, InRange(c, mine, n), Load(c, micro, work.micro), Load(c, round, work.micro));
        next_round.push_back(round);
      }
      const Value x = Where(c, Is(c, stage, 0), first, received);
      const auto [out, entries] = stage_step(c, x, mine_stacks, work.micro, work.chunk, weights);
      // The last stage's output of the last pass is that of micro-batch
      // i - (P - 1) - n (v - 1).
      const Value last = c.Sub(i, c.ScalarInt(stages - 1 + n * (passes - 1)));
      std::vector<Value> next = {
          HandOn(c, out, passes > 1 ? around_stages_ : to_next_stage_),
          StoreIf(c, outputs, out, ClampIndex(c, last, n), InRange(c, last, n)), micro};
      next.insert(next.end(), next_round.begin(), next_round.end());
      for (size_t k = 0; k < count; ++k) {
        next.push_back(work.chunk ? StoreChunkIf(c, mine_stacks[k], entries[k], work.micro,
                                                 *work.chunk, valid, per_layer)
                                  : StoreIf(c, mine_stacks[k], entries[k], work.micro, valid));
      }
      next.insert(next.end(), weights.begin(), weights.end());
      return next;
    };
    const std::vector<Value> done = Loop(e, name, init, n * passes + stages - 1, step);
    return {
        e.Reshape(done[2], {n * rows, s_.W}),
        std::vector<Value>(done.begin() + fixed, done.begin() + fixed + static_cast<long>(count))};
  }

  // --- interleaved stages ------------------------------------------------------------
  // How many times each micro-batch passes around the stages (the virtual
  // stages per device), and the layers of a device's chunk for one pass.
  int64_t Passes() const { return plan_.virtual_stages; }
  int64_t ChunkLayers() const { return s_.L / plan_.virtual_stages; }
  // A stage's work j of a pipeline (0 .. n v - 1): micro-batch j % n on
  // pass j / n, whose chunk of the device's layers starts at local layer
  // (j / n) * L / v (none without interleaving: all layers, work j is
  // micro-batch j).
  struct PipelineWork {
    Value micro;
    std::optional<Value> chunk;
  };
  PipelineWork WorkOf(ComputationEmitter& c, const Value& j) {
    if (Passes() == 1) return {j, std::nullopt};
    const Value n = c.ScalarInt(s_.n);
    return {c.Binary("remainder", j, n),
            c.Mul(c.Binary("divide", j, n), c.ScalarInt(ChunkLayers()))};
  }
  // The entries of local layers chunk .. chunk + L / v - 1 of micro-batch
  // `micro` of a stack [n, L, ...]: [L / v, ...]; and that block written
  // where `valid` holds. A stack of `per_layer` entries a local layer (a
  // serving cache's: one per layer of a block) holds a chunk's as
  // [per_layer L / v, ...] from entry per_layer chunk on.
  Value LoadChunk(ComputationEmitter& c, const Value& stack, const Value& micro, const Value& chunk,
                  int64_t per_layer = 1) {
    std::vector<Value> starts = {micro, ChunkEntry(c, chunk, per_layer)};
    std::vector<int64_t> sizes = {1, ChunkLayers() * per_layer};
    for (int64_t d = 2; d < stack.rank(); ++d) {
      starts.push_back(c.ScalarInt(0));
      sizes.push_back(stack.dim(d));
    }
    std::vector<int64_t> dims(sizes.begin() + 1, sizes.end());
    return c.Reshape(c.DynamicSlice(stack, starts, sizes), dims);
  }
  Value StoreChunkIf(ComputationEmitter& c, const Value& stack, const Value& value,
                     const Value& micro, const Value& chunk, const Value& valid,
                     int64_t per_layer = 1) {
    std::vector<Value> starts = {micro, ChunkEntry(c, chunk, per_layer)};
    for (int64_t d = 2; d < stack.rank(); ++d) starts.push_back(c.ScalarInt(0));
    const Value kept = Where(c, valid, value, LoadChunk(c, stack, micro, chunk, per_layer));
    std::vector<int64_t> dims = kept.dims;
    dims.insert(dims.begin(), 1);
    return c.DynamicUpdateSlice(stack, c.Reshape(kept, dims), starts);
  }
  static Value ChunkEntry(ComputationEmitter& c, const Value& chunk, int64_t per_layer) {
    return per_layer == 1 ? chunk : c.Mul(chunk, c.ScalarInt(per_layer));
  }

  // Serving through the pipeline: `layers` on each micro-batch with its
  // caches ([n, L, b, positions, K, hd]); with interleaved stages on each
  // pass, the pass's chunk of layers with their caches. Returns (outputs,
  // k, v).
  using ServedLayers = std::function<std::tuple<Value, Value, Value>(
      ComputationEmitter&, const Value& x, const Value& k, const Value& v,
      const std::vector<Value>& stacked, const std::optional<Value>& chunk)>;
  std::tuple<Value, Value, Value> ServingPipeline(ComputationEmitter& e, const Value& x0,
                                                  int64_t rows, const Value& k, const Value& v,
                                                  const std::vector<Value>& stacked,
                                                  const ServedLayers& layers) {
    const auto [out, caches] = MicroBatchPipeline(
        e, "serving_pipeline", x0, rows, {k, v}, stacked,
        [&](ComputationEmitter& c, const Value& x, const std::vector<Value>& stacks,
            const Value& at, const std::optional<Value>& chunk, const std::vector<Value>& weights) {
          // A cache has an entry per layer of a block.
          const auto cache = [&](const Value& stack) {
            return chunk ? LoadChunk(c, stack, at, *chunk, BlockLayers(m_)) : Load(c, stack, at);
          };
          const auto [y, keys, values] =
              layers(c, x, cache(stacks[0]), cache(stacks[1]), weights, chunk);
          return std::pair{y, std::vector<Value>{keys, values}};
        },
        BlockLayers(m_));
    return {out, caches[0], caches[1]};
  }

  // Logits [rows, V] of the last stage's x, on every stage of the pipeline.
  Value ServedLogits(ComputationEmitter& e, const Value& x, const Value& gf, const Value& wout) {
    const Value logits = Logits(e, x, gf, wout);
    if (plan_.pipeline == 1) return logits;
    const Value on_last = Masked(e, Is(e, StageIndex(e), plan_.pipeline - 1), logits);
    return e.AllReduce(on_last, pipeline_groups_);
  }

  static std::string ModuleName(const ModelConfig& m, const ParallelPlan& p,
                                std::string_view kind) {
    std::string name = fmt::format("{}_{}_{}", m.name, p.name, kind);
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    }
    return name;
  }

  // --- products ---------------------------------------------------------------------
  // a[T,K] . w[K,N], operands in the compute type, accumulated and written
  // in P (or written in `type`: a product the model axis sums, rounded
  // once; a projection, Projected).
  Value MatMul(ComputationEmitter& c, const Value& a, const Value& w) {
    return MatMul(c, a, w, P_);
  }
  Value MatMul(ComputationEmitter& c, const Value& a, const Value& w, std::string_view type) {
    return c.Dot(c.Convert(a, C_), c.Convert(w, C_), {{}, {}, {1}, {0}}, type);
  }
  // dy[T,N] . w[K,N]^T
  Value MatMulT(ComputationEmitter& c, const Value& dy, const Value& w, std::string_view type) {
    return c.Dot(c.Convert(dy, C_), c.Convert(w, C_), {{}, {}, {1}, {1}}, type);
  }
  Value MatMulT(ComputationEmitter& c, const Value& dy, const Value& w) {
    return MatMulT(c, dy, w, P_);
  }
  // A value held or sent as an activation, and one computed on.
  Value Held(ComputationEmitter& c, const Value& x) { return c.Convert(x, A_); }
  Value Math(ComputationEmitter& c, const Value& x) { return c.Convert(x, P_); }
  // A layer's projection of activations (q, k and v; the MLP's input
  // products; their input gradients) as Megatron's GEMMs and JAX's dots of
  // bf16 operands write it: accumulated in f32, written in the activation
  // type, computed on in P by the kernels that read it.
  Value Projected(ComputationEmitter& c, const Value& a, const Value& w) {
    return Math(c, MatMul(c, a, w, A_));
  }
  Value ProjectedT(ComputationEmitter& c, const Value& dy, const Value& w) {
    return Math(c, MatMulT(c, dy, w, A_));
  }
  // x[T,K]^T . dy[T,N]: a weight gradient.
  Value WeightGrad(ComputationEmitter& c, const Value& x, const Value& dy) {
    return c.Dot(c.Convert(x, C_), c.Convert(dy, C_), {{}, {}, {0}, {0}}, P_);
  }

  // --- norms over the last dimension of x[T,M] -------------------------------------
  // The mean over each row's whole width: under GSPMD's split of d_model
  // each device sums its slice, and the model axis sums those.
  Value RowMean(ComputationEmitter& c, const Value& x) {
    Value sum = c.ReduceSum(x, {1});
    int64_t width = x.dim(1);
    if (SplitsFeatures(plan_)) {
      sum = c.AllReduce(sum, tensor_groups_);
      width *= plan_.tensor;
    }
    return c.Scale(sum, 1.0 / static_cast<double>(width));
  }
  Value PerRow(ComputationEmitter& c, const Value& row, const Value& like) {
    return c.BroadcastLike(row, like, {0});
  }
  Value PerColumn(ComputationEmitter& c, const Value& column, const Value& like) {
    return c.BroadcastLike(column, like, {1});
  }

  // --- the model axis -----------------------------------------------------------------
  // Megatron's sequence parallelism: each device of the model axis its own
  // rows of the residual stream (GSPMD's split keeps every row: ResidualSplit).
  bool SplitsOwnRows() const { return SplitsRows(plan_); }
  // The dimension of the residual stream [rows, d_model] that sequence
  // parallelism splits over the model axis: rows (Megatron's), d_model
  // (GSPMD's), or none.
  std::optional<int64_t> ResidualSplit() const {
    if (SplitsOwnRows()) return 0;
    if (SplitsFeatures(plan_)) return 1;
    return std::nullopt;
  }
  // What a column-parallel product reads: the whole residual stream, under
  // sequence parallelism every device's part of it (an all-gather over the
  // model axis, in the activation type), else x itself.
  Value GatherResidual(ComputationEmitter& c, const Value& x) {
    const std::optional<int64_t> split = ResidualSplit();
    return split ? c.AllGather(Held(c, x), *split, tensor_groups_) : x;
  }
  // A row-parallel product (in the activation type) summed over the model
  // axis: this device's part of the sum under sequence parallelism (a
  // reduce-scatter), else all of it (an all-reduce); in P for what follows.
  Value SumOverModel(ComputationEmitter& c, const Value& partial) {
    return Math(c, HeldSumOverModel(c, partial));
  }
  // The same sum in the partial's type.
  Value HeldSumOverModel(ComputationEmitter& c, const Value& partial) {
    const std::optional<int64_t> split = ResidualSplit();
    return split ? c.ReduceScatter(partial, *split, tensor_groups_)
                 : c.AllReduce(partial, tensor_groups_);
  }
  // Where this device stands along a stretch of the mesh: (partition /
  // inner) % extent (the model axis: 1, tensor; a stage: data * tensor,
  // pipeline).
  Value Position(ComputationEmitter& c, int64_t inner, int64_t extent) {
    Value position = c.PartitionId();
    if (inner > 1) position = c.Binary("divide", position, c.ScalarInt(inner));
    return c.Binary("remainder", position, c.ScalarInt(extent));
  }

  // --- the gradients' reductions and ZeRO -----------------------------------------------
  bool Zero() const { return plan_.zero_stage >= 1; }
  // Under ZeRO-3 the stacked layer weights themselves are shards over the
  // data axis: each layer's is all-gathered where it is used and its
  // gradient reduce-scattered as the backward loop makes it (FSDP).
  bool ShardsLayers() const { return plan_.zero_stage == 3; }
  // What ZeRO shards: every weight but the experts, which their devices
  // own whole (no other device holds or updates them).
  bool ShardedByZero(size_t i) const { return Zero() && infos_[i].expert_dim < 0; }
  bool IsShard(size_t i) const { return ShardsLayers() && infos_[i].stacked && ShardedByZero(i); }
  // Under ZeRO-2 and -3 each layer's gradient is reduce-scattered as the
  // backward loop makes it (per micro-batch, into shards that sum them),
  // so no device holds a whole gradient of its layers.
  bool ScattersLayerGradients() const { return plan_.zero_stage >= 2; }
  bool GradientIsShard(size_t i) const {
    return ScattersLayerGradients() && infos_[i].stacked && ShardedByZero(i);
  }
  // Weight `i`'s gradient (or a run of its layers' under the interleaved
  // 1F1B schedule) summed over the devices that computed parts of it:
  // under ZeRO each device keeps its shard of the sum. As it is where the
  // backward loop summed it already, or where no other device has a part
  // (an expert's).
  Value SummedGradient(ComputationEmitter& e, size_t i, const Value& grad) {
    if (GradientIsShard(i) || GradientGroups(i).extent == 1) return grad;
    return SummedTogether(e, {i}, {grad}).front();
  }
  // The gradients `grads` of weights `weights` (as SummedGradient sums
  // each) summed by one variadic collective per group of devices and
  // scattered dimension, as XLA's combiners join independent reductions and
  // Megatron buckets its gradients.
  std::vector<Value> SummedTogether(ComputationEmitter& e, const std::vector<size_t>& weights,
                                    const std::vector<Value>& grads) {
    std::map<std::pair<const Groups*, int64_t>, std::vector<size_t>> together;
    for (size_t w = 0; w < weights.size(); ++w) {
      const size_t i = weights[w];
      together[{GradientGroups(i).groups, Zero() ? ShardDim(i) : -1}].push_back(w);
    }
    std::vector<Value> summed(grads.size());
    for (const auto& [key, members] : together) {
      const auto& [groups, dim] = key;
      std::vector<Value> operands;
      for (size_t w : members) {
        operands.push_back(dim < 0 ? grads[w] : PaddedForCut(e, weights[w], grads[w]));
      }
      const std::vector<Value> sums =
          dim < 0 ? e.AllReduce(operands, *groups) : e.ReduceScatter(operands, dim, *groups);
      for (size_t m = 0; m < members.size(); ++m) summed[members[m]] = sums[m];
    }
    return summed;
  }
  // Whether the interleaved 1F1B schedule sums weight `i`'s gradient pass
  // by pass, as each pass's last backward leaves the stages (its stacked
  // layers; ZeRO never cuts their layer dimension, so the pieces' sums
  // are the whole's).
  bool SummedByThePipeline(size_t i) const {
    return OneFOneB(plan_) && Passes() > 1 && infos_[i].stacked && !GradientIsShard(i) &&
           GradientGroups(i).extent > 1;
  }
  // The dims of weight `i`'s gradient as the step carries it.
  std::vector<int64_t> GradDims(size_t i) const {
    return GradientIsShard(i) ? StateDims(i) : LocalDims(infos_[i], plan_);
  }
  // Who sums weight `i`'s gradient (Weights order; GradientSummers says
  // how many), and where a device stands among them.
 public:
  ReductionGroups GradientGroups(size_t i) const {
    const WeightInfo info = infos_[i];
    const int64_t extent = GradientSummers(plan_, info);
    if (!info.stacked) {
      return SplitsOwnRows() && ModelSplitDim(info, plan_) < 0
                 ? ReductionGroups{&head_and_model_groups_, 1, extent}
                 : ReductionGroups{&head_groups_, plan_.tensor, extent};
    }
    if ((SplitsOwnRows() || info.partial_over_model) && ModelSplitDim(info, plan_) < 0 &&
        plan_.tensor > 1) {
      return {&data_and_model_groups_, 1, extent};
    }
    return {&data_groups_, plan_.tensor, extent};
  }
  ZeroCut Cut(size_t i) const { return *ZeroCutOf(infos_[i], plan_, GradientGroups(i).extent); }
  int64_t ShardDim(size_t i) const { return Cut(i).dim; }

 private:
  // The optimizer state's dims: the local weight's, or its ZeRO shard's.
  std::vector<int64_t> StateDims(size_t i) const {
    return Zero() ? ZeroShardDims(infos_[i], plan_, GradientGroups(i).extent)
                  : LocalDims(infos_[i], plan_);
  }
  // x (weight `i`, or with `layer_dropped` one layer of it) padded to its
  // ZeRO cut's extent, and back.
  Value PaddedForCut(ComputationEmitter& c, size_t i, const Value& x, bool layer_dropped = false) {
    const ZeroCut cut = Cut(i);
    if (cut.padded == cut.size) return x;
    const int64_t dim = cut.dim - (layer_dropped ? 1 : 0);
    std::vector<int64_t> zeros = x.dims;
    zeros[static_cast<size_t>(dim)] = cut.padded - cut.size;
    return c.Concatenate({x, c.Full(x.type, 0, zeros)}, dim);
  }
  Value UnpaddedFromCut(ComputationEmitter& c, size_t i, const Value& x,
                        bool layer_dropped = false) {
    const ZeroCut cut = Cut(i);
    if (cut.padded == cut.size) return x;
    return c.Slice(x, cut.dim - (layer_dropped ? 1 : 0), 0, cut.size);
  }
  // The weight, or under ZeRO this device's shard of it (the block the
  // reduce-scatter leaves it of the gradient; under stage 3 a layer weight
  // is that shard already).
  Value OwnShard(ComputationEmitter& c, size_t i, const Value& weight) {
    if (!ShardedByZero(i) || IsShard(i)) return weight;
    const ReductionGroups sum = GradientGroups(i);
    const Value position = Position(c, sum.inner, sum.extent);
    const int64_t dim = ShardDim(i);
    std::vector<int64_t> sizes = StateDims(i);
    std::vector<Value> starts;
    for (int64_t d = 0; d < weight.rank(); ++d) {
      starts.push_back(d == dim ? c.Mul(position, c.ScalarInt(sizes[static_cast<size_t>(d)]))
                                : c.ScalarInt(0));
    }
    return c.DynamicSlice(PaddedForCut(c, i, weight), starts, sizes);
  }

  // Weight `i` updated on this device's shard (OwnShard), whole again where
  // the step holds it whole: under ZeRO-1 and -2, all-gathered (in the
  // compute type, where the step holds a master shard) and its padding
  // dropped.
  Value GatheredIfZero(ComputationEmitter& c, size_t i, const Value& updated) {
    if (!ShardedByZero(i) || IsShard(i)) return updated;
    const Value sent = HoldsMasterShard(i) ? c.Convert(updated, C_) : updated;
    return UnpaddedFromCut(c, i, c.AllGather(sent, ShardDim(i), *GradientGroups(i).groups));
  }
  // Whether weight `i` is held in the compute type, its master shard among
  // the optimizer state (model::HoldsMasterShard).
  bool HoldsMasterShard(size_t i) const {
    return !serving_ && model::HoldsMasterShard(m_, plan_, infos_[i]);
  }
  // What the optimizer updates of weight `i`: its master shard, or the
  // weight's own shard (OwnShard).
  Value ToUpdate(ComputationEmitter& c, size_t i, const Value& weight,
                 const std::vector<std::optional<Value>>& masters) {
    return masters[i] ? *masters[i] : OwnShard(c, i, weight);
  }

  // This device's rows of x [n*T, C] under sequence parallelism, of each
  // micro-batch's T (its position on the model axis picks them), else x.
  Value OwnRows(ComputationEmitter& c, const Value& x) {
    if (!SplitsOwnRows()) return x;
    const int64_t columns = x.dim(1), n = x.dim(0) / s_.T;  // micro-batches in x
    const Value rank = Position(c, 1, plan_.tensor);
    const Value micro = c.Reshape(x, {n, s_.T, columns});
    const Value mine =
        c.DynamicSlice(micro, {c.ScalarInt(0), c.Mul(rank, c.ScalarInt(s_.R)), c.ScalarInt(0)},
                       {n, s_.R, columns});
    return c.Reshape(mine, {n * s_.R, columns});
  }

  NormActs NormForward(ComputationEmitter& c, const Value& x) {
    Value centred = x;
    if (m_.norm == "layernorm") centred = c.Sub(x, PerRow(c, RowMean(c, x), x));
    const Value variance = RowMean(c, c.Mul(centred, centred));
    const Value r = c.Unary("rsqrt", c.Add(variance, c.Full(P_, 1e-5, variance.dims)));
    return {c.Mul(centred, PerRow(c, r, x)), r};
  }
  // dx and dg of y = n * g, given dy.
  std::pair<Value, Value> NormBackward(ComputationEmitter& c, const Value& dy, const NormActs& norm,
                                       const Value& g) {
    const Value dg = c.ReduceSum(c.Mul(dy, norm.n), {0});
    const Value dn = c.Mul(dy, PerColumn(c, g, dy));
    Value inner = c.Sub(dn, c.Mul(norm.n, PerRow(c, RowMean(c, c.Mul(dn, norm.n)), dn)));
    if (m_.norm == "layernorm") inner = c.Sub(inner, PerRow(c, RowMean(c, dn), dn));
    return {c.Mul(inner, PerRow(c, norm.r, dn)), dg};
  }

  // --- attention --------------------------------------------------------------------
  // [T, heads*hd] -> [b, S, heads, hd]
  Value Heads(ComputationEmitter& c, const Value& x, int64_t heads) {
    return c.Reshape(x, {s_.b, s_.S, heads, s_.hd});
  }
  // k or v [b,positions,K,hd] shared by G query heads each: [b,positions,H,hd].
  // The fused projection's columns, per kv head: its G query heads, then
  // its k and its v (Megatron's fused QKV layout), so that a device's
  // column shard holds whole groups. qkv [b*positions, K*(G+2)*hd] -> q
  // [b,positions,H,hd] (head k*G+g: the order ExpandKv shares k and v out
  // in), k and v [b,positions,K,hd].
  std::tuple<Value, Value, Value> SplitQkv(ComputationEmitter& c, const Value& qkv,
                                           int64_t positions) {
    const int64_t b = s_.b;
    const Value grouped = c.Reshape(qkv, {b, positions, s_.K, s_.G + 2, s_.hd});
    return {c.Reshape(c.Slice(grouped, 3, 0, s_.G), {b, positions, s_.H, s_.hd}),
            c.Reshape(c.Slice(grouped, 3, s_.G, 1), {b, positions, s_.K, s_.hd}),
            c.Reshape(c.Slice(grouped, 3, s_.G + 1, 1), {b, positions, s_.K, s_.hd})};
  }
  // q [b,positions,H,hd], k and v [b,positions,K,hd] of h [b*positions, M]:
  // from the fused product, or under multi-query from wq and wkv.
  std::tuple<Value, Value, Value> ProjectQkv(ComputationEmitter& c, const Value& h,
                                             const LayerWeights& w, int64_t positions) {
    if (!MultiQuery(m_)) return SplitQkv(c, Projected(c, h, w.wqkv), positions);
    const int64_t b = s_.b;
    const Value q = c.Reshape(Projected(c, h, w.wq), {b, positions, s_.H, s_.hd});
    const Value kv = c.Reshape(Projected(c, h, w.wkv), {b, positions, 1, 2, s_.hd});
    return {q, c.Reshape(c.Slice(kv, 3, 0, 1), {b, positions, 1, s_.hd}),
            c.Reshape(c.Slice(kv, 3, 1, 1), {b, positions, 1, s_.hd})};
  }
  // The weight gradients of the q, k, v projection and its input gradient
  // (this device's part of the sum over the model axis, in the activation
  // type), from the gradients of q [b,S,H,hd], k and v [b,S,K,hd].
  std::pair<std::vector<Value>, Value> ProjectQkvBackward(ComputationEmitter& c, const Value& h,
                                                          const LayerWeights& w, const Value& dq,
                                                          const Value& dk, const Value& dv) {
    if (!MultiQuery(m_)) {
      const Value dqkv = JoinQkv(c, dq, dk, dv);
      return {{WeightGrad(c, h, dqkv)}, MatMulT(c, dqkv, w.wqkv, A_)};
    }
    const std::vector<int64_t> one = {s_.b, s_.S, 1, 1, s_.hd};
    const Value dkv =
        c.Reshape(c.Concatenate({c.Reshape(dk, one), c.Reshape(dv, one)}, 3), {s_.T, 2 * s_.hd});
    const Value dq_rows = c.Reshape(dq, {s_.T, s_.H * s_.hd});
    return {{WeightGrad(c, h, dq_rows), WeightGrad(c, h, dkv)},
            c.Add(MatMulT(c, dq_rows, w.wq, A_), MatMulT(c, dkv, w.wkv, A_))};
  }
  // The gradients of q [b,S,H,hd], k and v [b,S,K,hd] in the fused
  // projection's layout: [T, K*(G+2)*hd].
  Value JoinQkv(ComputationEmitter& c, const Value& dq, const Value& dk, const Value& dv) {
    const std::vector<int64_t> group = {s_.b, s_.S, s_.K, 1, s_.hd};
    const Value joined = c.Concatenate({c.Reshape(dq, {s_.b, s_.S, s_.K, s_.G, s_.hd}),
                                        c.Reshape(dk, group), c.Reshape(dv, group)},
                                       3);
    return c.Reshape(joined, {s_.T, s_.K * (s_.G + 2) * s_.hd});
  }

  Value ExpandKv(ComputationEmitter& c, const Value& kv) {
    if (s_.G == 1) return kv;
    const int64_t b = kv.dim(0), positions = kv.dim(1);
    const Value wide = c.Broadcast(kv, {b, positions, s_.K, s_.G, s_.hd}, {0, 1, 2, 4});
    return c.Reshape(wide, {b, positions, s_.H, s_.hd});
  }
  Value ReduceKv(ComputationEmitter& c, const Value& dkv) {
    if (s_.G == 1) return dkv;
    return c.ReduceSum(c.Reshape(dkv, {dkv.dim(0), dkv.dim(1), s_.K, s_.G, s_.hd}), {3});
  }
  // Last-axis helpers on [b,H,S,C].
  Value Lanes(ComputationEmitter& c, const Value& row, const Value& like) {
    return c.BroadcastLike(row, like, {0, 1, 2});
  }

  // q k^T / sqrt(hd), q [b,S,H,hd], k [b,C,H,hd] -> [b,H,S,C] in P, with
  // the keys a query may not see at -inf when causal: those later than it,
  // `offset` (s32, or none for 0) being the first query's position less
  // the first key's. The product is written in `written` (it accumulates
  // in f32 either way): flash attention keeps it on chip in P; scores a
  // kernel writes out are in the activation type, as Megatron's baddbmm
  // and fused softmax and JAX's bf16 einsum write them, the scaling, mask
  // and softmax then in P inside the softmax's kernel.
  Value Scores(ComputationEmitter& c, const Value& q, const Value& k,
               const std::optional<Value>& offset, bool causal, std::string_view written) {
    Value scores =
        Math(c, c.Dot(c.Convert(q, C_), c.Convert(k, C_), {{0, 2}, {0, 2}, {3}, {3}}, written));
    scores = c.Scale(scores, 1.0 / std::sqrt(static_cast<double>(s_.hd)));
    if (!causal) return scores;
    const std::vector<int64_t> dims = scores.dims;
    Value row = c.Iota("s32", dims, 2);
    if (offset) row = c.Add(row, c.Broadcast(*offset, dims, {}));
    const Value column = c.Iota("s32", dims, 3);
    const Value visible = c.Compare(column, row, "LE");
    return c.Select(visible, scores, c.Full(P_, -INFINITY, dims));
  }
  // p = softmax(Scores) over every position of the sequence (k [b,Sk,H,hd]).
  Value AttentionProbabilities(ComputationEmitter& c, const Value& q, const Value& k, bool causal) {
    std::optional<Value> offset;
    if (causal && plan_.context > 1) offset = ChunkStart(c);
    return MaterialisedSoftmax(c, q, k, offset, causal);
  }
  // The probabilities of materialised attention (no flash form): the
  // scores written out and softmaxed, the probabilities written in the
  // activation type (what the products and the backward read).
  Value MaterialisedSoftmax(ComputationEmitter& c, const Value& q, const Value& k,
                            const std::optional<Value>& offset, bool causal) {
    return Held(c, SoftmaxLastDim(c, Scores(c, q, k, offset, causal, A_)));
  }
  // Softmax over the last dimension of [b,H,Q,C] scores.
  Value SoftmaxLastDim(ComputationEmitter& c, const Value& scores) {
    const Value shifted = c.Sub(scores, Lanes(c, c.ReduceMax(scores, {3}), scores));
    const Value e = c.Unary("exponential", shifted);
    return c.Div(e, Lanes(c, c.ReduceSum(e, {3}), e));
  }
  // p[b,H,S,C] . v[b,C,H,hd] -> [b,H,S,hd]
  Value WeightedValues(ComputationEmitter& c, const Value& p, const Value& v) {
    return c.Dot(c.Convert(p, C_), c.Convert(v, C_), {{0, 1}, {0, 2}, {3}, {1}}, P_);
  }
  // o[b,S,H,hd] = p[b,H,S,C] . v[b,C,H,hd]
  Value AttentionOutput(ComputationEmitter& c, const Value& p, const Value& v) {
    return c.Transpose(WeightedValues(c, p, v), {0, 2, 1, 3});
  }

  // --- attention over the context axis, and flash attention -----------------------------
  // This device's place on the context axis, and its chunk's first position.
  Value ContextRank(ComputationEmitter& c) { return Position(c, plan_.tensor, plan_.context); }
  Value ChunkStart(ComputationEmitter& c) { return c.Mul(ContextRank(c), c.ScalarInt(s_.S)); }
  // The keys and values attention reads of k or v [b,S,K,hd] (this chunk's)
  // in the type the products read, before they are shared out to the query
  // heads: every chunk's [b,Sk,K,hd] under all-gather context parallelism,
  // else this chunk's (under ring attention, the first block of the ring).
  Value KeysRead(ComputationEmitter& c, const Value& kv) {
    const Value operand = c.Convert(kv, C_);
    if (plan_.context == 1 || RingAttention(plan_)) return operand;
    return c.AllGather(operand, 1, context_groups_);
  }
  Value AttendedKv(ComputationEmitter& c, const Value& kv) { return ExpandKv(c, KeysRead(c, kv)); }
  // The sum over the context axis of a gradient of every chunk's k or v
  // [b,Sk,K,hd], this device's chunk of it (all-gather form), in P.
  Value ScatterKvGrad(ComputationEmitter& c, const Value& dkv) {
    if (plan_.context == 1) return dkv;
    return c.ReduceScatter(dkv, 1, context_groups_);
  }
  // The offset of Scores (the first query's position less the first key's)
  // for the block of keys attention holds at `step`: none without a causal
  // mask or a context axis; under ring attention the chunk of the device
  // `step` places back along the ring; else every chunk's keys from 0.
  std::optional<Value> BlockOffset(ComputationEmitter& c, int64_t step, bool causal) {
    if (!causal || plan_.context == 1) return std::nullopt;
    if (!RingAttention(plan_)) return ChunkStart(c);
    const int64_t cp = plan_.context;
    const Value rank = ContextRank(c);
    const Value source =
        c.Binary("remainder", c.Add(rank, c.ScalarInt(cp - step)), c.ScalarInt(cp));
    return c.Mul(c.Sub(rank, source), c.ScalarInt(s_.S));
  }
  // How many blocks of keys a query's attention takes in turn: one per
  // chunk under ring attention, else all at once.
  int64_t KeyBlocks() const { return RingAttention(plan_) ? plan_.context : 1; }
  Value AroundContext(ComputationEmitter& c, const Value& x) {
    return c.CollectivePermute(x, around_context_);
  }

  // `body` on `inputs`, inline, or with fused attention as one kernel: a
  // fusion whose computation `name` is the body, which keeps its
  // temporaries (the [S, C] scores and probabilities) on chip, as flash
  // attention does. The cost model prices such a kernel by its dots' FLOPs
  // and the bytes of its inputs and outputs. Both run the same ops in the
  // same order, so they compute the same values, bitwise.
  using KernelBody =
      std::function<std::vector<Value>(ComputationEmitter&, const std::vector<Value>& inputs)>;
  std::vector<Value> Kernel(ComputationEmitter& c, std::string_view name,
                            const std::vector<Value>& inputs, const KernelBody& body) {
    if (!FusedAttention(m_)) return body(c, inputs);
    ComputationEmitter& kernel = module_.AddComputation(name);
    std::vector<Value> parameters;
    for (size_t i = 0; i < inputs.size(); ++i) {
      parameters.push_back(
          kernel.Parameter(inputs[i].type, inputs[i].dims, fmt::format("in{}", i)));
    }
    kernel.SetRoot(kernel.Tuple(body(kernel, parameters)));
    return c.Elements(c.Fusion(inputs, kernel));
  }
  // `inputs` and then the offset, when there is one.
  static std::vector<Value> WithOffset(std::vector<Value> inputs,
                                       const std::optional<Value>& offset) {
    if (offset) inputs.push_back(*offset);
    return inputs;
  }
  static std::optional<Value> OffsetAt(const std::vector<Value>& inputs, size_t index) {
    if (index < inputs.size()) return inputs[index];
    return std::nullopt;
  }

  // Flash attention's running softmax of each query (Dao et al. 2022): m
  // the largest score so far, l the sum of exp(score - m), acc the sum of
  // exp(score - m) v [b,H,S,hd]. A block of keys k, v [b,C,K,hd] (in the
  // type the products read) is folded in: the new running maximum m' (of m
  // and the block's largest score) rescales l and acc by exp(m - m'). The
  // first block holds every query's own
  // position, so m is finite from the start, and a later block a query
  // sees nothing of adds exp(-inf) = 0.
  struct RunningSoftmax {
    Value m, l, acc;
  };
  RunningSoftmax FlashBlock(ComputationEmitter& c, const Value& q, const Value& k, const Value& v,
                            const std::optional<Value>& offset,
                            const std::optional<RunningSoftmax>& so_far, bool causal) {
    const Value scores = Scores(c, q, ExpandKv(c, k), offset, causal, P_);
    const Value largest = c.ReduceMax(scores, {3});
    const Value m = so_far ? c.Binary("maximum", so_far->m, largest) : largest;
    const Value p = c.Unary("exponential", c.Sub(scores, Lanes(c, m, scores)));
    const Value sum = c.ReduceSum(p, {3});
    const Value values = WeightedValues(c, p, ExpandKv(c, v));  // [b,H,S,hd]
    if (!so_far) return {m, sum, values};
    const Value rescale = c.Unary("exponential", c.Sub(so_far->m, m));
    return {m, c.Add(c.Mul(so_far->l, rescale), sum),
            c.Add(c.Mul(so_far->acc, Lanes(c, rescale, so_far->acc)), values)};
  }

  // Attention in flash attention's form, block by block of keys (each a
  // kernel of its own with fused attention): under ring attention one block
  // per chunk, its k and v handed on around the context axis after each
  // but the last (ring attention, Liu et al. 2023); else one block of every
  // key. Returns o [b,S,H,hd] and the log-sum-exp m + log l [b,H,S].
  std::pair<Value, Value> FlashForward(ComputationEmitter& c, const Value& q, const Value& kc,
                                       const Value& vc, bool causal) {
    Value k = KeysRead(c, kc), v = KeysRead(c, vc);
    std::optional<RunningSoftmax> run;
    for (int64_t step = 0; step < KeyBlocks(); ++step) {
      std::vector<Value> inputs = {q, k, v};
      if (run) inputs.insert(inputs.end(), {run->m, run->l, run->acc});
      const std::vector<Value> out =
          Kernel(c, "flash_attention", WithOffset(inputs, BlockOffset(c, step, causal)),
                 [&](ComputationEmitter& f, const std::vector<Value>& in) {
                   std::optional<RunningSoftmax> before;
                   if (run) before = RunningSoftmax{in[3], in[4], in[5]};
                   const RunningSoftmax after = FlashBlock(
                       f, in[0], in[1], in[2], OffsetAt(in, run ? 6 : 3), before, causal);
                   return std::vector<Value>{after.m, after.l, after.acc};
                 });
      run = RunningSoftmax{out[0], out[1], out[2]};
      if (step + 1 < KeyBlocks()) {
        k = AroundContext(c, k);
        v = AroundContext(c, v);
      }
    }
    const Value o = c.Transpose(c.Div(run->acc, Lanes(c, run->l, run->acc)), {0, 2, 1, 3});
    return {o, c.Add(run->m, c.Unary("log", run->l))};
  }

  // Flash attention's backward, per block of keys as FlashForward takes
  // them: each block's probabilities made again as exp(score - lse); dq
  // sums here, and the block's dk and dv (per kv head, in P) are this
  // device's (of every key: reduce-scattered under all-gather context
  // parallelism) or, under ring attention, travel with the chunk, handed on
  // after every step, the last bringing them home. delta = rowsum(dO o)
  // stands for rowsum(dp p). dO and the results as LayerBackward's.
  std::tuple<Value, Value, Value> FlashBackward(ComputationEmitter& c, const LayerActs& a,
                                                const Value& dO) {
    const Value o = Heads(c, Math(c, a.o), s_.H);
    const Value delta = c.Transpose(c.ReduceSum(c.Mul(dO, o), {3}), {0, 2, 1});  // [b,H,S]
    const Value lse = Math(c, a.lse);
    Value k = KeysRead(c, a.kc), v = KeysRead(c, a.vc);
    Value dq, dk, dv;
    for (int64_t step = 0; step < KeyBlocks(); ++step) {
      const std::vector<Value> part =
          Kernel(c, "flash_attention_backward",
                 WithOffset({a.q, k, v, dO, lse, delta}, BlockOffset(c, step, a.causal)),
                 [&](ComputationEmitter& f, const std::vector<Value>& in) {
                   return FlashBlockBackward(f, in, OffsetAt(in, 6), a.causal);
                 });
      dq = step == 0 ? part[0] : c.Add(dq, part[0]);
      if (!RingAttention(plan_)) {
        dk = ScatterKvGrad(c, part[1]);
        dv = ScatterKvGrad(c, part[2]);
        break;
      }
      dk = AroundContext(c, step == 0 ? part[1] : c.Add(dk, part[1]));
      dv = AroundContext(c, step == 0 ? part[2] : c.Add(dv, part[2]));
      if (step + 1 < KeyBlocks()) {
        k = AroundContext(c, k);
        v = AroundContext(c, v);
      }
    }
    return {dq, dk, dv};
  }
  // One block's part of dq [b,S,H,hd] and its dk and dv [b,C,K,hd], from
  // (q, k, v, dO, lse, delta) as FlashBackward passes them.
  std::vector<Value> FlashBlockBackward(ComputationEmitter& c, const std::vector<Value>& in,
                                        const std::optional<Value>& offset, bool causal) {
    const Value &q = in[0], &dO = in[3], &lse = in[4], &delta = in[5];
    const Value keys = ExpandKv(c, in[1]);
    const Value scores = Scores(c, q, keys, offset, causal, P_);
    const Value p = c.Unary("exponential", c.Sub(scores, Lanes(c, lse, scores)));
    const Value dp = c.Dot(c.Convert(dO, C_), ExpandKv(c, in[2]), {{0, 2}, {0, 2}, {3}, {3}}, P_);
    const Value ds = c.Scale(c.Mul(p, c.Sub(dp, Lanes(c, delta, dp))),
                             1.0 / std::sqrt(static_cast<double>(s_.hd)));
    const Value dq =
        c.Transpose(c.Dot(c.Convert(ds, C_), keys, {{0, 1}, {0, 2}, {3}, {1}}, P_), {0, 2, 1, 3});
    const Value dk = c.Transpose(
        c.Dot(c.Convert(ds, C_), c.Convert(q, C_), {{0, 1}, {0, 2}, {2}, {1}}, P_), {0, 2, 1, 3});
    const Value dv = c.Transpose(
        c.Dot(c.Convert(p, C_), c.Convert(dO, C_), {{0, 1}, {0, 2}, {2}, {1}}, P_), {0, 2, 1, 3});
    return {dq, ReduceKv(c, dk), ReduceKv(c, dv)};
  }

  // The attention core of a layer from a.q, a.kc, a.vc: a.o [T, H*hd] and
  // what its backward reads (a.k, a.v, a.p; in flash attention's form a.lse).
  void AttentionCore(ComputationEmitter& c, LayerActs& a) {
    if (KeepsLogSumExp(m_, plan_)) {
      Value o;
      std::tie(o, a.lse) = FlashForward(c, a.q, a.kc, a.vc, a.causal);
      a.o = c.Reshape(o, {s_.T, s_.H * s_.hd});
      return;
    }
    a.k = AttendedKv(c, a.kc);
    a.v = AttendedKv(c, a.vc);
    a.p = AttentionProbabilities(c, a.q, a.k, a.causal);
    a.o = c.Reshape(AttentionOutput(c, a.p, a.v), {s_.T, s_.H * s_.hd});
  }
  // The gradients of q [b,S,H,hd], k and v [b,S,K,hd] from dO [b,S,H,hd],
  // the gradient of the attention's output.
  std::tuple<Value, Value, Value> AttentionCoreBackward(ComputationEmitter& c, const LayerActs& a,
                                                        const Value& dO) {
    if (KeepsLogSumExp(m_, plan_)) return FlashBackward(c, a, dO);
    const auto [dq, dk, dv] = SoftmaxAttentionBackward(c, a.p, a.q, a.k, a.v, dO);
    return {dq, ScatterKvGrad(c, ReduceKv(c, dk)), ScatterKvGrad(c, ReduceKv(c, dv))};
  }
  // The gradients of q [b,S,H,hd], k and v [b,C,H,hd] of o = p v, p =
  // softmax(q k^T / sqrt(hd)) [b,H,S,C] (materialised, in the activation
  // type), from dO [b,S,H,hd]. dp and ds are written in the activation
  // type as the scores are (Megatron's softmax backward reads and writes
  // them so); ds = p (dp - rowsum(dp p)) / sqrt(hd) is made in P.
  std::tuple<Value, Value, Value> SoftmaxAttentionBackward(ComputationEmitter& c, const Value& p,
                                                           const Value& q, const Value& k,
                                                           const Value& v, const Value& dO) {
    const Value dp =
        Math(c, c.Dot(c.Convert(dO, C_), c.Convert(v, C_), {{0, 2}, {0, 2}, {3}, {3}}, A_));
    const Value dv = c.Transpose(
        c.Dot(c.Convert(p, C_), c.Convert(dO, C_), {{0, 1}, {0, 2}, {2}, {1}}, P_), {0, 2, 1, 3});
    const Value pm = Math(c, p);
    const Value row_dot = Lanes(c, c.ReduceSum(c.Mul(dp, pm), {3}), dp);
    const Value ds = Held(
        c, c.Scale(c.Mul(pm, c.Sub(dp, row_dot)), 1.0 / std::sqrt(static_cast<double>(s_.hd))));
    const Value dq = c.Transpose(
        c.Dot(c.Convert(ds, C_), c.Convert(k, C_), {{0, 1}, {0, 2}, {3}, {1}}, P_), {0, 2, 1, 3});
    const Value dk = c.Transpose(
        c.Dot(c.Convert(ds, C_), c.Convert(q, C_), {{0, 1}, {0, 2}, {2}, {1}}, P_), {0, 2, 1, 3});
    return {dq, dk, dv};
  }

  // --- one layer ---------------------------------------------------------------------
  // x and the output in the activation type; in between in P.
  LayerActs LayerForward(ComputationEmitter& c, const Value& held, const LayerWeights& w) {
    LayerActs a;
    a.causal = w.causal;
    a.cross = w.cross;
    const Value x = Math(c, held);
    a.norm1 = NormForward(c, x);
    a.h = GatherResidual(c, c.Mul(a.norm1.n, PerColumn(c, w.g1, x)));
    std::tie(a.q, a.kc, a.vc) = ProjectQkv(c, a.h, w, s_.S);
    AttentionCore(c, a);
    a.x1 = c.Add(x, SumOverModel(c, MatMul(c, a.o, w.wo, A_)));
    if (w.cross) CrossAttentionForward(c, w, a);
    MlpForward(c, w, a);
    return a;
  }

  // x1 += cross-attention of norm(x1) to the encoder's output: q from the
  // decoder (column-parallel by heads), k and v from the memory (one fused
  // product, per head its k then its v), every position visible, the
  // output row-parallel.
  void CrossAttentionForward(ComputationEmitter& c, const LayerWeights& w, LayerActs& a) {
    a.normc = NormForward(c, a.x1);
    a.hc = GatherResidual(c, c.Mul(a.normc.n, PerColumn(c, w.gc, a.x1)));
    a.qc = Heads(c, Projected(c, a.hc, w.wqc), s_.H);
    const Value kv = c.Reshape(Projected(c, w.memory, w.wkvc), {s_.b, s_.S, s_.H, 2, s_.hd});
    a.kx = c.Reshape(c.Slice(kv, 3, 0, 1), {s_.b, s_.S, s_.H, s_.hd});
    a.vx = c.Reshape(c.Slice(kv, 3, 1, 1), {s_.b, s_.S, s_.H, s_.hd});
    a.pc = MaterialisedSoftmax(c, a.qc, a.kx, std::nullopt, false);
    a.oc = c.Reshape(AttentionOutput(c, a.pc, a.vx), {s_.T, s_.H * s_.hd});
    a.x1 = c.Add(a.x1, SumOverModel(c, MatMul(c, a.oc, w.woc, A_)));
  }
  // Its backward from dx1 (the gradient of x1 after it, in P): dx1 before
  // it, the gradients of gc, wqc, wkvc, woc, and this device's part (over
  // the model axis) of the memory's gradient [T, M] in P.
  struct CrossGrads {
    Value dx1, dmemory;
    std::vector<Value> weights;
  };
  CrossGrads CrossAttentionBackward(ComputationEmitter& c, const LayerActs& a,
                                    const LayerWeights& w, const Value& dx1) {
    const Value dy = GatherResidual(c, dx1);
    const Value dwoc = WeightGrad(c, a.oc, dy);
    const Value dO = Heads(c, ProjectedT(c, dy, w.woc), s_.H);
    const auto [dq, dk, dv] = SoftmaxAttentionBackward(c, a.pc, a.qc, a.kx, a.vx, dO);
    const Value dq_rows = c.Reshape(dq, {s_.T, s_.H * s_.hd});
    const Value dwqc = WeightGrad(c, a.hc, dq_rows);
    const auto [dx_norm, dgc] =
        NormBackward(c, SumOverModel(c, MatMulT(c, dq_rows, w.wqc, A_)), a.normc, w.gc);
    const std::vector<int64_t> one = {s_.b, s_.S, s_.H, 1, s_.hd};
    const Value dkv = c.Reshape(c.Concatenate({c.Reshape(dk, one), c.Reshape(dv, one)}, 3),
                                {s_.T, 2 * s_.H * s_.hd});
    return {c.Add(dx1, dx_norm),
            ProjectedT(c, dkv, w.wkvc),
            {dgc, dwqc, WeightGrad(c, w.memory, dkv), dwoc}};
  }

  // The MLP half of a layer, from a.x1: fills norm2 .. out.
  void MlpForward(ComputationEmitter& c, const LayerWeights& w, LayerActs& a) {
    a.norm2 = NormForward(c, a.x1);
    const Value h2 = c.Mul(a.norm2.n, PerColumn(c, w.g2, a.x1));
    if (w.moe) {
      a.h2 = ExpertsOnOwnRows() ? h2 : GatherResidual(c, h2);
      const Value y = MoeForward(c, w, a);
      a.out = Held(c, c.Add(a.x1, ExpertsOnOwnRows() ? Math(c, y) : SumOverModel(c, y)));
      return;
    }
    a.h2 = GatherResidual(c, h2);
    a.u = Projected(c, a.h2, w.w1);
    if (m_.mlp == "swiglu") a.z = Projected(c, a.h2, w.w3);
    a.act = Activation(c, a.u, a.z);
    a.out = Held(c, c.Add(a.x1, SumOverModel(c, MatMul(c, a.act, w.w2, A_))));
  }
  // GELU(u), or SiLU(u) z (SwiGLU).
  Value Activation(ComputationEmitter& c, const Value& u, const Value& z) {
    if (m_.mlp != "swiglu") return Gelu(c, u);
    return c.Mul(c.Mul(u, c.Unary("logistic", u)), z);
  }
  // The gradients of u and (SwiGLU) z from that of Activation(u, z).
  std::pair<Value, Value> ActivationBackward(ComputationEmitter& c, const Value& dact,
                                             const Value& u, const Value& z) {
    if (m_.mlp != "swiglu") return {c.Mul(dact, GeluDerivative(c, u)), Value{}};
    const Value s = c.Unary("logistic", u);
    const Value silu = c.Mul(u, s);
    const Value dz = c.Mul(dact, silu);
    const Value one = c.Full(P_, 1.0, u.dims);
    const Value dsilu = c.Mul(s, c.Add(one, c.Mul(u, c.Sub(one, s))));
    return {c.Mul(c.Mul(dact, z), dsilu), dz};
  }

  // --- inference ----------------------------------------------------------------------

  // One layer for one new token per sequence (x [b, M]) at position
  // `context` of caches [b, context+1, K, hd] (positions 0 .. context-1
  // filled; caches[0] k, caches[1] v): writes the token's k and v at
  // `context`, attends over all context + 1 positions (all visible: none is
  // later than the token); a layer with cross-attention then attends to the
  // memory's k and v, caches[2] and caches[3] [b, S, H, hd]. Returns (out,
  // k cache, v cache).
  std::tuple<Value, Value, Value> DecodeLayer(ComputationEmitter& c, const Value& x,
                                              const LayerWeights& w,
                                              const std::vector<Value>& caches, int64_t context) {
    const int64_t b = s_.b;
    const Value &k_cache = caches[0], &v_cache = caches[1];
    LayerActs a;
    const Value xf = Math(c, x);
    a.norm1 = NormForward(c, xf);
    a.h = c.Mul(a.norm1.n, PerColumn(c, w.g1, xf));
    const auto [q, k, v] = ProjectQkv(c, a.h, w, 1);
    // Under context parallelism each device holds its chunk of the
    // positions, and the token's is the last position of the last chunk.
    const int64_t slot = plan_.context > 1 ? k_cache.dim(1) - 1 : context;
    const std::vector<Value> at = {c.ScalarInt(0), c.ScalarInt(slot), c.ScalarInt(0),
                                   c.ScalarInt(0)};
    const Value keys = c.DynamicUpdateSlice(k_cache, TokenEntry(c, k_cache, k, at), at);
    const Value values = c.DynamicUpdateSlice(v_cache, TokenEntry(c, v_cache, v, at), at);
    const Value o = plan_.context > 1 ? DecodeAttentionAcrossChunks(c, q, keys, values)
                                      : DecodeAttention(c, q, keys, values);
    a.x1 = c.Add(xf, Math(c, c.AllReduce(MatMul(c, c.Reshape(o, {b, s_.H * s_.hd}), w.wo, A_),
                                         tensor_groups_)));
    if (w.cross) a.x1 = DecodeCrossAttention(c, a.x1, w, caches[2], caches[3]);
    MlpForward(c, w, a);
    return {a.out, keys, values};
  }
  // What the token writes at `at` of a cache: its k or v; under context
  // parallelism only on the last chunk's device, the others keeping the
  // entry there (a position of their own chunk).
  Value TokenEntry(ComputationEmitter& c, const Value& cache, const Value& kv,
                   const std::vector<Value>& at) {
    const Value entry = Held(c, kv);
    if (plan_.context == 1) return entry;
    const Value kept = c.DynamicSlice(cache, at, entry.dims);
    return Where(c, Is(c, ContextRank(c), plan_.context - 1), entry, kept);
  }
  // The token's attention o [b, 1, H, hd] over every cached position (q
  // [b, 1, H, hd], the caches [b, positions, K, hd]).
  Value DecodeAttention(ComputationEmitter& c, const Value& q, const Value& keys,
                        const Value& values) {
    const Value p = MaterialisedSoftmax(c, q, ExpandKv(c, keys), std::nullopt, false);
    return c.Transpose(
        c.Dot(c.Convert(p, C_), c.Convert(ExpandKv(c, values), C_), {{0, 1}, {0, 2}, {3}, {1}}, P_),
        {0, 2, 1, 3});
  }
  // The same with the positions in chunks over the context axis (as flash
  // decoding splits them): each device folds its chunk into a running
  // softmax (m, l, acc), and the chunks' are joined by their maximum, the
  // rescaled sums of l and of acc over the axis.
  Value DecodeAttentionAcrossChunks(ComputationEmitter& c, const Value& q, const Value& keys,
                                    const Value& values) {
    const RunningSoftmax chunk =
        FlashBlock(c, q, c.Convert(keys, C_), c.Convert(values, C_), std::nullopt, std::nullopt,
                   /*causal=*/false);
    const Value m = c.AllReduce(chunk.m, context_groups_, "maximum");
    const Value rescale = c.Unary("exponential", c.Sub(chunk.m, m));
    const Value l = c.AllReduce(c.Mul(chunk.l, rescale), context_groups_);
    const Value acc = c.AllReduce(c.Mul(chunk.acc, Lanes(c, rescale, chunk.acc)), context_groups_);
    return c.Transpose(c.Div(acc, Lanes(c, l, acc)), {0, 2, 1, 3});
  }

  // x1 [b, M] plus the cross-attention of norm(x1) to the memory's k and v
  // [b, S, H, hd], as CrossAttentionForward computes it for one position.
  Value DecodeCrossAttention(ComputationEmitter& c, const Value& x1, const LayerWeights& w,
                             const Value& kx, const Value& vx) {
    const NormActs norm = NormForward(c, x1);
    const Value h = c.Mul(norm.n, PerColumn(c, w.gc, x1));
    const Value q = c.Reshape(Projected(c, h, w.wqc), {s_.b, 1, s_.H, s_.hd});
    const Value p = MaterialisedSoftmax(c, q, kx, std::nullopt, false);
    const Value o = c.Reshape(AttentionOutput(c, p, vx), {s_.b, s_.H * s_.hd});
    return c.Add(x1, SumOverModel(c, MatMul(c, o, w.woc, A_)));
  }

  // GELU, tanh form: 0.5 u (1 + tanh(c (u + 0.044715 u^3))).
  Value GeluInner(ComputationEmitter& c, const Value& u) {
    const Value u3 = c.Mul(c.Mul(u, u), u);
    return c.Scale(c.Add(u, c.Scale(u3, 0.044715)), std::sqrt(2.0 / std::numbers::pi));
  }
  Value Gelu(ComputationEmitter& c, const Value& u) {
    const Value t = c.Unary("tanh", GeluInner(c, u));
    return c.Mul(c.Scale(u, 0.5), c.Add(c.Full(P_, 1.0, u.dims), t));
  }
  Value GeluDerivative(ComputationEmitter& c, const Value& u) {
    const Value t = c.Unary("tanh", GeluInner(c, u));
    const Value one = c.Full(P_, 1.0, u.dims);
    const Value sech2 = c.Sub(one, c.Mul(t, t));
    const Value inner_d =
        c.Scale(c.Add(one, c.Scale(c.Mul(u, u), 3 * 0.044715)), std::sqrt(2.0 / std::numbers::pi));
    return c.Add(c.Scale(c.Add(one, t), 0.5), c.Mul(c.Scale(u, 0.5), c.Mul(sech2, inner_d)));
  }

  struct LayerGrads {
    Value dx;
    std::vector<Value> weights;  // in Weights order
    Value dmemory;               // cross-attention: this device's part of the memory's gradient
    Value aux;                   // MoE: this device's part of the auxiliary loss (MoeBackward)
  };

  // dout and dx in the activation type, as the layer's output and input.
  LayerGrads LayerBackward(ComputationEmitter& c, const LayerActs& a, const LayerWeights& w,
                           const Value& dout, const std::optional<Value>& aux_scale) {
    // MLP: out = x1 + act . w2 (its rows of the sum under sequence
    // parallelism: the gradient of every row is gathered back).
    const bool own_rows = w.moe && ExpertsOnOwnRows();
    const Value dy2 = own_rows ? dout : GatherResidual(c, dout);
    std::vector<Value> mlp_grads;  // after dg2
    Value dh2, aux;
    if (w.moe) {
      MoeGrads moe = MoeBackward(c, a, w, dy2, aux_scale);
      dh2 = moe.dh;
      mlp_grads = std::move(moe.weights);
      aux = moe.aux;
    } else {
      const Value dw2 = WeightGrad(c, a.act, dy2);
      const Value dact = ProjectedT(c, dy2, w.w2);
      const auto [du, dz] = ActivationBackward(c, dact, a.u, a.z);
      Value dw3;
      if (m_.mlp == "swiglu") dw3 = WeightGrad(c, a.h2, dz);
      const Value dw1 = WeightGrad(c, a.h2, du);
      dh2 = MatMulT(c, du, w.w1, A_);
      if (m_.mlp == "swiglu") dh2 = c.Add(dh2, MatMulT(c, dz, w.w3, A_));
      mlp_grads = {dw1};
      if (m_.mlp == "swiglu") mlp_grads.push_back(dw3);
      mlp_grads.push_back(dw2);
    }
    dh2 = own_rows ? Math(c, dh2) : SumOverModel(c, dh2);
    const auto [dx1_norm, dg2] = NormBackward(c, dh2, a.norm2, w.g2);
    Value dx1 = c.Add(Math(c, dout), dx1_norm);
    CrossGrads cross;
    if (w.cross) {
      cross = CrossAttentionBackward(c, a, w, dx1);
      dx1 = cross.dx1;
    }

    // Attention: x1 = x + o . wo
    const Value dy = GatherResidual(c, dx1);
    const Value dwo = WeightGrad(c, a.o, dy);
    const Value dO = Heads(c, ProjectedT(c, dy, w.wo), s_.H);
    const auto [dq, dk, dv] = AttentionCoreBackward(c, a, dO);
    const auto [dprojection, dh_part] = ProjectQkvBackward(c, a.h, w, dq, dk, dv);
    const Value dh = SumOverModel(c, dh_part);
    const auto [dx_norm, dg1] = NormBackward(c, dh, a.norm1, w.g1);

    LayerGrads grads;
    grads.dx = Held(c, c.Add(dx1, dx_norm));
    grads.dmemory = cross.dmemory;
    grads.aux = aux;
    grads.weights = {dg1};
    grads.weights.insert(grads.weights.end(), dprojection.begin(), dprojection.end());
    grads.weights.push_back(dwo);
    grads.weights.insert(grads.weights.end(), cross.weights.begin(), cross.weights.end());
    grads.weights.push_back(dg2);
    grads.weights.insert(grads.weights.end(), mlp_grads.begin(), mlp_grads.end());
    return grads;
  }

  // --- a block of layers ---------------------------------------------------------------
  // The layers of a block on `held`, each on the one before's output.
  std::vector<LayerActs> BlockForward(ComputationEmitter& c, const Value& held,
                                      const std::vector<LayerWeights>& block) {
    std::vector<LayerActs> acts;
    for (const LayerWeights& w : block) {
      acts.push_back(LayerForward(c, acts.empty() ? held : acts.back().out, w));
    }
    return acts;
  }
  // The block's backward from dout: dx and the weights' gradients in
  // Weights order (its first layer's first).
  LayerGrads BlockBackward(ComputationEmitter& c, const std::vector<LayerActs>& acts,
                           const std::vector<LayerWeights>& block, const Value& dout,
                           const std::optional<Value>& aux_scale) {
    std::vector<std::vector<Value>> per_layer(block.size());
    Value d = dout, dmemory, aux;
    const auto add = [&](Value& sum, const Value& part) {
      if (!part.name.empty()) sum = sum.name.empty() ? part : c.Add(sum, part);
    };
    for (size_t j = block.size(); j-- > 0;) {
      LayerGrads g = LayerBackward(c, acts[j], block[j], d, aux_scale);
      per_layer[j] = std::move(g.weights);
      d = g.dx;
      add(dmemory, g.dmemory);
      add(aux, g.aux);
    }
    LayerGrads grads{d, {}, dmemory, aux};
    for (const std::vector<Value>& weights : per_layer) {
      grads.weights.insert(grads.weights.end(), weights.begin(), weights.end());
    }
    return grads;
  }

  // --- mixture of experts ----------------------------------------------------------------
  // Softmax over the last dimension of [rows, E].
  Value SoftmaxRows(ComputationEmitter& c, const Value& x) {
    const Value shifted = c.Sub(x, PerRow(c, c.ReduceMax(x, {1}), x));
    const Value e = c.Unary("exponential", shifted);
    return c.Div(e, PerRow(c, c.ReduceSum(e, {1}), e));
  }
  // Where each token of each routing group goes (GShard's top-k gating):
  // per choice, the chosen expert (one-hot [Ng, G, E]: the most probable
  // expert not chosen before, the lowest-numbered on a tie), its
  // probability and its renormalised gate [Ng, G], and its slot one-hot
  // [Ng, G, E, C] (the token's place among the group's tokens sent to the
  // expert, earlier choices first; none past the capacity); their sums by
  // slot, dispatch, and weighted by the gates, combine.
  struct Routing {
    std::vector<Value> masks, raw, gates, slots;
    Value dispatch, combine;
  };
  Routing Route(ComputationEmitter& c, const Value& probs) {
    const int64_t E = m_.experts, G = s_.Gs, groups = probs.dim(0) / G, C = s_.Cap;
    const Value p = c.Reshape(probs, {groups, G, E});
    const std::vector<int64_t> tokens = {groups, G}, slots = {groups, G, E, C};
    const Value expert = c.Iota(P_, p.dims, 2);
    // Lower triangle [G, G] of ones: the running count of a group's tokens.
    const Value earlier =
        c.Convert(c.Compare(c.Iota("s32", {G, G}, 1), c.Iota("s32", {G, G}, 0), "LE"), P_);
    Routing r;
    Value remaining = p, placed = c.Full(P_, 0, {groups, E});  // tokens each expert has
    for (int64_t choice = 0; choice < m_.top_k; ++choice) {
      const Value top = c.ReduceMax(remaining, {2});
      const Value is_top = c.Compare(remaining, c.BroadcastLike(top, p, {0, 1}), "EQ");
      // The lowest expert at the top: E - 1 - max(E - 1 - e where at the top).
      const Value last = c.Full(P_, static_cast<double>(E - 1), p.dims);
      const Value reversed =
          c.ReduceMax(c.Select(is_top, c.Sub(last, expert), c.Full(P_, -1, p.dims)), {2});
      const Value chosen =
          c.Compare(expert,
                    c.BroadcastLike(c.Sub(c.Full(P_, static_cast<double>(E - 1), tokens), reversed),
                                    p, {0, 1}),
                    "EQ");
      const Value mask = c.Convert(chosen, P_);
      r.masks.push_back(mask);
      r.raw.push_back(c.ReduceSum(c.Mul(p, mask), {2}));
      remaining = c.Select(chosen, c.Full(P_, -1, p.dims), remaining);
      // The slot: tokens before it in the group sent to the expert by this
      // choice, after those every earlier choice sent there.
      const Value before = c.Transpose(c.Dot(earlier, mask, {{}, {}, {1}, {1}}, P_), {1, 0, 2});
      const Value position =
          c.Add(c.Sub(before, c.Full(P_, 1, p.dims)), c.BroadcastLike(placed, p, {0, 2}));
      placed = c.Add(placed, c.ReduceSum(mask, {1}));
      const Value slot =
          c.Compare(c.Broadcast(position, slots, {0, 1, 2}), c.Iota(P_, slots, 3), "EQ");
      r.slots.push_back(c.Mul(c.Convert(slot, P_), c.Broadcast(mask, slots, {0, 1, 2})));
    }
    // Several choices' gates sum to one (GShard); one choice keeps its probability.
    Value total = r.raw[0];
    for (size_t j = 1; j < r.raw.size(); ++j) total = c.Add(total, r.raw[j]);
    for (size_t j = 0; j < r.raw.size(); ++j) {
      r.gates.push_back(m_.top_k > 1 ? c.Div(r.raw[j], total) : r.raw[j]);
      const Value weighted = c.Mul(r.slots[j], c.Broadcast(r.gates[j], slots, {0, 1}));
      r.dispatch = j == 0 ? r.slots[j] : c.Add(r.dispatch, r.slots[j]);
      r.combine = j == 0 ? weighted : c.Add(r.combine, weighted);
    }
    return r;
  }
  // The slots of each expert [Ng, E, C, M] to the device holding it:
  // [E_local, devices x Ng x C, M], the devices of the expert-parallel
  // group in order (an all-to-all over it); and back.
  Value ToExperts(ComputationEmitter& c, const Value& slots) {
    const int64_t groups = slots.dim(0), E = m_.experts, C = s_.Cap, El = s_.E, D = E / El;
    const Value by_expert =
        c.Reshape(c.Transpose(slots, {1, 0, 2, 3}), {E, groups * C, s_.M});  // [E, Ng C, M]
    const Value received = c.AllToAll(by_expert, 0, data_groups_);  // [(device, e), Ng C, M]
    return c.Reshape(c.Transpose(c.Reshape(received, {D, El, groups * C, s_.M}), {1, 0, 2, 3}),
                     {El, D * groups * C, s_.M});
  }
  Value FromExperts(ComputationEmitter& c, const Value& outputs, int64_t groups) {
    const int64_t E = m_.experts, C = s_.Cap, El = s_.E, D = E / El;
    const Value by_device =
        c.Reshape(c.Transpose(c.Reshape(outputs, {El, D, groups * C, s_.M}), {1, 0, 2, 3}),
                  {E, groups * C, s_.M});
    const Value returned = c.AllToAll(by_device, 0, data_groups_);  // [E, Ng C, M]
    return c.Transpose(c.Reshape(returned, {E, groups, C, s_.M}), {1, 0, 2, 3});
  }
  // Under sequence parallelism each device routes its own rows, and the
  // experts' slots of the model axis's devices are gathered over it for
  // the experts' d_ff shards, their outputs reduce-scattered back
  // (Megatron's MoE with sequence parallelism); else every device of the
  // model axis routes all the rows, and the outputs are summed over it
  // after the combine, as a dense MLP's.
  bool ExpertsOnOwnRows() const { return SplitsOwnRows(); }
  Value AcrossModel(ComputationEmitter& c, const Value& slots) {
    return ExpertsOnOwnRows() ? c.AllGather(slots, 1, tensor_groups_) : slots;
  }
  Value ExpertSlotsSummed(ComputationEmitter& c, const Value& partial) {
    return ExpertsOnOwnRows() ? c.ReduceScatter(partial, 1, tensor_groups_) : partial;
  }
  // [experts, rows, K] . [experts, K, N] per expert, in the compute type.
  Value PerExpert(ComputationEmitter& c, const Value& x, const Value& w, std::string_view type) {
    return c.Dot(c.Convert(x, C_), c.Convert(w, C_), {{0}, {0}, {2}, {1}}, type);
  }

  // An MoE layer's MLP on a.h2 [T, M] (every token of the micro-batch):
  // the router, the tokens dispatched to their experts' devices, the
  // experts' MLPs (their d_ff this device's part), the outputs brought
  // back and combined by the gates. Returns the output [T, M], this
  // device's part of the sum over the model axis, in the activation type.
  Value MoeForward(ComputationEmitter& c, const LayerWeights& w, LayerActs& a) {
    const int64_t T = a.h2.dim(0), groups = T / s_.Gs;
    a.probs = SoftmaxRows(c, MatMul(c, a.h2, w.router));
    const Routing r = Route(c, a.probs);
    const Value h = c.Reshape(a.h2, {groups, s_.Gs, s_.M});
    const Value slots =
        c.Dot(c.Convert(r.dispatch, C_), c.Convert(h, C_), {{0}, {0}, {1}, {1}}, A_);
    a.xe = AcrossModel(c, ToExperts(c, slots));
    a.ue = Math(c, PerExpert(c, a.xe, w.we1, A_));  // written as Projected's
    if (m_.mlp == "swiglu") a.ze = Math(c, PerExpert(c, a.xe, w.we3, A_));
    a.acte = Activation(c, a.ue, a.ze);
    a.yb = FromExperts(c, ExpertSlotsSummed(c, PerExpert(c, a.acte, w.we2, A_)), groups);
    const Value y = c.Dot(c.Convert(r.combine, C_), c.Convert(a.yb, C_), {{0}, {0}, {2, 3}, {1, 2}},
                          A_);  // [Ng, G, M]
    return c.Reshape(y, {T, s_.M});
  }
  // Its backward from dy [T, M] (the output's gradient, every token): the
  // gradient of h2 (this device's part of the sum over the model axis, in
  // the activation type), those of the router and the experts, and with
  // the auxiliary loss (`aux_scale`: 1, or 0 where a pipeline's bubble
  // runs the layer) this device's part of it, as the loss's token sums
  // count it (AuxLoss).
  struct MoeGrads {
    Value dh;
    std::vector<Value> weights;
    Value aux;
  };
  MoeGrads MoeBackward(ComputationEmitter& c, const LayerActs& a, const LayerWeights& w,
                       const Value& dy, const std::optional<Value>& aux_scale) {
    const int64_t T = a.h2.dim(0), groups = T / s_.Gs, E = m_.experts;
    const Routing r = Route(c, a.probs);
    const Value dyg = c.Reshape(dy, {groups, s_.Gs, s_.M});
    // y = combine . yb
    const Value dcombine =
        c.Dot(c.Convert(dyg, C_), c.Convert(a.yb, C_), {{0}, {0}, {2}, {3}}, P_);  // [Ng, G, E, C]
    const Value dyb = c.Dot(c.Convert(r.combine, C_), c.Convert(dyg, C_), {{0}, {0}, {1}, {1}},
                            A_);  // [Ng, E, C, M]
    const Value dye = AcrossModel(c, ToExperts(c, dyb));
    // The experts' MLPs.
    const Value dwe2 = c.Dot(c.Convert(a.acte, C_), c.Convert(dye, C_), {{0}, {0}, {1}, {1}}, P_);
    const Value dact =
        Math(c, c.Dot(c.Convert(dye, C_), c.Convert(w.we2, C_), {{0}, {0}, {2}, {2}}, A_));
    const auto [due, dze] =
        ActivationBackward(c, dact, Math(c, a.ue), m_.mlp == "swiglu" ? Math(c, a.ze) : Value{});
    const auto weight_grad = [&](const Value& dpre) {
      return c.Dot(c.Convert(a.xe, C_), c.Convert(dpre, C_), {{0}, {0}, {1}, {1}}, P_);
    };
    const auto input_grad = [&](const Value& dpre, const Value& weight) {
      return c.Dot(c.Convert(dpre, C_), c.Convert(weight, C_), {{0}, {0}, {2}, {2}}, A_);
    };
    std::vector<Value> grads;  // router, we1, (we3), we2: the router's below
    grads.push_back(weight_grad(due));
    if (m_.mlp == "swiglu") grads.push_back(weight_grad(dze));
    grads.push_back(dwe2);
    Value dxe = input_grad(due, w.we1);
    if (m_.mlp == "swiglu") dxe = c.Add(dxe, input_grad(dze, w.we3));
    // The dispatch: slots = dispatch . h
    const Value dslots = FromExperts(c, ExpertSlotsSummed(c, dxe), groups);  // [Ng, E, C, M]
    const Value dh_dispatch =
        c.Dot(c.Convert(r.dispatch, C_), c.Convert(dslots, C_), {{0}, {0}, {2, 3}, {1, 2}}, A_);
    // The gates: combine = sum of gate . slot; the renormalisation; the
    // probabilities each choice read; the router's softmax.
    std::vector<Value> dgates;
    for (const Value& slot : r.slots) dgates.push_back(c.ReduceSum(c.Mul(dcombine, slot), {2, 3}));
    std::vector<Value> draw = dgates;
    if (m_.top_k > 1) {
      Value total = r.raw[0], weighted = c.Mul(dgates[0], r.gates[0]);
      for (size_t j = 1; j < r.raw.size(); ++j) {
        total = c.Add(total, r.raw[j]);
        weighted = c.Add(weighted, c.Mul(dgates[j], r.gates[j]));
      }
      for (size_t j = 0; j < draw.size(); ++j) draw[j] = c.Div(c.Sub(dgates[j], weighted), total);
    }
    const std::vector<int64_t> by_expert = {groups, s_.Gs, E};
    Value dprobs;
    for (size_t j = 0; j < draw.size(); ++j) {
      const Value part = c.Mul(r.masks[j], c.Broadcast(draw[j], by_expert, {0, 1}));
      dprobs = j == 0 ? part : c.Add(dprobs, part);
    }
    Value aux;
    if (aux_scale) {
      const AuxLossParts parts = AuxLoss(c, r, a.probs, *aux_scale);
      aux = parts.value;
      dprobs = c.Add(dprobs, parts.dprobs);
    }
    dprobs = c.Reshape(dprobs, {T, E});
    const Value dlogits =
        c.Mul(a.probs, c.Sub(dprobs, PerRow(c, c.ReduceSum(c.Mul(dprobs, a.probs), {1}), dprobs)));
    grads.insert(grads.begin(), WeightGrad(c, a.h2, dlogits));
    const Value dh = c.Add(c.Reshape(dh_dispatch, {T, s_.M}), MatMulT(c, dlogits, w.router, A_));
    return {dh, grads, aux};
  }
  // GShard's load-balancing loss over this device's routing groups
  // (ModelConfig::aux_loss_weight): per group E sum_e f_e P_e, f_e the
  // share of its G tokens whose first choice is e (counts, so no gradient)
  // and P_e e's mean probability, averaged over the batch's groups. The
  // loss the step reports is a sum over tokens divided by the batch's
  // tokens, which are G per group, so this device's part of that sum is
  // (weight E / G) sum_g sum_e count_ge psum_ge; its gradient of the
  // reported loss by p_gte is weight E count_ge / (G tokens). Where every
  // device of the model axis routes every row, the probabilities'
  // gradient is each device's part of a sum over the axis (the experts'
  // outputs are), so each takes 1 / tensor of this one.
  struct AuxLossParts {
    Value value, dprobs;  // dprobs [Ng, G, E]
  };
  AuxLossParts AuxLoss(ComputationEmitter& c, const Routing& r, const Value& probs,
                       const Value& scale) {
    const int64_t E = m_.experts, G = s_.Gs, groups = probs.dim(0) / G;
    const Value count = c.ReduceSum(r.masks[0], {1});                       // [Ng, E]
    const Value psum = c.ReduceSum(c.Reshape(probs, {groups, G, E}), {1});  // [Ng, E]
    const double weight = m_.aux_loss_weight * static_cast<double>(E);
    const Value value = c.Mul(
        c.Scale(c.ReduceSum(c.Mul(count, psum), {0, 1}), weight / static_cast<double>(G)), scale);
    const double share = ExpertsOnOwnRows() ? 1 : 1.0 / static_cast<double>(plan_.tensor);
    const Value per_token = c.Scale(c.Mul(count, c.Broadcast(scale, count.dims, {})),
                                    share * weight / (static_cast<double>(G) * BatchTokens()));
    return {value, c.BroadcastLike(per_token, r.masks[0], {0, 2})};
  }

  // --- what backward reads of the forward ----------------------------------------------
  // The layer's SavedShapes values, in that order.
  std::vector<Value> Saved(ComputationEmitter& c, const Value& input,
                           const std::vector<LayerActs>& acts) {
    if (plan_.recompute == "full") return {input};
    std::vector<Value> saved;
    for (size_t j = 0; j < acts.size(); ++j) {
      const LayerActs& a = acts[j];
      saved.insert(saved.end(), {a.norm1.n, a.norm1.r, a.q, a.kc, a.vc, a.norm2.n, a.norm2.r});
      if (IsMoeLayer(m_, static_cast<int64_t>(j))) {
        saved.insert(saved.end(), {a.probs, a.xe, a.ue});
        if (m_.mlp == "swiglu") saved.push_back(a.ze);
        saved.insert(saved.end(), {a.acte, a.yb});
      } else {
        saved.push_back(a.u);
        if (m_.mlp == "swiglu") saved.push_back(a.z);
        saved.push_back(a.act);
      }
      if (plan_.recompute == "none") {
        saved.push_back(KeepsLogSumExp(m_, plan_) ? a.lse : a.p);
        saved.push_back(a.o);
      }
      if (a.cross) {
        saved.insert(saved.end(), {a.normc.n, a.normc.r, a.qc, a.kx, a.vx});
        if (plan_.recompute == "none") saved.insert(saved.end(), {a.pc, a.oc});
      }
    }
    const std::vector<SavedShape> shapes =
        SavedShapes(s_, m_, plan_, !acts.empty() && acts.front().cross);
    for (size_t k = 0; k < saved.size(); ++k) {
      saved[k] = shapes[k].in_param_type ? Math(c, saved[k]) : Held(c, saved[k]);
    }
    return saved;
  }
  // What LayerBackward reads of each layer of a block, from the block's
  // saved values: the block recomputed (full), its attention cores
  // recomputed (selective), or all as saved (none).
  std::vector<LayerActs> Restored(ComputationEmitter& c, const std::vector<Value>& saved,
                                  const std::vector<LayerWeights>& block) {
    if (plan_.recompute == "full") return BlockForward(c, saved[0], block);
    std::vector<LayerActs> acts;
    size_t i = 0;
    for (const LayerWeights& w : block) acts.push_back(RestoredLayer(c, saved, i, w));
    return acts;
  }
  // One layer's, from its saved values at saved[i] on (i moves past them).
  LayerActs RestoredLayer(ComputationEmitter& c, const std::vector<Value>& saved, size_t& i,
                          const LayerWeights& w) {
    LayerActs a;
    a.causal = w.causal;
    a.cross = w.cross;
    a.norm1 = {Math(c, saved[i]), Math(c, saved[i + 1])};
    i += 2;
    a.q = saved[i++];
    a.kc = saved[i++];
    a.vc = saved[i++];
    a.norm2 = {Math(c, saved[i]), Math(c, saved[i + 1])};
    i += 2;
    // What the column-parallel products read, made again from the norms'
    // outputs (under sequence parallelism gathered again, as Megatron does
    // rather than keep every device's rows).
    a.h = GatherResidual(c, c.Mul(a.norm1.n, PerColumn(c, w.g1, a.norm1.n)));
    const Value h2 = c.Mul(a.norm2.n, PerColumn(c, w.g2, a.norm2.n));
    a.h2 = w.moe && ExpertsOnOwnRows() ? h2 : GatherResidual(c, h2);
    if (w.moe) {
      a.probs = saved[i++];
      a.xe = saved[i++];
      a.ue = saved[i++];
      if (m_.mlp == "swiglu") a.ze = saved[i++];
      a.acte = saved[i++];
      a.yb = saved[i++];
    } else {
      a.u = Math(c, saved[i++]);
      if (m_.mlp == "swiglu") a.z = Math(c, saved[i++]);
      a.act = saved[i++];
    }
    if (plan_.recompute != "none") {
      AttentionCore(c, a);
    } else {
      if (KeepsLogSumExp(m_, plan_)) {
        a.lse = saved[i++];
      } else {
        a.k = AttendedKv(c, a.kc);
        a.v = AttendedKv(c, a.vc);
        a.p = saved[i++];
      }
      a.o = saved[i++];
    }
    if (w.cross) RestoredCrossAttention(c, saved, i, w, a);
    return a;
  }
  // Its cross-attention's, from saved[i] on: the input of q's product made
  // again from the norm's output, and (selective) the attention core
  // recomputed from q and the memory's k and v.
  void RestoredCrossAttention(ComputationEmitter& c, const std::vector<Value>& saved, size_t& i,
                              const LayerWeights& w, LayerActs& a) {
    a.normc = {Math(c, saved[i]), Math(c, saved[i + 1])};
    i += 2;
    a.qc = saved[i++];
    a.kx = saved[i++];
    a.vx = saved[i++];
    a.hc = GatherResidual(c, c.Mul(a.normc.n, PerColumn(c, w.gc, a.normc.n)));
    if (plan_.recompute == "none") {
      a.pc = saved[i++];
      a.oc = saved[i++];
      return;
    }
    a.pc = MaterialisedSoftmax(c, a.qc, a.kx, std::nullopt, false);
    a.oc = c.Reshape(AttentionOutput(c, a.pc, a.vx), {s_.T, s_.H * s_.hd});
  }
  // Zero stacks of the saved values: [extents..., SavedShapes...] (`cross`:
  // of layers with cross-attention).
  std::vector<Value> SavedStacks(ComputationEmitter& e, const std::vector<int64_t>& extents,
                                 bool cross = false) {
    std::vector<Value> stacks;
    for (const SavedShape& saved : SavedShapes(s_, m_, plan_, cross)) {
      std::vector<int64_t> full = extents;
      full.insert(full.end(), saved.dims.begin(), saved.dims.end());
      stacks.push_back(e.Full(saved.in_param_type ? P_ : A_, 0, full));
    }
    return stacks;
  }
  std::vector<Value> LoadAll(ComputationEmitter& c, const std::vector<Value>& stacks,
                             const Value& index) {
    std::vector<Value> entries;
    for (const Value& stack : stacks) entries.push_back(Load(c, stack, index));
    return entries;
  }

  // --- the loops over layers ------------------------------------------------------------
  // Layer `index` of each stacked weight, as 1- or 2-D values.
  // Entry `index` of a stack [L, ...] (a stacked weight, the saved inputs,
  // a gradient) is read and written at (index, 0, ..., 0).
  static std::vector<Value> EntryStarts(ComputationEmitter& c, const Value& stack,
                                        const Value& index) {
    std::vector<Value> starts = {index};
    for (int64_t i = 1; i < stack.rank(); ++i) starts.push_back(c.ScalarInt(0));
    return starts;
  }
  static std::vector<int64_t> EntryDims(const Value& stack) {
    return std::vector<int64_t>(stack.dims.begin() + 1, stack.dims.end());
  }

  Value Load(ComputationEmitter& c, const Value& stack, const Value& index) {
    std::vector<int64_t> sizes = EntryDims(stack);
    sizes.insert(sizes.begin(), 1);
    return c.Reshape(c.DynamicSlice(stack, EntryStarts(c, stack, index), sizes), EntryDims(stack));
  }

  Value Store(ComputationEmitter& c, const Value& stack, const Value& value, const Value& index) {
    std::vector<int64_t> dims = value.dims;
    dims.insert(dims.begin(), 1);
    return c.DynamicUpdateSlice(stack, c.Reshape(value, dims), EntryStarts(c, stack, index));
  }

  // Block `index` of each stacked weight: its layers' weights.
  std::vector<LayerWeights> SliceLayer(ComputationEmitter& c, const std::vector<Value>& stacked,
                                       const Value& index, const LayerStack& stack = {}) {
    std::vector<Value> w;
    for (size_t k = 0; k < stacked.size(); ++k) {
      const Value layer = Load(c, stacked[k], index);
      // Under ZeRO-3 the layer's weight is gathered whole where it is used:
      // a matrix in the type its products read, a norm gain (1-D) in P.
      if (!IsShard(stack.first + k)) {
        w.push_back(layer);
        continue;
      }
      const Value sent = layer.rank() > 1 ? c.Convert(layer, C_) : layer;
      const size_t index = stack.first + k;
      w.push_back(UnpaddedFromCut(
          c, index, c.AllGather(sent, ShardDim(index) - 1, *GradientGroups(index).groups), true));
    }
    std::vector<LayerWeights> block;
    size_t i = 0;
    for (int64_t j = 0; j < BlockLayers(m_); ++j) {
      LayerWeights lw;
      lw.g1 = w[i++];
      if (MultiQuery(m_)) {
        lw.wq = w[i++], lw.wkv = w[i++];
      } else {
        lw.wqkv = w[i++];
      }
      lw.wo = w[i++];
      lw.causal = m_.causal && !stack.encoder;
      // An encoder-decoder's decoder attends to the memory (which a decode
      // step reads as its prefill cached its k and v).
      if (EncoderDecoder(m_) && !stack.encoder) {
        lw.cross = true;
        lw.gc = w[i++], lw.wqc = w[i++], lw.wkvc = w[i++], lw.woc = w[i++];
        if (stack.memory) lw.memory = *stack.memory;
      }
      lw.g2 = w[i++];
      lw.moe = IsMoeLayer(m_, j);
      Value& first = lw.moe ? lw.router : lw.w1;
      first = w[i++];
      if (lw.moe) lw.we1 = w[i++];
      if (m_.mlp == "swiglu") (lw.moe ? lw.we3 : lw.w3) = w[i++];
      (lw.moe ? lw.we2 : lw.w2) = w[i++];
      block.push_back(lw);
    }
    return block;
  }

  // A while loop over the state `init` (element 0 a counter from 0) for
  // `trips` iterations: computation `name` is the body, which `step` writes
  // from the state's elements, returning the next state's elements after
  // the counter (the loop adds it). Returns the final state's elements.
  using LoopStep =
      std::function<std::vector<Value>(ComputationEmitter&, const std::vector<Value>& state)>;
  std::vector<Value> Loop(ComputationEmitter& e, std::string_view name, std::vector<Value> init,
                          int64_t trips, const LoopStep& step) {
    init.insert(init.begin(), e.ScalarInt(0));
    const Value carry = e.Tuple(init);
    ComputationEmitter& condition = module_.AddComputation(fmt::format("{}_condition", name));
    condition.SetRoot(
        condition.Compare(condition.Element(condition.TupleParameter(carry.elements, "state"), 0),
                          condition.ScalarInt(trips), "LT"));
    ComputationEmitter& body = module_.AddComputation(name);
    const std::vector<Value> in = body.Elements(body.TupleParameter(carry.elements, "state"));
    std::vector<Value> next = step(body, in);
    next.insert(next.begin(), body.Add(in[0], body.ScalarInt(1)));
    body.SetRoot(body.Tuple(next));
    return e.Elements(e.While(carry, condition, body));
  }

  // How many layers a stack's loops run: an encoder-decoder's encoder has
  // its own count.
  int64_t StackLayers(const LayerStack& stack) const {
    return stack.encoder ? m_.encoder_layers : s_.L;
  }

  // What a loop over a stack carries after the weights (and gradients): the
  // chunk's first layer under interleaving, the memory, and its gradient.
  static std::vector<Value> Extras(const std::optional<Value>& chunk, const LayerStack& stack,
                                   const std::optional<Value>& dmemory = std::nullopt) {
    std::vector<Value> extras;
    if (chunk) extras.push_back(*chunk);
    if (stack.memory) extras.push_back(*stack.memory);
    if (dmemory) extras.push_back(*dmemory);
    return extras;
  }

  // Runs the layers forward (with interleaved stages, the chunk of L / v
  // from local layer `chunk` on, carried into the loop); returns (final x,
  // what backward reads of each layer run: SavedShapes stacked [L, ...]).
  std::pair<Value, std::vector<Value>> ForwardLoop(ComputationEmitter& e, const Value& x,
                                                   const std::vector<Value>& stacked,
                                                   const std::optional<Value>& chunk = {},
                                                   const LayerStack& stack = {}) {
    const int64_t trips = chunk ? ChunkLayers() : StackLayers(stack);
    const std::vector<Value> stacks = SavedStacks(e, {trips}, stack.memory.has_value());
    const auto kept = static_cast<long>(stacks.size());
    const std::vector<Value> extras = Extras(chunk, stack);
    const auto n = static_cast<long>(stacked.size());
    std::vector<Value> init = {x};
    init.insert(init.end(), stacks.begin(), stacks.end());
    init.insert(init.end(), stacked.begin(), stacked.end());
    init.insert(init.end(), extras.begin(), extras.end());
    const std::vector<Value> done = Loop(
        e, "forward_layer", init, trips, [&](ComputationEmitter& c, const std::vector<Value>& in) {
          const std::vector<Value> weights(in.begin() + 2 + kept, in.begin() + 2 + kept + n);
          const std::vector<Value> carried(in.begin() + 2 + kept + n, in.end());
          const Value layer = chunk ? c.Add(carried[0], in[0]) : in[0];
          LayerStack here = stack;
          if (stack.memory) here.memory = carried.back();
          const std::vector<LayerActs> acts =
              BlockForward(c, in[1], SliceLayer(c, weights, layer, here));
          const std::vector<Value> saved = Saved(c, in[1], acts);
          // An empty slot hands its input on.
          const std::optional<Value> empty = EmptySlot(c, layer, stack);
          std::vector<Value> out = {empty ? Where(c, *empty, in[1], acts.back().out)
                                          : acts.back().out};
          for (size_t k = 0; k < saved.size(); ++k) {
            out.push_back(Store(c, in[2 + k], saved[k], in[0]));
          }
          out.insert(out.end(), weights.begin(), weights.end());
          out.insert(out.end(), carried.begin(), carried.end());
          return out;
        });
    return {done[1], std::vector<Value>(done.begin() + 2, done.begin() + 2 + kept)};
  }

  // Runs the layers backward from dx (the gradient of the last layer's
  // output; with interleaved stages of the chunk from local layer `chunk`
  // on, whose saved values `saved` holds); returns the gradient of the
  // first layer's input, stacked weight gradients of every local layer,
  // and for a stack that reads a memory this device's part (over the model
  // axis) of the memory's gradient, in P. Given `into` (stacks of running
  // sums, as a pipeline keeps over its micro-batches), each layer's weight
  // gradients are added into its entries there as the layer makes them, as
  // Megatron accumulates into its main gradients, and those sums returned:
  // the loop then touches its own layers' entries only, not a whole zeroed
  // stack added to the sums each micro-batch.
  // The auxiliary loss, where the model has one, is this device's part of
  // it over the loop's layers (MoeBackward), `aux_scale` (a scalar of `e`,
  // 1 where absent) scaling it and its gradient: 0 in a pipeline's bubble.
  struct StackGrads {
    Value dx;
    std::vector<Value> weights;
    Value dmemory;
    Value aux;
  };
  StackGrads BackwardLoop(ComputationEmitter& e, const Value& dx, const std::vector<Value>& saved,
                          const std::vector<Value>& stacked, const std::optional<Value>& chunk = {},
                          const LayerStack& stack = {}, const std::vector<Value>& into = {},
                          const std::optional<Value>& aux_scale = {}) {
    const size_t n = stacked.size();
    const int64_t trips = chunk ? ChunkLayers() : StackLayers(stack);
    const auto kept = static_cast<long>(saved.size());
    std::optional<Value> dmemory;
    if (stack.memory) dmemory = e.Full(P_, 0, stack.memory->dims);
    const std::vector<Value> extras = Extras(chunk, stack, dmemory);
    std::vector<Value> init = {dx};
    init.insert(init.end(), saved.begin(), saved.end());
    init.insert(init.end(), stacked.begin(), stacked.end());
    for (size_t k = 0; k < n; ++k) {
      init.push_back(into.empty() ? e.Full(P_, 0, GradDims(stack.first + k)) : into[k]);
    }
    init.insert(init.end(), extras.begin(), extras.end());
    // The auxiliary loss's sum and scale ride last.
    const bool aux = AuxLossOn();
    if (aux) init.insert(init.end(), {e.Full(P_, 0, {}), aux_scale.value_or(e.Full(P_, 1, {}))});
    const long first_weight = 2 + kept;
    const auto end_of_grads = first_weight + 2 * static_cast<long>(n);
    const std::vector<Value> done = Loop(
        e, "backward_layer", init, trips, [&](ComputationEmitter& c, const std::vector<Value>& in) {
          const std::vector<Value> stacks(in.begin() + 2, in.begin() + first_weight);
          const std::vector<Value> weights(in.begin() + first_weight,
                                           in.begin() + first_weight + static_cast<long>(n));
          const std::vector<Value> grads(in.begin() + first_weight + static_cast<long>(n),
                                         in.begin() + end_of_grads);
          std::vector<Value> carried(in.begin() + end_of_grads, in.end() - (aux ? 2 : 0));
          std::optional<Value> aux_sum, scale;
          if (aux) {
            aux_sum = in[in.size() - 2];
            scale = in.back();
          }
          const Value entry = c.Sub(c.ScalarInt(trips - 1), in[0]);
          const Value layer = chunk ? c.Add(carried[0], entry) : entry;
          LayerStack here = stack;
          if (stack.memory) here.memory = carried[carried.size() - 2];
          const std::vector<LayerWeights> block = SliceLayer(c, weights, layer, here);
          LayerGrads g =
              BlockBackward(c, Restored(c, LoadAll(c, stacks, entry), block), block, in[1], scale);
          // An empty slot hands its gradient back, and gives its weights
          // (and the auxiliary loss) none.
          if (const std::optional<Value> empty = EmptySlot(c, layer, stack)) {
            g.dx = Where(c, *empty, in[1], g.dx);
            for (Value& grad : g.weights) grad = Masked(c, c.Unary("not", *empty), grad);
            if (aux) g.aux = Masked(c, c.Unary("not", *empty), g.aux);
          }
          std::vector<Value> out = {g.dx};
          out.insert(out.end(), stacks.begin(), stacks.end());
          out.insert(out.end(), weights.begin(), weights.end());
          for (size_t k = 0; k < n; ++k) {
            // Under ZeRO-2 and -3 each device keeps its shard of the
            // layer's gradient, summed over the devices that sum it (the
            // data axis; for multi-query k and v the model axis too) as it
            // is made.
            const size_t index = stack.first + k;
            const Value grad =
                GradientIsShard(index)
                    ? c.ReduceScatter(PaddedForCut(c, index, g.weights[k], true),
                                      ShardDim(index) - 1, *GradientGroups(index).groups)
                    : g.weights[k];
            out.push_back(Store(
                c, grads[k], into.empty() ? grad : c.Add(Load(c, grads[k], layer), grad), layer));
          }
          if (stack.memory) carried.back() = c.Add(carried.back(), g.dmemory);
          out.insert(out.end(), carried.begin(), carried.end());
          if (aux) out.insert(out.end(), {c.Add(*aux_sum, g.aux), *scale});
          return out;
        });
    const auto grads = done.begin() + first_weight + static_cast<long>(n);
    StackGrads result{done[1], std::vector<Value>(grads, grads + static_cast<long>(n)), {}, {}};
    const size_t tail = aux ? 2 : 0;
    if (stack.memory) result.dmemory = done[done.size() - 1 - tail];
    if (aux) result.aux = done[done.size() - 2];
    return result;
  }
  // Whether the step adds MoE's auxiliary load-balancing loss.
  bool AuxLossOn() const { return m_.experts > 0 && m_.aux_loss_weight > 0; }
  // `loss` (a token sum of this device's) with this device's part of the
  // auxiliary loss added, summed over the model axis where its devices
  // route their own rows (else each routes them all, as the loss counts
  // every row once there).
  Value WithAux(ComputationEmitter& c, const Value& loss, const Value& aux) {
    if (aux.name.empty()) return loss;
    return c.Add(loss, ExpertsOnOwnRows() ? c.AllReduce(aux, tensor_groups_) : aux);
  }

  // --- the pipeline ---------------------------------------------------------------------
  bool Pipelined() const { return plan_.pipeline > 1 || plan_.micro_batches > 1; }

  // This device's pipeline stage, from its partition id.
  Value StageIndex(ComputationEmitter& c) {
    return Position(c, plan_.data * plan_.context * plan_.tensor, plan_.pipeline);
  }
  Value Is(ComputationEmitter& c, const Value& scalar, int64_t value) {
    return c.Compare(scalar, c.ScalarInt(value), "EQ");
  }
  // Whether this device's slot `slot` (of its stage's v chunks) of the
  // decoder's layer stack is empty (PipelineLayout): none where every chunk
  // is full, or for an encoder's stack (never pipelined).
  std::optional<Value> EmptySlot(ComputationEmitter& c, const Value& slot,
                                 const LayerStack& stack) {
    if (stack.encoder || !layout_.Uneven()) return std::nullopt;
    const Value pass = c.Binary("divide", slot, c.ScalarInt(layout_.slots));
    const Value chunk = c.Add(c.Mul(pass, c.ScalarInt(plan_.pipeline)), StageIndex(c));
    const Value short_chunk =
        c.Binary("or", c.Compare(chunk, c.ScalarInt(layout_.short_first), "LT"),
                 c.Compare(chunk, c.ScalarInt(layout_.chunks - layout_.short_last), "GE"));
    const Value last =
        Is(c, c.Binary("remainder", slot, c.ScalarInt(layout_.slots)), layout_.slots - 1);
    return c.Binary("and", short_chunk, last);
  }
  // 0 <= k < limit
  Value InRange(ComputationEmitter& c, const Value& k, int64_t limit) {
    return c.Binary("and", c.Compare(k, c.ScalarInt(0), "GE"),
                    c.Compare(k, c.ScalarInt(limit), "LT"));
  }
  Value ClampIndex(ComputationEmitter& c, const Value& k, int64_t limit) {
    return c.Clamp(c.ScalarInt(0), k, c.ScalarInt(limit - 1));
  }
  // `x` where the scalar `predicate` holds, else `otherwise`.
  Value Where(ComputationEmitter& c, const Value& predicate, const Value& x,
              const Value& otherwise) {
    return c.Select(c.Broadcast(predicate, x.dims, {}), x, otherwise);
  }
  Value Masked(ComputationEmitter& c, const Value& predicate, const Value& x) {
    return Where(c, predicate, x, c.Full(x.type, 0, x.dims));
  }
  // Entry `index` of `stack` becomes `value` where `valid` holds, and stays.
  Value StoreIf(ComputationEmitter& c, const Value& stack, const Value& value, const Value& index,
                const Value& valid) {
    return Store(c, stack, Where(c, valid, value, Load(c, stack, index)), index);
  }
  Value HandOn(ComputationEmitter& c, const Value& x,
               const std::vector<std::pair<int64_t, int64_t>>& pairs) {
    return pairs.empty() ? x : c.CollectivePermute(x, pairs);
  }

  // The forward pipeline over micro-batches of x0 [Tb, M]: returns the last
  // stage's outputs [Tb, M] (meaningful on the last stage) and what the
  // backward reads of each of the stage's layers per micro-batch [n, L, ...].
  std::pair<Value, std::vector<Value>> PipelineForward(ComputationEmitter& e, const Value& x0,
                                                       const std::vector<Value>& stacked) {
    return MicroBatchPipeline(
        e, "pipeline_forward", x0, s_.R, SavedStacks(e, {s_.n, s_.L}), stacked,
        [&](ComputationEmitter& c, const Value& x, const std::vector<Value>&, const Value&,
            const std::optional<Value>& chunk,
            const std::vector<Value>& weights) { return ForwardLoop(c, x, weights, chunk); });
  }

  // The backward pipeline from dxl [Tb, M] (the loss's gradient of the last
  // stage's outputs), micro-batches in reverse, the last stage first: returns
  // the gradient of the first stage's inputs [Tb, M] (meaningful on stage 0)
  // and this stage's stacked weight gradients summed over micro-batches
  // (and its part of the auxiliary loss, none in the bubble's iterations).
  // With interleaved stages the forward's work in reverse order, passes
  // last: stage 0 hands each pass but the first back round to the last
  // stage, which keeps it for the pass before.
  StackGrads PipelineBackward(ComputationEmitter& e, const Value& dxl,
                              const std::vector<Value>& saved, const std::vector<Value>& stacked) {
    const int64_t n = s_.n, stages = plan_.pipeline, passes = Passes(), works = n * passes;
    const size_t w = stacked.size();
    const auto kept = static_cast<long>(saved.size());
    const long fixed = passes > 1 ? 5 : 4;  // the counter, received, dxl, dx0[, round]
    std::vector<Value> init = {e.Full(A_, 0, {s_.R, s_.W}), e.Reshape(dxl, {n, s_.R, s_.W}),
                               e.Full(A_, 0, {n, s_.R, s_.W})};
    if (passes > 1) init.push_back(e.Full(A_, 0, {n, s_.R, s_.W}));
    init.insert(init.end(), saved.begin(), saved.end());
    init.insert(init.end(), stacked.begin(), stacked.end());
    for (size_t k = 0; k < w; ++k) init.push_back(e.Full(P_, 0, GradDims(3 + k)));
    const bool aux = AuxLossOn();  // its sum rides last
    if (aux) init.push_back(e.Full(P_, 0, {}));
    const long first_weight = fixed + kept;
    const auto step = [&](ComputationEmitter& c, const std::vector<Value>& in) {
      const Value &j = in[0], &received = in[1], &dxl_all = in[2], &dx0 = in[3];
      const std::vector<Value> stacks(in.begin() + fixed, in.begin() + first_weight);
      const std::vector<Value> weights(in.begin() + first_weight,
                                       in.begin() + first_weight + static_cast<long>(w));
      const std::vector<Value> sums(in.begin() + first_weight + static_cast<long>(w),
                                    in.end() - (aux ? 1 : 0));
      const Value stage = StageIndex(c);
      // The k-th work this stage takes back, k = j - (P - 1 - stage), is
      // its work n v - 1 - k of the forward.
      const Value k = c.Sub(c.Add(j, stage), c.ScalarInt(stages - 1));
      const Value valid = InRange(c, k, works);
      const auto reversed = [&](const Value& index) {
        return ClampIndex(c, c.Sub(c.ScalarInt(works - 1), index), works);
      };
      const Value back = reversed(k);
      const PipelineWork work = WorkOf(c, back);
      Value from_loss = Load(c, dxl_all, reversed(j));
      std::vector<Value> next_round;
      Value first_pass = valid;  // where stage 0's dx is the step's input gradient
      if (passes > 1) {
        // What stage 0 handed round (its work j - P back) comes back to the
        // last stage for the pass before; the last stage's first n take the
        // loss's gradient.
        const Value came = c.Sub(j, c.ScalarInt(stages));
        const Value round =
            StoreIf(c, in[4], received, WorkOf(c, reversed(came)).micro,
                    c.Binary("and", Is(c, stage, stages - 1), InRange(c, came, n * (passes - 1))));
        from_loss =
            Where(c, InRange(c, j, n), Load(c, dxl_all, work.micro), Load(c, round, work.micro));
        first_pass = c.Binary("and", valid, c.Compare(back, c.ScalarInt(n), "LT"));
        next_round.push_back(round);
      }
      const Value dout = Masked(c, valid, Where(c, Is(c, stage, stages - 1), from_loss, received));
      std::vector<Value> kept_values;
      for (const Value& stack : stacks) {
        kept_values.push_back(work.chunk ? LoadChunk(c, stack, work.micro, *work.chunk)
                                         : Load(c, stack, work.micro));
      }
      const StackGrads stage_grads =
          BackwardLoop(c, dout, kept_values, weights, work.chunk, {}, sums, c.Convert(valid, P_));
      const Value& dx = stage_grads.dx;
      const std::vector<Value>& grads = stage_grads.weights;
      std::vector<Value> next = {
          HandOn(c, dx, passes > 1 ? around_stages_back_ : to_previous_stage_), dxl_all,
          StoreIf(c, dx0, dx, work.micro, first_pass)};
      next.insert(next.end(), next_round.begin(), next_round.end());
      next.insert(next.end(), stacks.begin(), stacks.end());
      next.insert(next.end(), weights.begin(), weights.end());
      next.insert(next.end(), grads.begin(), grads.end());  // the sums, accumulated
      if (aux) next.push_back(c.Add(in.back(), stage_grads.aux));
      return next;
    };
    const std::vector<Value> done = Loop(e, "pipeline_backward", init, works + stages - 1, step);
    const auto grads = done.begin() + first_weight + static_cast<long>(w);
    return {e.Reshape(done[3], {n * s_.R, s_.W}),
            std::vector<Value>(grads, grads + static_cast<long>(w)),
            {},
            aux ? done.back() : Value{}};
  }

  // The final norm, the head and the loss on the last layer's output xl
  // (this device's rows) against the target ids of the rows the model axis
  // gathers (IdsAsGathered's order), and back: the
  // sum over the rows of -log p(target), the gradient of xl (in the
  // activation type) and those of gf and wout. The head is vocab-parallel
  // (Megatron's parallel cross-entropy): each device of the model axis
  // takes every row of it (gathered under sequence parallelism) into its
  // slice of the logits; each row's max, sum of exponentials and target
  // logit are reduced over the axis, and the input's gradient, partial
  // over the vocabulary, summed over it (each device's rows of the sum under
  // sequence parallelism).
  struct Head {
    Value loss, dxl, dgf, dwout;
  };
  Head HeadStep(ComputationEmitter& c, const Value& xl, const Value& ids, const Value& gf,
                const Value& wout) {
    const NormActs final_norm = NormForward(c, Math(c, xl));
    const Value hf = GatherResidual(c, c.Mul(final_norm.n, PerColumn(c, gf, final_norm.n)));
    const Value logits = MatMul(c, hf, wout);  // [rows of the model axis, V]
    const Value onehot = OneHot(c, ids, P_);
    const Value mx = c.AllReduce(c.ReduceMax(logits, {1}), tensor_groups_, "max");
    const Value shifted = c.Sub(logits, PerRow(c, mx, logits));
    const Value exp = c.Unary("exponential", shifted);
    const Value z = c.AllReduce(c.ReduceSum(exp, {1}), tensor_groups_);
    const Value picked = c.AllReduce(c.ReduceSum(c.Mul(shifted, onehot), {1}), tensor_groups_);
    Head head;
    head.loss = c.ReduceSum(c.Sub(c.Unary("log", z), picked), {0});
    const Value softmax = c.Div(exp, PerRow(c, z, exp));
    const Value dlogits = c.Scale(c.Sub(softmax, onehot), 1.0 / BatchTokens());
    head.dwout = WeightGrad(c, hf, dlogits);
    // Summed in the parameter type (where Megatron sums it in bf16): the
    // residual stream's gradient starts from it, and so a plan changes only
    // the order of its sum, not its rounding. It is one sum a micro-batch,
    // not one a layer.
    const Value dhf = HeldSumOverModel(c, MatMulT(c, dlogits, wout));
    const auto [dxl, dgf] = NormBackward(c, dhf, final_norm, gf);
    head.dxl = Held(c, dxl);
    head.dgf = dgf;
    return head;
  }

  // Under pipeline stages the head's rows are spread over the stages, as
  // JAX's SPMD pipelines run the layers outside the pipeline with the stage
  // axis as one more batch axis (where Megatron's last stage runs the head
  // in place of a layer it holds fewer): an all-to-all over the pipeline
  // axis hands each stage its R / P of the last stage's rows, every stage
  // runs the head on them (against its rows' ids), and an all-gather brings
  // their gradients back, in order, to every stage, of which the last
  // reads them. Each row's loss and gradient are as the last stage alone
  // computes them; the sums over rows (the loss, the gain's and the head's
  // gradients) are each stage's part, summed over the pipeline axis with
  // the other weights every stage holds. Under ParallelPlan::head
  // "last-stage", or where P does not divide R, every stage runs the head
  // on all of them, the last's counting.
  bool SpreadsHead() const { return model::SpreadsHead(m_, plan_); }
  // The head on one micro-batch's rows x [R, M] (the last stage's) against
  // its target ids [b, S].
  Head StageHead(ComputationEmitter& c, const Value& x, const Value& targets, const Value& gf,
                 const Value& wout) {
    const Value ids = IdsAsGathered(c, targets);
    if (!SpreadsHead()) return HeadStep(c, x, ids, gf, wout);
    const int64_t stages = plan_.pipeline, share = s_.R / stages;
    // Every stage's block `stage` of its rows, in stage order: the last
    // stage's block is this stage's share.
    const Value received = c.AllToAll(x, 0, pipeline_groups_);
    const Value rows = c.Slice(received, 0, (stages - 1) * share, share);
    // The ids of each model-axis device's rows, by stage: this stage's.
    const int64_t devices = ids.dim(0) / s_.R;
    const Value zero = c.ScalarInt(0);
    const Value by_stage = c.Reshape(ids, {devices, stages, share});
    const Value mine = c.DynamicSlice(by_stage, {zero, StageIndex(c), zero}, {devices, 1, share});
    Head head = HeadStep(c, rows, c.Reshape(mine, {devices * share}), gf, wout);
    head.dxl = c.AllGather(head.dxl, 0, pipeline_groups_);
    return head;
  }

  // The head on the last layer's outputs xl [n R, M] of the n
  // micro-batches of `targets` [n b, S], one micro-batch at a time (as the
  // last stage of Megatron's pipeline runs it on each micro-batch it
  // finishes, so that one micro-batch's logits are live at once): a loop
  // writing each micro-batch's dxl and summing the losses and the head's
  // gradients.
  Head MicroBatchedHead(ComputationEmitter& e, const Value& xl, const Value& targets,
                        const Value& gf, const Value& wout) {
    if (s_.n == 1) return StageHead(e, xl, targets, gf, wout);
    const std::vector<Value> init = {e.Full(P_, 0, {}),
                                     e.Full(A_, 0, xl.dims),
                                     e.Full(P_, 0, gf.dims),
                                     e.Full(P_, 0, wout.dims),
                                     xl,
                                     targets,
                                     gf,
                                     wout};
    const auto step = [&](ComputationEmitter& c, const std::vector<Value>& in) {
      const Value& i = in[0];
      const Value rows = c.Mul(i, c.ScalarInt(s_.R)), zero = c.ScalarInt(0);
      const Value x = c.DynamicSlice(in[5], {rows, zero}, {s_.R, s_.W});
      const Head head = StageHead(c, x, MicroBatchRows(c, in[6], i), in[7], in[8]);
      return std::vector<Value>{c.Add(in[1], head.loss),
                                c.DynamicUpdateSlice(in[2], head.dxl, {rows, zero}),
                                c.Add(in[3], head.dgf),
                                c.Add(in[4], head.dwout),
                                in[5],
                                in[6],
                                in[7],
                                in[8]};
    };
    const std::vector<Value> done = Loop(e, "head_micro_batch", init, s_.n, step);
    return {done[1], done[2], done[3], done[4]};
  }

  // The local loss and gradients (before their sums over devices, in
  // Weights order) of the micro-batch ids `tokens` and `targets` [rows,
  // S]: the embedding, the layers, the head and back. Given `into` (running
  // sums of the gradients, in Weights order, as gradient accumulation keeps
  // them), the gradients are added into them (the layers' as each layer
  // makes them: BackwardLoop) and the sums returned.
  std::pair<Value, std::vector<Value>> ForwardBackward(ComputationEmitter& c, const Value& tokens,
                                                       const Value& targets,
                                                       const std::vector<Value>& weights,
                                                       const std::vector<Value>& into = {}) {
    const auto summed = [&](std::vector<Value> grads, size_t count) {
      for (size_t k = 0; k < count && !into.empty(); ++k) grads[k] = c.Add(into[k], grads[k]);
      return grads;
    };
    if (EncoderDecoder(m_)) {
      const auto [loss, grads] = EncoderDecoderGrads(c, tokens, targets, weights);
      return {loss, summed(grads, grads.size())};
    }
    const std::vector<Value> stacked(weights.begin() + 3, weights.end());
    const Embedded in = Embed(c, tokens, weights[0]);
    const auto [xl, saved] = ForwardLoop(c, in.x0, stacked);
    const Head head = HeadStep(c, xl, IdsAsGathered(c, targets), weights[1], weights[2]);
    const std::vector<Value> stacked_sums =
        into.empty() ? std::vector<Value>{} : std::vector<Value>(into.begin() + 3, into.end());
    const StackGrads back = BackwardLoop(c, head.dxl, saved, stacked, {}, {}, stacked_sums);
    std::vector<Value> grads = summed({EmbedGrad(c, in, back.dx), head.dgf, head.dwout}, 3);
    grads.insert(grads.end(), back.weights.begin(), back.weights.end());
    return {WithAux(c, head.loss, back.aux), grads};
  }

  // An encoder-decoder's: the encoder over the tokens, its final norm (the
  // memory, every row of it gathered where the rows are split), the
  // decoder over the targets shifted right, each layer reading the memory,
  // the head and the loss; and back, the memory's gradient summed over
  // the decoder's layers and over the model axis into the encoder's.
  std::pair<Value, std::vector<Value>> EncoderDecoderGrads(ComputationEmitter& c,
                                                           const Value& tokens,
                                                           const Value& targets,
                                                           const std::vector<Value>& weights) {
    const Stacks stacks = StacksOf(weights);
    const std::vector<Value>& decoder = stacks.decoder;
    const std::vector<Value>& encoder = stacks.encoder;
    const Value& gain = stacks.gain;
    const LayerStack& encoding = stacks.encoding;
    const Embedded source = Embed(c, tokens, weights[0]);
    const auto [encoded, encoder_saved] = ForwardLoop(c, source.x0, encoder, {}, encoding);
    const auto [norm, memory] = EncoderMemory(c, encoded, gain);
    LayerStack decoding;
    decoding.memory = memory;
    const Embedded shifted = Embed(c, ShiftedRight(c, targets), weights[0]);
    const auto [xl, decoder_saved] = ForwardLoop(c, shifted.x0, decoder, {}, decoding);
    const Head head = HeadStep(c, xl, IdsAsGathered(c, targets), weights[1], weights[2]);
    const StackGrads decoder_back = BackwardLoop(c, head.dxl, decoder_saved, decoder, {}, decoding);
    const auto [dencoded, dgain] =
        NormBackward(c, SumOverModel(c, Held(c, decoder_back.dmemory)), norm, gain);
    const StackGrads encoder_back =
        BackwardLoop(c, Held(c, dencoded), encoder_saved, encoder, {}, encoding);
    std::vector<Value> grads = {
        c.Add(EmbedGrad(c, source, encoder_back.dx), EmbedGrad(c, shifted, decoder_back.dx)),
        head.dgf, head.dwout};
    grads.insert(grads.end(), decoder_back.weights.begin(), decoder_back.weights.end());
    grads.push_back(dgain);
    grads.insert(grads.end(), encoder_back.weights.begin(), encoder_back.weights.end());
    return {head.loss, grads};
  }
  // The stacked weights by stack (of the weights in Weights order): the
  // decoder's (the model's only stack but for an encoder-decoder), and an
  // encoder-decoder's encoder's with its final norm's gain.
  // (The decoder's stack is the default LayerStack, with the memory once
  // the encoder has made it.)
  struct Stacks {
    std::vector<Value> decoder;
    std::vector<Value> encoder;
    LayerStack encoding;
    Value gain;
  };
  Stacks StacksOf(const std::vector<Value>& weights) const {
    if (!EncoderDecoder(m_)) return {std::vector<Value>(weights.begin() + 3, weights.end())};
    size_t encoder_gain = 3;
    while (infos_[encoder_gain].name != "enc.gf") ++encoder_gain;
    const auto gain = static_cast<long>(encoder_gain);
    return {std::vector<Value>(weights.begin() + 3, weights.begin() + gain),
            std::vector<Value>(weights.begin() + gain + 1, weights.end()),
            LayerStack{encoder_gain + 1, true, std::nullopt}, weights[encoder_gain]};
  }
  // The encoder's final norm of its output and the memory the decoder reads:
  // the norm's output times the gain [T, M] in the activation type, every
  // row of it gathered where the rows are split.
  std::pair<NormActs, Value> EncoderMemory(ComputationEmitter& c, const Value& encoded,
                                           const Value& gain) {
    const NormActs norm = NormForward(c, Math(c, encoded));
    return {norm, GatherResidual(c, Held(c, c.Mul(norm.n, PerColumn(c, gain, norm.n))))};
  }

  // The decoder's input: each sequence of ids [rows, S] one position on, id 0 first.
  Value ShiftedRight(ComputationEmitter& c, const Value& ids) {
    const int64_t rows = ids.dim(0), S = ids.dim(1);
    return c.Concatenate({c.Full("s32", 0, {rows, 1}), c.Slice(ids, 1, 0, S - 1)}, 1);
  }

  // Gradient accumulation (micro-batches, one stage): a loop over the n
  // micro-batches, each run forward and backward before the next (so one
  // micro-batch's activations are kept at a time), the loss and the
  // gradients summed.
  std::pair<Value, std::vector<Value>> AccumulatedGrads(ComputationEmitter& e, const Value& tokens,
                                                        const Value& targets,
                                                        const std::vector<Value>& weights) {
    const size_t w = weights.size();
    std::vector<Value> init = {e.Full(P_, 0, {}), tokens, targets};
    // Each gradient is shaped as its weight, or under ZeRO-2 and -3 as a
    // layer weight's shard (which the backward loop scatters it to).
    for (size_t k = 0; k < w; ++k) init.push_back(e.Full(P_, 0, GradDims(k)));
    init.insert(init.end(), weights.begin(), weights.end());
    const auto step = [&](ComputationEmitter& c, const std::vector<Value>& in) {
      const Value& i = in[0];
      const std::vector<Value> sums(in.begin() + 4, in.begin() + 4 + static_cast<long>(w));
      const std::vector<Value> mine(in.begin() + 4 + static_cast<long>(w), in.end());
      const auto [loss, accumulated] =
          ForwardBackward(c, MicroBatchRows(c, in[2], i), MicroBatchRows(c, in[3], i), mine, sums);
      std::vector<Value> next = {c.Add(in[1], loss), in[2], in[3]};
      next.insert(next.end(), accumulated.begin(), accumulated.end());
      next.insert(next.end(), mine.begin(), mine.end());
      return next;
    };
    const std::vector<Value> done = Loop(e, "micro_batch", init, s_.n, step);
    return {done[1], std::vector<Value>(done.begin() + 4, done.begin() + 4 + static_cast<long>(w))};
  }
  // The local loss and gradients of the GPipe pipeline: every stage runs
  // the head, the last stage's counts; the embedding's gradient is stage
  // 0's.
  std::pair<Value, std::vector<Value>> PipelinedGrads(ComputationEmitter& e, const Value& tokens,
                                                      const Value& targets,
                                                      const std::vector<Value>& weights) {
    if (OneFOneB(plan_)) return OneForwardOneBackwardGrads(e, tokens, targets, weights);
    const std::vector<Value> stacked(weights.begin() + 3, weights.end());
    const Embedded in = Embed(e, tokens, weights[0]);
    const auto [xl, saved] = PipelineForward(e, in.x0, stacked);
    const Head head = MicroBatchedHead(e, xl, targets, weights[1], weights[2]);
    const StackGrads back = PipelineBackward(e, head.dxl, saved, stacked);
    return StageLossAndGrads(e, head.loss, EmbedGrad(e, in, back.dx), head.dgf, head.dwout,
                             back.weights, back.aux);
  }
  // A stage's loss and gradients in Weights order: the embedding's counts
  // on stage 0, the loss and the head's on the last stage (every stage
  // computed them, masked or not) or, with the head spread, each stage's
  // part, the stage's layers' (and its part of the auxiliary loss) as they
  // are.
  std::pair<Value, std::vector<Value>> StageLossAndGrads(ComputationEmitter& e, const Value& loss,
                                                         const Value& dembed, const Value& dgf,
                                                         const Value& dwout,
                                                         const std::vector<Value>& stacked,
                                                         const Value& aux) {
    const Value stage = StageIndex(e);
    const auto on_stage = [&](int64_t which, const Value& x) {
      return Masked(e, Is(e, stage, which), x);
    };
    // The head's sums are each stage's where the head is spread.
    const auto of_head = [&](const Value& x) {
      return SpreadsHead() ? x : on_stage(plan_.pipeline - 1, x);
    };
    std::vector<Value> grads = {on_stage(0, dembed), of_head(dgf), of_head(dwout)};
    grads.insert(grads.end(), stacked.begin(), stacked.end());
    return {WithAux(e, of_head(loss), aux), grads};
  }

  // --- the 1F1B schedule ------------------------------------------------------------------
  // One loop over iterations t in which every stage may run a forward, the
  // head and a backward, each masked where the stage has no work (the SPMD
  // form: every device runs the same program). Works are ordered as
  // Megatron orders them: in groups of P micro-batches, each group's passes
  // around the stages in turn (without virtual stages, work j is
  // micro-batch j). Stage p runs forward work j = t - p, handing its output
  // on at once (to stage 0, from the last, for the next pass), and backward
  // work k = t - T0 - (P - 1 - p), handing its input gradient back, where
  // T0 = P v - 1 is the iteration at which the last stage finishes its first
  // work's last pass: its head then runs in the same iteration and its
  // backward starts there. What a forward saves lives from t = j + p to the
  // backward's t, at most 2 P v - 2 iterations later (work 0 on stage 0),
  // in a ring of min(n v, P v + P - 1) slots (SavedRing). The iterations
  // are cut by what some stage has work for (PhaseAt: warm-up, forwards
  // only, the first T0 iterations; then both, with the head where the last
  // stage finishes a last pass; cool-down, backwards only), each run of
  // iterations that run the same parts one loop, so that none computes
  // what it masks away wholesale; with virtual stages the runs of the
  // groups after the first repeat, and a loop over groups runs them. As
  // Megatron's first and last stages do, the
  // embedding runs on each micro-batch stage 0 starts (an iteration early,
  // so that it falls in the head's iterations), its gradient is summed from
  // each micro-batch's backward that leaves stage 0 (an iteration late,
  // likewise), and the head runs on each micro-batch the last stage
  // finishes: one micro-batch's one-hot rows and logits at a time.
  struct Schedule {
    Value sent_forward, sent_backward;  // what the stages handed on last iteration
    Value tokens, embed, dembed;        // what the embedding reads, its gradient's sum
    Value x0_next;                      // the embedding of stage 0's next work
    Value embed_dx, embed_micro;        // stage 0's last backward of a first pass (else 0)
    Value loss, dgf, dwout;             // the head's sums
    Value targets, gf, wout;            // what the head reads
    std::vector<Value> saved;           // the ring of saved values [K, L / v, ...]
    std::vector<Value> weights, grads;  // the stage's stacked weights, their gradients' sums
    Value aux;                          // the auxiliary loss's sum, where the model has one
  };
  static constexpr long kScheduleFixed = 14;  // the values before `saved`
  static std::vector<Value> Flat(const Schedule& s) {
    std::vector<Value> flat = {s.sent_forward, s.sent_backward, s.tokens,      s.embed, s.dembed,
                               s.x0_next,      s.embed_dx,      s.embed_micro, s.loss,  s.dgf,
                               s.dwout,        s.targets,       s.gf,          s.wout};
    for (const auto* part : {&s.saved, &s.weights, &s.grads}) {
      flat.insert(flat.end(), part->begin(), part->end());
    }
    if (!s.aux.name.empty()) flat.push_back(s.aux);
    return flat;
  }
  static Schedule Unflat(const std::vector<Value>& flat, const Schedule& like) {
    Schedule s{flat[0], flat[1],  flat[2],  flat[3],  flat[4],  flat[5], flat[6], flat[7], flat[8],
               flat[9], flat[10], flat[11], flat[12], flat[13], {},      {},      {}};
    auto at = flat.begin() + kScheduleFixed;
    for (auto [part, count] :
         {std::pair{&s.saved, like.saved.size()}, std::pair{&s.weights, like.weights.size()},
          std::pair{&s.grads, like.grads.size()}}) {
      part->assign(at, at + static_cast<long>(count));
      at += static_cast<long>(count);
    }
    if (!like.aux.name.empty()) s.aux = *at;
    return s;
  }
  // Forward work j (or, `backward`, backward work j: the same group's
  // passes in reverse) under 1F1B: its micro-batch, its pass, its chunk of
  // layers and its slot in the ring.
  struct ScheduledWork {
    Value micro;
    std::optional<Value> pass, chunk;  // with virtual stages
    Value slot;
  };
  ScheduledWork ScheduledWorkOf(ComputationEmitter& c, const Value& j, bool backward) {
    const int64_t stages = plan_.pipeline, passes = Passes();
    const auto constant = [&](int64_t v) { return c.ScalarInt(v); };
    if (passes == 1) return {j, std::nullopt, std::nullopt, RingSlot(c, j)};
    const Value group = c.Binary("divide", j, constant(stages * passes));
    const Value within = c.Binary("remainder", j, constant(stages * passes));
    const Value lane = c.Binary("remainder", within, constant(stages));
    Value pass = c.Binary("divide", within, constant(stages));
    if (backward) pass = c.Sub(constant(passes - 1), pass);
    const Value micro = c.Add(c.Mul(group, constant(stages)), lane);
    const Value forward_index =
        c.Add(c.Mul(group, constant(stages * passes)), c.Add(c.Mul(pass, constant(stages)), lane));
    return {micro, pass, c.Mul(pass, constant(ChunkLayers())), RingSlot(c, forward_index)};
  }
  // The ring's slot of forward work `f` (SavedRing): f mod K, or the
  // slot's entry in a table of them (an index outside the works, which a
  // masked work may have, clamps to one).
  Value RingSlot(ComputationEmitter& c, const Value& f) {
    if (ring_.Cyclic()) return c.Binary("remainder", f, c.ScalarInt(ring_.slots));
    return c.Reshape(c.DynamicSlice(c.IntVector(ring_.slot_of), {f}, {1}), {});
  }

  // Which parts of an iteration a phase runs.
  struct Phase {
    bool forward = false, head = false, backward = false;
    bool embed = false;       // the embedding of stage 0's next work, a first pass
    bool embed_grad = false;  // the embedding's gradient from stage 0's last backward
    bool operator==(const Phase&) const = default;
    // Runs every part `other` runs.
    bool Covers(const Phase& other) const {
      return (forward || !other.forward) && (head || !other.head) &&
             (backward || !other.backward) && (embed || !other.embed) &&
             (embed_grad || !other.embed_grad);
    }
  };
  // What iteration t must run: the parts some stage has work for.
  Phase PhaseAt(int64_t t) const {
    const int64_t stages = plan_.pipeline, passes = Passes(), works = s_.n * passes;
    const int64_t first_backward = passes * stages - 1;  // T0
    const auto within = [](int64_t x, int64_t limit) { return x >= 0 && x < limit; };
    // Forward work j's pass (Megatron's order: groups of P micro-batches).
    const auto pass = [&](int64_t j) { return j % (stages * passes) / stages; };
    Phase phase;
    phase.forward = within(t, works + stages - 1);
    phase.head = within(t - (stages - 1), works) && pass(t - (stages - 1)) == passes - 1;
    phase.backward = within(t - first_backward, works + stages - 1);
    phase.embed = within(t + 1, works) && pass(t + 1) == 0;
    // Stage 0's backward work at t - 1, and its pass (the group's in reverse).
    const int64_t k = t - 1 - first_backward - (stages - 1);
    phase.embed_grad = within(k, works) && passes - 1 - pass(k) == 0;
    return phase;
  }
  // Iteration t of the schedule.
  Schedule ScheduleIteration(ComputationEmitter& c, const Value& t, Schedule s, Phase phase) {
    const int64_t n = s_.n, stages = plan_.pipeline, passes = Passes(), works = n * passes;
    const Value stage = StageIndex(c);
    const Value on_first = Is(c, stage, 0), on_last = Is(c, stage, stages - 1);
    std::optional<Head> head;
    if (phase.embed_grad) {
      const Value ids = MicroBatchRows(c, s.tokens, s.embed_micro);
      s.dembed = EmbedGrad(c, {Lookup(c, ids), {}}, s.embed_dx, s.dembed);
    }
    if (phase.forward) {
      const Value j = c.Sub(t, stage);
      const Value valid = InRange(c, j, works);
      const ScheduledWork work = ScheduledWorkOf(c, ClampIndex(c, j, works), false);
      Value first = s.x0_next;
      if (work.pass) first = Where(c, Is(c, *work.pass, 0), first, s.sent_forward);
      const auto [out, entries] =
          ForwardLoop(c, Where(c, on_first, first, s.sent_forward), s.weights, work.chunk);
      for (size_t k = 0; k < entries.size(); ++k) {
        s.saved[k] = StoreIf(c, s.saved[k], entries[k], work.slot, valid);
      }
      s.sent_forward = HandOn(c, out, passes > 1 ? around_stages_ : to_next_stage_);
      if (phase.head) {
        // The last stage's work is a last pass of micro-batch `micro`.
        const Value micro = ScheduledWorkOf(c, c.Sub(t, c.ScalarInt(stages - 1)), false).micro;
        head = StageHead(c, out, MicroBatchRows(c, s.targets, micro), s.gf, s.wout);
        s.loss = c.Add(s.loss, head->loss);
        s.dgf = c.Add(s.dgf, head->dgf);
        s.dwout = c.Add(s.dwout, head->dwout);
      }
    }
    if (phase.embed) {
      const Value next =
          ScheduledWorkOf(c, ClampIndex(c, c.Add(t, c.ScalarInt(1)), works), false).micro;
      s.x0_next = Embed(c, MicroBatchRows(c, s.tokens, next), s.embed).x0;
    }
    if (phase.backward) {
      const Value k = c.Sub(c.Add(t, stage), c.ScalarInt(passes * stages - 1 + stages - 1));
      const Value valid = InRange(c, k, works);
      const ScheduledWork work = ScheduledWorkOf(c, ClampIndex(c, k, works), true);
      Value dout = s.sent_backward;
      if (head) {
        // The last stage's backward of a last pass starts from the head.
        Value from_head = on_last;
        if (work.pass) from_head = c.Binary("and", from_head, Is(c, *work.pass, passes - 1));
        dout = Where(c, from_head, head->dxl, dout);
      }
      const StackGrads grads =
          BackwardLoop(c, Masked(c, valid, dout), LoadAll(c, s.saved, work.slot), s.weights,
                       work.chunk, {}, s.grads, c.Convert(valid, P_));
      if (!s.aux.name.empty()) s.aux = c.Add(s.aux, grads.aux);
      // Stage 0's input gradient of a first pass is the embedding's.
      Value embedded = c.Binary("and", valid, on_first);
      if (work.pass) embedded = c.Binary("and", embedded, Is(c, *work.pass, 0));
      s.embed_dx = Masked(c, embedded, grads.dx);
      s.embed_micro = work.micro;
      s.sent_backward = HandOn(c, grads.dx, passes > 1 ? around_stages_back_ : to_previous_stage_);
      s.grads = grads.weights;  // the sums, accumulated
    }
    return s;
  }

  // `trips` iterations of the schedule from iteration `first` (a value of
  // `e`, carried into the loop).
  Schedule RunPhase(ComputationEmitter& e, std::string_view name, const Schedule& s,
                    const Value& first, int64_t trips, Phase phase) {
    if (trips == 0) return s;
    std::vector<Value> init = Flat(s);
    init.push_back(first);
    const std::vector<Value> done =
        Loop(e, name, init, trips, [&](ComputationEmitter& c, const std::vector<Value>& in) {
          const Value& start = in.back();
          const Schedule here = Unflat(std::vector<Value>(in.begin() + 1, in.end() - 1), s);
          std::vector<Value> next = Flat(ScheduleIteration(c, c.Add(start, in[0]), here, phase));
          next.push_back(start);
          return next;
        });
    return Unflat(std::vector<Value>(done.begin() + 1, done.end() - 1), s);
  }

  // `count` iterations from the value `first` (the iteration `from`'s,
  // whose phases they run), a loop per run of them that run the same parts.
  Schedule RunIterations(ComputationEmitter& e, Schedule s, const Value& first, int64_t from,
                         int64_t count) {
    for (int64_t begin = 0; begin < count;) {
      const Phase phase = PhaseAt(from + begin);
      int64_t end = begin + 1;
      while (end < count && PhaseAt(from + end) == phase) ++end;
      const std::string_view name = !phase.backward  ? "pipeline_1f1b_warm_up"
                                    : !phase.forward ? "pipeline_1f1b_cool_down"
                                                     : "pipeline_1f1b";
      s = RunPhase(e, name, s, e.Add(first, e.ScalarInt(begin)), end - begin, phase);
      begin = end;
    }
    return s;
  }

  // Micro-batch `micro`'s rows [b, S] of ids [n b, S].
  Value MicroBatchRows(ComputationEmitter& c, const Value& ids, const Value& micro) {
    return c.DynamicSlice(ids, {c.Mul(micro, c.ScalarInt(s_.b)), c.ScalarInt(0)}, {s_.b, s_.S});
  }

  // The stage's loss and gradients under 1F1B (as PipelinedGrads returns them).
  std::pair<Value, std::vector<Value>> OneForwardOneBackwardGrads(
      ComputationEmitter& e, const Value& tokens, const Value& targets,
      const std::vector<Value>& weights) {
    const int64_t n = s_.n, stages = plan_.pipeline, passes = Passes();
    const std::vector<Value> stacked(weights.begin() + 3, weights.end());
    const Value rows = e.Full(A_, 0, {s_.R, s_.W});  // a micro-batch's rows, zero
    Schedule s{.sent_forward = rows,
               .sent_backward = rows,
               .tokens = tokens,
               .embed = weights[0],
               .dembed = e.Full(P_, 0, weights[0].dims),
               .x0_next = rows,
               .embed_dx = rows,
               .embed_micro = e.ScalarInt(0),
               .loss = e.Full(P_, 0, {}),
               .dgf = e.Full(P_, 0, weights[1].dims),
               .dwout = e.Full(P_, 0, weights[2].dims),
               .targets = targets,
               .gf = weights[1],
               .wout = weights[2],
               .saved = SavedStacks(e, {ring_.slots, ChunkLayers()}),
               .weights = stacked,
               .grads = {},
               .aux = AuxLossOn() ? e.Full(P_, 0, {}) : Value{}};
    for (size_t k = 0; k < stacked.size(); ++k) s.grads.push_back(e.Full(P_, 0, GradDims(3 + k)));
    const int64_t works = n * passes, first_backward = passes * stages - 1;
    const int64_t iterations = first_backward + stages - 1 + works;
    // Before the loop, the embedding of stage 0's first work; after it,
    // the gradient from its last backward.
    s = ScheduleIteration(e, e.ScalarInt(-1), s, PhaseAt(-1));
    if (passes == 1) {
      s = RunIterations(e, s, e.ScalarInt(0), 0, iterations);
    } else {
      // Up to the first head block's end; then per further group a block
      // of P v iterations, which run what the first such block runs (the
      // last's embeddings idle); then the cool-down.
      const int64_t block = passes * stages, blocks_from = first_backward + stages;
      const int64_t groups = n / stages, blocks_to = blocks_from + (groups - 1) * block;
      s = RunIterations(e, s, e.ScalarInt(0), 0, blocks_from);
      if (groups > 1) {
        for (int64_t t = blocks_from; t < blocks_to; ++t) {
          LOOM_CHECK(PhaseAt(blocks_from + (t - blocks_from) % block).Covers(PhaseAt(t)),
                     "1f1b: a group's block runs what the first runs");
        }
        const std::vector<Value> done =
            Loop(e, "pipeline_1f1b_group", Flat(s), groups - 1,
                 [&](ComputationEmitter& c, const std::vector<Value>& state) {
                   const Value base =
                       c.Add(c.ScalarInt(blocks_from), c.Mul(state[0], c.ScalarInt(block)));
                   const Schedule g = Unflat(std::vector<Value>(state.begin() + 1, state.end()), s);
                   return Flat(RunIterations(c, g, base, blocks_from, block));
                 });
        s = Unflat(std::vector<Value>(done.begin() + 1, done.end()), s);
      }
      // The cool-down, cut where a pass's gradients are complete, each
      // pass's summed there so that the sum overlaps the passes still
      // running backward (as Megatron reduces a model chunk's gradient
      // buckets once its last micro-batch's backward is done).
      std::vector<std::vector<Value>> summed(s.grads.size());  // per weight, per pass
      int64_t at = blocks_to;
      for (int64_t pass = passes - 1; pass >= 0; --pass) {
        const int64_t done = pass == 0 ? iterations : PassGradientsDoneAfter(pass) + 1;
        s = RunIterations(e, s, e.ScalarInt(at), at, done - at);
        at = done;
        std::vector<size_t> weights;
        std::vector<Value> layers;
        for (size_t k = 0; k < s.grads.size(); ++k) {
          if (!SummedByThePipeline(3 + k)) continue;
          weights.push_back(3 + k);
          layers.push_back(e.Slice(s.grads[k], 0, pass * ChunkLayers(), ChunkLayers()));
        }
        const std::vector<Value> sums = SummedTogether(e, weights, layers);
        for (size_t w = 0; w < weights.size(); ++w) {
          std::vector<Value>& pieces = summed[weights[w] - 3];
          pieces.insert(pieces.begin(), sums[w]);
        }
      }
      for (size_t k = 0; k < s.grads.size(); ++k) {
        if (!summed[k].empty()) s.grads[k] = e.Concatenate(summed[k], 0);
      }
    }
    s = ScheduleIteration(e, e.ScalarInt(iterations), s, PhaseAt(iterations));
    return StageLossAndGrads(e, s.loss, s.dembed, s.dgf, s.dwout, s.grads, s.aux);
  }
  // The last iteration of the interleaved 1F1B schedule in which some stage
  // runs a backward of pass `pass`: stage 0's backward of the last group's
  // last work of that pass (the group's backward works run its passes in
  // reverse, P works each), at k + (P v - 1) + (P - 1).
  int64_t PassGradientsDoneAfter(int64_t pass) const {
    const int64_t stages = plan_.pipeline, block = stages * Passes();
    const int64_t last_group = s_.n / stages - 1;
    const int64_t k = last_group * block + (Passes() - pass) * stages - 1;
    return k + block - 1 + stages - 1;
  }

  // The embedding of token ids [rows, S], vocab-parallel (Megatron's): each
  // device looks up the ids (of every row of the model axis, in
  // IdsAsGathered's order) in its slice of the vocabulary, zeros for the
  // ids outside it, in the compute type (bf16: the rows as a bf16 table
  // holds them) and then the activation type, and the partial rows are
  // summed over the model axis (under sequence parallelism each device's
  // rows of the sum, by reduce-scatter). `lookup` is what the gradient
  // reads again: the one-hot rows, or the ids' rows in the slice.
  struct Embedded {
    Value lookup, x0;
  };
  bool OneHotEmbedding() const { return m_.embedding == "one-hot"; }
  Value Lookup(ComputationEmitter& c, const Value& ids) {
    return OneHotEmbedding() ? OneHot(c, IdsAsGathered(c, ids), C_)
                             : RowsInSlice(c, IdsAsGathered(c, ids));
  }
  Embedded Embed(ComputationEmitter& c, const Value& ids, const Value& embed) {
    const Value lookup = Lookup(c, ids);
    if (OneHotEmbedding()) {
      const Value partial = c.Dot(lookup, c.Convert(embed, C_), {{}, {}, {1}, {0}}, A_);
      return {lookup, HeldSumOverModel(c, partial)};
    }
    // An id outside the slice reads the slice's last row (gather clamps),
    // which the select then drops.
    const Value rows = c.Convert(c.Convert(c.TakeRows(embed, lookup), C_), A_);
    const Value inside =
        c.Compare(lookup, c.Full("s32", static_cast<double>(s_.V), lookup.dims), "LT");
    const Value partial =
        c.Select(c.Broadcast(inside, rows.dims, {0}), rows, c.Full(A_, 0, rows.dims));
    return {lookup, HeldSumOverModel(c, partial)};
  }
  // The embedding's gradient (this device's rows of the vocabulary) from
  // dx0, the gradient of x0 (every row of the model axis's: gathered under
  // sequence parallelism), added into `into` where given (a gather's
  // scatter adds in place).
  Value EmbedGrad(ComputationEmitter& c, const Embedded& in, const Value& dx0,
                  const std::optional<Value>& into = std::nullopt) {
    const Value dx = c.Convert(GatherResidual(c, dx0), C_);
    if (OneHotEmbedding()) {
      const Value grad = c.Dot(in.lookup, dx, {{}, {}, {0}, {0}}, P_);
      return into ? c.Add(*into, grad) : grad;
    }
    const Value base = into ? *into : c.Full(P_, 0, {s_.V, m_.d_model});
    return c.ScatterAddRows(base, in.lookup, c.Convert(dx, P_));
  }
  // Each id's row in this device's slice of the vocabulary [rows] (s32),
  // the slice's size V for an id outside it (a scatter drops it).
  Value RowsInSlice(ComputationEmitter& c, const Value& ids) {
    Value local = ids;
    if (plan_.tensor > 1) {
      const Value first = c.Mul(Position(c, 1, plan_.tensor), c.ScalarInt(s_.V));
      local = c.Sub(ids, c.Broadcast(first, ids.dims, {}));
    }
    const Value zero = c.Full("s32", 0, ids.dims),
                end = c.Full("s32", static_cast<double>(s_.V), ids.dims);
    const Value inside = c.Binary("and", c.Compare(local, zero, "GE"), c.Compare(local, end, "LT"));
    return c.Select(inside, local, end);
  }
  // The loss is the mean over the global batch's tokens.
  double BatchTokens() const { return static_cast<double>(m_.batch * m_.seq); }

  // onehot(ids)[rows, V] in `type` over this device's slice of the
  // vocabulary (ids outside it give rows of zeros), rows the ids' count.
  Value OneHot(ComputationEmitter& c, const Value& ids, std::string_view type) {
    int64_t rows = 1;
    for (int64_t d : ids.dims) rows *= d;
    const Value flat = c.Reshape(ids, {rows});
    const Value wide = c.Broadcast(flat, {rows, s_.V}, {0});
    Value column = c.Iota("s32", {rows, s_.V}, 1);
    if (plan_.tensor > 1) {
      const Value first = c.Mul(Position(c, 1, plan_.tensor), c.ScalarInt(s_.V));
      column = c.Add(column, c.Broadcast(first, {rows, s_.V}, {}));
    }
    return c.Convert(c.Compare(wide, column, "EQ"), type);
  }
  // The ids [n b, S] of n micro-batches flattened in the order of the rows
  // the model axis's devices hold, gathered: under sequence parallelism
  // device j's rows of each micro-batch (OwnRows), then device j + 1's,
  // which is what an all-gather of every device's rows over the model axis
  // lays out (and what a reduce-scatter hands back each device's of);
  // else the ids in order.
  Value IdsAsGathered(ComputationEmitter& c, const Value& ids) {
    const int64_t rows = ids.dim(0) * ids.dim(1);
    if (!SplitsOwnRows()) return c.Reshape(ids, {rows});
    const Value by_device = c.Reshape(ids, {rows / s_.T, plan_.tensor, s_.R});
    return c.Reshape(c.Transpose(by_device, {1, 0, 2}), {rows});
  }

  // Adafactor on weight `i` (its local shard w, or under ZeRO this device's
  // shard of it, gradient g, and state as AdafactorState lists it, cut as
  // AdafactorStateDims says): returns (w, state...) updated. Means over a
  // dimension the model axis splits are summed over that axis, and over one
  // ZeRO cuts, over the devices that share the weight. ZeRO's padding is
  // zeros with zero gradients: it stays zero, and adds only its squares'
  // floor, 1e-30 an element, to the means (far below the rounding of any
  // real gradient's square).
  std::vector<Value> Adafactor(ComputationEmitter& c, size_t i, const Value& w, const Value& g,
                               const std::vector<Value>& state, const Value& step) {
    const WeightInfo info = infos_[i];
    const int64_t rank = w.rank(), first = info.stacked ? 1 : 0;
    const std::optional<int64_t> zero_dim =
        ShardedByZero(i) ? std::optional<int64_t>(ShardDim(i)) : std::nullopt;
    // Mean of x over its dimension `dim`, which is the weight's `of`.
    const auto mean = [&](const Value& x, int64_t dim, int64_t of) {
      Value sum = c.ReduceSum(x, {dim});
      if (of == info.split_dim && plan_.tensor > 1) sum = c.AllReduce(sum, tensor_groups_);
      if (of == zero_dim) sum = c.AllReduce(sum, *GradientGroups(i).groups);
      return c.Scale(sum, 1.0 / static_cast<double>(info.dims[static_cast<size_t>(of)]));
    };
    // The decay 1 - t^-0.8 and its complement t^-0.8, t the step.
    const Value fresh = c.Unary("exponential", c.Mul(c.Unary("log", step), c.Scalar(P_, -0.8)));
    const auto decayed = [&](const Value& old, const Value& now) {
      const Value keep = c.Broadcast(c.Sub(c.Scalar(P_, 1.0), fresh), old.dims, {});
      return c.Add(c.Mul(old, keep), c.Mul(now, c.Broadcast(fresh, now.dims, {})));
    };
    const Value g2 = c.Add(c.Mul(g, g), c.Full(P_, 1e-30, g.dims));
    std::vector<Value> updated;
    Value v_hat;
    if (state.size() == 1) {
      updated.push_back(decayed(state[0], g2));
      v_hat = updated[0];
    } else {
      const int64_t row = rank - 2, column = rank - 1;
      const Value r = decayed(state[0], mean(g2, column, column));
      const Value col = decayed(state[1], mean(g2, row, row));
      updated = {r, col};
      // r c^T / mean(r), per layer.
      std::vector<int64_t> outer(static_cast<size_t>(row));
      for (int64_t d = 0; d < row; ++d) outer[static_cast<size_t>(d)] = d;
      std::vector<int64_t> but_column = outer, but_row = outer;
      but_column.push_back(row);
      but_row.push_back(column);
      v_hat = c.Div(c.Mul(c.Broadcast(r, w.dims, but_column), c.Broadcast(col, w.dims, but_row)),
                    c.Broadcast(mean(r, row, row), w.dims, outer));
    }
    const Value u = c.Div(g, c.Unary("sqrt", v_hat));
    // RMS of the update per layer (over the whole weight, every shard),
    // clipped to 1: u / max(1, rms).
    std::vector<int64_t> layer_dims, per_layer;
    double count = 1;
    for (int64_t d = first; d < rank; ++d) {
      layer_dims.push_back(d);
      count *= static_cast<double>(info.dims[static_cast<size_t>(d)]);
    }
    for (int64_t d = 0; d < first; ++d) per_layer.push_back(d);
    Value squares = c.ReduceSum(c.Mul(u, u), layer_dims);
    if (info.split_dim >= 0 && plan_.tensor > 1) squares = c.AllReduce(squares, tensor_groups_);
    if (zero_dim) squares = c.AllReduce(squares, *GradientGroups(i).groups);
    // An MoE layer's experts are one weight, over the expert-parallel devices.
    if (info.expert_dim >= 0) squares = c.AllReduce(squares, data_groups_);
    const Value rms = c.Unary("sqrt", c.Scale(squares, 1.0 / count));
    const Value clip = c.Binary("maximum", rms, c.Full(P_, 1.0, rms.dims));
    const Value step_size =
        c.Scale(c.Div(u, c.Broadcast(clip, w.dims, per_layer)), plan_.learning_rate);
    updated.insert(updated.begin(), c.Sub(w, step_size));
    return updated;
  }

  // Adam on one weight: returns (w, m, v) updated.
  std::vector<Value> Adam(ComputationEmitter& c, const Value& w, const Value& g, const Value& m,
                          const Value& v, const Value& step) {
    const double b1 = plan_.beta1, b2 = plan_.beta2;
    const Value m1 = c.Add(c.Scale(m, b1), c.Scale(g, 1 - b1));
    const Value v1 = c.Add(c.Scale(v, b2), c.Scale(c.Mul(g, g), 1 - b2));
    // Bias corrections 1 - beta^t, t the step (from 1).
    const auto correction = [&](double beta) {
      const Value power = c.Unary("exponential", c.Mul(step, c.Scalar(P_, std::log(beta))));
      return c.Sub(c.Scalar(P_, 1.0), power);
    };
    const Value m_hat = c.Div(m1, c.Broadcast(correction(b1), w.dims, {}));
    const Value v_hat = c.Div(v1, c.Broadcast(correction(b2), w.dims, {}));
    const Value denominator = c.Add(c.Unary("sqrt", v_hat), c.Full(P_, plan_.epsilon, w.dims));
    const Value w1 = c.Sub(w, c.Scale(c.Div(m_hat, denominator), plan_.learning_rate));
    return {w1, m1, v1};
  }

  const ModelConfig& m_;
  const ParallelPlan& plan_;
  const bool serving_;  // a prefill or decode step
  ModuleEmitter module_;
  LocalSizes s_{};
  PipelineLayout layout_;          // of the decoder's layer stack
  SavedRing ring_;                 // under 1F1B, of the saved chunks
  std::vector<WeightInfo> infos_;  // Weights(m_), in parameter order
  std::string P_, C_, A_;  // parameter (arithmetic), compute (dot operand), activation types
  // data_groups_: the data and context axes (the layers' gradients);
  // head_groups_: the pipeline, data and context axes together (the loss
  // and the weights every stage holds); context_groups_: the context axis.
  Groups tensor_groups_, data_groups_, head_groups_, pipeline_groups_;
  // Under sequence parallelism: the head groups with the model axis, and
  // each stage's data and model axes.
  Groups head_and_model_groups_, data_and_model_groups_;
  Groups context_groups_;
  // Stage to stage (with interleaved stages, round: the last to the first
  // and back); and each device to the next along the context axis, the
  // last to the first (ring attention's ring).
  std::vector<std::pair<int64_t, int64_t>> to_next_stage_, to_previous_stage_, around_stages_,
      around_stages_back_, around_context_;
};

std::string StepWriter::Write() {
  ComputationEmitter& e = module_.Entry();
  const Value tokens = e.Parameter("s32", {s_.b * s_.n, s_.S}, "tokens");
  const Value targets = e.Parameter("s32", {s_.b * s_.n, s_.S}, "targets");
  const Value step = e.Parameter(P_, {}, "step");
  const std::vector<Value> weights = WeightParameters(e);
  std::vector<Value> moments, variances;
  std::vector<std::vector<Value>> factored;  // Adafactor's state, per weight
  if (plan_.optimizer == "adafactor") {
    for (size_t i = 0; i < weights.size(); ++i) {
      factored.emplace_back();
      const std::vector<WeightInfo> states = AdafactorState(m_, i);
      for (size_t k = 0; k < states.size(); ++k) {
        const std::vector<int64_t> dims =
            AdafactorStateDims(infos_[i], states[k], k, plan_, GradientGroups(i).extent);
        factored.back().push_back(e.Parameter(P_, dims, states[k].name));
      }
    }
  }
  if (plan_.optimizer == "adam") {
    for (size_t i = 0; i < weights.size(); ++i) {
      moments.push_back(e.Parameter(P_, StateDims(i), "m." + weights[i].name));
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      variances.push_back(e.Parameter(P_, StateDims(i), "v." + weights[i].name));
    }
  }
  std::vector<std::optional<Value>> masters(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    if (HoldsMasterShard(i))
      masters[i] = e.Parameter(P_, StateDims(i), "master." + weights[i].name);
  }
  // Forward and backward (under sequence parallelism on this device's rows
  // of the tokens: the embedding, the residual stream, the head and the
  // loss): the local loss and gradients, summed over devices below.
  Value local_loss;
  std::vector<Value> grads;
  if (plan_.pipeline > 1) {
    std::tie(local_loss, grads) = PipelinedGrads(e, tokens, targets, weights);
  } else if (s_.n > 1) {
    std::tie(local_loss, grads) = AccumulatedGrads(e, tokens, targets, weights);
  } else {
    std::tie(local_loss, grads) = ForwardBackward(e, tokens, targets, weights);
  }
  // The loss (of every row of the model axis: the head reads them all)
  // sums over the pipeline, data and context axes.
  const Value loss = e.Scale(e.AllReduce(local_loss, head_groups_), 1.0 / BatchTokens());
  // Summed over the devices that computed parts of them; under ZeRO-1 each
  // device keeps its shard of the sum.
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!SummedByThePipeline(i)) grads[i] = SummedGradient(e, i, grads[i]);
  }

  std::vector<Value> outputs = {loss};
  std::vector<Value> new_masters;  // the master shards updated, last
  if (plan_.optimizer == "none") {
    outputs.insert(outputs.end(), grads.begin(), grads.end());
  } else if (plan_.optimizer == "adafactor") {
    std::vector<Value> states;
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::vector<Value> updated =
          Adafactor(e, i, ToUpdate(e, i, weights[i], masters), grads[i], factored[i], step);
      outputs.push_back(GatheredIfZero(e, i, updated[0]));
      if (masters[i]) new_masters.push_back(updated[0]);
      states.insert(states.end(), updated.begin() + 1, updated.end());
    }
    outputs.insert(outputs.end(), states.begin(), states.end());
  } else if (plan_.optimizer == "sgd") {
    for (size_t i = 0; i < weights.size(); ++i) {
      const Value updated =
          e.Sub(ToUpdate(e, i, weights[i], masters), e.Scale(grads[i], plan_.learning_rate));
      outputs.push_back(GatheredIfZero(e, i, updated));
      if (masters[i]) new_masters.push_back(updated);
    }
  } else {
    std::vector<Value> new_w, new_m, new_v;
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::vector<Value> updated =
          Adam(e, ToUpdate(e, i, weights[i], masters), grads[i], moments[i], variances[i], step);
      new_w.push_back(GatheredIfZero(e, i, updated[0]));
      if (masters[i]) new_masters.push_back(updated[0]);
      new_m.push_back(updated[1]);
      new_v.push_back(updated[2]);
    }
    outputs.insert(outputs.end(), new_w.begin(), new_w.end());
    outputs.insert(outputs.end(), new_m.begin(), new_m.end());
    outputs.insert(outputs.end(), new_v.begin(), new_v.end());
  }
  outputs.insert(outputs.end(), new_masters.begin(), new_masters.end());
  e.SetRoot(e.Tuple(outputs));
  return module_.Text();
}

std::string StepWriter::WritePrefill() {
  ComputationEmitter& e = module_.Entry();
  const Value tokens = e.Parameter("s32", {s_.b * s_.n, s_.S}, "tokens");
  // An encoder-decoder encodes the tokens and runs its decoder over the
  // prompt (what the decoder has been given, its start token first).
  std::optional<Value> prompt;
  if (EncoderDecoder(m_)) prompt = e.Parameter("s32", {s_.b * s_.n, s_.S}, "prompt");
  const std::vector<Value> weights = WeightParameters(e);
  const std::vector<Value> stacked(weights.begin() + 3, weights.end());
  const Value x0 = Embed(e, tokens, weights[0]).x0;
  Value x, k, v;
  std::vector<Value> memory_kv;
  if (prompt) {
    const Stacks stacks = StacksOf(weights);
    const Value encoded = CachedLayers(
                              e, "encoder_layer", x0, {}, stacks.encoder,
                              [&](ComputationEmitter& c, const Value& in, const LayerWeights& w,
                                  const Value&, const std::vector<Value>&) {
                                return std::pair{LayerForward(c, in, w).out, std::vector<Value>{}};
                              },
                              std::nullopt, stacks.encoding)
                              .first;
    LayerStack decoding;
    decoding.memory = EncoderMemory(e, encoded, stacks.gain).second;
    std::vector<Value> caches;
    for (int i = 0; i < 4; ++i) caches.push_back(e.Full(A_, 0, CacheDims(s_.S)));
    std::tie(x, caches) = PrefillLayers(e, Embed(e, *prompt, weights[0]).x0, caches, stacks.decoder,
                                        std::nullopt, decoding);
    k = caches[0];
    v = caches[1];
    memory_kv = {caches[2], caches[3]};
  } else if (Pipelined()) {
    std::vector<int64_t> micro = CacheDims(s_.S);
    micro.insert(micro.begin(), s_.n);
    const auto layers = [&](ComputationEmitter& c, const Value& in, const Value& kin,
                            const Value& vin, const std::vector<Value>& w,
                            const std::optional<Value>& chunk) {
      const auto [out, caches] = PrefillLayers(c, in, {kin, vin}, w, chunk);
      return std::tuple{out, caches[0], caches[1]};
    };
    std::tie(x, k, v) =
        ServingPipeline(e, x0, s_.T, e.Full(A_, 0, micro), e.Full(A_, 0, micro), stacked, layers);
    k = ByLayer(e, k);
    v = ByLayer(e, v);
  } else {
    const auto [out, caches] = PrefillLayers(
        e, x0, {e.Full(A_, 0, CacheDims(s_.S)), e.Full(A_, 0, CacheDims(s_.S))}, stacked);
    x = out;
    k = caches[0];
    v = caches[1];
  }
  // The logits of each sequence's last position: what the first new token is drawn from.
  const int64_t b = s_.b * s_.n;
  const Value last = e.Reshape(
      e.DynamicSlice(e.Reshape(x, {b, s_.S, s_.W}),
                     {e.ScalarInt(0), e.ScalarInt(s_.S - 1), e.ScalarInt(0)}, {b, 1, s_.W}),
      {b, s_.W});
  Value logits = ServedLogits(e, last, weights[1], weights[2]);
  // Under context parallelism the last position is the last chunk's.
  if (plan_.context > 1) {
    logits =
        e.AllReduce(Masked(e, Is(e, ContextRank(e), plan_.context - 1), logits), context_groups_);
  }
  std::vector<Value> outputs = {logits, k, v};
  outputs.insert(outputs.end(), memory_kv.begin(), memory_kv.end());
  e.SetRoot(e.Tuple(outputs));
  return module_.Text();
}

std::string StepWriter::WriteDecode(int64_t context) {
  ComputationEmitter& e = module_.Entry();
  const int64_t b = s_.b * s_.n;
  const Value token = e.Parameter("s32", {b, 1}, "token");
  const std::vector<Value> weights = WeightParameters(e);
  // Under context parallelism each device holds its chunk of the positions.
  std::vector<int64_t> cache = CacheDims((context + 1) / plan_.context);
  cache[1] = b;
  const Value k_cache = e.Parameter(A_, cache, "k_cache");
  const Value v_cache = e.Parameter(A_, cache, "v_cache");
  // An encoder-decoder's decoder reads the memory's k and v its prefill
  // cached.
  std::vector<Value> memory_kv;
  if (EncoderDecoder(m_)) {
    std::vector<int64_t> memory = CacheDims(s_.S);
    memory[1] = b;
    memory_kv = {e.Parameter(A_, memory, "memory_k"), e.Parameter(A_, memory, "memory_v")};
  }
  const std::vector<Value> stacked = StacksOf(weights).decoder;
  const Value x0 = Embed(e, token, weights[0]).x0;
  Value x, k, v;
  const auto layers = [&](ComputationEmitter& c, const Value& in, const Value& kin,
                          const Value& vin, const std::vector<Value>& w,
                          const std::optional<Value>& chunk) {
    const auto [out, caches] = DecodeLayers(c, in, {kin, vin}, w, context, chunk, memory_kv);
    return std::tuple{out, caches[0], caches[1]};
  };
  if (Pipelined()) {
    std::tie(x, k, v) = ServingPipeline(e, x0, s_.b, ByMicroBatch(e, k_cache),
                                        ByMicroBatch(e, v_cache), stacked, layers);
    k = ByLayer(e, k);
    v = ByLayer(e, v);
  } else {
    std::tie(x, k, v) = layers(e, x0, k_cache, v_cache, stacked, std::nullopt);
  }
  e.SetRoot(e.Tuple({ServedLogits(e, x, weights[1], weights[2]), k, v}));
  return module_.Text();
}

Status Positive(int64_t value, std::string_view what) {
  if (value > 0) return OkStatus();
  return Error{fmt::format("{} must be positive, is {}", what, value)};
}

Status Divides(int64_t value, int64_t by, std::string_view what, std::string_view axis) {
  if (value % by == 0) return OkStatus();
  return Error{fmt::format("{} ({}) does not divide by the {} axis ({})", what, value, axis, by)};
}

}  // namespace

namespace {

// The stacked weights of a stack of `layers` layers (in blocks; names
// prefixed by `prefix`, and "l0.", ... when a block has several), appended
// to `weights`; `cross`: each layer's cross-attention too.
void AddLayerStack(const ModelConfig& m, int64_t layers, const std::string& prefix, bool cross,
                   std::vector<WeightInfo>& weights) {
  const int64_t blocks = layers / BlockLayers(m), M = m.d_model, F = m.d_ff, E = m.experts;
  const int64_t q = m.heads * m.head_dim;
  for (int64_t j = 0; j < BlockLayers(m); ++j) {
    const std::string l = prefix + (BlockLayers(m) > 1 ? fmt::format("l{}.", j) : "");
    const auto stacked = [&](std::string name, std::vector<int64_t> dims, int64_t split) {
      dims.insert(dims.begin(), blocks);
      return WeightInfo{l + std::move(name), std::move(dims), split, true};
    };
    // A norm's gain [blocks, M], split by d_model where the residual stream is.
    const auto gain = [&](std::string name) {
      WeightInfo w = stacked(std::move(name), {M}, -1);
      w.residual_dim = 1;
      return w;
    };
    weights.push_back(gain("g1"));
    if (MultiQuery(m)) {
      // q split by heads; the one k and v head every device's heads read.
      weights.push_back(stacked("wq", {M, q}, 2));
      weights.push_back(stacked("wkv", {M, 2 * m.head_dim}, -1));
      weights.back().partial_over_model = true;
    } else {
      // q, k and v fused, per kv head its query heads then its k and its v.
      weights.push_back(stacked("wqkv", {M, (m.heads + 2 * m.kv_heads) * m.head_dim}, 2));
    }
    weights.push_back(stacked("wo", {q, M}, 1));
    if (cross) {
      // Cross-attention: its norm's gain, q by heads, the memory's k and v
      // (per head its k then its v), the output.
      weights.push_back(gain("gc"));
      weights.push_back(stacked("wqc", {M, q}, 2));
      weights.push_back(stacked("wkvc", {M, 2 * q}, 2));
      weights.push_back(stacked("woc", {q, M}, 1));
    }
    weights.push_back(gain("g2"));
    if (!IsMoeLayer(m, j)) {
      weights.push_back(stacked("w1", {M, F}, 2));
      if (m.mlp == "swiglu") weights.push_back(stacked("w3", {M, F}, 2));
      weights.push_back(stacked("w2", {F, M}, 1));
      continue;
    }
    // The router, replicated; the experts, split over the expert-parallel
    // devices and, by d_ff, over the model axis.
    weights.push_back(stacked("router", {M, E}, -1));
    weights.back().partial_over_model = true;
    const auto expert = [&](std::string name, std::vector<int64_t> dims, int64_t split) {
      WeightInfo w = stacked(std::move(name), std::move(dims), split);
      w.expert_dim = 1;
      return w;
    };
    weights.push_back(expert("we1", {E, M, F}, 3));
    if (m.mlp == "swiglu") weights.push_back(expert("we3", {E, M, F}, 3));
    weights.push_back(expert("we2", {E, F, M}, 2));
  }
}

}  // namespace

std::vector<WeightInfo> Weights(const ModelConfig& m) {
  // The embedding's rows and the head's columns, the vocabulary, split
  // over the model axis (Megatron's vocab-parallel embedding and output
  // layer).
  std::vector<WeightInfo> weights = {{"embed", {m.vocab, m.d_model}, 0},
                                     {"gf", {m.d_model}, -1},
                                     {"wout", {m.d_model, m.vocab}, 1}};
  weights[1].residual_dim = 0;
  // The decoder's layers (with cross-attention in an encoder-decoder); then
  // an encoder-decoder's encoder: its final norm's gain and its layers.
  AddLayerStack(m, m.layers, "", EncoderDecoder(m), weights);
  if (EncoderDecoder(m)) {
    weights.push_back({"enc.gf", {m.d_model}, -1});
    weights.back().residual_dim = 0;
    AddLayerStack(m, m.encoder_layers, "enc.", false, weights);
  }
  return weights;
}

namespace {

Status OneOf(const std::string& value, std::initializer_list<std::string_view> allowed,
             std::string_view what) {
  for (std::string_view a : allowed) {
    if (value == a) return OkStatus();
  }
  return Error{fmt::format("{} '{}' is not one of {}", what, value, fmt::join(allowed, ", "))};
}

}  // namespace

Status ValidateModel(const ModelConfig& m) {
  for (const auto& [value, what] :
       std::vector<std::pair<int64_t, std::string_view>>{{m.layers, "layers"},
                                                         {m.d_model, "d_model"},
                                                         {m.d_ff, "d_ff"},
                                                         {m.heads, "heads"},
                                                         {m.kv_heads, "kv_heads"},
                                                         {m.head_dim, "head_dim"},
                                                         {m.vocab, "vocab"},
                                                         {m.seq, "seq"},
                                                         {m.batch, "batch"}}) {
    LOOM_RETURN_IF_ERROR(Positive(value, what));
  }
  if (m.heads % m.kv_heads != 0) {
    return Error{fmt::format("heads ({}) is not a multiple of kv_heads ({})", m.heads, m.kv_heads)};
  }
  if (m.experts < 0) return Error{fmt::format("experts must be >= 0, is {}", m.experts)};
  if (m.encoder_layers < 0) {
    return Error{fmt::format("encoder_layers must be >= 0, is {}", m.encoder_layers)};
  }
  if (!(m.aux_loss_weight >= 0) || !std::isfinite(m.aux_loss_weight)) {
    return Error{fmt::format("aux_loss_weight must be >= 0, is {}", m.aux_loss_weight)};
  }
  if (m.aux_loss_weight > 0 && m.experts == 0) {
    return Error{fmt::format("aux_loss_weight ({}) balances experts, and the model has none",
                             m.aux_loss_weight)};
  }
  if (m.experts > 0) {
    LOOM_RETURN_IF_ERROR(Positive(m.moe_every, "moe_every"));
    if (m.top_k < 1 || m.top_k > m.experts) {
      return Error{fmt::format("top_k ({}) must be 1 .. experts ({})", m.top_k, m.experts)};
    }
    if (!(m.capacity_factor > 0) || !std::isfinite(m.capacity_factor)) {
      return Error{fmt::format("capacity_factor must be positive, is {}", m.capacity_factor)};
    }
    if (m.layers % m.moe_every != 0) {
      return Error{
          fmt::format("layers ({}) is not a multiple of moe_every ({}): the layer loop "
                      "runs blocks of moe_every layers",
                      m.layers, m.moe_every)};
    }
  }
  LOOM_RETURN_IF_ERROR(OneOf(m.mlp, {"gelu", "swiglu"}, "mlp"));
  LOOM_RETURN_IF_ERROR(OneOf(m.norm, {"layernorm", "rmsnorm"}, "norm"));
  LOOM_RETURN_IF_ERROR(OneOf(m.attention, {"materialized", "fused"}, "attention"));
  LOOM_RETURN_IF_ERROR(OneOf(m.embedding, {"gather", "one-hot"}, "embedding"));
  LOOM_RETURN_IF_ERROR(OneOf(m.compute_type, {"bf16", "f32", "f64"}, "compute_type"));
  LOOM_RETURN_IF_ERROR(OneOf(m.param_type, {"f32", "f64"}, "param_type"));
  return OneOf(ActivationType(m), {"bf16", "f32", "f64"}, "activation_type");
}

Status ValidateParallelPlan(const ParallelPlan& p) {
  for (const auto& [value, what] :
       std::vector<std::pair<int64_t, std::string_view>>{{p.tensor, "tensor"},
                                                         {p.data, "data"},
                                                         {p.pipeline, "pipeline"},
                                                         {p.context, "context"},
                                                         {p.virtual_stages, "virtual_stages"},
                                                         {p.micro_batches, "micro_batches"}}) {
    LOOM_RETURN_IF_ERROR(Positive(value, what));
  }
  LOOM_RETURN_IF_ERROR(OneOf(p.optimizer, {"adam", "adafactor", "sgd", "none"}, "optimizer"));
  LOOM_RETURN_IF_ERROR(OneOf(p.recompute, {"full", "selective", "none"}, "recompute"));
  LOOM_RETURN_IF_ERROR(OneOf(p.context_form, {"ring", "all-gather"}, "context_form"));
  LOOM_RETURN_IF_ERROR(OneOf(p.head, {"spread", "last-stage"}, "head"));
  LOOM_RETURN_IF_ERROR(OneOf(p.residual_split, {"tokens", "d_model"}, "residual_split"));
  if (p.residual_split != "tokens" && !p.sequence_parallel) {
    return Error{fmt::format(
        "residual_split {} says how sequence parallelism splits the residual stream: it needs "
        "sequence_parallel true",
        p.residual_split)};
  }
  return OneOf(p.schedule, {"gpipe", "1f1b"}, "schedule");
}

Status ValidatePlan(const ModelConfig& m, const ParallelPlan& p) {
  LOOM_RETURN_IF_ERROR(ValidateModel(m));
  LOOM_RETURN_IF_ERROR(ValidateParallelPlan(p));
  LOOM_RETURN_IF_ERROR(Divides(m.heads, p.tensor, "heads", "tensor"));
  if (!MultiQuery(m)) LOOM_RETURN_IF_ERROR(Divides(m.kv_heads, p.tensor, "kv_heads", "tensor"));
  LOOM_RETURN_IF_ERROR(Divides(m.d_ff, p.tensor, "d_ff", "tensor"));
  if (m.vocab % p.tensor != 0) {
    return Error{fmt::format(
        "vocab ({}) does not divide by the tensor axis ({}): the embedding and the head split "
        "the vocabulary over it (Megatron's vocab-parallel layers); pad it to a multiple, as "
        "Megatron's --make-vocab-size-divisible-by does",
        m.vocab, p.tensor)};
  }
  LOOM_RETURN_IF_ERROR(Divides(m.batch, p.data, "batch", "data"));
  if (EncoderDecoder(m)) {
    // What the encoder-decoder is built with; the rest is refused by name.
    const auto refuse = [&](bool when, std::string_view what) -> Status {
      if (!when) return OkStatus();
      return Error{fmt::format("an encoder-decoder (encoder_layers {}) is not built with {}",
                               m.encoder_layers, what)};
    };
    LOOM_RETURN_IF_ERROR(refuse(p.pipeline > 1, "pipeline stages"));
    LOOM_RETURN_IF_ERROR(refuse(p.context > 1, "context parallelism"));
    LOOM_RETURN_IF_ERROR(refuse(m.experts > 0, "experts"));
    LOOM_RETURN_IF_ERROR(refuse(m.kv_heads != m.heads, "grouped-query or multi-query attention"));
    LOOM_RETURN_IF_ERROR(refuse(!m.causal, "a bidirectional decoder (causal false)"));
  }
  if (m.experts > 0) {
    LOOM_RETURN_IF_ERROR(
        Divides(m.experts, p.data * p.context, "experts", "data x context (expert-parallel)"));
    const int64_t rows =
        m.batch / p.data / p.micro_batches * (m.seq / p.context) / (SplitsRows(p) ? p.tensor : 1);
    if (SplitsRows(p) && rows % RoutingGroup(m) != 0) {
      return Error{fmt::format(
          "under sequence parallelism a device routes its own {} rows, which must be whole "
          "routing groups of {} positions (expert_group)",
          rows, RoutingGroup(m))};
    }
    if (m.expert_group < 0 || (m.seq / p.context) % RoutingGroup(m) != 0) {
      return Error{fmt::format(
          "expert_group ({}) must divide a device's positions of a sequence ({}): a routing "
          "group is its device's",
          RoutingGroup(m), m.seq / p.context)};
    }
  }
  // Every chunk of the pipeline holds a block; where the chunks do not
  // divide the blocks, some hold one fewer (PipelineLayout).
  if (m.layers / BlockLayers(m) < p.pipeline * p.virtual_stages) {
    return Error{fmt::format(
        "{} ({}) are fewer than pipeline x virtual_stages ({} x {}): every chunk of stages "
        "holds at least one",
        m.experts > 0 ? "blocks of moe_every layers" : "layers", m.layers / BlockLayers(m),
        p.pipeline, p.virtual_stages)};
  }
  LOOM_RETURN_IF_ERROR(Divides(m.seq, p.context, "seq", "context"));
  if (p.virtual_stages > 1) {
    if (p.pipeline == 1)
      return Error{"virtual_stages > 1 interleaves pipeline stages: pipeline > 1"};
    if (p.micro_batches < p.pipeline) {
      return Error{fmt::format(
          "interleaved stages hand each micro-batch round to the first stage, which needs "
          "micro_batches ({}) >= pipeline ({})",
          p.micro_batches, p.pipeline)};
    }
  }
  LOOM_RETURN_IF_ERROR(
      Divides(m.batch / p.data, p.micro_batches, "the local batch", "micro_batches"));
  if (p.schedule == "1f1b" && p.virtual_stages > 1 && p.micro_batches % p.pipeline != 0) {
    return Error{fmt::format(
        "the interleaved 1f1b schedule runs micro-batches in groups of pipeline ({}), which "
        "must divide micro_batches ({})",
        p.pipeline, p.micro_batches)};
  }
  if (p.zero_stage < 0 || p.zero_stage > 3) {
    return Error{fmt::format(
        "zero_stage {} is not one of 0; 1 (the distributed optimizer); 2 (the layers' gradients "
        "sharded too); 3 (and their weights)",
        p.zero_stage)};
  }
  if (p.zero_stage >= 1) {
    if (p.optimizer == "none") {
      return Error{fmt::format("zero_stage {} shards the optimizer: it needs optimizer adam or sgd",
                               p.zero_stage)};
    }
    // Every weight's shard needs a dimension to cut (past a layer's).
    const std::vector<WeightInfo> weights = Weights(m);
    for (size_t i = 0; i < weights.size(); ++i) {
      const int64_t parts = GradientSummers(p, weights[i]);
      if (!ZeroCutOf(weights[i], p, parts)) {
        return Error{
            fmt::format("zero_stage {}: {} has no dimension to cut into the {} "
                        "shards of the devices that sum its gradient",
                        p.zero_stage, weights[i].name, parts)};
      }
    }
  }
  if (SplitsRows(p)) {
    LOOM_RETURN_IF_ERROR(Divides(m.batch / p.data / p.micro_batches * (m.seq / p.context), p.tensor,
                                 "a micro-batch's tokens", "tensor"));
  }
  if (SplitsFeatures(p)) LOOM_RETURN_IF_ERROR(Divides(m.d_model, p.tensor, "d_model", "tensor"));
  return OkStatus();
}

double ModelFlopsPerStep(const ModelConfig& model) {
  const std::vector<WeightInfo> weights = Weights(model);
  double parameters = 0;
  for (size_t i = 1; i < weights.size(); ++i) {  // past the embedding
    double count = 1;
    for (int64_t d : weights[i].dims) count *= static_cast<double>(d);
    // A token runs top_k of the experts.
    if (weights[i].expert_dim >= 0) {
      count *= static_cast<double>(model.top_k) / static_cast<double>(model.experts);
    }
    parameters += count;
  }
  // Self-attention in every layer, cross-attention in an encoder-decoder's
  // decoder layers (to as many positions).
  const int64_t attending =
      model.layers + (model.encoder_layers > 0 ? model.layers + model.encoder_layers : 0);
  const double attention =
      12.0 * static_cast<double>(attending * model.heads * model.head_dim * model.seq);
  return (6 * parameters + attention) * static_cast<double>(model.batch * model.seq);
}

std::vector<WeightInfo> AdafactorState(const ModelConfig& model, size_t weight) {
  const WeightInfo w = Weights(model)[weight];
  const auto rank = static_cast<int64_t>(w.dims.size());
  if (rank - (w.stacked ? 1 : 0) < 2) {
    WeightInfo state{"v." + w.name, w.dims, w.split_dim, w.stacked};
    state.residual_dim = w.residual_dim;
    return {state};
  }
  const auto without = [&](int64_t dim) {
    WeightInfo state{"", w.dims, -1, w.stacked};
    state.dims.erase(state.dims.begin() + dim);
    if (w.split_dim >= 0 && w.split_dim != dim) {
      state.split_dim = w.split_dim > dim ? w.split_dim - 1 : w.split_dim;
    }
    // The experts' dimension comes before the two a matrix's means drop.
    state.expert_dim = w.expert_dim;
    return state;
  };
  WeightInfo rows = without(rank - 1), columns = without(rank - 2);
  rows.name = "r." + w.name;
  columns.name = "c." + w.name;
  return {rows, columns};
}

std::string ActivationType(const ModelConfig& model) {
  return model.activation_type.empty() ? model.compute_type : model.activation_type;
}

std::string PlanName(const ParallelPlan& p) {
  std::string name = fmt::format("tp{}_dp{}", p.tensor, p.data);
  if (p.pipeline > 1) name += fmt::format("_pp{}", p.pipeline);
  if (p.context > 1) {
    name += fmt::format("_cp{}{}", p.context, p.context_form == "ring" ? "" : "_allgather");
  }
  if (p.virtual_stages > 1) name += fmt::format("_v{}", p.virtual_stages);
  if (OneFOneB(p)) name += "_1f1b";
  if (p.pipeline > 1 && p.head == "last-stage") name += "_head_last";
  if (p.micro_batches > 1) name += fmt::format("_mb{}", p.micro_batches);
  if (p.sequence_parallel) name += p.residual_split == "d_model" ? "_sp_dmodel" : "_sp";
  if (p.zero_stage > 0) name += fmt::format("_zero{}", p.zero_stage);
  if (p.recompute != "full") name += "_recompute_" + p.recompute;
  return name;
}

int64_t Devices(const ParallelPlan& p) { return p.tensor * p.context * p.data * p.pipeline; }

bool SpreadsHead(const ModelConfig& model, const ParallelPlan& plan) {
  return plan.pipeline > 1 && plan.head == "spread" && SizesOf(model, plan).R % plan.pipeline == 0;
}

Expected<std::string> BuildTrainingStep(const ModelConfig& model, const ParallelPlan& plan) {
  LOOM_RETURN_IF_ERROR(ValidatePlan(model, plan));
  StepWriter writer(model, plan, "train_step");
  return writer.Write();
}

Expected<OptimizerShard> OptimizerShardOf(const ModelConfig& model, const ParallelPlan& plan,
                                          size_t weight, int64_t device) {
  LOOM_RETURN_IF_ERROR(ValidatePlan(model, plan));
  const std::vector<WeightInfo> weights = Weights(model);
  if (weight >= weights.size()) return Error{fmt::format("no weight {}", weight)};
  if (plan.zero_stage == 0) return OptimizerShard{};
  const StepWriter writer(model, plan, "train_step");
  const ReductionGroups sum = writer.GradientGroups(weight);
  const std::optional<ZeroCut> cut = ZeroCutOf(weights[weight], plan, sum.extent);
  return OptimizerShard{cut->dim, sum.extent, device / sum.inner % sum.extent, cut->padded};
}

Expected<OptimizerShard> AdafactorStateShardOf(const ModelConfig& model, const ParallelPlan& plan,
                                               size_t weight, size_t state, int64_t device) {
  Expected<OptimizerShard> shard = OptimizerShardOf(model, plan, weight, device);
  if (!shard.ok() || shard->parts == 1) return shard;
  if (state >= AdafactorState(model, weight).size()) {
    return Error{fmt::format("weight {} has no Adafactor state {}", weight, state)};
  }
  const std::optional<int64_t> dim = AdafactorStateDim(Weights(model)[weight], state, shard->dim);
  if (!dim) return OptimizerShard{};
  shard->dim = *dim;
  return shard;
}

MemoryFootprint Footprint(const ModelConfig& m, const ParallelPlan& p,
                          const InferenceStep* serving) {
  const int64_t element = TypeBytes(m.param_type), held = TypeBytes(ActivationType(m));
  const auto product = [](const std::vector<int64_t>& dims) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    return count;
  };
  MemoryFootprint f;
  for (const WeightInfo& w : Weights(m)) {
    const int64_t bytes = serving != nullptr          ? TypeBytes(ServedWeightType(m, w))
                          : HoldsMasterShard(m, p, w) ? TypeBytes(m.compute_type)
                                                      : element;
    f.weights += product(LocalDims(w, p)) * bytes;
  }
  // A stage's layers: its slots of blocks, each block's layers.
  const int64_t layers =
      LayoutOf(m.layers / BlockLayers(m), p).slots * p.virtual_stages * BlockLayers(m);
  const int64_t local_batch = m.batch / p.data;
  if (serving != nullptr) {
    // Each layer's k and v of every position (and an encoder-decoder's
    // decoder layer's of the memory's, the encoder's seq).
    int64_t positions = serving->kind == "decode" ? serving->context + 1 : m.seq;
    if (m.encoder_layers > 0) positions += m.seq;
    positions /= p.context;  // a chunk of them under context parallelism
    f.activations = 2 * layers * local_batch * positions *
                    (MultiQuery(m) ? 1 : m.kv_heads / p.tensor) * m.head_dim * held;
    return f;
  }
  f.gradients = 0;
  for (const WeightInfo& w : Weights(m)) f.gradients += product(LocalDims(w, p)) * element;
  if (p.optimizer == "adam") f.optimizer = 2 * f.weights;
  if (p.optimizer == "adafactor") {
    for (size_t i = 0; i < Weights(m).size(); ++i) {
      for (const WeightInfo& state : AdafactorState(m, i)) {
        f.optimizer += product(LocalDims(state, p)) * element;
      }
    }
  }
  if (p.zero_stage >= 1) {
    // Each device its shard of each moment; under stage 3 of each layer
    // weight and its gradient too.
    f.optimizer = 0;
    const std::vector<WeightInfo> weights = Weights(m);
    for (size_t i = 0; i < weights.size(); ++i) {
      const int64_t parts = GradientSummers(p, weights[i]);
      const int64_t whole = product(LocalDims(weights[i], p)) * element;
      const int64_t shard = product(ZeroShardDims(weights[i], p, parts)) * element;
      if (p.optimizer == "adam") f.optimizer += 2 * shard;
      if (HoldsMasterShard(m, p, weights[i])) f.optimizer += shard;  // the master weights
      if (p.optimizer == "adafactor") {
        const std::vector<WeightInfo> states = AdafactorState(m, i);
        for (size_t k = 0; k < states.size(); ++k) {
          f.optimizer += product(AdafactorStateDims(weights[i], states[k], k, p, parts)) * element;
        }
      }
      if (p.zero_stage >= 2 && weights[i].stacked) f.gradients += shard - whole;
      if (p.zero_stage == 3 && weights[i].stacked) f.weights += shard - whole;
    }
  }
  // What the recomputation keeps of each layer: for every micro-batch in
  // a GPipe pipeline (it holds them all), for the ring's slots of a chunk
  // of L / v layers each under 1F1B, for one at a time in gradient
  // accumulation.
  const LocalSizes sizes = SizesOf(m, p);
  int64_t kept_layers = sizes.L;  // entries of blocks of a stage's layers
  if (OneFOneB(p)) {
    kept_layers = RingSlots(p) * (sizes.L / p.virtual_stages);
  } else if (p.pipeline > 1) {
    kept_layers = sizes.n * sizes.L;
  }
  const auto kept_of = [&](int64_t layers, bool cross) {
    int64_t bytes = 0;
    for (const SavedShape& saved : SavedShapes(sizes, m, p, cross)) {
      bytes += layers * product(saved.dims) * (saved.in_param_type ? element : held);
    }
    return bytes;
  };
  f.activations += kept_of(kept_layers, m.encoder_layers > 0);
  // An encoder-decoder's encoder keeps as much of each of its layers (it
  // has no cross-attention), and every row of the memory each decoder
  // layer reads.
  if (m.encoder_layers > 0) {
    f.activations += kept_of(m.encoder_layers, false) + sizes.T * sizes.M * held;
  }
  return f;
}

std::string ServedWeightType(const ModelConfig& model, const WeightInfo& weight) {
  const size_t rank = weight.dims.size() - (weight.stacked ? 1 : 0);
  return rank >= 2 ? model.compute_type : model.param_type;
}

bool HoldsMasterShard(const ModelConfig& model, const ParallelPlan& plan,
                      const WeightInfo& weight) {
  const size_t rank = weight.dims.size() - (weight.stacked ? 1 : 0);
  const bool layer_shard = plan.zero_stage == 3 && weight.stacked;  // sharded itself
  return plan.zero_stage >= 1 && plan.optimizer != "none" && weight.expert_dim < 0 &&
         !layer_shard && rank >= 2 && TypeBytes(model.compute_type) < TypeBytes(model.param_type);
}

Expected<std::string> BuildInferenceStep(const ModelConfig& model, const ParallelPlan& plan,
                                         const InferenceStep& step) {
  LOOM_RETURN_IF_ERROR(ValidatePlan(model, plan));
  if (step.kind != "prefill" && step.kind != "decode") {
    return Error{fmt::format("step '{}' is not one of train, prefill, decode", step.kind)};
  }
  if (step.context < 0) return Error{fmt::format("context must be >= 0, is {}", step.context)};
  if (plan.sequence_parallel) {
    return Error{"sequence parallelism is built for training steps, not for serving"};
  }
  if (plan.zero_stage != 0) {
    return Error{"ZeRO shards what training updates: serving takes zero_stage 0"};
  }
  if (plan.context > 1) {
    // Each device holds its chunk of the positions; a token routes with its
    // sequence's others, and stages would hand on chunks.
    if (plan.pipeline > 1 || plan.micro_batches > 1 || model.experts > 0) {
      return Error{"context parallelism serves without pipeline stages, micro-batches or experts"};
    }
    if (step.kind == "decode" && (step.context + 1) % plan.context != 0) {
      return Error{fmt::format(
          "decode under context parallelism: context + 1 ({}) positions must divide into "
          "{} chunks",
          step.context + 1, plan.context)};
    }
  }
  if (model.encoder_layers > 0 && plan.micro_batches > 1) {
    return Error{"an encoder-decoder is served without micro-batches: micro_batches 1"};
  }
  if (step.kind == "decode" && !model.causal) {
    return Error{fmt::format("{} is an encoder (causal false): it has no decode step", model.name)};
  }
  StepWriter writer(model, plan, step.kind);
  return step.kind == "prefill" ? writer.WritePrefill() : writer.WriteDecode(step.context);
}

}  // namespace loom::model
