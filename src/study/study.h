// `loom study`: models x plans x targets, each training step built by the
// model builder (model/training_step.h) and simulated in the three
// pipelines of study/pipelines.h, gathered into a table (markdown, CSV,
// JSON) and plots (study/svg.h): the speed-up of the full pipeline against
// chips, exposed communication before and after, MFU.
//
// A spec is a JSON object:
//   {"models": ["megatron-22b", {"preset": "llama3-8b", "layers": 4}],
//    "plans": [{"tensor": 8, "data": 2}, {"tensor": 8, "data": 4,
//              "sequence_parallel": true}],
//    "targets": ["dgx-h100:auto", "tpu-v4:auto"],
//    "layers": 4,
//    "full_pipeline": "collective-matmul{judge=simulate},async-collectives,schedule"}
// models: presets or model objects (ParseModelConfig); plans: plan objects
// (ParsePlan); targets: any --target spelling, a family being sized to each
// plan's devices; layers (optional): every model's layer count, to keep the
// simulations short (the step then scales with the layers it has);
// full_pipeline (optional): the passes of the full pipeline, a variant of
// study/pipelines.h's kFullPipelinePasses, checked when the spec is read.
// Every
// model runs under every plan on every target; a case that cannot run (the
// plan does not divide the model, the simulation is too large) is a row
// that says why.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/training_step.h"
#include "sim/options.h"
#include "study/pipelines.h"
#include "support/status.h"

namespace loom::study {

struct StudyCase {
  model::ModelConfig model;
  model::ParallelPlan plan;
  std::string target;  // as given in the spec
  std::string full_pipeline = std::string(kFullPipelinePasses);
};

struct StudySpec {
  std::vector<StudyCase> cases;  // models x plans x targets, in that order
};

Expected<StudySpec> ParseStudySpec(const std::string& text, std::string_view where);

struct StudyRow {
  std::string model, plan, target;  // the target as resolved ("dgx-h100-x2")
  std::string target_spec;          // as the spec names it ("dgx-h100:auto"): a plot's line
  int64_t devices = 0;
  double build_seconds = 0;
  int64_t instructions = 0;
  // By pipeline (as written, async+schedule, full): the simulated step,
  // the mean exposed communication per device, MFU (model FLOPs, PaLM's
  // count: model::ModelFlopsPerStep, over the step times the devices' peak
  // for the compute type) and HFU (the program's dot FLOPs, recomputation
  // and bubbles included, over each dot type's peak: sim::SimReport::mfu).
  std::array<double, 3> step{}, exposed{}, mfu{}, hfu{};
  int64_t memory_bytes = 0;     // per device, by the plan's arithmetic (model::Footprint)
  int64_t peak_bytes = 0;       // the step's peak live bytes, fused as the target fuses
  bool fits = true;             // that peak within the target device's memory (as `loom model`)
  double simulate_seconds = 0;  // wall time of the three simulations
  std::string full_pipeline;    // the full pipeline's passes
  std::string error;            // a case that could not run says why (the rest is empty)

  double Speedup(size_t over) const { return step[2] > 0 ? step[over] / step[2] : 0; }
};

// Progress: (cases done, cases in all, the case about to run).
using Progress = std::function<void(size_t, size_t, const StudyCase&)>;

StudyRow RunCase(const StudyCase& c, const sim::SimOptions& options);
std::vector<StudyRow> RunStudy(const StudySpec& spec, const sim::SimOptions& options,
                               const Progress& progress = {});

std::string StudyMarkdown(const std::vector<StudyRow>& rows);
std::string StudyCsv(const std::vector<StudyRow>& rows);
std::string StudyJson(const std::vector<StudyRow>& rows);
// The plots, as SVG documents: the full pipeline's speed-up over
// async+schedule (and over as written) against devices, one line per model
// and target; the mean exposed communication of async+schedule and of the
// full pipeline; MFU of the three pipelines.
std::string SpeedupPlot(const std::vector<StudyRow>& rows);
std::string ExposedPlot(const std::vector<StudyRow>& rows);
std::string MfuPlot(const std::vector<StudyRow>& rows);

}  // namespace loom::study
