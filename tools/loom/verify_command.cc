// `loom verify MODULE`: parse, verify, and say what was checked.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "loom/command.h"

namespace loom::cli {

void AddVerifyCommand(CLI::App& app) {
  struct Options {
    std::string input;
    bool list_trusted = false;
    std::string json;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "verify", "Parse and verify an HLO module: structure, shapes, replica groups");
  command->add_option("MODULE", options->input, "HLO text file")->required();
  command->add_flag("--trusted", options->list_trusted,
                    "List the instructions whose declared shape was trusted, not inferred");
  command->add_option("--json", options->json,
                      "Also write what was verified as JSON (devices, counts, trusted shapes, "
                      "warnings) to this file ('-': to stdout, instead of the text)");
  command->callback([options] {
    ir::VerifyReport report;
    std::unique_ptr<ir::Module> module = LoadVerifiedModule(options->input, &report);
    int64_t instructions = 0;
    for (const auto& computation : module->computations()) {
      instructions += computation->instruction_count();
    }
    if (options->json != "-") {
      fmt::print(
          "{}: ok: module {}, {} computations, {} instructions, {} partition(s) x {} "
          "replica(s), {} shape(s) trusted as declared\n",
          options->input, module->name(), module->computations().size(), instructions,
          report.partition_count, report.replica_count, report.trusted.size());
    }
    if (options->list_trusted && options->json != "-") {
      for (const std::string& line : report.trusted) fmt::print("  {}\n", line);
    }
    if (!options->json.empty()) {
      nlohmann::json warnings = nlohmann::json::array();
      for (const Error& warning : report.warnings) {
        warnings.push_back(
            {{"line", warning.loc.line}, {"col", warning.loc.col}, {"message", warning.message}});
      }
      const nlohmann::json json = {
          {"module", module->name()},
          {"computations", module->computations().size()},
          {"instructions", instructions},
          {"partitions", report.partition_count},
          {"replicas", report.replica_count},
          {"devices", report.partition_count * report.replica_count},
          {"trusted", report.trusted},
          {"warnings", warnings},
      };
      WriteOutput(options->json, json.dump(2) + "\n");
    }
  });
}

}  // namespace loom::cli
