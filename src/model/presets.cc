// Model presets (figures from ../shared/BRIEF.md section 8 and the papers it
// cites) and the JSON forms of configs and plans.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/training_step.h"

namespace loom::model {
namespace {

ModelConfig Decoder(std::string name, int64_t layers, int64_t d_model, int64_t d_ff, int64_t heads,
                    int64_t kv_heads, int64_t head_dim, int64_t vocab, int64_t seq, int64_t batch,
                    std::string mlp, std::string norm, std::string source) {
  ModelConfig m;
  m.name = std::move(name);
  m.layers = layers;
  m.d_model = d_model;
  m.d_ff = d_ff;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.vocab = vocab;
  m.seq = seq;
  m.batch = batch;
  m.mlp = std::move(mlp);
  m.norm = std::move(norm);
  m.compute_type = "bf16";
  m.source = std::move(source);
  return m;
}

// An encoder: attention sees every position.
ModelConfig Encoder(ModelConfig m) {
  m.causal = false;
  return m;
}

// An encoder-decoder with `encoder_layers` encoder layers before the
// decoder's.
ModelConfig EncoderDecoderOf(ModelConfig m, int64_t encoder_layers) {
  m.encoder_layers = encoder_layers;
  return m;
}

// Mixture-of-experts MLPs: `experts`, top `top_k`, `capacity_factor`,
// every `every`-th layer.
ModelConfig Experts(ModelConfig m, int64_t experts, int64_t top_k, double capacity_factor,
                    int64_t every, int64_t group = 0) {
  m.experts = experts;
  m.expert_group = group;
  m.top_k = top_k;
  m.capacity_factor = capacity_factor;
  m.moe_every = every;
  return m;
}
// GShard's auxiliary load-balancing loss at `weight`.
ModelConfig WithAuxLoss(ModelConfig m, double weight) {
  m.aux_loss_weight = weight;
  return m;
}

// Attention in fused kernels (flash attention), where the published run
// had them; the source says so, or says it is assumed.
ModelConfig FlashAttention(ModelConfig m, std::string_view why) {
  m.attention = "fused";
  m.source += fmt::format("; fused (flash) attention {}", why);
  return m;
}

// The embedding looked up by one-hot products, as JAX's SPMD programs on
// TPUs do it: praxis's sharding annotations for its LMs set the embedding's
// lookup_style to 'matmul'; the source says so, or says it is assumed.
ModelConfig OneHotEmbedding(ModelConfig m, std::string_view why) {
  m.embedding = "one-hot";
  m.source += fmt::format("; one-hot embedding products {}", why);
  return m;
}
constexpr std::string_view kPraxisLookup = "(praxis's lookup_style='matmul' under SPMD sharding)";
constexpr std::string_view kAssumedPraxisLookup =
    "assumed (an SPMD program on TPUs, written as praxis's LMs write theirs)";

// Dubey et al. 2024 do not name the attention kernel; PyTorch's, on which
// Llama 3 trained, runs flash attention at these lengths.
constexpr std::string_view kLlamaAttention = "assumed (PyTorch's fused attention kernels)";

std::vector<ModelConfig> Presets() {
  return {
      Decoder("tiny", 2, 64, 256, 4, 4, 16, 128, 16, 4, "gelu", "layernorm",
              "a small decoder for tests (not a published model)"),
      Decoder("tiny-gqa", 2, 64, 192, 4, 2, 16, 96, 8, 4, "swiglu", "rmsnorm",
              "a small Llama-like decoder for tests (not a published model)"),
      OneHotEmbedding(
          Encoder(Decoder("tiny-bert", 2, 64, 128, 4, 1, 32, 80, 8, 4, "swiglu", "layernorm",
                          "a small BERT-like multi-query encoder for tests (not a published "
                          "model)")),
          "as bert-480b's"),
      WithAuxLoss(
          Experts(OneHotEmbedding(
                      Decoder("tiny-moe", 4, 32, 48, 4, 4, 8, 64, 16, 4, "gelu", "layernorm",
                              "a small decoder with 4 experts, top-2, every other layer, "
                              "capacity factor 1 (tokens dropped), routing groups of 8 "
                              "positions, the auxiliary loss at 0.1 (ten times Switch's "
                              "weight, so that tests see it), for tests (not a published "
                              "model)"),
                      "as glam-1.2t's"),
                  4, 2, 1.0, 2, 8),
          0.1),
      Decoder("gpt3-175b", 96, 12288, 49152, 96, 96, 128, 51200, 2048, 1536, "gelu", "layernorm",
              "Brown et al. 2020, table 2.1 (batch 3.2M tokens = 1536 x 2048)"),
      Decoder("megatron-8.3b", 72, 3072, 12288, 32, 32, 96, 51200, 1024, 512, "gelu", "layernorm",
              "Shoeybi et al. 2019 (Megatron-LM), table 2: the 8.3B GPT-2; vocab 50257 padded to "
              "51200 as there; batch 512"),
      Decoder("megatron-22b", 48, 6144, 24576, 64, 64, 96, 51200, 2048, 1536, "gelu", "layernorm",
              "Korthikanti et al. 2022 (Megatron-LM), table 3; batch assumed as GPT-3's"),
      Decoder("megatron-530b", 105, 20480, 81920, 128, 128, 160, 51200, 2048, 2240, "gelu",
              "layernorm", "Smith et al. 2022 (MT-NLG), batch 1920-2240 (the largest)"),
      Decoder("megatron-1t", 128, 25600, 102400, 160, 160, 160, 51200, 2048, 3072, "gelu",
              "layernorm", "Narayanan et al. 2021, table 1 (1T: batch 3072)"),
      OneHotEmbedding(Decoder("paxml-1t", 142, 24576, 98304, 192, 192, 128, 32000, 1024, 4096,
                              "gelu", "layernorm",
                              "paxml LmCloudSpmd1024B; vocab 32000 assumed (paxml's default "
                              "SentencePiece)"),
                      kPraxisLookup),
      OneHotEmbedding(Decoder("paxml-500b", 102, 20480, 81920, 160, 160, 128, 32000, 1024, 4096,
                              "gelu", "layernorm", "paxml LmCloudSpmd512B; vocab 32000 assumed"),
                      kPraxisLookup),
      FlashAttention(
          Decoder("llama3-8b", 32, 4096, 14336, 32, 8, 128, 128256, 8192, 512, "swiglu", "rmsnorm",
                  "Llama 3 model card; batch assumed (4M tokens = 512 x 8192)"),
          kLlamaAttention),
      FlashAttention(Decoder("llama3-70b", 80, 8192, 28672, 64, 8, 128, 128256, 8192, 512, "swiglu",
                             "rmsnorm", "Llama 3 model card; batch assumed (4M tokens)"),
                     kLlamaAttention),
      OneHotEmbedding(
          Encoder(Decoder(
              "bert-480b", 64, 16384, 131072, 256, 1, 128, 30592, 512, 4096, "swiglu", "layernorm",
              "MLPerf Training v1.1 open division, Google's 480B BERT (BRIEF section 8: "
              "L, d_model, d_ff, 256 heads of 128, multi-query, gated SiLU, seq 512, batch "
              "4096, mesh [256, 8]); BERT's WordPiece vocabulary (30522, padded to 30592, "
              "a multiple of 128, as Megatron's BERT pads it, for the model axis to split "
              "it) and LayerNorm assumed; the loss is cross-entropy at every position (the "
              "masked-LM "
              "objective's 15% of positions not modelled)")),
          kAssumedPraxisLookup),
      FlashAttention(
          Decoder("llama3-405b", 126, 16384, 53248, 128, 8, 128, 128256, 8192, 2048, "swiglu",
                  "rmsnorm", "Dubey et al. 2024, table 3 and 4 (16M tokens = 2048 x 8192)"),
          kLlamaAttention),
      OneHotEmbedding(
          EncoderDecoderOf(Decoder("tiny-t5", 2, 32, 64, 4, 4, 8, 64, 8, 4, "gelu", "rmsnorm",
                                   "a small T5-like encoder-decoder for tests (not a published "
                                   "model)"),
                           2),
          "as t5-500b's"),
      OneHotEmbedding(
          EncoderDecoderOf(
              Decoder(
                  "t5-500b", 64, 16384, 65536, 128, 128, 128, 32128, 512, 2048, "gelu", "rmsnorm",
                  "ASSUMED throughout: the paper's T5-like ~500B encoder-decoder has no public "
                  "config (BRIEF section 8). Taken as T5's shape (Raffel et al. 2020) widened: "
                  "64 encoder and 64 decoder layers of d_model 16384, d_ff 65536, 128 heads of "
                  "128 (490B parameters), T5's vocabulary of 32128, 512 positions on both sides, "
                  "batch 2048, RMSNorm and GELU (T5.1.1's gated GELU not modelled)"),
              64),
          kAssumedPraxisLookup),
      OneHotEmbedding(
          WithAuxLoss(
              Experts(
                  Decoder("glam-1.2t", 64, 8192, 32768, 128, 128, 64, 256000, 1024, 1024, "gelu",
                          "layernorm",
                          "Du et al. 2022 (GLaM 64B/64E): 64 layers, every other one 64 experts "
                          "with top-2 gating, d_model 8192, d_ff 32768, 128 heads, 1024 positions, "
                          "SentencePiece vocabulary of 256K; its FFN taken as GELU with two "
                          "matrices (which gives its 1.2T parameters); capacity factor 2 and the "
                          "auxiliary load-balancing loss (GShard's), batch 1024 sequences (1M "
                          "tokens), LayerNorm, routing groups of a whole sequence and the "
                          "auxiliary loss's weight 0.01 (Switch's) assumed"),
                  64, 2, 2.0, 2),
              0.01),
          kAssumedPraxisLookup),
      OneHotEmbedding(
          Encoder(Decoder(
              "speech-10b", 48, 4096, 16384, 32, 32, 128, 1024, 1024, 1024, "gelu", "layernorm",
              "ASSUMED throughout: Wang et al. 2023 report a ~10B speech model with no "
              "public config (BRIEF section 8). Taken as a Conformer-like encoder without "
              "its convolution modules: 48 layers of d_model 4096 (12 L d^2 = 9.7B), "
              "d_ff 4 d, 32 heads of 128, 1024 frames after 4x subsampling, 1024 "
              "word-piece targets per frame (a per-frame cross-entropy standing for CTC "
              "or RNN-T), batch 1024 utterances")),
          kAssumedPraxisLookup),
  };
}

template <typename T>
Status Read(const nlohmann::json& json, std::string_view key, T* out, std::string_view where) {
  if (!json.contains(key)) return OkStatus();
  const nlohmann::json& value = json.at(std::string(key));
  if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return Error{fmt::format("{}: '{}' must be a string", where, key)};
    *out = value.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean())
      return Error{fmt::format("{}: '{}' must be true or false", where, key)};
    *out = value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer()) {
      return Error{fmt::format("{}: '{}' must be an integer", where, key)};
    }
    *out = value.get<T>();
  } else {
    if (!value.is_number()) return Error{fmt::format("{}: '{}' must be a number", where, key)};
    *out = value.get<T>();
  }
  return OkStatus();
}

