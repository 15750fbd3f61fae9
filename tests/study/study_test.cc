// loom study on tiny cases: the spec's cross product, a row per case (a
// case that cannot run says why), the three pipelines' steps, and the
// table, CSV, JSON and SVG that come out.
#include "study/study.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "study/svg.h"

namespace loom::study {
namespace {

TEST(StudySpec, IsTheCrossProductAndNamesWhatIsWrong) {
  Expected<StudySpec> spec = ParseStudySpec(R"({"models": ["tiny", {"preset": "tiny-gqa"}],
      "plans": [{"tensor": 2}, {"tensor": 2, "data": 2, "sequence_parallel": true}],
      "targets": ["dgx-h100:auto", "tpu-v4:auto", "loopback-2gbit"], "layers": 1})",
                                            "s.json");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_EQ(spec->cases.size(), 2u * 2u * 3u);
  EXPECT_EQ(spec->cases[0].model.name, "tiny");
  EXPECT_EQ(spec->cases[0].model.layers, 1);
  EXPECT_EQ(spec->cases[3].plan.name, "tp2_dp2_sp");
  EXPECT_EQ(spec->cases[11].target, "loopback-2gbit");
  const auto error = [](const std::string& text) {
    Expected<StudySpec> bad = ParseStudySpec(text, "s.json");
    return bad.ok() ? std::string("accepted") : bad.error().message;
  };
  EXPECT_EQ(error(R"({"models": ["tiny"], "plans": [{}], "targets": []})"),
            "s.json: 'targets' must be a non-empty array");
  EXPECT_EQ(error(R"({"models": ["tiny"], "plans": [{}], "targets": ["x"], "chips": 1})"),
            "s.json: unknown key 'chips' (models, plans, targets, layers, full_pipeline)");
  EXPECT_EQ(error(R"({"models": ["tiny"], "plans": [{}], "targets": ["dgx-h100"],
      "full_pipeline": "collective-matmul{judge=guess}"})")
                .rfind("s.json: full_pipeline: ", 0),
            0u);
  EXPECT_EQ(error(R"({"models": ["tiny"], "plans": [{}], "targets": ["x"], "full_pipeline": 1})"),
            "s.json: 'full_pipeline' must be a string of passes");
  EXPECT_EQ(error(R"({"models": ["nope"], "plans": [{}], "targets": ["x"]})")
                .rfind("s.json: models[0]: no model preset 'nope'", 0),
            0u);
  EXPECT_EQ(error(R"({"models": ["tiny"], "plans": [{"tensor": "2"}], "targets": ["x"]})"),
            "s.json: plans[0]: 'tensor' must be an integer");
  EXPECT_EQ(error("[1]"), "s.json: not a JSON object");
}

// A variant of the full pipeline runs in its place, and the reports name it:
// async-collectives alone (starts right before their dones, nothing
// scheduled between) as the "full" pipeline gives exactly the step as
// written, longer than async+schedule's (where the default full pipeline
// is async+schedule's step: the gate takes nothing in this tiny step).
TEST(Study, RunsAVariantOfTheFullPipelineAndNamesIt) {
  Expected<StudySpec> spec = ParseStudySpec(R"({"models": ["tiny"],
      "plans": [{"tensor": 2, "sequence_parallel": true}], "targets": ["dgx-h100:auto"],
      "full_pipeline": "async-collectives"})",
                                            "s.json");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  const std::vector<StudyRow> rows = RunStudy(*spec, sim::SimOptions{}, {});
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0].error.empty()) << rows[0].error;
  EXPECT_EQ(rows[0].step[2], rows[0].step[0]);
  EXPECT_GT(rows[0].step[2], rows[0].step[1]);
  EXPECT_EQ(StudyMarkdown(rows).rfind("full pipeline: `async-collectives`\n\n| model", 0), 0u);
  const nlohmann::json json = nlohmann::json::parse(StudyJson(rows));
  EXPECT_EQ(json["cases"][0]["pipelines"]["full pipeline"]["passes"], "async-collectives");
}

TEST(Study, SimulatesEveryCaseInThreePipelinesAndWritesItsReports) {
  Expected<StudySpec> spec = ParseStudySpec(R"({"models": ["tiny"],
      "plans": [{"tensor": 2, "sequence_parallel": true}, {"tensor": 2, "data": 2},
                {"tensor": 8}],
      "targets": ["dgx-h100:auto"]})",
                                            "s.json");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  size_t calls = 0;
  const std::vector<StudyRow> rows =
      RunStudy(*spec, sim::SimOptions{}, [&](size_t done, size_t total, const StudyCase&) {
        EXPECT_EQ(done, calls++);
        EXPECT_EQ(total, 3u);
      });
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(calls, 3u);
  for (size_t i = 0; i < 2; ++i) {
    const StudyRow& r = rows[i];
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.target, "dgx-h100");
    EXPECT_GT(r.instructions, 100);
    for (double step : r.step) EXPECT_GT(step, 0);
    // Scheduling never makes the step longer than the program as written
    // here, and the gate keeps nothing slower than async+schedule.
    EXPECT_LE(r.step[1], r.step[0] * (1 + 1e-9));
    EXPECT_LE(r.step[2], r.step[1] * (1 + 1e-9));
    EXPECT_GT(r.memory_bytes, 0);
    // The peak holds everything the footprint counts, and the temporaries.
    EXPECT_GT(r.peak_bytes, r.memory_bytes);
    // The program computes more than the model's FLOPs (the layers again
    // under full recomputation, the one-hot embedding), never less.
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_GT(r.mfu[i], 0);
      EXPECT_LT(r.mfu[i], r.hfu[i]);
    }
  }
  EXPECT_EQ(rows[1].devices, 4);
  // 4 heads do not split 8 ways: a row that says so.
  EXPECT_NE(rows[2].error.find("does not divide by the tensor axis"), std::string::npos)
      << rows[2].error;

  const std::string table = StudyMarkdown(rows);
  EXPECT_NE(table.find("| tiny | tp2_dp1_sp | dgx-h100 | 2 |"), std::string::npos) << table;
  EXPECT_NE(table.find("not run: "), std::string::npos);
  const std::string csv = StudyCsv(rows);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  const nlohmann::json json = nlohmann::json::parse(StudyJson(rows));
  ASSERT_EQ(json["cases"].size(), 3u);
  EXPECT_DOUBLE_EQ(json["cases"][0]["pipelines"]["full pipeline"]["step_seconds"].get<double>(),
                   rows[0].step[2]);
  EXPECT_TRUE(json["cases"][2].contains("error"));
  for (const std::string& svg : {SpeedupPlot(rows), ExposedPlot(rows), MfuPlot(rows)}) {
    EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    EXPECT_NE(svg.find("tiny, dgx-h100:auto"), std::string::npos);  // the legend
  }
}

TEST(LineChart, PlacesPointsOnItsAxesAndEscapesText) {
  Chart chart;
  chart.title = "a < b & c";
  chart.log2_x = true;
  chart.series = {{"s", {{8, 1.0}, {32, 2.0}}, false}};
  const std::string svg = LineChartSvg(chart);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  // 8 and 32 at the two ends of the x axis, 16 between them.
  EXPECT_NE(svg.find(">16</text>"), std::string::npos);
  EXPECT_EQ(LineChartSvg(Chart{}).find("no data") != std::string::npos, true);
}

}  // namespace
}  // namespace loom::study
