// `loom stats MODULE`: op counts, bytes moved per collective kind, dot and
// convolution FLOPs, and the same per device over one run (loops times their
// trip counts) with the peak of live bytes.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "analysis/live_bytes.h"
#include "analysis/module_stats.h"
#include "cost/kernel_times.h"
#include "cost/target_cost_model.h"
#include "loom/command.h"
#include "support/saturating.h"
#include "support/units.h"

namespace loom::cli {
namespace {

// "3.00 MiB (all-gather 3.00 MiB, reduce-scatter 3.00 MiB)".
std::string BytesSentByKind(const analysis::DynamicStats& dynamic) {
  std::string text = FormatBytes(dynamic.bytes_sent_per_device);
  std::string by_kind;
  for (const auto& [kind, collective] : dynamic.collectives) {
    by_kind += fmt::format("{}{} {}", by_kind.empty() ? "" : ", ", kind,
                           FormatBytes(collective.ring_bytes_per_device));
  }
  return by_kind.empty() ? text : fmt::format("{} ({})", text, by_kind);
}

// The module's peak live bytes, and with a target whose compiler fuses, the
// peak with what it fuses kept on chip (analysis/live_bytes.h).
struct Peaks {
  int64_t unfused = 0;
  std::optional<int64_t> fused;
  std::string target;  // the fused peak's
};

void PrintDynamicStats(const analysis::DynamicStats& dynamic, const Peaks& peaks) {
  fmt::print("\nper device, dynamic (loop bodies times their trip counts)\n");
  fmt::print("  bytes sent:        {}\n", BytesSentByKind(dynamic));
  fmt::print("  dot FLOPs:         {:.3f} GFLOP ({} dots run)\n",
             static_cast<double>(dynamic.dot_flops) / 1e9, dynamic.dot_count);
  if (dynamic.convolution_count > 0) {
    fmt::print("  convolution FLOPs: {:.3f} GFLOP ({} convolutions run)\n",
               static_cast<double>(dynamic.convolution_flops) / 1e9, dynamic.convolution_count);
  }
  fmt::print("  peak live bytes:   {} (text order, buffers freed after their last use)\n",
             FormatBytes(peaks.unfused));
  if (peaks.fused) {
    fmt::print("  peak live bytes:   {} fused as on {}\n", FormatBytes(*peaks.fused), peaks.target);
  }
  if (dynamic.unknown_trip_count_loops > 0) {
    fmt::print("  note: {} while loop(s) with an unknown trip count counted once per run\n",
               dynamic.unknown_trip_count_loops);
  }
}

nlohmann::json CollectivesJson(const std::map<std::string, analysis::CollectiveStats>& kinds) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [kind, collective] : kinds) {
    json[kind] = {{"count", collective.count},
                  {"result_bytes", collective.result_bytes},
                  {"ring_bytes_per_device", collective.ring_bytes_per_device}};
  }
  return json;
}

nlohmann::json StatsJson(const ir::Module& module, const analysis::ModuleStats& stats,
                         const Peaks& peaks) {
  const analysis::DynamicStats& dynamic = stats.dynamic;
  nlohmann::json json = {
      {"module", module.name()},
      {"devices", stats.devices},
      {"computations", stats.computation_count},
      {"instructions", stats.instruction_count},
      {"entry_parameter_bytes", stats.entry_parameter_bytes},
      {"opcodes", stats.opcode_counts},
      {"collectives", CollectivesJson(stats.collectives)},
      {"dots", stats.dot_count},
      {"dot_flops", stats.dot_flops},
      {"convolutions", stats.convolution_count},
      {"convolution_flops", stats.convolution_flops},
      {"dynamic",
       {{"collectives", CollectivesJson(dynamic.collectives)},
        {"bytes_sent_per_device", dynamic.bytes_sent_per_device},
        {"dots", dynamic.dot_count},
        {"dot_flops", dynamic.dot_flops},
        {"convolutions", dynamic.convolution_count},
        {"convolution_flops", dynamic.convolution_flops},
        {"unknown_trip_count_loops", dynamic.unknown_trip_count_loops},
        {"peak_live_bytes", peaks.unfused}}},
      {"saturated", stats.saturated},
  };
  if (peaks.fused) {
    json["dynamic"]["peak_live_bytes_fused"] = {{"bytes", *peaks.fused}, {"target", peaks.target}};
  }
  return json;
}