Expected<nlohmann::json> ParseObject(const std::string& text, std::string_view where,
                                     std::initializer_list<std::string_view> keys) {
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error{fmt::format("{}: not a JSON object", where)};
  }
  for (const auto& [key, value] : json.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return Error{fmt::format("{}: unknown key '{}'", where, key)};
    }
  }
  return json;
}

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const ModelConfig& m : Presets()) names.push_back(m.name);
  return names;
}

Expected<ModelConfig> ModelPreset(std::string_view name) {
  for (const ModelConfig& m : Presets()) {
    if (m.name == name) return m;
  }
  return Error{
      fmt::format("no model preset '{}' (presets: {})", name, fmt::join(ModelPresetNames(), ", "))};
}

Expected<ModelConfig> ParseModelConfig(const std::string& text, std::string_view where) {
  LOOM_ASSIGN_OR_RETURN(const nlohmann::json json, ParseObject(text, where,
                                                               {"preset",
                                                                "name",
                                                                "layers",
                                                                "d_model",
                                                                "d_ff",
                                                                "heads",
                                                                "kv_heads",
                                                                "head_dim",
                                                                "vocab",
                                                                "seq",
                                                                "batch",
                                                                "mlp",
                                                                "norm",
                                                                "causal",
                                                                "attention",
                                                                "encoder_layers",
                                                                "experts",
                                                                "top_k",
                                                                "capacity_factor",
                                                                "moe_every",
                                                                "expert_group",
                                                                "aux_loss_weight",
                                                                "embedding",
                                                                "compute_type",
                                                                "param_type",
                                                                "activation_type",
                                                                "source"}));
  ModelConfig m;
  std::string preset;
  LOOM_RETURN_IF_ERROR(Read(json, "preset", &preset, where));
  if (!preset.empty()) {
    LOOM_ASSIGN_OR_RETURN(m, ModelPreset(preset));
  }
  LOOM_RETURN_IF_ERROR(Read(json, "name", &m.name, where));
  LOOM_RETURN_IF_ERROR(Read(json, "layers", &m.layers, where));
  LOOM_RETURN_IF_ERROR(Read(json, "d_model", &m.d_model, where));
  LOOM_RETURN_IF_ERROR(Read(json, "d_ff", &m.d_ff, where));
  LOOM_RETURN_IF_ERROR(Read(json, "heads", &m.heads, where));
  LOOM_RETURN_IF_ERROR(Read(json, "kv_heads", &m.kv_heads, where));
  LOOM_RETURN_IF_ERROR(Read(json, "head_dim", &m.head_dim, where));
  LOOM_RETURN_IF_ERROR(Read(json, "vocab", &m.vocab, where));
  LOOM_RETURN_IF_ERROR(Read(json, "seq", &m.seq, where));
  LOOM_RETURN_IF_ERROR(Read(json, "batch", &m.batch, where));
  LOOM_RETURN_IF_ERROR(Read(json, "mlp", &m.mlp, where));
  LOOM_RETURN_IF_ERROR(Read(json, "norm", &m.norm, where));
  LOOM_RETURN_IF_ERROR(Read(json, "causal", &m.causal, where));
  LOOM_RETURN_IF_ERROR(Read(json, "attention", &m.attention, where));
  LOOM_RETURN_IF_ERROR(Read(json, "encoder_layers", &m.encoder_layers, where));
  LOOM_RETURN_IF_ERROR(Read(json, "experts", &m.experts, where));
  LOOM_RETURN_IF_ERROR(Read(json, "top_k", &m.top_k, where));
  LOOM_RETURN_IF_ERROR(Read(json, "capacity_factor", &m.capacity_factor, where));
  LOOM_RETURN_IF_ERROR(Read(json, "moe_every", &m.moe_every, where));
  LOOM_RETURN_IF_ERROR(Read(json, "expert_group", &m.expert_group, where));
  LOOM_RETURN_IF_ERROR(Read(json, "aux_loss_weight", &m.aux_loss_weight, where));
  LOOM_RETURN_IF_ERROR(Read(json, "embedding", &m.embedding, where));
  LOOM_RETURN_IF_ERROR(Read(json, "compute_type", &m.compute_type, where));
  LOOM_RETURN_IF_ERROR(Read(json, "param_type", &m.param_type, where));
  LOOM_RETURN_IF_ERROR(Read(json, "activation_type", &m.activation_type, where));
  LOOM_RETURN_IF_ERROR(Read(json, "source", &m.source, where));
  if (const Status valid = ValidateModel(m); !valid.ok()) {
    return Error{fmt::format("{}: {}", where, valid.error().message)};
  }
  return m;
}

