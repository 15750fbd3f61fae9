// What the subcommands share: loading a module and reporting failure. The
// CLI is the one place where errors become exceptions, messages and exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <stdexcept>
#include <string>

#include "ir/module.h"
#include "ir/verifier.h"

namespace loom::cli {

// A failure to report as `MESSAGE` on stderr with exit code 1.
class CommandError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses `path`; throws CommandError "PATH:LINE:COL: error: ..." on failure.
std::unique_ptr<ir::Module> LoadModule(const std::string& path);
// Parses and verifies `path`, returning the verifier's report too.
std::unique_ptr<ir::Module> LoadVerifiedModule(const std::string& path, ir::VerifyReport* report);

// Writes `text` to `path`, or to stdout when `path` is empty or "-". The
// file appears only when complete (written to a temporary, then renamed).
void WriteOutput(const std::string& path, const std::string& text);

// Each subcommand adds itself to the app; one file per subcommand.
void AddFmtCommand(CLI::App& app);
void AddVerifyCommand(CLI::App& app);
void AddStatsCommand(CLI::App& app);

}  // namespace loom::cli
