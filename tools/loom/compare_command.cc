// `loom compare A.hlo B.hlo --devices N [--seed S] [--backend ...]
// [--tolerance 0|rounding|T]`: run two programs on the same inputs and
// compare every output of every device: bitwise, within the rounding of
// reordered sums (exec/tensor_compare.h), or within a tolerance.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include "analysis/flops.h"
#include "exec/cpu/cpu_device.h"
#include "exec/tensor_compare.h"
#include "loom/command.h"

namespace loom::cli {
namespace {

// What --tolerance asks for: bitwise equality (0), differences within the
// rounding of reordered sums ("rounding"), or |a-b| within T times
// max(1, |a|, |b|) per element. Without it, what the dot kernels guarantee:
// bitwise with --deterministic, within rounding with OpenBLAS, whose
// kernels sum a block of a product differently from the whole on some CPUs
// (README, "Exactness of the executor"), so that the verdict is the same on
// every CPU.
struct Tolerance {
  bool rounding = false;
  double value = 0;
};

std::optional<Tolerance> ParseTolerance(const std::string& text) {
  if (text == "rounding") return Tolerance{.rounding = true};
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(value >= 0) || !std::isfinite(value)) {
    return std::nullopt;
  }
  return Tolerance{.value = value};
}

// An option error (exit 2) rather than a failed run.
CLI::Validator IsTolerance() {
  return CLI::Validator(
      [](const std::string& text) {
        return ParseTolerance(text) ? std::string()
                                    : fmt::format(
                                          "'{}' is neither 'rounding' nor a finite "
                                          "number >= 0",
                                          text);
      },
      "0|rounding|T");
}

nlohmann::json OutputComparison(const exec::Tensor& a, const exec::Tensor& b, int64_t longest_sum) {
  const exec::TensorDifference d = exec::CompareTensors(a, b);
  std::string shape = a.shape().ToString(false);
  if (!d.shapes_match) shape += " vs " + b.shape().ToString(false);
  return {{"shape", shape},
          {"max_abs", d.max_abs},
          {"max_rel", d.max_rel},
          {"max_ulps", d.max_ulps},
          {"max_scaled", d.max_scaled},
          {"error_in_u", d.error_in_u},
          {"elements_differing", d.elements_differing},
          {"bitwise", d.bitwise},
          {"envelope_in_u", exec::RoundingEnvelope(a.type(), longest_sum)},
          {"rounding", exec::IsRoundingDifference(d, a.type(), longest_sum)}};
}

nlohmann::json DeviceComparison(const exec::DeviceResult& a, const exec::DeviceResult& b,
                                int64_t longest_sum) {
  const auto a_leaves = exec::OutputLeaves(a.output);
  const auto b_leaves = exec::OutputLeaves(b.output);
  nlohmann::json outputs = nlohmann::json::array();
  for (size_t i = 0; i < std::max(a_leaves.size(), b_leaves.size()); ++i) {
    if (i >= a_leaves.size() || i >= b_leaves.size()) {
      outputs.push_back({{"shape", "missing"},
                         {"max_abs", INFINITY},
                         {"max_rel", INFINITY},
                         {"max_ulps", INFINITY},
                         {"max_scaled", INFINITY},
                         {"error_in_u", INFINITY},
                         {"envelope_in_u", 0},
                         {"elements_differing", 0},
                         {"bitwise", false},
                         {"rounding", false}});
      continue;
    }
    outputs.push_back(OutputComparison(*a_leaves[i], *b_leaves[i], longest_sum));
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

// One output, worst over devices.
struct Worst {
  std::string shape;
  double max_abs = 0, max_rel = 0, max_ulps = 0, max_scaled = 0, error_in_u = 0, envelope = 0;
  bool bitwise = true, rounding = true;

  void Add(const nlohmann::json& output) {
    shape = output["shape"].get<std::string>();
    max_abs = std::max(max_abs, Number(output["max_abs"]));
    max_rel = std::max(max_rel, Number(output["max_rel"]));
    max_ulps = std::max(max_ulps, Number(output["max_ulps"]));
    max_scaled = std::max(max_scaled, Number(output["max_scaled"]));
    error_in_u = std::max(error_in_u, Number(output["error_in_u"]));
    envelope = output["envelope_in_u"].get<double>();
    const bool same = output["bitwise"].get<bool>();
    bitwise = bitwise && same;
    rounding = rounding && (same || output["rounding"].get<bool>());
  }
  bool Within(const Tolerance& tolerance) const {
    if (tolerance.rounding) return rounding;
    return tolerance.value == 0 ? bitwise : max_scaled <= tolerance.value;
  }
  std::string_view Verdict(const Tolerance& tolerance) const {
    if (bitwise) return "same";
    if (rounding) return "rounding";
    return Within(tolerance) ? "within" : "DIFFER";
  }
};

// The verdict over every device: per output the worst difference, and
// what the whole comparison amounts to.
struct Comparison {
  std::vector<Worst> outputs;
  double seconds_a = 0;  // slowest device
  double seconds_b = 0;
  bool within = true;  // every output within the tolerance asked for
  bool bitwise = true;
  bool rounding = true;    // every output bitwise or within rounding
  double worst_ratio = 0;  // error / envelope, over outputs

  // "bitwise", "rounding", "tolerance" (within the tolerance asked for,
  // not within rounding) or "differ".
  std::string_view Verdict() const {
    if (bitwise) return "bitwise";
    if (within && rounding) return "rounding";
    if (within) return "tolerance";
    return "differ";
  }
};

Comparison Compare(const std::vector<nlohmann::json>& devices, const Tolerance& tolerance) {
  Comparison comparison;
  for (const nlohmann::json& device : devices) {
    comparison.seconds_a = std::max(comparison.seconds_a, device["seconds_a"].get<double>());
    comparison.seconds_b = std::max(comparison.seconds_b, device["seconds_b"].get<double>());
    const nlohmann::json& outputs = device["outputs"];
    if (comparison.outputs.size() < outputs.size()) comparison.outputs.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) comparison.outputs[i].Add(outputs[i]);
  }
  for (const Worst& w : comparison.outputs) {
    comparison.within = comparison.within && w.Within(tolerance);
    comparison.bitwise = comparison.bitwise && w.bitwise;
    comparison.rounding = comparison.rounding && w.rounding;
    if (w.envelope > 0) {
      comparison.worst_ratio = std::max(comparison.worst_ratio, w.error_in_u / w.envelope);
    }
  }
  return comparison;
}

// One row per output (worst over devices), then the verdict in words.
void PrintReport(const Comparison& comparison, const Tolerance& tolerance, int64_t longest_sum) {
  fmt::print("{:>6} {:<24} {:>12} {:>12} {:>9} {:>10} {:>9} {:>9}\n", "output", "shape",
             "max abs diff", "max rel diff", "max ulps", "error (u)", "envelope", "verdict");
  for (size_t i = 0; i < comparison.outputs.size(); ++i) {
    const Worst& w = comparison.outputs[i];
    fmt::print("{:>6} {:<24} {:>12.6g} {:>12.6g} {:>9.4g} {:>10.4g} {:>9.4g} {:>9}\n", i, w.shape,
               w.max_abs, w.max_rel, w.max_ulps, w.error_in_u, w.envelope, w.Verdict(tolerance));
  }
  fmt::print("slowest device: A {:.3f} ms, B {:.3f} ms\n", comparison.seconds_a * 1e3,
             comparison.seconds_b * 1e3);
  const std::string rounding_note = fmt::format(
      "within the rounding of reordered sums (max|a-b| / (u max|b|) at most {:.2g} of the "
      "envelope for sums of up to {} terms)",
      comparison.worst_ratio, longest_sum);
  if (comparison.bitwise) {
    fmt::print("bitwise equal on every device\n");
  } else if (comparison.within && comparison.rounding) {
    fmt::print("equal {}\n", rounding_note);
  } else if (comparison.within) {
    fmt::print("equal within the tolerance on every device\n");
  } else if (comparison.rounding) {
    fmt::print("the programs differ, but only {} (--tolerance rounding accepts that)\n",
               rounding_note);
  } else {
    fmt::print("the programs differ\n");
  }
}

// JSON has no infinity: a difference that is infinite (an output missing,
// or a NaN against a number) is written as null.
nlohmann::json Finite(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json ComparisonJson(const Comparison& comparison, const Tolerance& tolerance,
                              int64_t longest_sum) {
  nlohmann::json outputs = nlohmann::json::array();
  for (size_t i = 0; i < comparison.outputs.size(); ++i) {
    const Worst& w = comparison.outputs[i];
    outputs.push_back({{"output", i},
                       {"shape", w.shape},
                       {"max_abs", Finite(w.max_abs)},
                       {"max_rel", Finite(w.max_rel)},
                       {"max_ulps", Finite(w.max_ulps)},
                       {"max_scaled", Finite(w.max_scaled)},
                       {"error_in_u", Finite(w.error_in_u)},
                       {"envelope_in_u", w.envelope},
                       {"bitwise", w.bitwise},
                       {"rounding", w.rounding},
                       {"within", w.Within(tolerance)},
                       {"verdict", w.Verdict(tolerance)}});
  }
  return {{"tolerance",
           tolerance.rounding ? nlohmann::json("rounding") : nlohmann::json(tolerance.value)},
          {"verdict", comparison.Verdict()},
          {"within", comparison.within},
          {"longest_sum", longest_sum},
          {"worst_error_over_envelope", comparison.worst_ratio},
          {"slowest_seconds_a", comparison.seconds_a},
          {"slowest_seconds_b", comparison.seconds_b},
          {"outputs", outputs}};
}

}  // namespace

void AddCompareCommand(CLI::App& app) {
  struct Options {
    std::string a;
    std::string b;
    ExecutionFlags flags;
    std::string tolerance;  // empty: what the kernels guarantee (DefaultTolerance)
    std::string json;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "compare", "Run two programs on the same inputs and compare their outputs device by device");
  command->add_option("A", options->a, "First HLO module")->required();
  command->add_option("B", options->b, "Second HLO module")->required();
  AddExecutionFlags(*command, options->flags);
  command
      ->add_option(
          "--tolerance", options->tolerance,
          "0: bitwise equality (the default with --deterministic); 'rounding': differences "
          "within the rounding of reordered sums, the default with OpenBLAS (max|a-b| <= E u "
          "max|b|, u the unit roundoff of the output type, E = max(8, 2 sqrt(n) u_f32 / u) for "
          "sums of n terms); a number T: |a-b| <= T max(1, |a|, |b|) per element")
      ->check(IsTolerance());
  command->add_option("--json", options->json,
                      "Also write the verdict as JSON to this file ('-': to stdout, instead of "
                      "the text)");
  command->callback([options] {
    const Tolerance tolerance = options->tolerance.empty()
                                    ? Tolerance{.rounding = !options->flags.deterministic}
                                    : ParseTolerance(options->tolerance).value_or(Tolerance{});
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

    const int64_t longest_sum =
        std::max(analysis::LongestSum(*a, grid), analysis::LongestSum(*b, grid));
    const bool same = EndJobOnFailure(*launch, [&] {
      std::vector<std::string> mine;
      for (size_t i = 0; i < results_a->size(); ++i) {
        mine.push_back(DeviceComparison((*results_a)[i], (*results_b)[i], longest_sum).dump());
      }
      Expected<std::vector<std::string>> texts = launch->GatherAtRoot(std::move(mine));
      if (!texts.ok()) throw CommandError(texts.error().ToString());
      bool all_same = true;
      if (launch->is_root()) {
        std::vector<nlohmann::json> devices;
        for (const std::string& text : *texts) devices.push_back(nlohmann::json::parse(text));
        const Comparison comparison = Compare(devices, tolerance);
        const std::string kernels = exec::cpu::DotKernelName(options->flags.deterministic);
        if (options->json != "-") {
          fmt::print("compare {} and {} on {} device(s), backend {}, seed {}, dot kernels {}\n",
                     options->a, options->b, options->flags.devices, options->flags.backend,
                     options->flags.seed, kernels);
          PrintReport(comparison, tolerance, longest_sum);
        }
        if (!options->json.empty()) {
          nlohmann::json json = RunHeaderJson(options->flags);
          json["a"] = options->a;
          json["b"] = options->b;
          json.update(ComparisonJson(comparison, tolerance, longest_sum));
          WriteOutput(options->json, json.dump(2) + "\n");
        }
        all_same = comparison.within;
      }
      if (Status synced = launch->AwaitRoot(); !synced.ok()) {
        throw CommandError(synced.error().ToString());
      }
      return all_same;
    });
    if (!same) throw CommandError("");
  });
}

}  // namespace loom::cli
