// What the subcommands share: loading a module and reporting failure. The
// CLI is the one place where errors become exceptions, messages and exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "analysis/live_bytes.h"
#include "cost/target.h"
#include "exec/launch.h"
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

// The target `spec` names (cost::FindTarget), sized to `module` when the
// spec is a family alone; throws CommandError "--target: ..." on failure,
// or when the module has more devices than the target.
cost::Target ResolveTarget(const std::string& spec, const ir::Module& module);
// How --target may be spelled, for help texts.
inline constexpr const char* kTargetSpellings =
    "a name from `loom targets`, a family at any size (tpu-v4:4x4x8, dgx-h100:16), a family "
    "sized to the module (tpu-v4, tpu-v4:auto, dgx-h100:auto), or a .json file";

// --max-messages for the simulator (sim::SimOptions::max_messages), `what`
// saying what a refusal means to the subcommand.
void AddMaxMessagesOption(CLI::App& command, int64_t& value, std::string_view what);

// Where a peak of live bytes is reached: "%while.1 in %main, running %dot.3
// in %body" (the instruction at the peak in each computation down).
std::string PeakWhere(const analysis::PeakBreakdown& peak);
// The `count` largest buffers live at the peak, one a line indented by
// `indent`, after a line that says how many of how many they are.
std::string PeakBuffersText(const analysis::PeakBreakdown& peak, size_t count,
                            std::string_view indent = "  ");

// The whole of the file at `path`; throws CommandError "PATH: cannot read".
std::string ReadFile(const std::string& path);

// Writes `text` to `path`, or to stdout when `path` is empty or "-". The
// file appears only when complete (written to a temporary, then renamed).
void WriteOutput(const std::string& path, const std::string& text);

// The flags `run` and `compare` share: where and how to execute.
struct ExecutionFlags {
  int64_t devices = 1;
  std::string backend = "threads";
  uint64_t seed = 0;
  std::string inputs;
  bool deterministic = false;
  double timeout_seconds = 60;
  int repeat = 1;
  std::string collectives = "ring";
  int compute_threads = 0;
};
void AddExecutionFlags(CLI::App& command, ExecutionFlags& flags);
exec::RunOptions RunOptionsFrom(const ExecutionFlags& flags);
// What `run --json` and `compare --json` say about how they ran: devices,
// backend, seed, collectives and the dot kernels.
nlohmann::json RunHeaderJson(const ExecutionFlags& flags);
// Starts the backend; throws CommandError when it cannot.
std::unique_ptr<exec::Launch> StartLaunch(const ExecutionFlags& flags);

// Runs `work`, the part of a command between Launch::Run and AwaitRoot in
// which the devices wait on each other: an exception there (an output that
// cannot be written, a report that does not arrive) ends the whole job
// under MPI through Launch::Fail, rather than leaving the peers waiting.
template <typename Work>
auto EndJobOnFailure(exec::Launch& launch, Work&& work) -> decltype(work()) {
  try {
    return work();
  } catch (const std::exception& error) {
    launch.Fail(Error{error.what()});
    throw;
  }
}
// The device grid of `module` for flags.devices devices.
ir::DeviceGrid GridOf(const ir::Module& module, const ExecutionFlags& flags);

// Each subcommand adds itself to the app; one file per subcommand.
void AddFmtCommand(CLI::App& app);
void AddVerifyCommand(CLI::App& app);
void AddStatsCommand(CLI::App& app);
void AddRunCommand(CLI::App& app);
void AddCompareCommand(CLI::App& app);
void AddModelCommand(CLI::App& app);
void AddOptCommand(CLI::App& app);
void AddTargetsCommand(CLI::App& app);
void AddSimulateCommand(CLI::App& app);
void AddStudyCommand(CLI::App& app);

}  // namespace loom::cli
