// What the subcommands share: loading modules, writing outputs, and the
// execution flags of `run` and `compare`.
#include "loom/command.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <vector>

#include "exec/cpu/cpu_device.h"
#include "ir/parser.h"
#include "support/output_file.h"
#include "support/saturating.h"
#include "support/units.h"

namespace loom::cli {

std::unique_ptr<ir::Module> LoadModule(const std::string& path) {
  Expected<std::unique_ptr<ir::Module>> module = ir::ParseModuleFile(path);
  if (!module.ok()) throw CommandError(module.error().ToString(path));
  return std::move(module).value();
}

namespace {

// Under mpirun every process loads the module: only the first says what
// its warnings are. (MPI is not initialised yet: the launcher's variables
// tell the rank.)
bool IsFirstProcessOfTheJob() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* rank = std::getenv(variable)) return std::string_view(rank) == "0";
  }
  return true;
}

}  // namespace

std::unique_ptr<ir::Module> LoadVerifiedModule(const std::string& path, ir::VerifyReport* report) {
  std::unique_ptr<ir::Module> module = LoadModule(path);
  Expected<ir::VerifyReport> verified = ir::VerifyModule(*module);
  if (!verified.ok()) throw CommandError(verified.error().ToString(path));
  for (const Error& warning :
       IsFirstProcessOfTheJob() ? verified->warnings : std::vector<Error>{}) {
    const std::string where = warning.loc.known()
                                  ? fmt::format("{}:{}:{}", path, warning.loc.line, warning.loc.col)
                                  : path;
    std::fprintf(stderr, "%s: warning: %s\n", where.c_str(), warning.message.c_str());
  }
  if (report) *report = std::move(verified).value();
  return module;
}

cost::Target ResolveTarget(const std::string& spec, const ir::Module& module) {
  Expected<ir::VerifyReport> report = ir::VerifyModule(module);
  const int64_t devices =
      report.ok() ? report->partition_count * report->replica_count : int64_t{0};
  Expected<cost::Target> target = cost::FindTarget(spec, devices);
  if (!target.ok()) throw CommandError("--target: " + target.error().message);
  if (devices > target->device_count()) {
    throw CommandError(fmt::format(
        "--target: the module runs on {} devices but target {} has {} (a family with :auto, "
        "e.g. dgx-h100:auto or tpu-v4, is sized to the module)",
        devices, target->name(), target->device_count()));
  }
  return std::move(target).value();
}

void AddMaxMessagesOption(CLI::App& command, int64_t& value, std::string_view what) {
  command
      .add_option("--max-messages", value,
                  fmt::format("Refuse up front a simulation that would move more point-to-point "
                              "messages than this (the replay's: one device per class of symmetric "
                              "devices, loops that transfer trip by trip){}",
                              what))
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
}

std::string PeakWhere(const analysis::PeakBreakdown& peak) {
  std::string where;
  for (const ir::Instruction* instruction : peak.where) {
    where += fmt::format("{}%{} in %{}", where.empty() ? "" : ", running ", instruction->name(),
                         instruction->parent()->name());
  }
  return where.empty() ? "the start" : where;
}

