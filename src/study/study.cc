#include "study/study.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "analysis/live_bytes.h"
#include "cost/target.h"
#include "cost/target_cost_model.h"
#include "ir/parser.h"
#include "ir/shape.h"
#include "pass/registry.h"
#include "sim/report.h"
#include "study/pipelines.h"
#include "study/svg.h"
#include "support/units.h"

namespace loom::study {

namespace {

using Json = nlohmann::json;

Expected<model::ModelConfig> ModelOf(const Json& entry, std::string_view where) {
  if (entry.is_string()) return model::ModelPreset(entry.get<std::string>());
  if (entry.is_object()) return model::ParseModelConfig(entry.dump(), where);
  return Error{fmt::format("{}: a model is a preset name or an object", where)};
}

}  // namespace

namespace {

// Whether `c`'s full pipeline parses, with its passes' options, for its
// target (a pass that needs a cost model gets one).
Status CheckPipeline(const StudyCase& c, std::string_view where) {
  Expected<cost::Target> target = cost::FindTarget(c.target, model::Devices(c.plan));
  if (!target.ok()) return OkStatus();  // that case's row says so
  pass::PassContext context;
  context.cost_model = std::make_shared<cost::TargetCostModel>(*target);
  Expected<pass::Pipeline> pipeline = pass::ParsePipeline(c.full_pipeline, context);
  if (!pipeline.ok()) {
    return Error{fmt::format("{}: full_pipeline: {}", where, pipeline.error().message)};
  }
  return OkStatus();
}

}  // namespace

Expected<StudySpec> ParseStudySpec(const std::string& text, std::string_view where) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error{fmt::format("{}: not a JSON object", where)};
  }
  for (const auto& [key, value] : json.items()) {
    if (key != "models" && key != "plans" && key != "targets" && key != "layers" &&
        key != "full_pipeline") {
      return Error{fmt::format(
          "{}: unknown key '{}' (models, plans, targets, layers, full_pipeline)", where, key)};
    }
  }
  for (const char* key : {"models", "plans", "targets"}) {
    if (!json.contains(key) || !json[key].is_array() || json[key].empty()) {
      return Error{fmt::format("{}: '{}' must be a non-empty array", where, key)};
    }
  }
  std::optional<int64_t> layers;
  if (json.contains("layers")) {
    if (!json["layers"].is_number_integer() || json["layers"].get<int64_t>() < 1) {
      return Error{fmt::format("{}: 'layers' must be a positive integer", where)};
    }
    layers = json["layers"].get<int64_t>();
  }
  std::vector<model::ModelConfig> models;
  for (size_t i = 0; i < json["models"].size(); ++i) {
    const std::string at = fmt::format("{}: models[{}]", where, i);
    Expected<model::ModelConfig> m = ModelOf(json["models"][i], at);
    if (!m.ok()) return Error{fmt::format("{}: {}", at, m.error().message)};
    if (layers) *m = model::WithLayers(*m, *layers);
    models.push_back(std::move(*m));
  }
  std::vector<model::ParallelPlan> plans;
  for (size_t i = 0; i < json["plans"].size(); ++i) {
    const std::string at = fmt::format("{}: plans[{}]", where, i);
    if (!json["plans"][i].is_object()) return Error{fmt::format("{}: a plan is an object", at)};
    LOOM_ASSIGN_OR_RETURN(model::ParallelPlan plan, model::ParsePlan(json["plans"][i].dump(), at));
    if (!json["plans"][i].contains("name")) plan.name = model::PlanName(plan);
    plans.push_back(std::move(plan));
  }
  std::string full_pipeline(kFullPipelinePasses);
  if (json.contains("full_pipeline")) {
    if (!json["full_pipeline"].is_string()) {
      return Error{fmt::format("{}: 'full_pipeline' must be a string of passes", where)};
    }
    full_pipeline = json["full_pipeline"].get<std::string>();
  }
  StudySpec spec;
  for (const model::ModelConfig& m : models) {
    for (const model::ParallelPlan& p : plans) {
      for (size_t i = 0; i < json["targets"].size(); ++i) {
        if (!json["targets"][i].is_string()) {
          return Error{fmt::format("{}: targets[{}] must be a string", where, i)};
        }
        spec.cases.push_back({m, p, json["targets"][i].get<std::string>(), full_pipeline});
      }
    }
  }
  LOOM_RETURN_IF_ERROR(CheckPipeline(spec.cases.front(), where));
  return spec;
}

