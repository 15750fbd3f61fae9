#include "pass/registry.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include "pass/async_collectives.h"
#include "pass/collective_matmul.h"
#include "pass/collective_matmul_gate.h"
#include "pass/joint_schedule.h"
#include "pass/schedule.h"

namespace loom::pass {

namespace {

// Splits at commas that are not inside braces.
std::vector<std::string_view> SplitTopLevel(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '{') {
      ++depth;
    } else if (text[i] == '}') {
      --depth;
    }
  }
  return parts;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

Expected<PassOptions> ParseOptions(std::string_view pass, std::string_view body) {
  PassOptions options;
  if (Trim(body).empty()) return options;
  for (std::string_view item : SplitTopLevel(body)) {
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return Error{fmt::format("pass {}: option '{}' is not key=value", pass, Trim(item))};
    }
    options[std::string(Trim(item.substr(0, equals)))] = std::string(Trim(item.substr(equals + 1)));
  }
  return options;
}

Expected<int64_t> ParseBytes(std::string_view pass, std::string_view key, std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || value < 0) {
    return Error{fmt::format("pass {}: {}={} is not a byte count", pass, key, text)};
  }
  const std::string_view suffix(end, static_cast<size_t>(text.data() + text.size() - end));
  int shift = 0;
  if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (!suffix.empty()) {
    return Error{fmt::format("pass {}: {}={} has an unknown unit", pass, key, text)};
  }
  if (value > (std::numeric_limits<int64_t>::max() >> shift)) {
    return Error{fmt::format("pass {}: {}={} is too large", pass, key, text)};
  }
  return value << shift;
}

// A count of at least 1 (steps, transfers in flight).
Expected<int64_t> ParseCount(std::string_view pass, std::string_view key, std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1) {
    return Error{fmt::format("pass {}: {}={} is not a positive integer", pass, key, text)};
  }
  return value;
}

// --- option values, checked against the table before a factory sees them -----

// The allowed values of a kChoice option ("a|b|c") or the parts of a
// kChoiceSet ("a+b").
bool IsOneOf(std::string_view value, std::string_view choices) {
  for (size_t start = 0; start <= choices.size();) {
    const size_t end = std::min(choices.find('|', start), choices.size());
    if (choices.substr(start, end - start) == value) return true;
    start = end + 1;
  }
  return false;
}

Expected<double> ParseFraction(std::string_view pass, std::string_view key, std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(value >= 0 && value < 1)) {
    return Error{fmt::format("pass {}: {}={} is not a fraction in [0, 1)", pass, key, text)};
  }
  return value;
}

Status CheckValue(std::string_view pass, const OptionSpec& spec, std::string_view key,
                  std::string_view value) {
  switch (spec.type) {
    case OptionType::kChoice:
      if (IsOneOf(value, spec.choices)) return OkStatus();
      return Error{fmt::format("pass {}: {}={}: want one of {}", pass, key, value, spec.choices)};
    case OptionType::kChoiceSet:
      for (size_t start = 0; start <= value.size();) {
        const size_t end = std::min(value.find('+', start), value.size());
        if (!IsOneOf(value.substr(start, end - start), spec.choices)) {
          return Error{fmt::format("pass {}: {}={}: want values of {} joined by '+'", pass, key,
                                   value, spec.choices)};
        }
        start = end + 1;
      }
      return OkStatus();
    case OptionType::kBytes:
      return ParseBytes(pass, key, value).status();
    case OptionType::kCount:
      return ParseCount(pass, key, value).status();
    case OptionType::kFraction:
      return ParseFraction(pass, key, value).status();
  }
  return OkStatus();
}

// The spec `key` names: its own, or a family's ("max-in-flight.KIND").
const OptionSpec* FindOption(const PassEntry& entry, std::string_view key) {
  for (const OptionSpec& spec : entry.options) {
    if (!spec.family_suffixes.empty()) {
      const std::string_view prefix = spec.name.substr(0, spec.name.find('.') + 1);
      if (key.starts_with(prefix) && IsOneOf(key.substr(prefix.size()), spec.family_suffixes)) {
        return &spec;
      }
    } else if (spec.name == key) {
      return &spec;
    }
  }
  return nullptr;
}

std::string OptionNames(const PassEntry& entry) {
  std::string names;
  for (const OptionSpec& spec : entry.options) {
    names += fmt::format("{}{}", names.empty() ? "" : ", ", spec.name);
  }
  return names.empty() ? "none" : names;
}

Status CheckOptions(const PassEntry& entry, const PassOptions& options) {
  for (const auto& [key, value] : options) {
    const OptionSpec* spec = FindOption(entry, key);
    if (spec == nullptr) {
      return Error{fmt::format("pass {}: unknown option '{}' (options: {})", entry.name, key,
                               OptionNames(entry))};
    }
    LOOM_RETURN_IF_ERROR(CheckValue(entry.name, *spec, key, value));
  }
  return OkStatus();
}

