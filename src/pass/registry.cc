#include "pass/registry.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <map>
#include <string>

#include "pass/async_collectives.h"
#include "pass/collective_matmul.h"
#include "pass/collective_matmul_gate.h"
#include "pass/schedule.h"

namespace loom::pass {

namespace {

using PassOptions = std::map<std::string, std::string, std::less<>>;

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

Expected<std::unique_ptr<Pass>> CreateCollectiveMatmul(const PassOptions& options,
                                                       const PassContext& context) {
  constexpr std::string_view kName = "collective-matmul";
  CollectiveMatmulOptions config;
  StepGateOptions gate;
  for (const auto& option : options) {
    const auto& [key, value] = option;
    // Captures the pair, not its bindings (which clang 14 cannot capture).
    const auto bad = [&option, kName] {
      return Error{fmt::format("pass {}: {}={} is not one of the allowed values", kName,
                               option.first, option.second)};
    };
    if (key == "direction") {
      if (value != "unidirectional" && value != "bidirectional") return bad();
      config.direction =
          value == "bidirectional" ? RingDirection::kBidirectional : RingDirection::kUnidirectional;
      gate.direction = config.direction;
    } else if (key == "form") {
      if (value != "loop" && value != "unrolled") return bad();
      config.form = value == "loop" ? RingForm::kLoop : RingForm::kUnrolled;
      gate.form = config.form;
    } else if (key == "min-bytes") {
      LOOM_ASSIGN_OR_RETURN(config.min_bytes, ParseBytes(kName, key, value));
    } else if (key == "other-users") {
      if (value != "decline" && value != "keep") return bad();
      config.keep_gather_for_other_users = value == "keep";
    } else if (key == "forms") {
      config.all_gather = config.reduce_scatter = config.all_reduce = false;
      for (size_t start = 0; start <= value.size();) {
        const size_t end = std::min(value.find('+', start), value.size());
        const std::string_view form = std::string_view(value).substr(start, end - start);
        if (form == "all-gather") {
          config.all_gather = true;
        } else if (form == "reduce-scatter") {
          config.reduce_scatter = true;
        } else if (form == "all-reduce") {
          config.all_reduce = true;
        } else {
          return bad();
        }
        start = end + 1;
      }
    } else if (key == "permutes-in-flight") {
      LOOM_ASSIGN_OR_RETURN(gate.schedule.MaxInFlight(cost::TransferKind::kCollectivePermute),
                            ParseCount(kName, key, value));
    } else if (key == "min-gain") {
      double gain = -1;
      try {
        size_t used = 0;
        gain = std::stod(value, &used);
        if (used != value.size()) gain = -1;
      } catch (const std::exception&) {
        gain = -1;
      }
      if (!(gain >= 0 && gain < 1)) {
        return Error{fmt::format("pass {}: min-gain={} is not a fraction in [0, 1)", kName, value)};
      }
      gate.min_gain = gain;
    } else if (key == "max-unrolled-steps") {
      LOOM_ASSIGN_OR_RETURN(gate.max_unrolled_steps, ParseCount(kName, key, value));
    } else {
      return Error{fmt::format("pass {}: unknown option '{}'", kName, key)};
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

// The schedule pass keeps a reference to its cost model; this owns it.
struct CostModelHolder {
  std::shared_ptr<const cost::CostModel> model;
};
class OwningSchedule : private CostModelHolder, public Schedule {
 public:
  OwningSchedule(std::shared_ptr<const cost::CostModel> model, ScheduleOptions options)
      : CostModelHolder{std::move(model)}, Schedule(*CostModelHolder::model, std::move(options)) {}
};

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
      if (value == "best") {
        config.order = ScheduleOrder::kBest;
      } else if (value == "top-down") {
        config.order = ScheduleOrder::kTopDown;
      } else if (value == "bottom-up") {
        config.order = ScheduleOrder::kBottomUp;
      } else {
        return Error{fmt::format(
            "pass schedule: order must be best, top-down or bottom-up, got '{}'", value)};
      }
    } else {
      return Error{fmt::format("pass {}: unknown option '{}'", kName, key)};
    }
  }
  return std::unique_ptr<Pass>(std::make_unique<OwningSchedule>(context.cost_model, config));
}

Expected<std::unique_ptr<Pass>> CreateAsyncCollectives(const PassOptions& options) {
  if (!options.empty()) {
    return Error{
        fmt::format("pass async-collectives: unknown option '{}'", options.begin()->first)};
  }
  return std::unique_ptr<Pass>(std::make_unique<AsyncCollectives>());
}

}  // namespace

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
  LOOM_ASSIGN_OR_RETURN(PassOptions options, ParseOptions(name, body));
  if (name == "collective-matmul") return CreateCollectiveMatmul(options, context);
  if (name == "async-collectives") return CreateAsyncCollectives(options);
  if (name == "schedule") return CreateSchedule(options, context);
  return Error{fmt::format(
      "unknown pass '{}' (known: collective-matmul, async-collectives, schedule)", name)};
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
  return {
      "collective-matmul{direction=unidirectional|bidirectional, form=loop|unrolled, "
      "min-bytes=N[K|M] (default 1M; without --target); with --target: max-unrolled-steps=N "
      "(default 16), permutes-in-flight=N (default 1, as schedule's max-in-flight), "
      "min-gain=F (default 0.005: the step must get faster by more than this fraction); "
      "other-users=decline|keep, "
      "forms=all-gather+reduce-scatter+all-reduce}: decompose collectives next to dots into "
      "rings of collective-permutes overlapped with partial products",
      "async-collectives: turn collectives and collective-permutes into start/done pairs",
      "schedule{max-in-flight=N (default 1), max-in-flight.KIND=N, "
      "order=best|top-down|bottom-up (default best)}: order every computation by list "
      "scheduling on the --target's cost model, starts early and dones late, at most N "
      "transfers of a kind in flight (KIND: collective-permute, all-gather, all-reduce, "
      "reduce-scatter, all-to-all); best keeps whichever scheduler's order has the shorter "
      "estimate",
  };
}

}  // namespace loom::pass
