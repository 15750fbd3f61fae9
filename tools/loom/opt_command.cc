// `loom opt MODULE --passes=P1,P2{opt=v} [-o OUT] [--explain]`: run passes.
#include <fmt/format.h>

#include "ir/printer.h"
#include "loom/command.h"
#include "pass/registry.h"

namespace loom::cli {

void AddOptCommand(CLI::App& app) {
  struct Options {
    std::string input;
    std::string output;
    std::string passes;
    bool explain = false;
    bool list = false;
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
  command->add_flag("--list-passes", options->list, "List the passes and their options");
  command->callback([options] {
    if (options->list) {
      for (const std::string& line : pass::DescribePasses()) fmt::print("{}\n", line);
      return;
    }
    if (options->input.empty()) throw CommandError("opt: MODULE is required");
    if (options->passes.empty()) throw CommandError("opt: --passes is required");
    Expected<pass::Pipeline> pipeline = pass::ParsePipeline(options->passes);
    if (!pipeline.ok()) throw CommandError("--passes: " + pipeline.error().message);
    std::unique_ptr<ir::Module> module = LoadVerifiedModule(options->input, nullptr);
    Expected<bool> changed = pipeline->Run(*module);
    if (!changed.ok()) throw CommandError(changed.error().ToString(options->input));
    if (options->explain) {
      std::FILE* sink = options->output.empty() || options->output == "-" ? stderr : stdout;
      for (const auto& pass : pipeline->passes()) {
        for (const std::string& line : pass->Explain()) {
          fmt::print(sink, "{}: {}\n", pass->name(), line);
        }
      }
    }
    WriteOutput(options->output, ir::PrintModule(*module));
  });
}

}  // namespace loom::cli