// --- the factories: options already checked ---------------------------------

Expected<std::unique_ptr<Pass>> CreateCollectiveMatmul(const PassOptions& options,
                                                       const PassContext& context) {
  constexpr std::string_view kName = "collective-matmul";
  CollectiveMatmulOptions config;
  config.deterministic = context.deterministic;
  StepGateOptions gate;
  for (const auto& [key, value] : options) {
    if (key == "deterministic") {
      config.deterministic = value == "true";
    } else if (key == "direction") {
      config.direction =
          value == "bidirectional" ? RingDirection::kBidirectional : RingDirection::kUnidirectional;
      gate.direction = config.direction;
    } else if (key == "form") {
      config.form = value == "loop" ? RingForm::kLoop : RingForm::kUnrolled;
      gate.form = config.form;
    } else if (key == "min-bytes") {
      LOOM_ASSIGN_OR_RETURN(config.min_bytes, ParseBytes(kName, key, value));
    } else if (key == "other-users" && value != "auto") {
      config.other_users = value == "keep"    ? GatherOtherUsers::kKeep
                           : value == "cache" ? GatherOtherUsers::kCache
                                              : GatherOtherUsers::kDecline;
    } else if (key == "dot-users" && value != "auto") {
      config.ring_per_dot = value == "ring-each";
    } else if (key == "forms") {
      // A named copy: clang 14 cannot capture a structured binding.
      const std::string forms = "+" + value + "+";
      const auto has = [&forms](std::string_view form) {
        return forms.find("+" + std::string(form) + "+") != std::string::npos;
      };
      config.all_gather = has("all-gather");
      config.reduce_scatter = has("reduce-scatter");
      config.all_reduce = has("all-reduce");
      config.all_to_all = has("all-to-all");
    } else if (key == "permutes-in-flight") {
      LOOM_ASSIGN_OR_RETURN(gate.schedule.MaxInFlight(cost::TransferKind::kCollectivePermute),
                            ParseCount(kName, key, value));
    } else if (key == "chunks") {
      LOOM_ASSIGN_OR_RETURN(config.chunks, ParseCount(kName, key, value));
    } else if (key == "step-chunks") {
      LOOM_ASSIGN_OR_RETURN(config.step_chunks, ParseCount(kName, key, value));
      gate.step_chunks = config.step_chunks;
    } else if (key == "rounds-per-product") {
      LOOM_ASSIGN_OR_RETURN(config.rounds_per_product, ParseCount(kName, key, value));
    } else if (key == "min-gain") {
      LOOM_ASSIGN_OR_RETURN(gate.min_gain, ParseFraction(kName, key, value));
    } else if (key == "judge") {
      gate.judge = value == "simulate" ? StepJudge::kSimulator : StepJudge::kEstimate;
    } else if (key == "max-unrolled-steps") {
      LOOM_ASSIGN_OR_RETURN(gate.max_unrolled_steps, ParseCount(kName, key, value));
    }
  }
  // With a target, the whole scheduled step decides; direction and form given
  // as options are then fixed, the rest chosen per candidate.
  if (context.cost_model) {
    return std::unique_ptr<Pass>(
        std::make_unique<GatedCollectiveMatmul>(std::move(config), context.cost_model, gate));
  }
  return std::unique_ptr<Pass>(std::make_unique<CollectiveMatmul>(std::move(config)));
}

Expected<std::unique_ptr<Pass>> CreateSchedule(const PassOptions& options,
                                               const PassContext& context) {
  constexpr std::string_view kName = "schedule";
  if (!context.cost_model) {
    return Error{"pass schedule needs a cost model: give --target"};
  }
  ScheduleOptions config;
  for (const auto& [key, value] : options) {
    if (key == "max-in-flight") {
      LOOM_ASSIGN_OR_RETURN(int64_t limit, ParseCount(kName, key, value));
      config.SetMaxInFlight(limit);
    } else if (key.starts_with("max-in-flight.")) {
      const auto kind = cost::ParseTransferKind(std::string_view(key).substr(14));
      if (!kind) return Error{fmt::format("pass schedule: unknown transfer kind in '{}'", key)};
      LOOM_ASSIGN_OR_RETURN(config.MaxInFlight(*kind), ParseCount(kName, key, value));
    } else if (key == "order") {
      config.order = value == "top-down"    ? ScheduleOrder::kTopDown
                     : value == "bottom-up" ? ScheduleOrder::kBottomUp
                                            : ScheduleOrder::kBest;
    }
  }
  return std::unique_ptr<Pass>(std::make_unique<Schedule>(context.cost_model, config));
}

