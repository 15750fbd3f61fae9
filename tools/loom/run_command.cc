// `loom run MODULE --devices N [--backend threads|mpi] [--seed S]
// [--inputs DIR] [--out DIR] [--trace FILE]`: execute a per-device program
// on N devices and print each device's time and output checksums.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "exec/cpu/cpu_device.h"
#include "exec/npy.h"
#include "loom/command.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

uint64_t Fnv1a(std::span<const std::byte> bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::byte b : bytes) hash = (hash ^ static_cast<uint8_t>(b)) * 0x100000001b3ULL;
  return hash;
}

nlohmann::json DeviceSummary(const exec::DeviceResult& result, bool with_trace) {
  nlohmann::json outputs = nlohmann::json::array();
  for (const exec::Tensor* leaf : exec::OutputLeaves(result.output)) {
    double sum = 0;
    for (int64_t i = 0; i < leaf->ElementCount(); ++i) sum += leaf->GetDouble(i);
    outputs.push_back({{"shape", leaf->shape().ToString(false)},
                       {"checksum", fmt::format("{:016x}", Fnv1a(leaf->bytes()))},
                       {"sum", sum}});
  }
  nlohmann::json summary = {
      {"device", result.device}, {"seconds", result.seconds}, {"outputs", outputs}};
  if (with_trace) summary["trace"] = exec::TraceEventsToJson(result.trace);
  return summary;
}

// Writes DIR/device<D>/output<I>.npy for each device this process ran, into
// a `.partial` folder renamed only once every device has finished.
std::vector<std::pair<fs::path, fs::path>> WriteOutputs(
    const std::string& dir, const std::vector<exec::DeviceResult>& results) {
  std::vector<std::pair<fs::path, fs::path>> renames;
  for (const exec::DeviceResult& result : results) {
    const fs::path final_dir = fs::path(dir) / fmt::format("device{}", result.device);
    const fs::path partial = final_dir.string() + ".partial";
    fs::remove_all(partial);
    fs::create_directories(partial);
    const auto leaves = exec::OutputLeaves(result.output);
    for (size_t i = 0; i < leaves.size(); ++i) {
      const fs::path file = partial / fmt::format("output{}.npy", i);
      if (Status written = exec::WriteNpy(file.string(), *leaves[i]); !written.ok()) {
        throw CommandError(written.error().ToString());
      }
    }
    renames.emplace_back(partial, final_dir);
  }
  return renames;
}

nlohmann::json ReportJson(const std::string& module_name, const ExecutionFlags& flags,
                          const std::vector<nlohmann::json>& summaries) {
  nlohmann::json json = {{"module", module_name}};
  json.update(RunHeaderJson(flags));
  nlohmann::json devices = nlohmann::json::array();
  for (nlohmann::json summary : summaries) {
    summary.erase("trace");
    devices.push_back(std::move(summary));
  }
  json["per_device"] = std::move(devices);
  return json;
}

void PrintReport(const std::string& module_name, const ExecutionFlags& flags,
                 const std::vector<nlohmann::json>& summaries) {
  fmt::print("module {} on {} device(s), backend {}, seed {}, dot kernels {}\n", module_name,
             flags.devices, flags.backend, flags.seed,
             exec::cpu::DotKernelName(flags.deterministic));
  fmt::print("{:>6} {:>11} {:>6} {:<24} {:<18} {:>16}\n", "device", "time (ms)", "output", "shape",
             "checksum", "sum");
  for (const nlohmann::json& summary : summaries) {
    int index = 0;
    for (const nlohmann::json& output : summary["outputs"]) {
      fmt::print("{:>6} {:>11.3f} {:>6} {:<24} {:<18} {:>16.6g}\n", summary["device"].get<int>(),
                 summary["seconds"].get<double>() * 1e3, index++,
                 output["shape"].get<std::string>(), output["checksum"].get<std::string>(),
                 output["sum"].is_number() ? output["sum"].get<double>() : NAN);
    }
  }
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  struct Options {
    std::string module;
    ExecutionFlags flags;
    std::string out;
    std::string trace;
    std::string json;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "run", "Execute a per-device program on N devices (threads, or MPI processes under mpirun)");
  command->add_option("MODULE", options->module, "HLO text file")->required();
  AddExecutionFlags(*command, options->flags);
  command->add_option("--out", options->out, "Write outputs to DIR/device<D>/output<I>.npy");
  command->add_option("--trace", options->trace, "Write a Chrome trace-event JSON timeline");
  command->add_option("--json", options->json,
                      "Also write each device's time and output checksums as JSON to this file "
                      "('-': to stdout, instead of the text)");
  command->callback([options] {
    std::unique_ptr<ir::Module> module = LoadVerifiedModule(options->module, nullptr);
    const ir::DeviceGrid grid = GridOf(*module, options->flags);
    std::unique_ptr<exec::Launch> launch = StartLaunch(options->flags);
    exec::RunOptions run_options = RunOptionsFrom(options->flags);
    run_options.trace = !options->trace.empty();
    run_options.source = options->module;
    Expected<std::vector<exec::DeviceResult>> results = launch->Run(*module, grid, run_options);
    if (!results.ok()) throw CommandError(results.error().ToString(options->module));

    std::vector<std::pair<fs::path, fs::path>> renames;
    const std::vector<std::string> texts = EndJobOnFailure(*launch, [&] {
      if (!options->out.empty()) renames = WriteOutputs(options->out, *results);
      std::vector<std::string> mine;
      for (const exec::DeviceResult& result : *results) {
        mine.push_back(DeviceSummary(result, run_options.trace).dump());
      }
      Expected<std::vector<std::string>> gathered = launch->GatherAtRoot(std::move(mine));
      if (!gathered.ok()) throw CommandError(gathered.error().ToString());
      if (Status synced = launch->AwaitRoot(); !synced.ok()) {
        throw CommandError(synced.error().ToString());
      }
      return std::move(gathered).value();
    });
    for (const auto& [partial, final_dir] : renames) {
      fs::remove_all(final_dir);
      fs::rename(partial, final_dir);
    }
    if (!launch->is_root()) return;
    std::vector<nlohmann::json> summaries;
    std::vector<exec::TraceEvent> events;
    for (const std::string& text : texts) {
      summaries.push_back(nlohmann::json::parse(text));
      if (run_options.trace) {
        Expected<std::vector<exec::TraceEvent>> device_events =
            exec::TraceEventsFromJson(summaries.back()["trace"].get<std::string>());
        if (!device_events.ok()) throw CommandError(device_events.error().ToString());
        events.insert(events.end(), device_events->begin(), device_events->end());
      }
    }
    const bool text = options->json != "-";
    if (text) PrintReport(module->name(), options->flags, summaries);
    if (run_options.trace) {
      if (Status written = exec::WriteChromeTrace(options->trace, events); !written.ok()) {
        throw CommandError(written.error().ToString());
      }
      if (text) fmt::print("trace: {} ({} events)\n", options->trace, events.size());
    }
    if (!options->json.empty()) {
      WriteOutput(options->json,
                  ReportJson(module->name(), options->flags, summaries).dump(2) + "\n");
    }
  });
}

}  // namespace loom::cli
