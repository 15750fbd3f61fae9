// `loom opt MODULE --passes=P1,P2{opt=v} [-o OUT] [--explain] [--print-after-all]
// [--dump-dir DIR]`: run passes, and show the module after each.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string_view>

#include "cost/step_time.h"
#include "ir/printer.h"
#include "loom/command.h"
#include "pass/registry.h"

namespace loom::cli {

namespace {

cost::StepEstimate Estimate(const ir::Module& module, const cost::CostModel& model) {
  Expected<cost::StepEstimate> estimate = cost::EstimateStep(module, model);
  if (!estimate.ok()) throw CommandError("estimate: " + estimate.error().message);
  return std::move(estimate).value();
}

// DIR/NN-NAME.hlo: the module after pass NN (00: as read).
std::string DumpPath(const std::string& dir, size_t index, std::string_view name) {
  return (std::filesystem::path(dir) / fmt::format("{:02}-{}.hlo", index, name)).string();
}

nlohmann::json PassJson(const pass::Pass& pass) {
  nlohmann::json decisions = nlohmann::json::array();
  for (const pass::Decision& d : pass.Decisions()) {
    decisions.push_back({{"computation", d.computation},
                         {"collective", d.collective},
                         {"dot", d.dot},
                         {"form", d.form},
                         {"rewritten", d.rewritten},
                         {"reason", d.reason}});
  }
  return {{"name", pass.name()}, {"explain", pass.Explain()}, {"decisions", decisions}};
}

}  // namespace

void AddOptCommand(CLI::App& app) {
  struct Options {
    std::string input;
    std::string output;
    std::string passes;
    std::string target;
    bool explain = false;
    bool deterministic = false;
    bool estimate = false;
    bool list = false;
    bool print_after_all = false;
    std::string dump_dir;
    std::string json;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "opt", "Run passes over an HLO module; the module is verified before and after each pass");
  command->add_option("MODULE", options->input, "HLO text file");
  command->add_option("--passes", options->passes,
                      "Comma-separated passes, each optionally with {key=value,...} options");
  command->add_option("-o,--output", options->output, "Write here instead of stdout");
  command->add_flag("--explain", options->explain,
                    "Say what each pass decided and why (on stdout with -o, else on stderr)");
  command->add_option(
      "--target", options->target,
      fmt::format("Decide and schedule for this target: {}; without one, collective-matmul "
                  "uses its size threshold",
                  kTargetSpellings));
  command->add_flag("--estimate", options->estimate,
                    "With --target: print the estimated step time of one device before and after "
                    "the passes (on stdout with -o, else on stderr)");
  command->add_flag("--deterministic", options->deterministic,
                    "Every pass keeps each sum in the order the original program folds it, so "
                    "that `loom run --deterministic` gives bitwise its result (collective-matmul's "
                    "deterministic=true)");
  command->add_flag("--list-passes", options->list, "List the passes and their options");
  command->add_flag("--print-after-all", options->print_after_all,
                    "Print the module after each pass to stderr, each under a '// after pass N: "
                    "NAME' line");
  command->add_option("--dump-dir", options->dump_dir,
                      "Write DIR/00-input.hlo and, after each pass, DIR/NN-NAME.hlo (numbered "
                      "from 01 in pipeline order)");
  command->add_option("--json", options->json,
                      "Write what each pass decided as JSON to this file ('-': stdout; then -o "
                      "is needed for the module), with the estimated step before and after "
                      "when --target is given");
  command->callback([options] {
    if (options->list) {
      for (const std::string& line : pass::DescribePasses()) fmt::print("{}\n", line);
      return;
    }
    if (options->input.empty()) throw CommandError("opt: MODULE is required");
    if (options->passes.empty()) throw CommandError("opt: --passes is required");
    ir::VerifyReport report;
    std::unique_ptr<ir::Module> module = LoadVerifiedModule(options->input, &report);
    pass::PassContext context;
    context.deterministic = options->deterministic;
    if (!options->target.empty()) {
      context.cost_model =
          std::make_shared<cost::TargetCostModel>(ResolveTarget(options->target, *module));
    }
    Expected<pass::Pipeline> pipeline = pass::ParsePipeline(options->passes, context);
    if (!pipeline.ok()) throw CommandError("--passes: " + pipeline.error().message);
    if (options->estimate && !context.cost_model) throw CommandError("--estimate needs --target");
    if (options->json == "-" && (options->output.empty() || options->output == "-")) {
      throw CommandError("opt: --json - needs -o for the module");
    }
    std::string before;
    if (options->estimate) before = Estimate(*module, *context.cost_model).ToString();
    nlohmann::json json = {{"module", module->name()}, {"passes", nlohmann::json::array()}};
    if (!options->json.empty() && context.cost_model) {
      json["estimate"] = {{"target", context.cost_model->target().name()},
                          {"before_seconds", Estimate(*module, *context.cost_model).total_seconds}};
    }
    if (!options->dump_dir.empty()) {
      std::filesystem::create_directories(options->dump_dir);
      WriteOutput(DumpPath(options->dump_dir, 0, "input"), ir::PrintModule(*module));
    }
    const auto after_pass = [&](size_t index, const pass::Pass& pass, const ir::Module& after) {
      if (options->print_after_all) {
        fmt::print(stderr, "// after pass {}: {}\n{}", index + 1, pass.name(),
                   ir::PrintModule(after));
      }
      if (!options->dump_dir.empty()) {
        WriteOutput(DumpPath(options->dump_dir, index + 1, pass.name()), ir::PrintModule(after));
      }
    };
    Expected<bool> changed = pipeline->Run(*module, after_pass);
    if (!changed.ok()) throw CommandError(changed.error().ToString(options->input));
    if (options->explain) {
      std::FILE* sink = options->output.empty() || options->output == "-" ? stderr : stdout;
      for (const auto& pass : pipeline->passes()) {
        for (const std::string& line : pass->Explain()) {
          fmt::print(sink, "{}: {}\n", pass->name(), line);
        }
      }
    }
    if (options->estimate) {
      std::FILE* sink = options->output.empty() || options->output == "-" ? stderr : stdout;
      fmt::print(sink, "estimated step on {}: before {}\n", context.cost_model->target().name(),
                 before);
      fmt::print(sink, "estimated step on {}: after  {}\n", context.cost_model->target().name(),
                 Estimate(*module, *context.cost_model).ToString());
    }
    WriteOutput(options->output, ir::PrintModule(*module));
    if (!options->json.empty()) {
      for (const auto& pass : pipeline->passes()) json["passes"].push_back(PassJson(*pass));
      if (context.cost_model) {
        json["estimate"]["after_seconds"] = Estimate(*module, *context.cost_model).total_seconds;
      }
      WriteOutput(options->json, json.dump(2) + "\n");
    }
  });
}

}  // namespace loom::cli