void PrintStats(const std::string& path, const ir::Module& module,
                const analysis::ModuleStats& stats, const Peaks& peaks) {
  fmt::print("module {} ({})\n", module.name(), path);
  fmt::print("  devices: {}   computations: {}   instructions: {}   entry parameters: {}\n",
             stats.devices, stats.computation_count, stats.instruction_count,
             FormatBytes(stats.entry_parameter_bytes));
  fmt::print("\nops (static counts: each instruction once, loop bodies not multiplied)\n");
  for (const auto& [opcode, count] : stats.opcode_counts) {
    fmt::print("  {:<28} {:>8}\n", opcode, count);
  }
  fmt::print("\ncollectives (per device)\n");
  fmt::print("  {:<22} {:>6} {:>16} {:>22}\n", "kind", "count", "result bytes",
             "ring bytes sent/device");
  if (stats.collectives.empty()) fmt::print("  (none)\n");
  for (const auto& [kind, collective] : stats.collectives) {
    fmt::print("  {:<22} {:>6} {:>16} {:>22}\n", kind, collective.count,
               FormatBytes(collective.result_bytes), FormatBytes(collective.ring_bytes_per_device));
  }
  fmt::print("\ndots: {}   dot FLOPs per device: {} ({:.3f} GFLOP)\n", stats.dot_count,
             stats.dot_flops, static_cast<double>(stats.dot_flops) / 1e9);
  if (stats.convolution_count > 0) {
    fmt::print("convolutions: {}   convolution FLOPs per device: {} ({:.3f} GFLOP)\n",
               stats.convolution_count, stats.convolution_flops,
               static_cast<double>(stats.convolution_flops) / 1e9);
  }
  PrintDynamicStats(stats.dynamic, peaks);
  if (stats.saturated) {
    fmt::print(
        "  note: some numbers exceed the 64-bit range; each of those is shown as its largest "
        "value, {}: read it as 'at least'\n",
        kSaturated);
  }
}

nlohmann::json PeakBuffersJson(const analysis::PeakBreakdown& peak, size_t count) {
  nlohmann::json where = nlohmann::json::array();
  for (const ir::Instruction* instruction : peak.where) {
    where.push_back(
        {{"instruction", instruction->name()}, {"computation", instruction->parent()->name()}});
  }
  nlohmann::json buffers = nlohmann::json::array();
  for (size_t i = 0; i < std::min(count, peak.live.size()); ++i) {
    const analysis::LiveBuffer& buffer = peak.live[i];
    buffers.push_back({{"instruction", buffer.defined_by->name()},
                       {"computation", buffer.defined_by->parent()->name()},
                       {"element", buffer.element},
                       {"bytes", buffer.bytes}});
  }
  return {{"bytes", peak.peak_bytes},
          {"where", where},
          {"buffers_live", peak.live.size()},
          {"largest", buffers}};
}