StudyRow RunCase(const StudyCase& c, const sim::SimOptions& options) {
  StudyRow row;
  row.model = c.model.name;
  row.plan = c.plan.name;
  row.target = c.target;
  row.target_spec = c.target;
  row.devices = model::Devices(c.plan);
  const auto fail = [&](const std::string& why) {
    row.error = why;
    return row;
  };
  const auto start = std::chrono::steady_clock::now();
  Expected<std::string> text = model::BuildTrainingStep(c.model, c.plan);
  if (!text.ok()) return fail(text.error().message);
  Expected<std::unique_ptr<ir::Module>> module = ir::ParseModule(*text);
  if (!module.ok()) return fail(module.error().ToString());
  row.build_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.instructions = (*module)->instruction_count();
  Expected<cost::Target> target = cost::FindTarget(c.target, row.devices);
  if (!target.ok()) return fail(target.error().message);
  row.target = target->name();
  const model::MemoryFootprint memory = model::Footprint(c.model, c.plan);
  row.memory_bytes = memory.total();
  row.peak_bytes = analysis::PeakLiveBytes(**module, target->compute().fuses_elementwise
                                                         ? analysis::Fusion::kFused
                                                         : analysis::Fusion::kNone);
  row.fits = static_cast<double>(row.peak_bytes) <= target->compute().memory_bytes;
  const auto simulated = std::chrono::steady_clock::now();
  row.full_pipeline = c.full_pipeline;
  Expected<std::array<sim::SimReport, 3>> reports =
      SimulatePipelines(**module, *target, options, /*deterministic=*/false, c.full_pipeline);
  if (!reports.ok()) return fail(reports.error().message);
  row.simulate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - simulated).count();
  const std::optional<ir::PrimitiveType> compute = ir::ParsePrimitiveType(c.model.compute_type);
  const double peak = compute ? target->compute().PeakFlops(*compute) : 0;
  for (size_t i = 0; i < 3; ++i) {
    row.step[i] = (*reports)[i].step_seconds;
    row.exposed[i] = sim::MeanOverDevices((*reports)[i], &sim::DeviceReport::exposed_communication);
    const double capacity = row.step[i] * static_cast<double>(row.devices) * peak;
    row.mfu[i] = capacity > 0 ? model::ModelFlopsPerStep(c.model) / capacity : 0;
    row.hfu[i] = (*reports)[i].mfu;
  }
  return row;
}

std::vector<StudyRow> RunStudy(const StudySpec& spec, const sim::SimOptions& options,
                               const Progress& progress) {
  std::vector<StudyRow> rows;
  for (size_t i = 0; i < spec.cases.size(); ++i) {
    if (progress) progress(i, spec.cases.size(), spec.cases[i]);
    rows.push_back(RunCase(spec.cases[i], options));
  }
  return rows;
}

std::string StudyMarkdown(const std::vector<StudyRow>& rows) {
  std::string out;
  // A variant of the full pipeline is named above the table.
  for (const StudyRow& r : rows) {
    if (r.error.empty() && r.full_pipeline != kFullPipelinePasses) {
      out = fmt::format("full pipeline: `{}`\n\n", r.full_pipeline);
      break;
    }
  }
  out +=
      "| model | plan | target | devices | build | instructions | as written | async+schedule | "
      "full pipeline | full / async+schedule | full / as written | exposed: async+schedule → "
      "full | MFU: async+schedule → full | HFU: async+schedule → full | memory per device "
      "(peak) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const StudyRow& r : rows) {
    if (!r.error.empty()) {
      out += fmt::format("| {} | {} | {} | {} | {} ||||||||||\n", r.model, r.plan, r.target,
                         r.devices, "not run: " + r.error);
      continue;
    }
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3f}x | {:.3f}x | {} → {} | "
        "{:.1f}% → {:.1f}% | {:.1f}% → {:.1f}% | {} (peak {}{}) |\n",
        r.model, r.plan, r.target, r.devices, FormatSeconds(r.build_seconds), r.instructions,
        FormatSeconds(r.step[0]), FormatSeconds(r.step[1]), FormatSeconds(r.step[2]), r.Speedup(1),
        r.Speedup(0), FormatSeconds(r.exposed[1]), FormatSeconds(r.exposed[2]), 100 * r.mfu[1],
        100 * r.mfu[2], 100 * r.hfu[1], 100 * r.hfu[2], FormatBytes(r.memory_bytes),
        FormatBytes(r.peak_bytes), r.fits ? "" : ", does not fit");
  }
  return out;
}

