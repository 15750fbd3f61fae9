// `loom fmt MODULE [-o OUT]`: parse and print canonically.
#include "ir/printer.h"
#include "loom/command.h"

namespace loom::cli {

void AddFmtCommand(CLI::App& app) {
  struct Options {
    std::string input;
    std::string output;
    bool verify = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "fmt",
      "Parse an HLO module and print it in Loom's canonical form (a fixed point: "
      "formatting the output again changes nothing)");
  command->add_option("MODULE", options->input, "HLO text file")->required();
  command->add_option("-o,--output", options->output, "Write here instead of stdout");
  command->add_flag("--verify", options->verify, "Also run the verifier before printing");
  command->callback([options] {
    std::unique_ptr<ir::Module> module =
        options->verify ? LoadVerifiedModule(options->input, nullptr) : LoadModule(options->input);
    WriteOutput(options->output, ir::PrintModule(*module));
  });
}

}  // namespace loom::cli
