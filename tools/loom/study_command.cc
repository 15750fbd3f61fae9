// `loom study SPEC.json [-o DIR] [--max-messages N]`: models x plans x
// targets, each step built and simulated as written, with async+schedule
// and with the full pipeline (study/study.h); prints the markdown table
// and writes DIR/study.{md,csv,json} and DIR/{speedup,exposed,mfu}.svg.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "loom/command.h"
#include "study/study.h"

namespace loom::cli {

namespace {

struct StudyFlags {
  std::string spec;
  std::string output_dir;
  int64_t max_messages = sim::SimOptions{}.max_messages;
  bool progress = true;
};

// "[#####.....] 3/12 megatron-22b tp8_dp2 on dgx-h100:auto", redrawn in
// place on a terminal.
void DrawProgress(size_t done, size_t total, const study::StudyCase& next) {
  constexpr size_t kWidth = 24;
  const size_t filled = total == 0 ? kWidth : done * kWidth / total;
  std::fprintf(stderr, "\r[%s%s] %zu/%zu %s %s on %s\033[K", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done + 1, total, next.model.name.c_str(),
               next.plan.name.c_str(), next.target.c_str());
  std::fflush(stderr);
}

}  // namespace

void AddStudyCommand(CLI::App& app) {
  auto flags = std::make_shared<StudyFlags>();
  CLI::App* command = app.add_subcommand(
      "study",
      "Simulate models x plans x targets as written, with async+schedule and with the full "
      "pipeline; print the table, write CSV, JSON and SVG plots");
  command
      ->add_option("spec", flags->spec,
                   "A JSON file: {\"models\": [...], \"plans\": [...], \"targets\": [...], "
                   "\"layers\": N, \"full_pipeline\": \"PASSES\"} (the last two optional)")
      ->required();
  command->add_option("-o,--output-dir", flags->output_dir,
                      "Write study.md, study.csv, study.json, speedup.svg, exposed.svg and "
                      "mfu.svg here (created if missing)");
  AddMaxMessagesOption(*command, flags->max_messages,
                       ", per case (the case is reported as not run); 0: no limit");
  command->add_flag("!--no-progress", flags->progress,
                    "No progress bar (there is none anyway when stderr is not a terminal)");
  command->callback([flags] {
    Expected<study::StudySpec> spec = study::ParseStudySpec(ReadFile(flags->spec), flags->spec);
    if (!spec.ok()) throw CommandError(spec.error().message);
    sim::SimOptions options;
    options.max_messages = flags->max_messages;
    options.trace_devices = 0;
    const bool bar = flags->progress && isatty(STDERR_FILENO) != 0;
    const std::vector<study::StudyRow> rows =
        study::RunStudy(*spec, options, bar ? study::Progress(DrawProgress) : study::Progress());
    if (bar) std::fprintf(stderr, "\r\033[K");
    const std::string table = study::StudyMarkdown(rows);
    fmt::print("{}", table);
    if (!flags->output_dir.empty()) {
      const std::filesystem::path dir(flags->output_dir);
      std::error_code error;
      std::filesystem::create_directories(dir, error);
      if (error) throw CommandError(fmt::format("{}: {}", flags->output_dir, error.message()));
      WriteOutput((dir / "study.md").string(), table);
      WriteOutput((dir / "study.csv").string(), study::StudyCsv(rows));
      WriteOutput((dir / "study.json").string(), study::StudyJson(rows));
      WriteOutput((dir / "speedup.svg").string(), study::SpeedupPlot(rows));
      WriteOutput((dir / "exposed.svg").string(), study::ExposedPlot(rows));
      WriteOutput((dir / "mfu.svg").string(), study::MfuPlot(rows));
    }
    const bool any_ran =
        std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.error.empty(); });
    if (!any_ran) throw CommandError(fmt::format("{}: no case could run", flags->spec));
  });
}

}  // namespace loom::cli
