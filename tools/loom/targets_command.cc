// `loom targets [NAME] [--json]`: the hardware catalog.
#include <fmt/format.h>

#include "cost/target.h"
#include "loom/command.h"

namespace loom::cli {

namespace {

std::string Rate(double bytes_per_second) {
  return fmt::format("{:.4g} GB/s", bytes_per_second / 1e9);
}

std::string Latency(double seconds) { return fmt::format("{:.3g} us", seconds * 1e6); }

std::string Interconnect(const cost::Target& target) {
  if (const auto* torus = std::get_if<cost::TorusTopology>(&target.topology())) {
    std::string dims;
    for (size_t d = 0; d < torus->dims.size(); ++d) {
      dims += fmt::format("{}{}{}", d ? "x" : "", torus->dims[d], torus->wraparound[d] ? "w" : "");
    }
    return fmt::format("torus {} (w: wraps around), link {} per direction, {} per hop", dims,
                       Rate(torus->link.bytes_per_second), Latency(torus->link.latency_seconds));
  }
  if (const auto* s = std::get_if<cost::SwitchedTopology>(&target.topology())) {
    return fmt::format("{} node(s) x {}: NVSwitch {} / {}, InfiniBand {} / {} per device", s->nodes,
                       s->devices_per_node, Rate(s->intra_node.bytes_per_second),
                       Latency(s->intra_node.latency_seconds), Rate(s->inter_node.bytes_per_second),
                       Latency(s->inter_node.latency_seconds));
  }
  const auto& bus = std::get<cost::BusTopology>(target.topology()).bus;
  return fmt::format("one shared medium, {} / {}", Rate(bus.bytes_per_second),
                     Latency(bus.latency_seconds));
}

void PrintTarget(const cost::Target& target) {
  const auto& compute = target.compute();
  std::string peaks;
  for (const auto& [type, flops] : compute.peak_flops) {
    peaks += fmt::format("{}{} {:.4g} TFLOP/s", peaks.empty() ? "" : ", ", type, flops / 1e12);
  }
  fmt::print("{}\n  {}\n", target.name(), target.description());
  if (compute.matrix_efficiency < 1) {
    peaks += fmt::format("; products sustain {:.1f}% of the peak", 100 * compute.matrix_efficiency);
  }
  fmt::print("  devices: {}   compute: {}\n",
             target.kind() == "bus" ? std::string("any") : std::to_string(target.device_count()),
             peaks);
  fmt::print("  memory: {:.4g} GiB at {}   launch: {}\n", compute.memory_bytes / (1LL << 30),
             Rate(compute.memory_bytes_per_second), Latency(compute.launch_seconds));
  fmt::print("  interconnect: {}\n", Interconnect(target));
}

}  // namespace

void AddTargetsCommand(CLI::App& app) {
  struct Options {
    std::string name;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "targets", "List the hardware targets the cost model knows, with their figures");
  command->add_option("NAME", options->name, "Show one target (a name, or a .json file)");
  command->add_flag("--json", options->json, "Print as JSON (the format --target FILE.json reads)");
  command->callback([options] {
    std::vector<cost::Target> targets;
    if (options->name.empty()) {
      targets = cost::BuiltinTargets();
    } else {
      Expected<cost::Target> target = cost::FindTarget(options->name);
      if (!target.ok()) throw CommandError(target.error().message);
      targets.push_back(std::move(*target));
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      if (options->json) {
        fmt::print("{}\n", cost::TargetToJson(targets[i]));
      } else {
        if (i > 0) fmt::print("\n");
        PrintTarget(targets[i]);
      }
    }
  });
}

}  // namespace loom::cli
