// Passes by name, for `loom opt --passes=...`. A pass may take options in
// braces, MLIR style:
//
//   collective-matmul{direction=bidirectional,form=unrolled,min-bytes=0}
//
// and a pipeline is a comma-separated list of them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cost/target_cost_model.h"
#include "pass/pipeline.h"

namespace loom::pass {

// What passes may need beyond their options.
struct PassContext {
  // The target to decide and schedule for (`loom opt --target`); without
  // one, collective-matmul falls back to its size threshold and schedule
  // cannot run.
  std::shared_ptr<const cost::TargetCostModel> cost_model;
  // `--deterministic`: every pass keeps each sum in the order the original
  // program folds it (collective-matmul's `deterministic`), unless the
  // pass's own option says otherwise.
  bool deterministic = false;
};

// What a pass option accepts.
enum class OptionType {
  kChoice,     // one of `choices`, "a|b|c"
  kChoiceSet,  // values of `choices` joined by '+'
  kBytes,      // N, NK or NM (KiB, MiB)
  kCount,      // an integer >= 1
  kFraction,   // a number in [0, 1)
};

struct OptionSpec {
  // The key; one ending in ".KIND" names a family, KIND one of
  // `family_suffixes` ("a|b").
  std::string_view name;
  OptionType type;
  std::string_view choices;          // kChoice, kChoiceSet
  std::string_view family_suffixes;  // a family's KINDs
  std::string_view default_value;    // as help shows it; empty: none
  std::string_view help;
};

using PassOptions = std::map<std::string, std::string, std::less<>>;

// One entry per pass: the one place its name, summary and options are
// spelled. CreatePass checks every option against the entry before the
// factory runs; --list-passes and option errors are made from it.
struct PassEntry {
  std::string_view name;
  std::string_view summary;
  std::vector<OptionSpec> options;
  Expected<std::unique_ptr<Pass>> (*factory)(const PassOptions& options,
                                             const PassContext& context);
};

const std::vector<PassEntry>& PassTable();

// One pass from `name` or `name{key=value,...}`.
Expected<std::unique_ptr<Pass>> CreatePass(std::string_view spec, const PassContext& context = {});
// Passes separated by commas outside braces.
Expected<Pipeline> ParsePipeline(std::string_view spec, const PassContext& context = {});
// Every pass with its summary, then a line per option (from PassTable).
std::vector<std::string> DescribePasses();

}  // namespace loom::pass
