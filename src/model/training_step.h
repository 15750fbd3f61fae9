// `loom model`: the per-device SPMD HLO of one training step of a decoder
// transformer (forward, backward written out op by op, optimizer update),
// under a tensor-, data-, context- and pipeline-parallel plan, as
// Megatron-LM and JAX write it.
//
// The step, per device of a [data, model] grid (device = d * tp + t; the
// full mesh, with context and pipeline axes, is Devices'):
//   x = all-reduce_model(onehot(tokens) . embed)   (vocab-parallel embedding: each
//                                                   device its rows of the vocabulary)
//   while i < L (layers as a scan over stacked weights, saving each input):
//     h  = norm(x) * g1
//     q, k, v = h . wqkv                          (column-parallel: heads / tp; one
//                                                   fused product, Megatron's layout)
//     o  = softmax(q k^T / sqrt(hd) + causal) v    (multi-head, grouped-query or
//                                                   multi-query: kv heads shared)
//     x += all-reduce_model(o . wo)                (row-parallel)
//     h2 = norm(x) * g2
//     x += all-reduce_model(act(h2 . w1 [, h2 . w3]) . w2)   (GELU or SwiGLU)
//   (with sequence parallelism, x is this device's tokens: h and h2 are
//   all-gathered over the model axis, and the all-reduces are reduce-scatters;
//   the head takes every row of the model axis, gathered, and the embedding
//   reduce-scatters its sum; under GSPMD's split, x is every token's slice
//   of d_model, gathered and scattered along d_model, and each norm's row
//   statistics are all-reduced over the model axis)
//   loss = mean cross-entropy(norm(x) * gf . wout, targets), all-reduced over data
//                                                  (vocab-parallel head: each device its
//                                                   columns of wout, the softmax's max,
//                                                   sum and target logit all-reduced
//                                                   over the model axis)
//   backward: the same in reverse, each layer recomputed from its saved input
//   (full recomputation; or, selective, only the attention core recomputed
//   from what the forward kept; or nothing recomputed), input gradients of
//   the column-parallel products
//   all-reduced over the model axis; every weight gradient all-reduced over
//   the data axis; then Adam (or SGD) on the f32 master weights.
//
// Context parallelism (ParallelPlan::context): each device's tokens are one
// contiguous chunk of every sequence, and attention reads the others'
// keys and values by ring attention or by all-gather.
//
// Pipeline parallelism (GPipe, as JAX's SPMD pipelines write it, and with
// interleaved stages its circular form, ParallelPlan::virtual_stages): an
// axis of P stages, device = ((p * data + d) * context + c) * tensor + t, each stage
// holding L/P consecutive layers. The local batch is cut into micro-batches;
// a loop of micro_batches + P - 1 iterations runs every stage on every
// device each iteration (stage p on micro-batch i - p; the bubbles compute
// on masked data), handing activations to the next stage by
// collective-permute and saving what backward reads of each of its layers
// per micro-batch (every micro-batch's at once, as GPipe holds them). The
// final norm, head and loss run one micro-batch at a time (a loop, so that
// one micro-batch's logits are live), each stage on its share of the last
// stage's rows (an all-to-all over the pipeline axis hands them out, an
// all-gather brings their gradients back; ParallelPlan::head), or under
// head "last-stage" every stage on all of them, the last stage's counting
// (the loss and the head's gradients masked to it); either way then
// all-reduced over the pipeline and data axes (the embedding's gradient
// masked to stage 0).
// The backward loop runs the micro-batches in reverse through the stages,
// last stage first, each stage running its layers' backward from what it
// saved (recomputing as the plan says), masking the bubbles' gradients to zero, summing
// its layers' weight gradients over micro-batches and handing the input
// gradient back by collective-permute. micro_batches > 1 with one stage is
// gradient accumulation: a loop over the micro-batches, each run forward and
// backward (keeping one micro-batch's activations at a time) and its
// gradients summed. Under the 1F1B schedule (ParallelPlan::schedule) one
// loop's iterations run a forward, the head and a backward on every stage,
// each masked where the stage has none, so that a micro-batch's backward
// starts in the iteration its forward leaves the last stage, and what the
// forwards save lives in a ring of at most P v + P - 1 slots; the loop is
// cut into warm-up (forwards only), steady and cool-down (backwards only)
// phases. With virtual stages the cool-down is cut again where a pass's
// last backward has left every stage, and that pass's layers' gradients
// are summed over the data axis there, overlapping the passes still
// running backward.
//
// Dot operands are converted to the compute type (bf16, or f32/f64) and
// accumulate in the parameter type (f32, or f64 for gradient checks). What
// crosses a layer or a device is held in the activation type (bf16 when the
// compute type is): each layer converts its input to the parameter type,
// computes in it, and rounds its output; a row-parallel product is rounded
// once to the activation type and summed over the model axis in it; the
// weight gradients and their sums over the data axis stay in the parameter
// type. Under ZeRO-3 the layers' matrices are gathered in the compute type
// (the type their products read; the norm gains in the parameter type).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace loom::model {

