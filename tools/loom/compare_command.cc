// `loom compare A.hlo B.hlo --devices N [--seed S] [--backend ...]
// [--tolerance T]`: run two programs on the same inputs and compare every
// output of every device.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "loom/command.h"

namespace loom::cli {
namespace {

struct Difference {
  std::string shape;
  double max_abs = 0;
  double max_rel = 0;
  bool bitwise = true;
  bool within = true;  // every element within the tolerance
};

// |a - b| over elements, NaN matching NaN; a NaN against a number is an
// infinite difference.
double AbsoluteDifference(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INFINITY;
  if (a == b) return 0;  // also equal infinities
  return std::fabs(a - b);
}

Difference Compare(const exec::Tensor& a, const exec::Tensor& b, double tolerance) {
  Difference difference;
  difference.shape = a.shape().ToString(false);
  if (!a.shape().Compatible(b.shape())) {
    difference.shape += " vs " + b.shape().ToString(false);
    difference.bitwise = difference.within = false;
    difference.max_abs = difference.max_rel = INFINITY;
    return difference;
  }
  difference.bitwise = a.BitwiseEqual(b);
  for (int64_t i = 0; i < a.ElementCount(); ++i) {
    const double x = a.GetDouble(i);
    const double y = b.GetDouble(i);
    const double abs = AbsoluteDifference(x, y);
    const double scale = std::max({std::fabs(x), std::fabs(y)});
    difference.max_abs = std::max(difference.max_abs, abs);
    if (abs > 0)
      difference.max_rel = std::max(difference.max_rel, scale > 0 ? abs / scale : INFINITY);
    if (abs > tolerance * std::max(1.0, scale)) difference.within = false;
  }
  return difference;
}

nlohmann::json DeviceComparison(const exec::DeviceResult& a, const exec::DeviceResult& b,
                                double tolerance) {
  const auto a_leaves = exec::OutputLeaves(a.output);
  const auto b_leaves = exec::OutputLeaves(b.output);
  nlohmann::json outputs = nlohmann::json::array();
  for (size_t i = 0; i < std::max(a_leaves.size(), b_leaves.size()); ++i) {
    if (i >= a_leaves.size() || i >= b_leaves.size()) {
      outputs.push_back({{"shape", "missing"},
                         {"max_abs", INFINITY},
                         {"max_rel", INFINITY},
                         {"bitwise", false},
                         {"within", false}});
      continue;
    }
    const Difference d = Compare(*a_leaves[i], *b_leaves[i], tolerance);
    outputs.push_back({{"shape", d.shape},
                       {"max_abs", d.max_abs},
                       {"max_rel", d.max_rel},
                       {"bitwise", d.bitwise},
                       {"within", d.within}});
  }
  return {{"device", a.device},
          {"seconds_a", a.seconds},
          {"seconds_b", b.seconds},
          {"outputs", outputs}};
}

// JSON has no infinity; dump() writes null for it.
double Number(const nlohmann::json& value) {
  return value.is_number() ? value.get<double>() : INFINITY;
}

// Prints one row per output (worst over devices); true when all are within
// the tolerance.
bool PrintReport(const std::vector<nlohmann::json>& devices, double tolerance) {
  std::vector<Difference> worst;
  double seconds_a = 0;
  double seconds_b = 0;
  for (const nlohmann::json& device : devices) {
    seconds_a = std::max(seconds_a, device["seconds_a"].get<double>());
    seconds_b = std::max(seconds_b, device["seconds_b"].get<double>());
    const nlohmann::json& outputs = device["outputs"];
    if (worst.size() < outputs.size()) worst.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      Difference& w = worst[i];
      w.shape = outputs[i]["shape"].get<std::string>();
      w.max_abs = std::max(w.max_abs, Number(outputs[i]["max_abs"]));
      w.max_rel = std::max(w.max_rel, Number(outputs[i]["max_rel"]));
      w.bitwise = w.bitwise && outputs[i]["bitwise"].get<bool>();
      w.within = w.within && outputs[i]["within"].get<bool>();
    }
  }
  fmt::print("{:>6} {:<24} {:>14} {:>14} {:>8} {:>8}\n", "output", "shape", "max abs diff",
             "max rel diff", "bitwise", "verdict");
  bool all_within = true;
  for (size_t i = 0; i < worst.size(); ++i) {
    const Difference& w = worst[i];
    all_within = all_within && w.within;
    fmt::print("{:>6} {:<24} {:>14.6g} {:>14.6g} {:>8} {:>8}\n", i, w.shape, w.max_abs, w.max_rel,
               w.bitwise ? "yes" : "no", w.within ? "same" : "DIFFER");
  }
  fmt::print("slowest device: A {:.3f} ms, B {:.3f} ms\n", seconds_a * 1e3, seconds_b * 1e3);
  fmt::print("{}\n", all_within ? (tolerance == 0 ? "bitwise equal on every device"
                                                  : "equal within the tolerance on every device")
                                : "the programs differ");
  return all_within;
}

}  // namespace