Expected<ParallelPlan> ParsePlan(const std::string& text, std::string_view where) {
  LOOM_ASSIGN_OR_RETURN(
      const nlohmann::json json,
      ParseObject(
          text, where,
          {"name", "tensor", "data", "pipeline", "context", "context_form", "virtual_stages",
           "schedule", "head", "micro_batches", "sequence_parallel", "residual_split", "zero_stage",
           "recompute", "optimizer", "learning_rate", "beta1", "beta2", "epsilon"}));
  ParallelPlan p;
  LOOM_RETURN_IF_ERROR(Read(json, "name", &p.name, where));
  LOOM_RETURN_IF_ERROR(Read(json, "tensor", &p.tensor, where));
  LOOM_RETURN_IF_ERROR(Read(json, "data", &p.data, where));
  LOOM_RETURN_IF_ERROR(Read(json, "pipeline", &p.pipeline, where));
  LOOM_RETURN_IF_ERROR(Read(json, "context", &p.context, where));
  LOOM_RETURN_IF_ERROR(Read(json, "context_form", &p.context_form, where));
  LOOM_RETURN_IF_ERROR(Read(json, "virtual_stages", &p.virtual_stages, where));
  LOOM_RETURN_IF_ERROR(Read(json, "schedule", &p.schedule, where));
  LOOM_RETURN_IF_ERROR(Read(json, "head", &p.head, where));
  LOOM_RETURN_IF_ERROR(Read(json, "micro_batches", &p.micro_batches, where));
  LOOM_RETURN_IF_ERROR(Read(json, "sequence_parallel", &p.sequence_parallel, where));
  LOOM_RETURN_IF_ERROR(Read(json, "residual_split", &p.residual_split, where));
  LOOM_RETURN_IF_ERROR(Read(json, "zero_stage", &p.zero_stage, where));
  LOOM_RETURN_IF_ERROR(Read(json, "recompute", &p.recompute, where));
  LOOM_RETURN_IF_ERROR(Read(json, "optimizer", &p.optimizer, where));
  LOOM_RETURN_IF_ERROR(Read(json, "learning_rate", &p.learning_rate, where));
  LOOM_RETURN_IF_ERROR(Read(json, "beta1", &p.beta1, where));
  LOOM_RETURN_IF_ERROR(Read(json, "beta2", &p.beta2, where));
  LOOM_RETURN_IF_ERROR(Read(json, "epsilon", &p.epsilon, where));
  if (const Status valid = ValidateParallelPlan(p); !valid.ok()) {
    return Error{fmt::format("{}: {}", where, valid.error().message)};
  }
  return p;
}