std::string StudyCsv(const std::vector<StudyRow>& rows) {
  std::string out =
      "model,plan,target,devices,build_seconds,instructions,step_as_written,"
      "step_async_schedule,step_full,speedup_over_async_schedule,speedup_over_as_written,"
      "exposed_as_written,exposed_async_schedule,exposed_full,mfu_as_written,"
      "mfu_async_schedule,mfu_full,hfu_as_written,hfu_async_schedule,hfu_full,memory_bytes,"
      "peak_bytes,fits,"
      "error\n";
  for (const StudyRow& r : rows) {
    std::string error = r.error;
    for (char& ch : error) {
      if (ch == '"') ch = '\'';
    }
    out += fmt::format(
        "{},{},{},{},{:.6g},{},{:.9g},{:.9g},{:.9g},{:.6g},{:.6g},{:.9g},{:.9g},{:.9g},{:.6g},"
        "{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{},{},{},\"{}\"\n",
        r.model, r.plan, r.target, r.devices, r.build_seconds, r.instructions, r.step[0], r.step[1],
        r.step[2], r.Speedup(1), r.Speedup(0), r.exposed[0], r.exposed[1], r.exposed[2], r.mfu[0],
        r.mfu[1], r.mfu[2], r.hfu[0], r.hfu[1], r.hfu[2], r.memory_bytes, r.peak_bytes,
        r.fits ? "true" : "false", error);
  }
  return out;
}

std::string StudyJson(const std::vector<StudyRow>& rows) {
  Json cases = Json::array();
  for (const StudyRow& r : rows) {
    Json row = {{"model", r.model}, {"plan", r.plan}, {"target", r.target}, {"devices", r.devices}};
    if (!r.error.empty()) {
      row["error"] = r.error;
    } else {
      row["build_seconds"] = r.build_seconds;
      row["instructions"] = r.instructions;
      row["simulate_seconds"] = r.simulate_seconds;
      Json pipelines = Json::object();
      for (size_t i = 0; i < 3; ++i) {
        pipelines[std::string(PipelineName(kPipelines[i]))] = {
            {"step_seconds", r.step[i]},
            {"exposed_communication_seconds", r.exposed[i]},
            {"mfu", r.mfu[i]},
            {"hfu", r.hfu[i]}};
      }
      pipelines[std::string(PipelineName(Pipeline::kFull))]["passes"] = r.full_pipeline;
      row["pipelines"] = pipelines;
      row["speedup_over_async_schedule"] = r.Speedup(1);
      row["speedup_over_as_written"] = r.Speedup(0);
      row["memory_bytes"] = r.memory_bytes;
      row["peak_bytes"] = r.peak_bytes;
      row["fits"] = r.fits;
    }
    cases.push_back(row);
  }
  return Json{{"cases", cases}}.dump(2) + "\n";
}

namespace {

// One line per (model, target) over the rows that ran, y from `value`.
std::vector<Series> ByModelAndTarget(const std::vector<StudyRow>& rows,
                                     const std::function<double(const StudyRow&)>& value,
                                     const std::string& suffix, bool dashed) {
  std::map<std::string, Series> lines;
  for (const StudyRow& r : rows) {
    if (!r.error.empty()) continue;
    Series& s = lines[r.model + " on " + r.target_spec];
    s.name = r.model + ", " + r.target_spec + suffix;
    s.dashed = dashed;
    s.points.emplace_back(static_cast<double>(r.devices), value(r));
  }
  std::vector<Series> out;
  for (auto& [key, s] : lines) out.push_back(std::move(s));
  return out;
}

std::string Plot(std::string title, std::string y_label, std::vector<Series> series,
                 bool y_from_zero = true) {
  Chart chart;
  chart.y_from_zero = y_from_zero;
  chart.title = std::move(title);
  chart.x_label = "devices";
  chart.y_label = std::move(y_label);
  chart.log2_x = true;
  chart.series = std::move(series);
  return LineChartSvg(chart);
}

std::vector<Series> Both(std::vector<Series> a, std::vector<Series> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::string SpeedupPlot(const std::vector<StudyRow>& rows) {
  return Plot("Full collective-matmul pipeline: speed-up", "speed-up (x)",
              Both(ByModelAndTarget(
                       rows, [](const StudyRow& r) { return r.Speedup(1); }, " / async", false),
                   ByModelAndTarget(
                       rows, [](const StudyRow& r) { return r.Speedup(0); }, " / written", true)),
              /*y_from_zero=*/false);
}

std::string ExposedPlot(const std::vector<StudyRow>& rows) {
  return Plot("Exposed communication per device", "seconds",
              Both(ByModelAndTarget(
                       rows, [](const StudyRow& r) { return r.exposed[1]; }, " async", true),
                   ByModelAndTarget(
                       rows, [](const StudyRow& r) { return r.exposed[2]; }, " full", false)));
}

std::string MfuPlot(const std::vector<StudyRow>& rows) {
  return Plot("Model FLOPs utilisation", "MFU (%)",
              Both(ByModelAndTarget(
                       rows, [](const StudyRow& r) { return 100 * r.mfu[1]; }, " async", true),
                   ByModelAndTarget(
                       rows, [](const StudyRow& r) { return 100 * r.mfu[2]; }, " full", false)));
}

}  // namespace loom::study
