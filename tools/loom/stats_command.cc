// `loom stats MODULE`: op counts, bytes moved per collective kind, dot FLOPs.
#include <fmt/format.h>

#include "analysis/module_stats.h"
#include "loom/command.h"

namespace loom::cli {
namespace {

std::string HumanBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

void PrintStats(const std::string& path, const ir::Module& module,
                const analysis::ModuleStats& stats) {
  fmt::print("module {} ({})\n", module.name(), path);
  fmt::print("  devices: {}   computations: {}   instructions: {}   entry parameters: {}\n",
             stats.devices, stats.computation_count, stats.instruction_count,
             HumanBytes(stats.entry_parameter_bytes));
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
               HumanBytes(collective.result_bytes), HumanBytes(collective.ring_bytes_per_device));
  }
  fmt::print("\ndots: {}   dot FLOPs per device: {} ({:.3f} GFLOP)\n", stats.dot_count,
             stats.dot_flops, static_cast<double>(stats.dot_flops) / 1e9);
}

}  // namespace

void AddStatsCommand(CLI::App& app) {
  auto input = std::make_shared<std::string>();
  CLI::App* command = app.add_subcommand(
      "stats", "Print op counts, bytes moved per collective kind and dot FLOPs of a module");
  command->add_option("MODULE", *input, "HLO text file")->required();
  command->callback([input] {
    ir::VerifyReport report;
    std::unique_ptr<ir::Module> module = LoadVerifiedModule(*input, &report);
    PrintStats(*input, *module, analysis::ComputeStats(*module, report));
  });
}

}  // namespace loom::cli