// The kernels that take the longest on one device of `target` over one run.
void PrintKernels(const ir::Module& module, const cost::Target& target, size_t count) {
  const cost::TargetCostModel model(target);
  const cost::KernelTimes top = cost::TopKernels(module, model, count);
  fmt::print(
      "\nkernels on {} (one device, one run, loops times their trip counts: the cost model's "
      "compute, no transfer; {} kernel runs, {} in all)\n",
      target.name(), top.kernel_runs, FormatSeconds(top.total_seconds));
  fmt::print("  {:>6} {:>12} {:>10} {:>12}  {}\n", "share", "total", "runs", "each", "kernel");
  for (const cost::KernelTime& kernel : top.kernels) {
    const ir::Instruction& root = *kernel.root;
    const std::string fused =
        kernel.fused > 0 ? fmt::format(", {} op(s) fused into it", kernel.fused) : "";
    fmt::print("  {:>5.1f}% {:>12} {:>10} {:>12}  %{} in %{}: {} {}{}\n",
               top.total_seconds > 0 ? 100 * kernel.Total() / top.total_seconds : 0,
               FormatSeconds(kernel.Total()), kernel.runs, FormatSeconds(kernel.seconds_per_run),
               root.name(), root.parent()->name(), root.shape().ToString(),
               ir::OpcodeName(root.opcode()), fused);
  }
}

}  // namespace

void AddStatsCommand(CLI::App& app) {
  auto input = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand(
      "stats",
      "Print op counts, bytes moved per collective kind and dot and convolution FLOPs of a module, "
      "statically "
      "and over one run (loop bodies times their trip counts), and its peak live bytes");
  command->add_option("MODULE", *input, "HLO text file")->required();
  auto json = std::make_shared<std::string>();
  command->add_option("--json", *json,
                      "Also write the numbers as JSON to this file ('-': to stdout, instead of "
                      "the text); a sum that saturated is 9223372036854775807, with "
                      "\"saturated\": true");
  auto target = std::make_shared<std::string>();
  command->add_option(
      "--target", *target,
      std::string("Also give the peak live bytes with what this target's compiler fuses kept on "
                  "chip; with --kernels, price the kernels on it: ") +
          kTargetSpellings);
  auto kernels = std::make_shared<size_t>(0);
  command->add_option("--kernels", *kernels,
                      "Also list the N kernels that take the most compute over one run on one "
                      "device of --target (with what its compiler fuses into each)");
  auto peak_buffers = std::make_shared<size_t>(0);
  command->add_option("--peak-buffers", *peak_buffers,
                      "Also say where the peak live bytes are reached and list the N largest "
                      "buffers live there (with --target, of the fused peak)");
  command->callback([input, json, target, kernels, peak_buffers] {
    if (*kernels > 0 && target->empty()) throw CommandError("--kernels needs --target");
    ir::VerifyReport report;
    std::unique_ptr<ir::Module> module = LoadVerifiedModule(*input, &report);
    const analysis::ModuleStats stats = analysis::ComputeStats(*module, report);
    Peaks peaks{analysis::PeakLiveBytes(*module), std::nullopt, ""};
    std::optional<cost::Target> device;
    if (!target->empty()) device = ResolveTarget(*target, *module);
    if (device && device->compute().fuses_elementwise) {
      peaks.fused = analysis::PeakLiveBytes(*module, analysis::Fusion::kFused);
      peaks.target = device->name();
    }
    if (*json != "-") PrintStats(*input, *module, stats, peaks);
    std::optional<analysis::PeakBreakdown> peak;
    if (*peak_buffers > 0) {
      peak = analysis::PeakLiveBreakdown(
          *module, peaks.fused ? analysis::Fusion::kFused : analysis::Fusion::kNone);
    }
    if (*json != "-" && peak) {
      fmt::print("\npeak live bytes{}{}: {}, at {}\n{}", peaks.fused ? " fused as on " : "",
                 peaks.target, FormatBytes(peak->peak_bytes), PeakWhere(*peak),
                 PeakBuffersText(*peak, *peak_buffers));
    }
    if (*json != "-" && *kernels > 0) PrintKernels(*module, *device, *kernels);
    if (!json->empty()) {
      nlohmann::json report = StatsJson(*module, stats, peaks);
      if (peak) report["dynamic"]["peak_buffers"] = PeakBuffersJson(*peak, *peak_buffers);
      WriteOutput(*json, report.dump(2) + "\n");
    }
  });
}

}  // namespace loom::cli