Expected<std::unique_ptr<Pass>> CreateJointSchedule(const PassOptions& options,
                                                    const PassContext& context) {
  constexpr std::string_view kName = "joint-schedule";
  if (!context.cost_model) {
    return Error{"pass joint-schedule needs a target to simulate on: give --target"};
  }
  JointScheduleOptions config;
  for (const auto& [key, value] : options) {
    if (key == "min-gain") {
      LOOM_ASSIGN_OR_RETURN(config.min_gain, ParseFraction(kName, key, value));
    } else if (key == "max-trials") {
      LOOM_ASSIGN_OR_RETURN(config.max_trials, ParseCount(kName, key, value));
    } else if (key == "max-messages") {
      LOOM_ASSIGN_OR_RETURN(config.simulation.max_messages, ParseCount(kName, key, value));
    } else if (key == "max-steps") {
      LOOM_ASSIGN_OR_RETURN(config.simulation.max_steps, ParseCount(kName, key, value));
    }
  }
  return std::unique_ptr<Pass>(
      std::make_unique<JointSchedule>(context.cost_model->target(), config));
}

Expected<std::unique_ptr<Pass>> CreateAsyncCollectives(const PassOptions& options,
                                                       const PassContext&) {
  AsyncCollectivesOptions config;
  if (auto kinds = options.find("kinds"); kinds != options.end()) {
    const auto has = [&](std::string_view kind) {
      return ("+" + kinds->second + "+").find("+" + std::string(kind) + "+") != std::string::npos;
    };
    config.all_gather = has("all-gather");
    config.all_reduce = has("all-reduce");
    config.collective_permute = has("collective-permute");
    config.reduce_scatter = has("reduce-scatter");
    config.all_to_all = has("all-to-all");
  }
  return std::unique_ptr<Pass>(std::make_unique<AsyncCollectives>(config));
}

constexpr std::string_view kTransferKinds =
    "collective-permute|all-gather|all-reduce|reduce-scatter|all-to-all";

}  // namespace

const std::vector<PassEntry>& PassTable() {
  static const std::vector<PassEntry> table = {
      {"collective-matmul",
       "decompose collectives next to dots into rings (all-to-all: pairwise exchanges) of "
       "collective-permutes overlapped with partial products",
       {
           {"direction", OptionType::kChoice, "unidirectional|bidirectional", "", "",
            "the ring's direction; with --target, chosen per candidate unless given"},
           {"form", OptionType::kChoice, "loop|unrolled", "", "",
            "a while loop or straight-line steps; with --target, chosen unless given"},
           {"min-bytes", OptionType::kBytes, "", "", "1M",
            "without --target: rewrite only collectives of at least this many bytes"},
           {"max-unrolled-steps", OptionType::kCount, "", "", "16",
            "with --target: the most ring steps the gate unrolls"},
           {"permutes-in-flight", OptionType::kCount, "", "", "1",
            "with --target: permutes in flight when the gate schedules (as schedule's "
            "max-in-flight)"},
           {"min-gain", OptionType::kFraction, "", "", "0.005",
            "with --target: the step must get faster by more than this fraction"},
           {"judge", OptionType::kChoice, "estimate|simulate", "", "estimate",
            "with --target: price each trial's step by the cost model's estimate, or by the "
            "simulator (sees links shared; slower)"},
           {"chunks", OptionType::kCount, "", "", "1",
            "without --target: cut each dot -> reduce-scatter / all-reduce into this many chunks "
            "(1: none), each with its own collective, where they divide the product (else the "
            "ring); with --target the gate tries chunks beside the rings"},
           {"step-chunks", OptionType::kCount, "", "", "1",
            "cut each ring step into this many chunks (1: whole steps), each sent by its own "
            "collective-permute, where they divide the ring's chunk dimension; with --target "
            "fixes it for the gate, which otherwise tries 1, 2, 4, 8 and 16"},
           {"rounds-per-product", OptionType::kCount, "", "", "1",
            "without --target: an all-to-all exchange multiplies this many rounds per product "
            "(when it divides the group size); with --target the gate chooses"},
           {"other-users", OptionType::kChoice, "decline|keep|cache|auto", "", "auto",
            "an all-gather with other users than the dots that get rings: decline, keep it for "
            "them, or cache the ring's windows into the gathered value they read; auto: cache "
            "with --target (the gate judges it), else decline"},
           {"dot-users", OptionType::kChoice, "ring-each|decline|auto", "", "auto",
            "an all-gather that feeds several dots (and nothing else): a ring for each dot, "
            "from the same shard, or decline (then other-users says); auto: with --target the "
            "gate tries a ring for each dot and a cached ring and keeps the faster, else "
            "ring-each"},
           {"forms", OptionType::kChoiceSet, "all-gather|reduce-scatter|all-reduce|all-to-all", "",
            "all-gather+reduce-scatter+all-reduce+all-to-all", "which collectives to decompose"},
           {"deterministic", OptionType::kChoice, "true|false", "", "false",
            "only rewrites that fold every sum in the original's order (bitwise equal with "
            "deterministic kernels); --deterministic sets it"},
       },
       CreateCollectiveMatmul},
      {"async-collectives",
       "turn collectives and collective-permutes into start/done pairs",
       {
           {"kinds", OptionType::kChoiceSet,
            "all-gather|all-reduce|collective-permute|reduce-scatter|all-to-all", "",
            "all-gather+all-reduce+collective-permute+reduce-scatter+all-to-all",
            "which collectives to make asynchronous"},
       },
       CreateAsyncCollectives},
      {"schedule",
       "order every computation by list scheduling on the --target's cost model, starts early "
       "and dones late",
       {
           {"max-in-flight", OptionType::kCount, "", "", "1",
            "transfers of each kind in flight at once"},
           {"max-in-flight.KIND", OptionType::kCount, "", kTransferKinds, "1",
            "the same for one kind"},
           {"order", OptionType::kChoice, "best|top-down|bottom-up", "", "best",
            "the list scheduler; best keeps whichever order has the shorter estimate"},
       },
       CreateSchedule},
      {"joint-schedule",
       "after schedule: hold back transfers that share links with others in flight, where the "
       "--target's simulated step gets shorter (link contention across mesh axes)",
       {
           {"min-gain", OptionType::kFraction, "", "", "0.005",
            "keep a move only when the simulated step gets faster by more than this fraction"},
           {"max-trials", OptionType::kCount, "", "", "200", "simulations the pass may run in all"},
           {"max-messages", OptionType::kCount, "", "", "200000000",
            "each simulation refuses a module that would move more messages (as loom simulate)"},
           {"max-steps", OptionType::kCount, "", "", "1000000000",
            "each simulation refuses a module that would replay more steps (as loom simulate)"},
       },
       CreateJointSchedule},
  };
  return table;
}