struct ModelConfig {
  std::string name = "model";
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t d_ff = 256;
  int64_t heads = 4;
  // = heads: multi-head; 1: multi-query (k and v from their own weight,
  // replicated over the model axis, as PaLM's); else grouped-query (the
  // model axis splits the kv heads: kv_heads a multiple of tensor).
  int64_t kv_heads = 4;
  int64_t head_dim = 16;
  int64_t vocab = 128;
  int64_t seq = 16;
  int64_t batch = 4;               // global batch, sequences
  std::string mlp = "gelu";        // gelu | swiglu
  std::string norm = "layernorm";  // layernorm | rmsnorm
  bool causal = true;              // false: every position attends to every other (an encoder)
  // How attention's kernels run: "materialized" writes the [S, S] scores
  // and probabilities to memory between ops (XLA without a fused attention
  // kernel; the systems of 2020-2022), "fused" is flash attention (Dao et
  // al. 2022): a kernel per block of keys keeping its scores on chip, a
  // running softmax across blocks, and a backward that makes the
  // probabilities again from each query's log-sum-exp (a fusion of kind
  // kCustom per block, the math inside it as HLO).
  std::string attention = "materialized";
  // An encoder-decoder (T5, Raffel et al. 2020) with encoder_layers > 0:
  // the encoder's bidirectional layers over the tokens and its final norm,
  // then `layers` decoder layers, each attending to the encoder's output
  // (cross-attention) between its causal self-attention and its MLP, fed
  // the targets shifted right (id 0 first); the embedding shared.
  int64_t encoder_layers = 0;
  // Mixture of experts (GShard, Lepikhin et al. 2021; GLaM, Du et al.
  // 2022): with experts > 0 every moe_every-th layer's MLP is E experts
  // (each an MLP of d_ff) behind a router: softmax(h . router) over the
  // experts, each token sent to its top_k (the gates renormalised over
  // them), at most `capacity` tokens per expert per routing group of
  // expert_group positions of a sequence (C = ceil(capacity_factor * top_k
  // * group / E); the later ones dropped, top-1 choices placed first), the
  // experts' outputs summed by the gates. The layer loop then runs blocks
  // of moe_every layers, the last of each with experts.
  int64_t experts = 0;
  int64_t top_k = 2;
  double capacity_factor = 2.0;
  int64_t moe_every = 2;
  int64_t expert_group = 0;  // positions per routing group; 0: the whole sequence
  // GShard's auxiliary load-balancing loss (Lepikhin et al. 2021,
  // algorithm 1; Switch's, Fedus et al. 2022, eq. 4), added to the loss
  // with this weight: per routing group E sum_e f_e P_e, f_e the share of
  // the group's tokens whose first choice is expert e and P_e e's mean
  // router probability over them, averaged over the batch's groups and
  // summed over the MoE layers. f_e counts, so the gradient flows through
  // P_e alone. 0: none.
  double aux_loss_weight = 0;
  // How the embedding looks its rows up: "gather" takes each token's row
  // (a gather; its gradient a scatter-add into the rows), as Megatron's
  // vocab-parallel embedding, PyTorch's and flax's do; "one-hot" multiplies
  // one-hot rows by the table (and the gradient by their transpose), as
  // praxis's SPMD sharding sets lookup_style='matmul' for TPUs. Either way
  // each device of the model axis looks up the ids in its slice of the
  // vocabulary, zeros for the others, summed over the axis.
  std::string embedding = "gather";
  std::string compute_type = "f32";  // dot operands: bf16 | f32 | f64
  std::string param_type = "f32";    // master weights, arithmetic, accumulation: f32 | f64
  // What the activations are held and sent in: the residual stream between
  // layers (the loop's carry, the saved layer inputs, what pipeline stages
  // hand on), the row-parallel products and their sums over the model axis
  // (all-reduce or reduce-scatter), what sequence parallelism gathers, their
  // gradients, and the KV caches: bf16 | f32 | f64, or empty for the compute
  // type (Megatron's and JAX's mixed precision: bf16 activations with f32
  // arithmetic inside each op and f32 weight gradients).
  std::string activation_type;
  std::string source;  // where the figures come from
};

