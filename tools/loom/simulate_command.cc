// `loom simulate MODULE --target T [--trace FILE] [--json FILE]`,
// `loom simulate --compare A B --target T` and `loom simulate --baseline
// MODULE --target T` (as written, async+schedule, full pipeline): the
// discrete-event simulator.
#include <fmt/format.h>

#include <limits>
#include <set>

#include "cost/step_time.h"
#include "cost/target.h"
#include "cost/target_cost_model.h"
#include "ir/async.h"
#include "ir/clone.h"
#include "loom/command.h"
#include "pass/registry.h"
#include "sim/simulator.h"
#include "study/pipelines.h"
#include "support/units.h"

namespace loom::cli {

namespace {

struct SimulateFlags {
  std::vector<std::string> modules;
  std::string target;
  std::string trace;
  std::string json;
  bool compare = false;
  bool baseline = false;
  std::string full_pipeline = std::string(study::kFullPipelinePasses);
  bool deterministic = false;
  bool every_device = false;
  std::vector<std::string> compute_scale;
  std::vector<std::string> link_scale;
  int64_t max_messages = sim::SimOptions{}.max_messages;
  int64_t max_steps = sim::SimOptions{}.max_steps;
  int64_t trace_devices = sim::SimOptions{}.trace_devices;
};

// A check of one --compute-scale or --link-scale value, so that a malformed
// one is an option error (exit 2) like any other.
CLI::Validator ParsesWith(Status (*parse)(std::string_view, sim::SimOptions*)) {
  return CLI::Validator(
      [parse](const std::string& text) {
        sim::SimOptions scratch;
        const Status status = parse(text, &scratch);
        return status.ok() ? std::string() : status.error().message;
      },
      "SPEC");
}

sim::SimReport SimulateOne(const ir::Module& module, const std::string& label,
                           const cost::Target& target, const sim::SimOptions& options) {
  Expected<sim::SimReport> report = sim::Simulate(module, target, options);
  if (!report.ok()) throw CommandError(fmt::format("{}: error: {}", label, report.error().message));
  report->module = label;
  return std::move(*report);
}

// What a program is, in a few words: whether it was scheduled, and how many
// of its collectives are asynchronous pairs.
std::string Describe(const ir::Module& module) {
  // The collective an async-start wraps is its computation's root: counted
  // once, as the asynchronous pair, not again as a synchronous collective.
  std::set<const ir::Computation*> wrapped;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      if (instruction->opcode() == ir::Opcode::kAsyncStart) {
        if (const ir::Computation* callee = ir::AsyncCallee(*instruction)) wrapped.insert(callee);
      }
    }
  }
  int64_t synchronous = 0, asynchronous = 0;
  for (const auto& computation : module.computations()) {
    if (wrapped.count(computation.get()) > 0) continue;
    for (const auto& instruction : computation->instructions()) {
      switch (cost::TransferRoleOf(*instruction)) {
        case cost::TransferRole::kSynchronous:
          ++synchronous;
          break;
        case cost::TransferRole::kStart:
          ++asynchronous;
          break;
        default:
          break;
      }
    }
  }
  return fmt::format("{}, {} synchronous collective(s), {} asynchronous pair(s)",
                     module.is_scheduled() ? "scheduled" : "as written (not scheduled)",
                     synchronous, asynchronous);
}