std::string ModelConfigJson(const ModelConfig& m) {
  return nlohmann::ordered_json{{"name", m.name},
                                {"layers", m.layers},
                                {"d_model", m.d_model},
                                {"d_ff", m.d_ff},
                                {"heads", m.heads},
                                {"kv_heads", m.kv_heads},
                                {"head_dim", m.head_dim},
                                {"vocab", m.vocab},
                                {"seq", m.seq},
                                {"batch", m.batch},
                                {"mlp", m.mlp},
                                {"norm", m.norm},
                                {"causal", m.causal},
                                {"attention", m.attention},
                                {"encoder_layers", m.encoder_layers},
                                {"experts", m.experts},
                                {"top_k", m.top_k},
                                {"capacity_factor", m.capacity_factor},
                                {"moe_every", m.moe_every},
                                {"expert_group", m.expert_group},
                                {"aux_loss_weight", m.aux_loss_weight},
                                {"embedding", m.embedding},
                                {"compute_type", m.compute_type},
                                {"param_type", m.param_type},
                                {"activation_type", ActivationType(m)},
                                {"source", m.source}}
             .dump(2) +
         "\n";
}

ModelConfig WithLayers(ModelConfig model, int64_t layers) {
  model.layers = layers;
  if (model.encoder_layers > 0) model.encoder_layers = layers;
  return model;
}

}  // namespace loom::model
