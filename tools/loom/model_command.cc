// `loom model --model PRESET|FILE.json [--tensor T] [--data D] [--pipeline P]
// [--micro-batches M] [--virtual-stages V] [--schedule gpipe|1f1b]
// [--head spread|last-stage] [--context-parallel C
// [--context-form ring|all-gather]]
// [--sequence-parallel [--residual-split tokens|d_model]]
// [--zero 0|1|2|3] [--step train|prefill|decode] [--context C] [--layers N]
// [--optimizer adam|sgd|none] [--plan FILE.json] [-o OUT]`: write the
// per-device HLO of one training or serving step (model/training_step.h).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "analysis/live_bytes.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "loom/command.h"
#include "model/training_step.h"
#include "support/units.h"

namespace loom::cli {
namespace {

template <typename T>
T OrFail(Expected<T> value) {
  if (!value.ok()) throw CommandError(value.error().ToString());
  return std::move(value).value();
}

}  // namespace

namespace {

// The --memory report of `module`: the footprint by category, the
// program's peak live bytes, and against `target`'s device memory when one
// is named: there the peak is the one with what the target's compiler fuses
// kept on chip (analysis/live_bytes.h), after the peak with nothing fused;
// a step that does not fit says where its peak is and what is live there.
std::string MemoryReport(const ir::Module& module, const model::MemoryFootprint& f,
                         const std::string& target) {
  int64_t peak = analysis::PeakLiveBytes(module);
  std::string text = fmt::format("memory of one device, {}:\n", module.name());
  const auto line = [&](std::string_view what, int64_t bytes) {
    text += fmt::format("  {:<40} {:>12}\n", what, FormatBytes(bytes));
  };
  line("weights", f.weights);
  line("gradients", f.gradients);
  line("optimizer state", f.optimizer);
  line("activations kept (or KV caches)", f.activations);
  line("together", f.total());
  line("peak live bytes of the program", peak);
  if (!target.empty()) {
    const cost::Target device = ResolveTarget(target, module);
    const bool fused = device.compute().fuses_elementwise;
    if (fused) {
      peak = analysis::PeakLiveBytes(module, analysis::Fusion::kFused);
      line(fmt::format("peak live bytes, fused as on {}", device.name()), peak);
    }
    const auto capacity = static_cast<int64_t>(device.compute().memory_bytes);
    const int64_t need = std::max(peak, f.total());
    text += need <= capacity
                ? fmt::format("  fits {} ({} per device; {:.0f}% used)\n", device.name(),
                              FormatBytes(capacity),
                              100.0 * static_cast<double>(need) / static_cast<double>(capacity))
                : fmt::format("  DOES NOT FIT {}: {} per device, {} more needed\n", device.name(),
                              FormatBytes(capacity), FormatBytes(need - capacity));
    if (need > capacity) {
      const analysis::PeakBreakdown breakdown = analysis::PeakLiveBreakdown(
          module, fused ? analysis::Fusion::kFused : analysis::Fusion::kNone);
      text += fmt::format("  its peak is at {}\n{}", PeakWhere(breakdown),
                          PeakBuffersText(breakdown, 5, "    "));
    }
  }
  return text;
}

}  // namespace

void AddModelCommand(CLI::App& app) {
  struct Options {
    std::string model;
    std::string plan;
    int64_t tensor = 0;
    int64_t data = 0;
    int64_t pipeline = 0;
    int64_t micro_batches = 0;
    int64_t context_parallel = 0;
    int64_t virtual_stages = 0;
    std::string schedule;
    std::string head;
    std::string context_form;
    bool sequence_parallel = false;
    std::string residual_split;
    int64_t zero_stage = -1;
    std::string step = "train";
    int64_t context = 0;
    bool memory = false;
    std::string target;
    int64_t layers = 0;
    int64_t batch = 0;
    int64_t seq = 0;
    std::string optimizer;
    std::string param_type;
    std::string compute_type;
    std::string embedding;
    std::string activation_type;
    std::string recompute;
    std::string output;
    bool list = false;
    bool show = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "model", "Write the per-device HLO of one training step of a transformer under a plan");
  command->add_option("--model", options->model,
                      "A preset (--list shows them) or a JSON file ({\"preset\": ..., "
                      "overrides})");
  command->add_option(
      "--plan", options->plan,
      "A JSON file: tensor, data, pipeline, virtual_stages, schedule, head, context, context_form, "
      "micro_batches, sequence_parallel, residual_split, "
      "zero_stage, recompute, optimizer, learning_rate, beta1, beta2, epsilon");
  command->add_option("--tensor", options->tensor, "Tensor-parallel ways (Megatron)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command->add_option("--data", options->data, "Data-parallel ways")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command
      ->add_option("--pipeline", options->pipeline,
                   "Pipeline stages (the layers split into stages, micro-batches handed "
                   "on by collective-permute)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command
      ->add_option("--micro-batches", options->micro_batches,
                   "Micro-batches of each data-parallel replica's batch (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command
      ->add_option("--virtual-stages", options->virtual_stages,
                   "Interleaved stages: each stage holds this many chunks of layers, and each "
                   "micro-batch passes around the stages that many times (JAX's circular "
                   "pipeline; needs --micro-batches >= --pipeline)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command
      ->add_option("--schedule", options->schedule,
                   "The pipeline's order of work: gpipe (every micro-batch forward, then "
                   "backward; the default) or 1f1b (each micro-batch's backward as soon as it "
                   "leaves the last stage: a stage keeps at most 2 P V - 1 chunks of "
                   "activations)")
      ->check(CLI::IsMember({"gpipe", "1f1b"}));
  command
      ->add_option("--head", options->head,
                   "Where the head and the loss run under pipeline stages: spread (each stage "
                   "on its share of the last stage's rows, as JAX runs what lies outside the "
                   "pipeline; the default) or last-stage (every stage on all of them in "
                   "lockstep, as Megatron's last stage paces a pipeline of even stages)")
      ->check(CLI::IsMember({"spread", "last-stage"}));
  command
      ->add_option("--context-parallel", options->context_parallel,
                   "Context-parallel ways: each sequence cut into this many chunks, one per "
                   "device, attention reading the others' keys and values; in serving, each device "
                   "holds its chunk of the KV caches")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command
      ->add_option("--context-form", options->context_form,
                   "ring (ring attention: k and v passed around the context axis, a running "
                   "softmax; the default) or all-gather (Llama 3's: k and v all-gathered)")
      ->check(CLI::IsMember({"ring", "all-gather"}));
  command->add_flag("--sequence-parallel", options->sequence_parallel,
                    "Megatron's sequence parallelism on the model axis: the residual stream split "
                    "by tokens, an all-gather before each column-parallel product and a "
                    "reduce-scatter after each row-parallel one (training steps)");
  command
      ->add_option("--residual-split", options->residual_split,
                   "How --sequence-parallel splits the residual stream over the model axis: "
                   "tokens (Megatron's; the default) or d_model (GSPMD's 2D sharding: the "
                   "all-gathers gather, and the reduce-scatters scatter, d_model; each norm's "
                   "row statistics all-reduced over the model axis)")
      ->check(CLI::IsMember({"tokens", "d_model"}));
  command
      ->add_option("--zero", options->zero_stage,
                   "ZeRO stage: 0; 1 (the distributed optimizer: gradients reduce-scattered, the "
                   "optimizer state and update per shard, the weights all-gathered); 2 (the "
                   "layers' gradients reduce-scattered as the backward makes them); 3 (the "
                   "layers' weights sharded too, gathered per layer where used: FSDP)")
      ->check(CLI::Range(int64_t{0}, int64_t{3}));
  command
      ->add_option("--step", options->step,
                   "train (forward, backward, optimizer), prefill (the prompt's forward and its KV "
                   "caches; an encoder-decoder's encoder over the tokens and decoder over the "
                   "prompt, with the memory's k and v) or decode (one token against caches of "
                   "--context positions)")
      ->check(CLI::IsMember({"train", "prefill", "decode"}));
  command
      ->add_option("--context", options->context,
                   "decode: the positions already in the KV caches (the new token's position)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  command->add_flag("--memory", options->memory,
                    "Print what one device holds (weights, gradients, optimizer state, "
                    "activations or KV caches, and the program's peak live bytes) instead of the "
                    "module; with --target, whether it fits the device's memory");
  command->add_option(
      "--target", options->target,
      fmt::format("With --memory: the device whose memory to check against: {}", kTargetSpellings));
  command
      ->add_option("--layers", options->layers,
                   "Override the number of layers (and an encoder-decoder's encoder's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command->add_option("--batch", options->batch, "Override the global batch (sequences)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  command->add_option("--seq", options->seq, "Override the sequence length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  command
      ->add_option("--optimizer", options->optimizer,
                   "adam, adafactor, sgd, or none (outputs gradients)")
      ->check(CLI::IsMember({"adam", "adafactor", "sgd", "none"}));
  command->add_option("--param-type", options->param_type, "f32 or f64 (master weights)")
      ->check(CLI::IsMember({"f32", "f64"}));
  command->add_option("--compute-type", options->compute_type, "bf16, f32 or f64 (dot operands)")
      ->check(CLI::IsMember({"bf16", "f32", "f64"}));
  command
      ->add_option("--embedding", options->embedding,
                   "gather (each token's row; its gradient a scatter-add, as Megatron's) or "
                   "one-hot (products with one-hot rows, as praxis's SPMD models on TPUs)")
      ->check(CLI::IsMember({"gather", "one-hot"}));
  command
      ->add_option("--activation-type", options->activation_type,
                   "bf16, f32 or f64: what activations are held and sent in (the residual "
                   "stream, the model axis's sums and gathers, what stages hand on, KV caches; "
                   "default: the compute type)")
      ->check(CLI::IsMember({"bf16", "f32", "f64"}));
  command
      ->add_option("--recompute", options->recompute,
                   "Activation recomputation: full (each layer's input kept, the layer "
                   "recomputed in backward; the default), selective (the attention core "
                   "recomputed from what the forward kept) or none")
      ->check(CLI::IsMember({"full", "selective", "none"}));
  command->add_option("-o,--output", options->output, "Write here instead of stdout");
  command->add_flag("--list", options->list, "List the model presets");
  command->add_flag("--show", options->show, "Print the model config as JSON instead");
  command->callback([options] {
    if (options->list) {
      for (const std::string& name : model::ModelPresetNames()) {
        const model::ModelConfig m = OrFail(model::ModelPreset(name));
        fmt::print("{:<14} L={} d_model={} d_ff={} heads={}/{} vocab={}  {}\n", name, m.layers,
                   m.d_model, m.d_ff, m.heads, m.kv_heads, m.vocab, m.source);
      }
      return;
    }
    if (options->model.empty()) throw CommandError("model: --model is required");
    model::ModelConfig m =
        options->model.ends_with(".json")
            ? OrFail(model::ParseModelConfig(ReadFile(options->model), options->model))
            : OrFail(model::ModelPreset(options->model));
    model::ParallelPlan plan;
    if (!options->plan.empty())
      plan = OrFail(model::ParsePlan(ReadFile(options->plan), options->plan));
    if (options->tensor > 0) plan.tensor = options->tensor;
    if (options->data > 0) plan.data = options->data;
    if (options->pipeline > 0) plan.pipeline = options->pipeline;
    if (options->micro_batches > 0) plan.micro_batches = options->micro_batches;
    if (options->context_parallel > 0) plan.context = options->context_parallel;
    if (options->virtual_stages > 0) plan.virtual_stages = options->virtual_stages;
    if (!options->schedule.empty()) plan.schedule = options->schedule;
    if (!options->head.empty()) plan.head = options->head;
    if (!options->context_form.empty()) plan.context_form = options->context_form;
    if (options->sequence_parallel) plan.sequence_parallel = true;
    if (!options->residual_split.empty()) plan.residual_split = options->residual_split;
    if (options->zero_stage >= 0) plan.zero_stage = options->zero_stage;
    if (options->layers > 0) m = model::WithLayers(m, options->layers);
    if (options->batch > 0) m.batch = options->batch;
    if (options->seq > 0) m.seq = options->seq;
    if (!options->optimizer.empty()) plan.optimizer = options->optimizer;
    if (!options->recompute.empty()) plan.recompute = options->recompute;
    if (!options->param_type.empty()) m.param_type = options->param_type;
    if (!options->compute_type.empty()) m.compute_type = options->compute_type;
    if (!options->activation_type.empty()) m.activation_type = options->activation_type;
    if (!options->embedding.empty()) m.embedding = options->embedding;
    if (options->plan.empty()) plan.name = model::PlanName(plan);
    if (options->show) {
      WriteOutput(options->output, model::ModelConfigJson(m));
      return;
    }
    const std::string text =
        options->step == "train"
            ? OrFail(model::BuildTrainingStep(m, plan))
            : OrFail(model::BuildInferenceStep(
                  m, plan, model::InferenceStep{options->step, options->context}));
    // What is written is what Loom reads back: parsed and verified first.
    Expected<std::unique_ptr<ir::Module>> module = ir::ParseModule(text);
    if (!module.ok()) {
      throw CommandError("internal: the generated step does not parse: " +
                         module.error().ToString("<model>"));
    }
    if (Expected<ir::VerifyReport> report = ir::VerifyModule(**module); !report.ok()) {
      throw CommandError("internal: the generated step does not verify: " +
                         report.error().ToString("<model>"));
    }
    if (options->memory) {
      const model::InferenceStep serving{options->step, options->context};
      const bool train = options->step == "train";
      std::string report = MemoryReport(
          **module, model::Footprint(m, plan, train ? nullptr : &serving), options->target);
      // What MFU divides by the step time (the work, not the memory, but
      // the number a reader of a plan's fit asks for next).
      if (train) {
        report += fmt::format("model FLOPs of the step (PaLM's count): {:.4g}\n",
                              model::ModelFlopsPerStep(m));
      }
      WriteOutput(options->output, report);
      return;
    }
    if (!options->target.empty()) throw CommandError("model: --target goes with --memory");
    WriteOutput(options->output, ir::PrintModule(**module));
  });
}

}  // namespace loom::cli