void PrintBaseline(const std::vector<sim::SimReport>& reports) {
  fmt::print("simulated on {}: {}\n", reports[0].target, reports[0].module);
  fmt::print("{:<30} {:>16} {:>20} {:>16}\n", "", "as written", "async+schedule", "full pipeline");
  const auto row = [&](std::string_view name, auto value) {
    fmt::print("{:<30} {:>16} {:>20} {:>16}\n", name, value(reports[0]), value(reports[1]),
               value(reports[2]));
  };
  row("step time", [](const sim::SimReport& r) { return FormatSeconds(r.step_seconds); });
  row("cost model's estimate",
      [](const sim::SimReport& r) { return FormatSeconds(r.cost_model_step_seconds); });
  row("exposed communication (mean)", [](const sim::SimReport& r) {
    return FormatSeconds(sim::MeanOverDevices(r, &sim::DeviceReport::exposed_communication));
  });
  row("MFU", [](const sim::SimReport& r) { return fmt::format("{:.1f}%", 100 * r.mfu); });
  fmt::print("full pipeline over async+schedule: {:.3f}x; over as written: {:.3f}x\n",
             reports[1].step_seconds / reports[2].step_seconds,
             reports[0].step_seconds / reports[2].step_seconds);
}

void PrintComparison(const sim::SimReport& a, const sim::SimReport& b, const std::string& a_is,
                     const std::string& b_is) {
  fmt::print("simulated on {}:\n  A = {} ({})\n  B = {} ({})\n", a.target, a.module, a_is, b.module,
             b_is);
  fmt::print("{:<34} {:>14} {:>14}\n", "", "A", "B");
  const auto row = [](std::string_view name, const std::string& x, const std::string& y) {
    fmt::print("{:<34} {:>14} {:>14}\n", name, x, y);
  };
  row("step time", FormatSeconds(a.step_seconds), FormatSeconds(b.step_seconds));
  row("cost model's estimate", FormatSeconds(a.cost_model_step_seconds),
      FormatSeconds(b.cost_model_step_seconds));
  row("compute per device (mean)",
      FormatSeconds(sim::MeanOverDevices(a, &sim::DeviceReport::compute)),
      FormatSeconds(sim::MeanOverDevices(b, &sim::DeviceReport::compute)));
  row("exposed communication (mean)",
      FormatSeconds(sim::MeanOverDevices(a, &sim::DeviceReport::exposed_communication)),
      FormatSeconds(sim::MeanOverDevices(b, &sim::DeviceReport::exposed_communication)));
  row("idle (mean)", FormatSeconds(sim::MeanOverDevices(a, &sim::DeviceReport::idle)),
      FormatSeconds(sim::MeanOverDevices(b, &sim::DeviceReport::idle)));
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
  command
      ->add_option("--target", flags->target,
                   fmt::format("Simulate on this target: {}", kTargetSpellings))
      ->required();
  command->add_flag("--compare", flags->compare,
                    "Simulate two modules and print them side by side, each as given (say which "
                    "is scheduled and asynchronous: the honest baseline of a rewrite is the "
                    "program with async-collectives and schedule, see --baseline)");
  command->add_flag("--baseline", flags->baseline,
                    "Simulate the module three ways: as written, with async-collectives,schedule, "
                    "and with collective-matmul,async-collectives,schedule, all for --target");
  command
      ->add_option("--full-pipeline", flags->full_pipeline,
                   "With --baseline: the full pipeline's passes, a variant of the default "
                   "(e.g. collective-matmul{judge=simulate},async-collectives,schedule)")
      ->capture_default_str();
  command->add_flag("--deterministic", flags->deterministic,
                    "With --baseline: the pipeline keeps every sum in the original's order "
                    "(as loom opt --deterministic)");
  command->add_option("--trace", flags->trace,
                      "Write a Chrome trace-event JSON (open in Perfetto); with --compare, of B");
  command
      ->add_option("--trace-devices", flags->trace_devices,
                   "With --trace: the devices it shows (the first, or the representatives of "
                   "the first classes of symmetric devices); fewer show more of the step "
                   "before the trace's bound on its events")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  command->add_option("--json", flags->json,
                      "Also write the report as JSON to this file ('-': to stdout, instead of "
                      "the text)");
  command
      ->add_option("--compute-scale", flags->compute_scale,
                   "DEVICE=FACTOR: that device computes FACTOR times slower (a straggler)")
      ->check(ParsesWith(sim::ParseComputeScale));
  command
      ->add_option("--link-scale", flags->link_scale,
                   "A-B=FACTOR (both ways) or A>B=FACTOR: the link between devices A and B "
                   "carries FACTOR of its bandwidth")
      ->check(ParsesWith(sim::ParseLinkScale));
  AddMaxMessagesOption(*command, flags->max_messages, "; 0: no limit");
  command->add_flag("--every-device", flags->every_device,
                    "Replay every device, not one per class of symmetric devices (the same "
                    "result, to rounding, at the full cost)");
  command
      ->add_option("--max-steps", flags->max_steps,
                   "Refuse up front a simulation that would replay more program steps than this "
                   "(summed over devices; loops that transfer run trip by trip); 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  command->callback([flags] {
    if (flags->deterministic && !flags->baseline) {
      throw CommandError("simulate: --deterministic goes with --baseline");
    }
    if (flags->full_pipeline != study::kFullPipelinePasses && !flags->baseline) {
      throw CommandError("simulate: --full-pipeline goes with --baseline");
    }
    if (flags->compare && flags->baseline) {
      throw CommandError("simulate: --compare and --baseline do not go together");
    }
    if (flags->modules.size() != (flags->compare ? 2u : 1u)) {
      throw CommandError(flags->compare ? "simulate --compare needs two modules"
                                        : "simulate takes one module (two with --compare)");
    }
    std::vector<std::unique_ptr<ir::Module>> modules;
    for (const std::string& path : flags->modules) {
      modules.push_back(LoadVerifiedModule(path, nullptr));
    }
    const cost::Target target = ResolveTarget(flags->target, *modules.front());
    sim::SimOptions options;
    options.trace = !flags->trace.empty();
    options.trace_devices = flags->trace_devices;
    options.max_messages = flags->max_messages;
    options.max_steps = flags->max_steps;
    options.exploit_symmetry = !flags->every_device;
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
    if (flags->baseline) {
      const ir::Module& module = *modules.front();
      const std::string& path = flags->modules.front();
      for (const study::Pipeline pipeline : study::kPipelines) {
        Expected<std::unique_ptr<ir::Module>> program =
            study::Apply(module, pipeline, target, flags->deterministic, flags->full_pipeline);
        if (!program.ok()) {
          throw CommandError(fmt::format("simulate --baseline: the {}: {}",
                                         study::PipelineName(pipeline),
                                         program.error().ToString()));
        }
        reports.push_back(SimulateOne(**program, path, target, options));
      }
      if (flags->json != "-") PrintBaseline(reports);
    } else {
      for (size_t i = 0; i < modules.size(); ++i) {
        reports.push_back(SimulateOne(*modules[i], flags->modules[i], target, options));
      }
      const bool text = flags->json != "-";
      if (text && flags->compare) {
        PrintComparison(reports[0], reports[1], Describe(*modules[0]), Describe(*modules[1]));
      } else if (text) {
        fmt::print("{}", sim::ReportTable(reports[0]));
      }
    }
    if (!flags->trace.empty()) WriteOutput(flags->trace, reports.back().trace_json);
    if (!flags->json.empty()) {
      std::string json = sim::ReportJson(reports.back());
      if (flags->compare) {
        json = fmt::format("{{\"a\": {}, \"b\": {}, \"speedup\": {}}}", sim::ReportJson(reports[0]),
                           json, reports[0].step_seconds / reports[1].step_seconds);
      } else if (flags->baseline) {
        json = fmt::format(
            "{{\"as_written\": {}, \"async_schedule\": {}, \"full_pipeline\": {}, "
            "\"speedup_over_as_written\": {}, \"speedup_over_async_schedule\": {}}}",
            sim::ReportJson(reports[0]), sim::ReportJson(reports[1]), json,
            reports[0].step_seconds / reports[2].step_seconds,
            reports[1].step_seconds / reports[2].step_seconds);
      }
      WriteOutput(flags->json, json + "\n");
    }
  });
}

}  // namespace loom::cli