struct ParallelPlan {
  std::string name = "plan";
  int64_t tensor = 1;         // model axis: Megatron column/row split
  int64_t data = 1;           // data axis: batch split, gradient all-reduce
  int64_t pipeline = 1;       // pipeline axis: stages of layers (PipelineLayout)
  int64_t micro_batches = 1;  // micro-batches of the local batch
  // Interleaved stages (virtual stages; JAX's circular pipeline, the SPMD
  // form of Megatron's interleaved schedule): each stage holds v chunks of
  // about L / (P v) layers (PipelineLayout), stage p the chunks p, p + P,
  // ..., and each micro-batch passes around the stages v times, the last
  // handing on to the first. The bubble shrinks v-fold ((P - 1) / v of a micro-batch's
  // time) for v times the hand-offs; it needs micro_batches >= pipeline.
  int64_t virtual_stages = 1;
  // The order of the pipeline's work: "gpipe" runs every micro-batch
  // forward, then every one backward, and so keeps every micro-batch's
  // activations; "1f1b" (PipeDream-Flush, Narayanan et al. 2021; with
  // virtual stages Megatron's interleaved schedule, micro-batches in groups
  // of `pipeline`, which must divide them) runs each micro-batch's backward
  // as soon as it leaves the last stage, so a stage keeps at most
  // P v + P - 1 chunks of activations: with virtual stages as many as
  // Megatron's interleaved first rank, without them 2 P - 1, P - 1 more
  // than PipeDream-Flush's P (a cost of the SPMD form: every stage moves
  // one step a loop iteration, so a micro-batch's round trip takes 2 P - 2
  // of stage 0's forwards). The same bubble either way. Ignored without
  // pipeline stages.
  std::string schedule = "gpipe";
  // Where the final norm, the head and the loss run under pipeline stages:
  // "spread", each stage on its share of the last stage's rows (as JAX's
  // SPMD pipelines run what lies outside the pipeline with the stage axis
  // as a batch axis; about Megatron's last stage where it holds a layer
  // fewer for the head, as Llama 3's does); "last-stage", every stage on
  // all of them in lockstep, the last stage's counting (Megatron's last
  // stage where its stages hold as many layers: the head's time is added
  // to the stage that paces the pipeline). "spread" falls back to
  // "last-stage" where the stages do not divide a micro-batch's rows.
  std::string head = "spread";
  // Expert parallelism rides the data and context axes: with experts, each
  // device of a data-and-context group holds E / (data * context) of each
  // MoE layer's experts (their d_ff split over the model axis as a dense
  // MLP's), and the tokens routed to an expert reach its device by
  // all-to-all over that group, and come back by all-to-all (GShard's
  // layout). An expert's gradient is its device's alone.
  //
  // Context parallelism (Megatron-LM's; Llama 3's for long sequences): an
  // axis that cuts each sequence into `context` contiguous chunks, each
  // device holding one chunk's tokens through the whole step. Only
  // attention reads across chunks, in `context_form`:
  //   "ring": ring attention (Liu et al. 2023; Megatron-LM's and
  //     TransformerEngine's CP): the chunks' k and v pass around the axis by
  //     collective-permute, one step per chunk, each device folding its
  //     queries' attention to the chunk in hand into a running softmax
  //     (flash attention's max, sum and weighted values). Backward passes
  //     them around again with their gradients, which arrive home after a
  //     last step; it keeps the log-sum-exp, not the probabilities.
  //   "all-gather": (Llama 3, Dubey et al. 2024, section 3.3.2) k and v
  //     all-gathered over the axis before attention, their gradients
  //     reduce-scattered back.
  // The weights' gradients are summed over the data and context axes
  // together (each device saw its own tokens), and ZeRO shards over both.
  int64_t context = 1;
  std::string context_form = "ring";  // ring | all-gather
  // Megatron's sequence parallelism (Korthikanti et al. 2022) on the model
  // axis: the residual stream, the norms and the head are split by tokens;
  // an all-gather before each column-parallel product and a reduce-scatter
  // after each row-parallel one replace the all-reduce (training steps;
  // with pipeline stages the stages hand on their tokens' rows).
  bool sequence_parallel = false;
  // How sequence parallelism splits the residual stream over the model
  // axis: "tokens", Megatron's (above); or "d_model", GSPMD's 2D
  // "finalized" sharding (Xu et al. 2021; praxis's set_sharding_params_v1,
  // activations [B, S, M] with M on the model axis): each device holds
  // every row's slice of d_model, and so does each norm's gain. The
  // all-gather before a column-parallel product then gathers d_model, the
  // dimension the product contracts; the reduce-scatter after a
  // row-parallel one scatters it; and each norm sums its rows' statistics
  // over the model axis (an all-reduce of one value a row per sum: the
  // mean and the variance, and in backward the two means it takes). With
  // zero_stage 3 over the data axis this is the paper's layout: weights
  // [M, F] on [data, model].
  std::string residual_split = "tokens";
  // ZeRO stage (Rajbhandari et al. 2020): 0; 1, the distributed optimizer
  // (Megatron's): each weight's gradient reduce-scattered over the devices
  // that sum it, Adam's moments and the update held and computed per shard,
  // the updated weight all-gathered back; 2, the layers' gradients held as
  // those shards too: each layer's reduce-scattered as the backward makes it
  // (per micro-batch, where stage 1 sums a micro-batch's whole gradients and
  // scatters them once); 3, the layers' weights held as shards too (FSDP):
  // each layer's all-gathered where the forward and the backward use it
  // (the embedding, final norm and head as under stage 1).
  int64_t zero_stage = 0;
  // Activation recomputation (Korthikanti et al. 2022): "full" keeps each
  // layer's input and recomputes the layer in backward; "selective" keeps
  // what the layer's products read and make and recomputes the attention
  // core (softmax(q k^T) v); "none" keeps everything backward reads.
  std::string recompute = "full";
  // adam | adafactor | sgd | none (outputs the loss and the gradients).
  // Adafactor (Shazeer and Stern 2018; paxml's): no first moment, the
  // second moment of each matrix factored into row and column means,
  // decay 1 - t^-0.8, updates clipped to RMS 1, step learning_rate.
  std::string optimizer = "adam";
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
};

