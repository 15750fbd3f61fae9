// SimReport as JSON and as a table.
#include "sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "support/check.h"
#include "support/units.h"
namespace loom::sim {

std::string ReportJson(const SimReport& report) {
  using Json = nlohmann::ordered_json;
  Json devices = Json::array();
  for (const DeviceReport& device : report.devices) {
    devices.push_back({{"device", device.device},
                       {"compute_seconds", device.compute},
                       {"exposed_communication_seconds", device.exposed_communication},
                       {"idle_seconds", device.idle},
                       {"finish_seconds", device.finish},
                       {"communication_seconds", device.communication},
                       {"compute_scale", device.compute_scale}});
  }
  Json kinds = Json::object();
  for (const auto& [name, kind] : report.op_kinds) {
    kinds[name] = {{"count", kind.count},
                   {"compute_seconds", kind.compute_seconds},
                   {"exposed_seconds", kind.exposed_seconds},
                   {"communication_seconds", kind.communication_seconds},
                   {"seconds_per_device", MustFind(report.seconds_by_op_kind, name)}};
  }
  Json json = {
      {"module", report.module},
      {"target", report.target},
      {"devices", report.device_count},
      {"replica_count", report.replica_count},
      {"partition_count", report.partition_count},
      {"step_seconds", report.step_seconds},
      {"cost_model_step_seconds", report.cost_model_step_seconds},
      {"mfu", report.mfu},
      {"dot_flops", report.dot_flops},
      {"op_kinds", kinds},
      {"per_device", devices},
      {"collective_plans", report.collective_plans},
      {"unknown_trip_counts", report.unknown_trip_counts},
      {"notes", report.notes},
      {"simulation",
       {{"events", report.events},
        {"flows", report.flows},
        {"collectives", report.collectives},
        {"max_concurrent_flows", report.max_concurrent_flows},
        {"reallocations", report.reallocations},
        {"mean_component_links", report.mean_component_links},
        {"wall_seconds", report.wall_seconds},
        {"events_per_second",
         report.wall_seconds > 0 ? static_cast<double>(report.events) / report.wall_seconds : 0},
        {"fairness", report.fairness},
        {"symmetry", report.symmetry},
        {"simulated_devices", report.simulated_devices},
        {"trace_truncated", report.trace_truncated}}},
  };
  return json.dump(2) + "\n";
}

double MeanOverDevices(const SimReport& report, double DeviceReport::*field) {
  double sum = 0;
  for (const auto& device : report.devices) sum += device.*field;
  return report.devices.empty() ? 0 : sum / static_cast<double>(report.devices.size());
}

std::string ReportTable(const SimReport& report) {
  std::string out;
  out +=
      fmt::format("module {} on {}: {} devices ({} replica(s) x {} partition(s))\n", report.module,
                  report.target, report.device_count, report.replica_count, report.partition_count);
  out += fmt::format("step time     {}  (cost model, no contention: {})\n",
                     FormatSeconds(report.step_seconds),
                     FormatSeconds(report.cost_model_step_seconds));
  out += fmt::format("MFU           {:.1f}%  ({:.3g} dot FLOPs over all devices)\n",
                     report.mfu * 100, report.dot_flops);

  // Devices: every one when there are few, else the spread and the slowest.
  const auto& devices = report.devices;
  if (!devices.empty()) {
    out += "\n";
    const auto row = [&](std::string_view label, double compute, double exposed, double idle,
                         double communication, double scale) {
      out +=
          fmt::format("{:<10} {:>13} {:>13} {:>13} {:>13} {:>6}\n", label, FormatSeconds(compute),
                      FormatSeconds(exposed), FormatSeconds(idle), FormatSeconds(communication),
                      scale == 1 ? std::string("") : fmt::format("x{:g}", scale));
    };
    out += fmt::format("{:<10} {:>13} {:>13} {:>13} {:>13} {:>6}\n", "device", "compute",
                       "exposed comm", "idle", "in flight", "scale");
    if (devices.size() <= 16) {
      for (const DeviceReport& d : devices) {
        row(fmt::format("{}", d.device), d.compute, d.exposed_communication, d.idle,
            d.communication, d.compute_scale);
      }
    } else {
      std::vector<size_t> order(devices.size());
      std::iota(order.begin(), order.end(), 0);
      const auto by = [&](auto field) {
        std::vector<double> values;
        for (const DeviceReport& d : devices) values.push_back(field(d));
        std::sort(values.begin(), values.end());
        return values;
      };
      const auto compute = by([](const DeviceReport& d) { return d.compute; });
      const auto exposed = by([](const DeviceReport& d) { return d.exposed_communication; });
      const auto idle = by([](const DeviceReport& d) { return d.idle; });
      const auto flight = by([](const DeviceReport& d) { return d.communication; });
      const size_t n = devices.size();
      row("min", compute[0], exposed[0], idle[0], flight[0], 1);
      row("median", compute[n / 2], exposed[n / 2], idle[n / 2], flight[n / 2], 1);
      row("max", compute[n - 1], exposed[n - 1], idle[n - 1], flight[n - 1], 1);
      // The devices that finished last (least idle), and any scaled one.
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return devices[a].idle < devices[b].idle; });
      out += "slowest:\n";
      for (size_t i = 0; i < std::min<size_t>(3, n); ++i) {
        const DeviceReport& d = devices[order[i]];
        row(fmt::format("{}", d.device), d.compute, d.exposed_communication, d.idle,
            d.communication, d.compute_scale);
      }
      for (const DeviceReport& d : devices) {
        if (d.compute_scale != 1) {
          row(fmt::format("{}", d.device), d.compute, d.exposed_communication, d.idle,
              d.communication, d.compute_scale);
        }
      }
    }
  }

  if (!report.op_kinds.empty()) {
    out += fmt::format("\n{:<20} {:>10} {:>13} {:>13} {:>13}\n", "op kind (per device)", "count",
                       "compute", "exposed comm", "in flight");
    std::vector<std::pair<double, std::string>> order;
    for (const auto& [name, seconds] : report.seconds_by_op_kind)
      order.emplace_back(-seconds, name);
    std::sort(order.begin(), order.end());
    const auto n = static_cast<double>(std::max<int64_t>(1, report.device_count));
    for (const auto& [negative, name] : order) {
      const OpKindReport& kind = MustFind(report.op_kinds, name);
      out += fmt::format(
          "{:<20} {:>10.4g} {:>13} {:>13} {:>13}\n", name, static_cast<double>(kind.count) / n,
          FormatSeconds(kind.compute_seconds / n), FormatSeconds(kind.exposed_seconds / n),
          FormatSeconds(kind.communication_seconds / n));
    }
  }

  if (!report.collective_plans.empty()) {
    out += "\ncollectives:\n";
    for (const std::string& plan : report.collective_plans) out += "  " + plan + "\n";
  }
  for (const std::string& name : report.unknown_trip_counts) {
    out += fmt::format("note: while %{} ran once: its trip count is unknown\n", name);
  }
  for (const std::string& note : report.notes) out += "note: " + note + "\n";
  out += fmt::format(
      "\nsimulated {} events ({} flows, {} collectives, at most {} flows at once) in {} "
      "({:.3g} events/s); bandwidth {}\n",
      report.events, report.flows, report.collectives, report.max_concurrent_flows,
      FormatSeconds(report.wall_seconds),
      report.wall_seconds > 0 ? static_cast<double>(report.events) / report.wall_seconds : 0.0,
      report.fairness);
  if (report.simulated_devices > 0 && report.simulated_devices < report.device_count) {
    out += fmt::format("replayed {} of {} devices, one per class of symmetric devices: {}\n",
                       report.simulated_devices, report.device_count, report.symmetry);
  }
  if (report.trace_truncated) out += "note: the trace was cut short (max_trace_events)\n";
  return out;
}

}  // namespace loom::sim
