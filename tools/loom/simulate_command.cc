// `loom simulate MODULE --target T [--trace FILE] [--json FILE]` and
// `loom simulate --compare A B --target T`: the discrete-event simulator.
#include <fmt/format.h>

#include "cost/target.h"
#include "loom/command.h"
#include "sim/simulator.h"
#include "support/units.h"

namespace loom::cli {

namespace {

struct SimulateFlags {
  std::vector<std::string> modules;
  std::string target;
  std::string trace;
  std::string json;
  bool compare = false;
  std::vector<std::string> compute_scale;
  std::vector<std::string> link_scale;
};

sim::SimReport SimulateOne(const std::string& path, const cost::Target& target,
                           const sim::SimOptions& options) {
  std::unique_ptr<ir::Module> module = LoadVerifiedModule(path, nullptr);
  Expected<sim::SimReport> report = sim::Simulate(*module, target, options);
  if (!report.ok()) throw CommandError(fmt::format("{}: error: {}", path, report.error().message));
  report->module = path;
  return std::move(*report);
}

double Mean(const sim::SimReport& report, double sim::DeviceReport::*field) {
  double sum = 0;
  for (const auto& device : report.devices) sum += device.*field;
  return report.devices.empty() ? 0 : sum / static_cast<double>(report.devices.size());
}

void PrintComparison(const sim::SimReport& a, const sim::SimReport& b) {
  fmt::print("simulated on {}: {} vs {}\n", a.target, a.module, b.module);
  fmt::print("{:<34} {:>14} {:>14}\n", "", "A", "B");
  const auto row = [](std::string_view name, const std::string& x, const std::string& y) {
    fmt::print("{:<34} {:>14} {:>14}\n", name, x, y);
  };
  row("step time", FormatSeconds(a.step_seconds), FormatSeconds(b.step_seconds));
  row("cost model's estimate", FormatSeconds(a.cost_model_step_seconds),
      FormatSeconds(b.cost_model_step_seconds));
  row("compute per device (mean)", FormatSeconds(Mean(a, &sim::DeviceReport::compute)),
      FormatSeconds(Mean(b, &sim::DeviceReport::compute)));
  row("exposed communication (mean)",
      FormatSeconds(Mean(a, &sim::DeviceReport::exposed_communication)),
      FormatSeconds(Mean(b, &sim::DeviceReport::exposed_communication)));
  row("idle (mean)", FormatSeconds(Mean(a, &sim::DeviceReport::idle)),
      FormatSeconds(Mean(b, &sim::DeviceReport::idle)));
  row("MFU", fmt::format("{:.1f}%", 100 * a.mfu), fmt::format("{:.1f}%", 100 * b.mfu));
  row("events", fmt::format("{}", a.events), fmt::format("{}", b.events));
  fmt::print("speedup of B over A: {:.3f}x\n", a.step_seconds / b.step_seconds);
}

}  // namespace

void AddSimulateCommand(CLI::App& app) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* command = app.add_subcommand(
      "simulate",
      "Replay every device's program on a target as discrete events: compute per device, "
      "transfers as flows sharing links max-min fairly");
  command->add_option("MODULE", flags->modules, "HLO module (two with --compare)")->required();
  command->add_option("--target", flags->target, "A name from `loom targets`, or a .json file")
      ->required();
  command->add_flag("--compare", flags->compare,
                    "Simulate two modules and print them side by side");
  command->add_option("--trace", flags->trace,
                      "Write a Chrome trace-event JSON (open in Perfetto); with --compare, of B");
  command->add_option("--json", flags->json, "Write the report as JSON");
  command->add_option("--compute-scale", flags->compute_scale,
                      "DEVICE=FACTOR: that device computes FACTOR times slower (a straggler)");
  command->add_option("--link-scale", flags->link_scale,
                      "A-B=FACTOR (both ways) or A>B=FACTOR: the link between devices A and B "
                      "carries FACTOR of its bandwidth");
  command->callback([flags] {
    if (flags->modules.size() != (flags->compare ? 2u : 1u)) {
      throw CommandError(flags->compare ? "simulate --compare needs two modules"
                                        : "simulate takes one module (two with --compare)");
    }
    Expected<cost::Target> target = cost::FindTarget(flags->target);
    if (!target.ok()) throw CommandError("--target: " + target.error().message);
    sim::SimOptions options;
    options.trace = !flags->trace.empty();
    for (const std::string& spec : flags->compute_scale) {
      if (Status status = sim::ParseComputeScale(spec, &options); !status.ok()) {
        throw CommandError("--compute-scale: " + status.error().message);
      }
    }
    for (const std::string& spec : flags->link_scale) {
      if (Status status = sim::ParseLinkScale(spec, &options); !status.ok()) {
        throw CommandError("--link-scale: " + status.error().message);
      }
    }
    std::vector<sim::SimReport> reports;
    for (const std::string& path : flags->modules) {
      reports.push_back(SimulateOne(path, *target, options));
    }
    if (flags->compare) {
      PrintComparison(reports[0], reports[1]);
    } else {
      fmt::print("{}", sim::ReportTable(reports[0]));
    }
    if (!flags->trace.empty()) WriteOutput(flags->trace, reports.back().trace_json);
    if (!flags->json.empty()) {
      std::string json = sim::ReportJson(reports.back());
      if (flags->compare) {
        json = fmt::format("{{\"a\": {}, \"b\": {}, \"speedup\": {}}}", sim::ReportJson(reports[0]),
                           json, reports[0].step_seconds / reports[1].step_seconds);
      }
      WriteOutput(flags->json, json + "\n");
    }
  });
}

}  // namespace loom::cli