// Under ZeRO: the shard of weight `weight` (Weights order) whose
// optimizer state device `device` holds: its local weight shard's
// dimension `dim`, padded with zeros to `padded` elements where `parts`
// does not divide it (0: not cut), cut into `parts`, block `index` (the
// device's position among the devices that sum that gradient).
struct OptimizerShard {
  int64_t dim = 0;
  int64_t parts = 1;
  int64_t index = 0;
  int64_t padded = 0;
};
Expected<OptimizerShard> OptimizerShardOf(const ModelConfig& model, const ParallelPlan& plan,
                                          size_t weight, int64_t device);

// How the pipeline holds a stack of `blocks` layer blocks (a block is
// moe_every layers with experts, else one layer): in P v chunks in
// pipeline order, chunk c on stage c mod P as its pass c / P, each with
// room for `slots` = ceil(blocks / (P v)) blocks. Where P v divides the
// blocks every chunk is full. Else the first and the last chunks hold one
// block fewer, then the second and the second-to-last, and so on (Llama 3's
// uneven stages, Dubey et al. 2024, section 3.3.2: its first and last
// stages hold a layer fewer, for the embedding and the head). Such a
// chunk's last slot is empty: there the step still runs a layer on
// whatever weights the slot holds, as every stage runs in lockstep, but
// passes its input on and its gradient back unchanged and gives the slot's
// weights a zero gradient, so that no other output depends on the slot.
struct PipelineLayout {
  int64_t chunks = 1;       // P v
  int64_t slots = 0;        // a chunk's room, in blocks
  int64_t short_first = 0;  // chunks 0 .. short_first - 1 hold slots - 1 blocks
  int64_t short_last = 0;   // and so do the last short_last chunks
  bool Short(int64_t chunk) const { return chunk < short_first || chunk >= chunks - short_last; }
  bool Uneven() const { return short_first + short_last > 0; }
  // The blocks chunk `chunk` holds, and the stack's block in its first slot.
  int64_t Blocks(int64_t chunk) const { return slots - (Short(chunk) ? 1 : 0); }
  int64_t FirstBlock(int64_t chunk) const;
};
PipelineLayout LayoutOf(int64_t blocks, const ParallelPlan& plan);