void AddCompareCommand(CLI::App& app) {
  struct Options {
    std::string a;
    std::string b;
    ExecutionFlags flags;
    double tolerance = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "compare", "Run two programs on the same inputs and compare their outputs device by device");
  command->add_option("A", options->a, "First HLO module")->required();
  command->add_option("B", options->b, "Second HLO module")->required();
  AddExecutionFlags(*command, options->flags);
  command
      ->add_option("--tolerance", options->tolerance,
                   "Allowed |a-b| per element, relative to max(1, |a|, |b|); 0 (the "
                   "default) asks for bitwise equality")
      ->check(CLI::NonNegativeNumber);
  command->callback([options] {
    std::unique_ptr<ir::Module> a = LoadVerifiedModule(options->a, nullptr);
    std::unique_ptr<ir::Module> b = LoadVerifiedModule(options->b, nullptr);
    const ir::DeviceGrid grid = GridOf(*a, options->flags);
    const ir::DeviceGrid grid_b = GridOf(*b, options->flags);
    if (grid.replica_count != grid_b.replica_count) {
      throw CommandError("the two modules place their devices differently");
    }
    std::unique_ptr<exec::Launch> launch = StartLaunch(options->flags);
    exec::RunOptions run_options = RunOptionsFrom(options->flags);
    run_options.source = options->a;
    Expected<std::vector<exec::DeviceResult>> results_a = launch->Run(*a, grid, run_options);
    if (!results_a.ok()) throw CommandError(results_a.error().ToString(options->a));
    run_options.source = options->b;
    Expected<std::vector<exec::DeviceResult>> results_b = launch->Run(*b, grid, run_options);
    if (!results_b.ok()) throw CommandError(results_b.error().ToString(options->b));

    std::vector<std::string> mine;
    for (size_t i = 0; i < results_a->size(); ++i) {
      mine.push_back(DeviceComparison((*results_a)[i], (*results_b)[i], options->tolerance).dump());
    }
    Expected<std::vector<std::string>> texts = launch->GatherAtRoot(std::move(mine));
    if (!texts.ok()) throw CommandError(texts.error().ToString());
    bool same = true;
    if (launch->is_root()) {
      std::vector<nlohmann::json> devices;
      for (const std::string& text : *texts) devices.push_back(nlohmann::json::parse(text));
      fmt::print("compare {} and {} on {} device(s), backend {}, seed {}{}\n", options->a,
                 options->b, options->flags.devices, options->flags.backend, options->flags.seed,
                 options->flags.deterministic ? ", deterministic" : "");
      same = PrintReport(devices, options->tolerance);
    }
    if (Status synced = launch->AwaitRoot(); !synced.ok()) {
      throw CommandError(synced.error().ToString());
    }
    if (!same) throw CommandError("");
  });
}

}  // namespace loom::cli