Expected<std::unique_ptr<Pass>> CreatePass(std::string_view spec, const PassContext& context) {
  spec = Trim(spec);
  std::string_view name = spec;
  std::string_view body;
  if (const size_t brace = spec.find('{'); brace != std::string_view::npos) {
    if (spec.back() != '}')
      return Error{fmt::format("pass '{}': options must end with '}}'", spec)};
    name = Trim(spec.substr(0, brace));
    body = spec.substr(brace + 1, spec.size() - brace - 2);
  }
  std::string known;
  for (const PassEntry& entry : PassTable()) {
    if (entry.name == name) {
      LOOM_ASSIGN_OR_RETURN(PassOptions options, ParseOptions(name, body));
      LOOM_RETURN_IF_ERROR(CheckOptions(entry, options));
      return entry.factory(options, context);
    }
    known += fmt::format("{}{}", known.empty() ? "" : ", ", entry.name);
  }
  return Error{fmt::format("unknown pass '{}' (known: {})", name, known)};
}

Expected<Pipeline> ParsePipeline(std::string_view spec, const PassContext& context) {
  Pipeline pipeline;
  for (std::string_view item : SplitTopLevel(spec)) {
    if (Trim(item).empty()) return Error{fmt::format("empty pass name in '{}'", spec)};
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Pass> pass, CreatePass(item, context));
    pipeline.Add(std::move(pass));
  }
  return pipeline;
}

std::vector<std::string> DescribePasses() {
  std::vector<std::string> lines;
  for (const PassEntry& entry : PassTable()) {
    lines.push_back(fmt::format("{}: {}", entry.name, entry.summary));
    for (const OptionSpec& option : entry.options) {
      std::string value;
      switch (option.type) {
        case OptionType::kChoice:
          value = std::string(option.choices);
          break;
        case OptionType::kChoiceSet:
          value = fmt::format("{} joined by +", option.choices);
          break;
        case OptionType::kBytes:
          value = "N[K|M]";
          break;
        case OptionType::kCount:
          value = "N >= 1";
          break;
        case OptionType::kFraction:
          value = "F in [0, 1)";
          break;
      }
      std::string name(option.name);
      if (!option.family_suffixes.empty()) {
        name += fmt::format(" (KIND: {})", option.family_suffixes);
      }
      lines.push_back(fmt::format(
          "    {}={}{}: {}", name, value,
          option.default_value.empty() ? "" : fmt::format(" (default {})", option.default_value),
          option.help));
    }
  }
  return lines;
}

}  // namespace loom::pass