// Whether the training step spreads the head's rows over the pipeline's
// stages (ParallelPlan::head "spread", where the stages divide a
// micro-batch's rows of the residual stream).
bool SpreadsHead(const ModelConfig& model, const ParallelPlan& plan);

// The activation type in effect: model.activation_type, or the compute type.
std::string ActivationType(const ModelConfig& model);

// "tp8_dp2_pp4_mb8_sp_zero1": the plan's axes, the parts that are not 1.
std::string PlanName(const ParallelPlan& plan);

// The devices of the plan's mesh: tensor x context x data x pipeline, a
// device numbered ((stage * data + d) * context + c) * tensor + t.
int64_t Devices(const ParallelPlan& plan);

// Checks that the plan divides the model (heads, kv heads, d_ff and batch
// by their axes, the local batch by the micro-batches), that every chunk of
// the pipeline holds a block (PipelineLayout), and that every size is
// positive.
Status ValidatePlan(const ModelConfig& model, const ParallelPlan& plan);
// What ValidatePlan checks of the model alone (its sizes positive, its
// choices ones Loom builds), and of the plan alone: what a config file can
// be told wrong by itself, before a plan meets a model.
Status ValidateModel(const ModelConfig& model);
Status ValidateParallelPlan(const ParallelPlan& plan);

// The HLO text of one step: parameters (tokens s32[b,S], targets s32[b,S],
// the optimizer's step count f32[], then every weight shard, then the
// optimizer state: Adam's moments m and v of every weight, or Adafactor's
// AdafactorState of each weight in turn), and a tuple of (loss, updated
// weights..., updated state...), or (loss, gradients...) with optimizer
// "none".
Expected<std::string> BuildTrainingStep(const ModelConfig& model, const ParallelPlan& plan);

// Inference under a tensor-, data- and pipeline-parallel plan (Megatron's
// serving: an all-reduce after each row-parallel product; micro-batches of
// sequences through the stages as for training, each stage's caches of its
// layers written per micro-batch, the logits all-reduced from the last
// stage to every stage), the weights split as for training, each in ServedWeightType:
//   prefill: the prompt (tokens s32[b,S], S = the model's seq) through every
//     layer, causal; returns the logits of each sequence's last position
//     [b,V] and the KV caches k, v [L/pipeline, b, S, kv_heads/tensor,
//     head_dim] of the stage's layers;
//   decode: one token per sequence (s32[b,1]) at position `context`, with
//     caches of context + 1 positions (0 .. context-1 filled) after the
//     weights; writes the token's k and v at `context`, attends over all,
//     and returns its logits [b,V] and both caches.
// Under context parallelism (no stages, micro-batches or experts) each
// device holds its chunk of the positions: the prefill's tokens and caches
// S/context of them, a decode's caches (context + 1)/context, the token's
// entry the last of the last chunk.
// An encoder-decoder's prefill takes the decoder's prompt s32[b,S] after
// the tokens (which the encoder reads) and returns after the caches the
// memory's k and v of each decoder layer [L, b, S, heads/tensor,
// head_dim]; its decode takes those after its caches (memory_k, memory_v).
// The module is named like a training step's, "_prefill" / "_decode".
struct InferenceStep {
  std::string kind = "prefill";  // prefill | decode
  int64_t context = 0;           // decode: the positions already cached
};
Expected<std::string> BuildInferenceStep(const ModelConfig& model, const ParallelPlan& plan,
                                         const InferenceStep& step);

// What one device holds in a step by the plan's arithmetic, in bytes (the
// parameter type's size per element; the activation type's for the
// activations and caches): its shards of the weights; in
// training their gradients (one of each) and, with Adam, the two moments,
// and the activations backward reads (what the plan's recomputation keeps
// of each layer, for every micro-batch under a pipeline, for one under
// gradient accumulation); in serving, the KV caches. The program's own peak (buffers
// live at once, analysis/live_bytes.h) comes on top of none of these: it counts them all, and the
// temporaries.
struct MemoryFootprint {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;  // training: what backward reads; serving: the KV caches
  int64_t total() const { return weights + gradients + optimizer + activations; }
};
// `serving`: the inference step, or null for a training step.
MemoryFootprint Footprint(const ModelConfig& model, const ParallelPlan& plan,
                          const InferenceStep* serving = nullptr);