std::string PeakBuffersText(const analysis::PeakBreakdown& peak, size_t count,
                            std::string_view indent) {
  const size_t shown = std::min(count, peak.live.size());
  std::string text = fmt::format("{}the {} largest of the {} buffers live there:\n", indent, shown,
                                 peak.live.size());
  for (size_t i = 0; i < shown; ++i) {
    const analysis::LiveBuffer& buffer = peak.live[i];
    const ir::Instruction& value = *buffer.defined_by;
    const ir::Shape& shape =
        value.shape().IsTuple() ? value.shape().tuple_element(buffer.element) : value.shape();
    const std::string element =
        value.shape().IsTuple() ? fmt::format(" {{{}}}", buffer.element) : "";
    text += fmt::format("{}{:>12}  %{}{} in %{}: {} {}\n", indent, FormatBytes(buffer.bytes),
                        value.name(), element, value.parent()->name(),
                        shape.ToString(/*print_layout=*/false), ir::OpcodeName(value.opcode()));
  }
  int64_t rest = 0;
  for (size_t i = shown; i < peak.live.size(); ++i) rest = SaturatingAdd(rest, peak.live[i].bytes);
  if (shown < peak.live.size()) {
    text += fmt::format("{}{:>12}  the other {}\n", indent, FormatBytes(rest),
                        peak.live.size() - shown);
  }
  return text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CommandError(fmt::format("{}: cannot read", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteOutput(const std::string& path, const std::string& text) {
  // -o given empty means stdout, as no -o does.
  if (Status written = WriteOutputFile(path.empty() ? "-" : path, text); !written.ok()) {
    throw CommandError(written.error().message);
  }
}

CLI::Validator DecimalDigits() {
  return CLI::Validator(
      [](const std::string& text) {
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, error] = std::from_chars(text.data(), end, value);
        const bool ok =
            !text.empty() && text[0] != '-' && text[0] != '+' && error == std::errc() && ptr == end;
        return ok ? std::string() : "'" + text + "' is not a whole number from 0 to 2^64-1";
      },
      "UINT");
}

CLI::Validator FiniteInRange(double low, double high) {
  return CLI::Validator(
      [low, high](const std::string& text) {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && end == text.c_str() + text.size() &&
                        std::isfinite(value) && value >= low && value <= high;
        return ok ? std::string()
                  : fmt::format("'{}' is not a number from {} to {}", text, low, high);
      },
      fmt::format("FLOAT in [{}, {}]", low, high));
}

void AddExecutionFlags(CLI::App& command, ExecutionFlags& flags) {
  command.add_option("--devices", flags.devices, "Number of devices (replicas x partitions)")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  command.add_option("--backend", flags.backend, "threads (one process) or mpi (under mpirun)")
      ->check(CLI::IsMember({"threads", "mpi"}));
  command.add_option("--seed", flags.seed, "Seed of the random inputs (0 to 2^64-1)")
      ->check(DecimalDigits());
  command.add_option("--inputs", flags.inputs,
                     "Read inputs from DIR/device<D>/param<I>.npy or DIR/param<I>.npy");
  command.add_flag(
      "--deterministic", flags.deterministic,
      "Dot kernels that sum each element in a fixed order: results bitwise the same on "
      "any CPU and however a product is split into blocks");
  command
      .add_option("--repeat", flags.repeat,
                  "Run the program N times after one warm-up run and report each device's "
                  "median time")
      ->check(CLI::Range(1, 1000000));
  command
      .add_option("--collectives", flags.collectives,
                  "ring: Loom's rings, with their fixed reduction order (the default); native: "
                  "the MPI backend's own collectives where it has them (all-gather, and f32/f64 "
                  "sums of all-reduce and reduce-scatter), whose sums are MPI's")
      ->check(CLI::IsMember({"ring", "native"}));
  command
      .add_option("--compute-threads", flags.compute_threads,
                  "OpenBLAS threads per device (default: 1 when several devices share the "
                  "machine); for machines with more cores than devices")
      ->check(CLI::Range(1, 1024));
  command
      .add_option("--timeout", flags.timeout_seconds,
                  "Seconds a device may wait for a peer before the run fails (more than 0, at "
                  "most 1e6)")
      ->check(FiniteInRange(1e-3, 1e6));
}

exec::RunOptions RunOptionsFrom(const ExecutionFlags& flags) {
  exec::RunOptions options;
  options.seed = flags.seed;
  options.inputs_dir = flags.inputs;
  options.deterministic = flags.deterministic;
  options.repeat = flags.repeat;
  options.compute_threads = flags.compute_threads;
  options.native_collectives = flags.collectives == "native";
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
  return options;
}

nlohmann::json RunHeaderJson(const ExecutionFlags& flags) {
  return {{"devices", flags.devices},
          {"backend", flags.backend},
          {"seed", flags.seed},
          {"collectives", flags.collectives},
          {"deterministic", flags.deterministic},
          {"dot_kernels", exec::cpu::DotKernelName(flags.deterministic)}};
}

std::unique_ptr<exec::Launch> StartLaunch(const ExecutionFlags& flags) {
  const exec::Backend backend =
      flags.backend == "mpi" ? exec::Backend::kMpi : exec::Backend::kThreads;
  Expected<std::unique_ptr<exec::Launch>> launch =
      exec::Launch::Create(backend, flags.devices, RunOptionsFrom(flags).timeout);
  if (!launch.ok()) throw CommandError(launch.error().ToString());
  return std::move(launch).value();
}

ir::DeviceGrid GridOf(const ir::Module& module, const ExecutionFlags& flags) {
  Expected<ir::DeviceGrid> grid = exec::GridFor(module, flags.devices);
  if (!grid.ok()) throw CommandError(grid.error().ToString());
  return *grid;
}

}  // namespace loom::cli