// Model FLOPs of one training step (PaLM, Chowdhery et al. 2022, appendix
// B): per token 6 N + 12 L (heads x head_dim) S, N every weight but the
// input embedding (a lookup; the output projection counts, as Megatron's
// formula counts it), S the sequence; times the global batch's tokens.
// What recomputation, bubbles and masking add are not model FLOPs.
double ModelFlopsPerStep(const ModelConfig& model);

// The weights in parameter order: name and full (unsharded) dims, and the
// dimension the model axis splits (-1: replicated); a layer weight, stacked
// [L, ...] by blocks, is held by the pipeline's stages as PipelineLayout
// says, a stage's [v slots, ...].
struct WeightInfo {
  std::string name;
  std::vector<int64_t> dims;
  int64_t split_dim = -1;
  bool stacked = false;
  // Replicated over the model axis, but each device's gradient is its part
  // of the sum (multi-query k and v, which every device's heads read; an
  // MoE router, whose gates read the experts' partial outputs, or under
  // sequence parallelism its device's rows).
  bool partial_over_model = false;
  // The experts' dimension, split over the data and context axes (expert
  // parallelism), or -1.
  int64_t expert_dim = -1;
  // A norm's gain: its d_model dimension, which the model axis splits
  // where the plan splits the residual stream by d_model
  // (ParallelPlan::residual_split), or -1.
  int64_t residual_dim = -1;
};

// The dimension of `weight` the model axis splits under `plan` (its
// split_dim, or a gain's residual_dim under residual_split "d_model"), or -1.
int64_t ModelSplitDim(const WeightInfo& weight, const ParallelPlan& plan);

// The type a serving step holds a weight in: a matrix (a product's operand,
// the embedding, a router, the experts') in the compute type, as servers
// load their checkpoints, with no master copy to update; a norm's gain in
// the parameter type, the type of the arithmetic it scales.
std::string ServedWeightType(const ModelConfig& model, const WeightInfo& weight);

// Whether a training step under `plan` holds `weight` as Megatron's
// distributed optimizer and DeepSpeed's ZeRO-1/2 do: the whole matrix in
// the compute type on each device (the copy its products read), and this
// device's ZeRO shard of the master weights, in the parameter type, among
// the optimizer state; the step updates the shard and all-gathers it in
// the compute type. So under ZeRO-1 and -2 (and ZeRO-3's weights outside
// the layer stack) for a matrix other than an expert's, where the compute
// type is narrower than the parameter type and an optimizer runs. A
// step's parameters and outputs list these master shards last, in
// Weights order.
bool HoldsMasterShard(const ModelConfig& model, const ParallelPlan& plan, const WeightInfo& weight);
std::vector<WeightInfo> Weights(const ModelConfig& model);

// Adafactor's state of weight `weight` (Weights order), as weights are
// described: for a matrix (per layer), its row means "r.NAME" (the last
// dimension dropped) and column means "c.NAME" (the one before dropped),
// each split where the weight is; for a vector, "v.NAME" like the weight.
std::vector<WeightInfo> AdafactorState(const ModelConfig& model, size_t weight);

// Under ZeRO, how Adafactor's state `state` (AdafactorState's order) of
// weight `weight` is cut on `device`: as the weight's optimizer state
// (OptimizerShardOf), in the state's own dimensions, where the state keeps
// the dimension the weight is cut along; where its mean dropped that
// dimension, not cut (parts 1): every device of the group holds it whole.
Expected<OptimizerShard> AdafactorStateShardOf(const ModelConfig& model, const ParallelPlan& plan,
                                               size_t weight, size_t state, int64_t device);

// Presets: model configurations and plans by name, and their JSON forms.
std::vector<std::string> ModelPresetNames();
Expected<ModelConfig> ModelPreset(std::string_view name);
Expected<ModelConfig> ParseModelConfig(const std::string& json_text, std::string_view where);
Expected<ParallelPlan> ParsePlan(const std::string& json_text, std::string_view where);
std::string ModelConfigJson(const ModelConfig& model);
// `model` at another depth: `layers` layers, and as many in an
// encoder-decoder's encoder (what `loom model --layers` and a study's
// "layers" mean).
ModelConfig WithLayers(ModelConfig model, int64_t layers);

}  // namespace loom::model
