#include "pass/collective_matmul_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "cost/step_time.h"
#include "ir/clone.h"
#include "ir/compare.h"
#include "ir/verifier.h"
#include "pass/async_collectives.h"
#include "sim/simulator.h"
#include "support/units.h"

namespace loom::pass {

namespace {

// The most chunks the gate tries for a chunked form.
constexpr int64_t kMaxChunks = 16;
// The chunk counts per ring step the gate tries (besides whole steps).
constexpr int64_t kStepChunkCounts[] = {2, 4, 8, 16};

// One candidate in one ring form.
struct Choice {
  std::string computation, collective, dot;
  int64_t group_size = 0;
  CandidateKind kind = CandidateKind::kAllGather;
  RingDirection direction = RingDirection::kUnidirectional;
  RingForm form = RingForm::kLoop;
  int64_t rounds_per_product = 1;
  int64_t chunks = 0;       // at least 2: the chunked form instead of a ring
  int64_t step_chunks = 0;  // at least 2: each ring step in that many chunks
  // An all-gather whose users are all dots: a ring for each (true) or one
  // ring caching its windows for the others (false); unset: as the gate's
  // matching options say.
  std::optional<bool> ring_per_dot;

  std::string Key() const { return computation + "/" + collective + "/" + dot; }
  // What tells two choices of one candidate apart: the ring, and for a
  // gather tried both ways, which way.
  std::string Variant() const {
    if (!ring_per_dot) return Ring();
    return Ring() + (*ring_per_dot ? ", a ring for each dot" : ", its windows cached");
  }
  GateVerdict Verdict(bool rewrite) const {
    GateVerdict verdict;
    verdict.rewrite = rewrite;
    verdict.direction = direction;
    verdict.form = form;
    verdict.rounds_per_product = rounds_per_product;
    verdict.chunks = chunks;
    verdict.step_chunks = step_chunks;
    return verdict;
  }
  std::string Ring() const { return RewriteSummary(Verdict(true), kind, group_size); }
};

// A choice's estimate, made on the program as it was after `round`
// acceptances.
struct Trial {
  Choice choice;
  double step = 0;
  int64_t round = 0;
};

bool Matches(const Candidate& c, const Choice& choice) {
  return c.computation == choice.computation && c.collective == choice.collective &&
         c.dot == choice.dot;
}

// The candidates of `module`, each with the ring forms to try, and the
// matcher's word on every pair that is no candidate at all.
struct Enumeration {
  std::vector<Choice> choices;
  std::vector<Decision> not_candidates;
  std::map<std::string, std::string> description;  // by Choice::Key: "all-gather -> dot (...)"
  // By Choice::Key: the counts of chunks per ring step to search, ascending.
  std::map<std::string, std::vector<int64_t>> step_chunk_counts;
};

Expected<Enumeration> EnumerateWith(ir::Module& module, CollectiveMatmulOptions matching,
                                    const StepGateOptions& options) {
  Enumeration found;
  matching.gate = [&](const Candidate& c) {
    std::vector<RingDirection> directions = {RingDirection::kUnidirectional};
    if (c.group_size >= 3) directions.push_back(RingDirection::kBidirectional);
    if (options.direction) directions = {*options.direction};
    // The pass folds partial sums one way round in deterministic mode.
    if (matching.deterministic && c.SumsAlongTheRing()) {
      directions = {RingDirection::kUnidirectional};
    }
    std::vector<RingForm> forms = {RingForm::kLoop};
    if (c.group_size <= options.max_unrolled_steps) forms.push_back(RingForm::kUnrolled);
    if (options.form) forms = {*options.form};
    // An exchange has one form; the choice is how many rounds a product takes.
    std::vector<int64_t> rounds = {1};
    if (!c.HasRingForms()) {
      directions = {RingDirection::kUnidirectional};
      forms = {RingForm::kUnrolled};
      for (int64_t g = 2; g < c.group_size; ++g) {
        if (c.group_size % g == 0) rounds.push_back(g);
      }
    }
    // Chunks per ring step: fixed by the user, or (when the ring has a
    // chunk dimension) searched from the best whole-step form afterwards.
    int64_t step_chunks = 0;
    if (options.step_chunks && *options.step_chunks >= 2 &&
        c.step_chunk_extent % *options.step_chunks == 0) {
      step_chunks = *options.step_chunks;
    }
    if (!options.step_chunks && c.HasRingForms()) {
      for (int64_t k : kStepChunkCounts) {
        if (c.step_chunk_extent >= k && c.step_chunk_extent % k == 0) {
          found.step_chunk_counts[Choice{c.computation, c.collective, c.dot}.Key()].push_back(k);
        }
      }
    }
    for (RingDirection direction : directions) {
      for (RingForm form : forms) {
        for (int64_t g : rounds) {
          found.choices.push_back({c.computation, c.collective, c.dot, c.group_size, c.kind,
                                   direction, form, g, 0, step_chunks});
        }
      }
    }
    // The chunked forms: every k up to kMaxChunks that divides the product's
    // dimension (not in deterministic mode where chunks would reorder sums).
    if (c.SumsAlongTheRing() && !(matching.deterministic && c.ChunksReorderSums())) {
      for (int64_t k = 2; k <= std::min(c.chunk_extent, kMaxChunks); ++k) {
        if (c.chunk_extent % k != 0) continue;
        found.choices.push_back({c.computation, c.collective, c.dot, c.group_size, c.kind,
                                 RingDirection::kUnidirectional, RingForm::kUnrolled, 1, k});
      }
    }
    GateVerdict verdict;
    verdict.reason = "a candidate";
    return verdict;
  };
  CollectiveMatmul pass(matching);
  LOOM_RETURN_IF_ERROR(pass.Run(module).status());
  for (const Decision& decision : pass.Decisions()) {
    if (decision.reason != "a candidate") {
      found.not_candidates.push_back(decision);
    } else {
      found.description[Choice{decision.computation, decision.collective, decision.dot}.Key()] =
          decision.form;
    }
  }
  return found;
}

// The candidates of `module` as the matching options make them; where they
// leave dot-users open (`try_both`), an all-gather whose users are all dots
// is tried both ways: a ring for each dot (the first dot's candidate), and
// one ring caching its windows for the others (any dot's candidate), the
// cached choices marked so that Apply makes them so.
Expected<Enumeration> Enumerate(ir::Module& module, const CollectiveMatmulOptions& matching,
                                const StepGateOptions& options, bool try_both) {
  CollectiveMatmulOptions each = matching;
  if (try_both) each.ring_per_dot = true;
  LOOM_ASSIGN_OR_RETURN(Enumeration found, EnumerateWith(module, each, options));
  if (!try_both || matching.other_users != GatherOtherUsers::kCache) return found;
  CollectiveMatmulOptions cached = matching;
  cached.ring_per_dot = false;
  LOOM_ASSIGN_OR_RETURN(Enumeration other, EnumerateWith(module, cached, options));
  std::set<std::string> added;
  for (Choice& choice : other.choices) {
    auto it = found.description.find(choice.Key());
    const std::string& description = other.description[choice.Key()];
    if (it != found.description.end() && it->second == description) continue;  // the same pair
    choice.ring_per_dot = false;
    added.insert(choice.Key());
    found.choices.push_back(std::move(choice));
  }
  for (const std::string& key : added) {
    found.description.try_emplace(key, other.description[key]);
    found.step_chunk_counts.try_emplace(key, other.step_chunk_counts[key]);
  }
  // A dot that is a candidate only cached is no "not a candidate" any more.
  std::erase_if(found.not_candidates, [&](const Decision& d) {
    return added.count(Choice{d.computation, d.collective, d.dot}.Key()) > 0;
  });
  return found;
}

// `base` with one choice applied; null when the choice is no candidate there
// any more. `decisions` receives the pass's records of the rewrite: the
// choice's first, then one for each other dot its all-gather's rings
// replace.
Expected<std::unique_ptr<ir::Module>> Apply(const ir::Module& base, const Choice& choice,
                                            CollectiveMatmulOptions matching,
                                            std::vector<Decision>* decisions) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module, ir::CloneModule(base));
  if (choice.ring_per_dot) matching.ring_per_dot = choice.ring_per_dot;
  matching.gate = [&](const Candidate& c) {
    GateVerdict verdict = choice.Verdict(Matches(c, choice));
    verdict.reason = verdict.rewrite ? "chosen" : "not this trial's";
    return verdict;
  };
  CollectiveMatmul pass(matching);
  LOOM_ASSIGN_OR_RETURN(const bool changed, pass.Run(*module));
  if (!changed) return std::unique_ptr<ir::Module>();
  if (decisions != nullptr) {
    for (const Decision& d : pass.Decisions()) {
      if (d.rewritten) decisions->push_back(d);
    }
  }
  return module;
}

// Per computation that is a copy of an earlier one (ir::BodyDifference:
// the same program under another name, as the builder's loops' bodies in
// each phase of a pipeline are, forward_layer, forward_layer.1, ...), the
// name of the first of them, the original.
std::map<std::string, std::string> OriginalsOfCopies(const ir::Module& module) {
  std::map<std::string, std::string> original_of;
  std::map<int64_t, std::vector<const ir::Computation*>> originals;  // by instruction count
  for (const auto& computation : module.computations()) {
    std::vector<const ir::Computation*>& alike = originals[computation->instruction_count()];
    auto it = std::find_if(alike.begin(), alike.end(), [&](const ir::Computation* original) {
      return ir::BodyDifference(*original, *computation).empty();
    });
    if (it == alike.end()) {
      alike.push_back(computation.get());
    } else {
      original_of[computation->name()] = (*it)->name();
    }
  }
  return original_of;
}

std::string Change(double before, double after) {
  return fmt::format("{:+.1f}%", 100 * (after / before - 1));
}

}  // namespace

namespace {

// A copy of `module` after async-collectives and schedule.
Expected<std::unique_ptr<ir::Module>> Scheduled(const ir::Module& module,
                                                const cost::CostModel& model,
                                                const ScheduleOptions& schedule,
                                                const ir::DeviceGrid& grid) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> copy, ir::CloneModule(module));
  AsyncCollectives async;
  LOOM_RETURN_IF_ERROR(async.Run(*copy).status());
  ScheduleOptions options = schedule;
  options.grid = grid;
  Schedule scheduler(model, options);
  LOOM_RETURN_IF_ERROR(scheduler.Run(*copy).status());
  return copy;
}

}  // namespace

Expected<double> ScheduledStepSeconds(const ir::Module& module, const cost::CostModel& model,
                                      const ScheduleOptions& schedule) {
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module, schedule.grid));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> scheduled,
                        Scheduled(module, model, schedule, grid));
  return cost::EstimateStep(*scheduled, model, grid).total_seconds;
}

Expected<double> SimulatedScheduledStepSeconds(const ir::Module& module,
                                               const cost::TargetCostModel& model,
                                               const ScheduleOptions& schedule) {
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module, schedule.grid));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> scheduled,
                        Scheduled(module, model, schedule, grid));
  LOOM_ASSIGN_OR_RETURN(const sim::SimReport report, sim::Simulate(*scheduled, model.target()));
  return report.step_seconds;
}

Expected<bool> GatedCollectiveMatmul::Run(ir::Module& module) {
  decisions_.clear();
  explanation_.clear();
  // Every trial runs on the module's devices, which no rewrite changes:
  // found once here, not by verifying each trial.
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module));
  CollectiveMatmulOptions matching = matching_;
  matching.grid = grid;
  ScheduleOptions schedule = options_.schedule;
  schedule.grid = grid;
  const cost::TargetCostModel& model = *model_;
  const bool simulated = options_.judge == StepJudge::kSimulator;
  const std::string on = model.target().name() + (simulated ? " (simulated)" : "");
  auto step = [&](const ir::Module& m) {
    return simulated ? SimulatedScheduledStepSeconds(m, model, schedule)
                     : ScheduledStepSeconds(m, model, schedule);
  };
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> current, ir::CloneModule(module));
  LOOM_ASSIGN_OR_RETURN(Enumeration enumeration,
                        Enumerate(*current, matching, options_, try_both_dot_users_));
  LOOM_ASSIGN_OR_RETURN(const double baseline, step(*current));
  double current_step = baseline;

  // Every choice estimated once on the program as given; each acceptance
  // makes the others stale, and a stale estimate is redone before it wins.
  std::vector<Trial> trials;
  std::set<std::string> seen;
  // A pair in a copy of a computation is a pair of its original too: its
  // ring forms are searched in the original only, and the copy is tried in
  // the form found best there (on a pipelined step, five copies of each
  // layer body: a fifth of the trials). By Choice::Key of the copy's pair,
  // that form's Choice::Variant ("" until it is known: none is tried).
  const std::map<std::string, std::string> original_of = OriginalsOfCopies(*current);
  std::map<std::string, std::string> form_of_copy;
  // Estimates `choice` on the program as rewritten so far, unless that was
  // done before: its step, or nothing when it was seen already, is no
  // candidate there, or is a copy's pair in another form than its original's.
  auto try_choice = [&](const Choice& choice, int64_t round) -> Expected<std::optional<double>> {
    const auto copy = form_of_copy.find(choice.Key());
    if (copy != form_of_copy.end() && copy->second != choice.Variant()) {
      return std::optional<double>();
    }
    if (!seen.insert(choice.Key() + choice.Variant()).second) return std::optional<double>();
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> trial,
                          Apply(*current, choice, matching, nullptr));
    if (!trial) return std::optional<double>();
    LOOM_ASSIGN_OR_RETURN(const double seconds, step(*trial));
    trials.push_back({choice, seconds, round});
    return std::optional<double>(seconds);
  };
  auto estimate_new = [&](const std::vector<Choice>& choices, int64_t round) -> Status {
    for (const Choice& choice : choices) {
      LOOM_RETURN_IF_ERROR(try_choice(choice, round).status());
    }
    return OkStatus();
  };
  // Chunks per ring step, searched from each candidate's best whole-step
  // ring: doubling k while the step keeps getting shorter (the curve has
  // one minimum: more chunks hide more of the transfer until their launches
  // and latencies cost more than they hide).
  auto search_step_chunks = [&](const Enumeration& found, int64_t round) -> Status {
    for (const auto& [key, counts] : found.step_chunk_counts) {
      const Trial* whole = nullptr;
      for (const Trial& t : trials) {
        if (t.choice.Key() == key && t.round == round && t.choice.chunks < 2 &&
            t.choice.step_chunks < 2 && (whole == nullptr || t.step < whole->step)) {
          whole = &t;
        }
      }
      if (whole == nullptr) continue;
      Choice choice = whole->choice;
      double best = whole->step;
      for (int64_t k : counts) {
        choice.step_chunks = k;
        LOOM_ASSIGN_OR_RETURN(const std::optional<double> seconds, try_choice(choice, round));
        if (!seconds) continue;
        if (!(*seconds < best)) break;
        best = *seconds;
      }
    }
    return OkStatus();
  };
  // Per candidate, the best estimate of any of its forms against the
  // baseline (for the declines).
  std::map<std::string, Trial> best_of;
  auto find_best = [&] {
    best_of.clear();
    for (const Trial& t : trials) {
      auto [it, fresh] = best_of.try_emplace(t.choice.Key(), t);
      if (!fresh && t.step < it->second.step) it->second = t;
    }
  };
  // The pairs in copies, one choice of each, by Choice::Key.
  std::map<std::string, Choice> pairs_in_copies;
  for (const Choice& choice : enumeration.choices) {
    if (original_of.count(choice.computation)) {
      pairs_in_copies.try_emplace(choice.Key(), choice);
      form_of_copy.try_emplace(choice.Key(), "");
    }
  }
  LOOM_RETURN_IF_ERROR(estimate_new(enumeration.choices, 0));
  LOOM_RETURN_IF_ERROR(search_step_chunks(enumeration, 0));
  find_best();
  std::set<std::string> searched_copies;  // by Choice::Key
  for (const auto& [key, choice] : pairs_in_copies) {
    Choice original = choice;
    original.computation = original_of.at(choice.computation);
    auto best = best_of.find(original.Key());
    if (best == best_of.end()) continue;  // no ring form applies there
    Choice in_copy = best->second.choice;
    in_copy.computation = choice.computation;
    form_of_copy[key] = in_copy.Variant();
    LOOM_ASSIGN_OR_RETURN(const std::optional<double> seconds, try_choice(in_copy, 0));
    // A copy that runs otherwise (a warm-up phase's loop, fewer trips
    // beside other work) may want another form: where the original's gains
    // and the copy's in it does not, the copy's forms are searched too.
    if (best->second.step < baseline && (!seconds || !(*seconds < baseline))) {
      searched_copies.insert(key);
    }
  }
  Enumeration again;  // those copies' forms, and their counts of chunks per ring step
  for (const std::string& key : searched_copies) {
    form_of_copy.erase(key);
    if (auto it = enumeration.step_chunk_counts.find(key);
        it != enumeration.step_chunk_counts.end()) {
      again.step_chunk_counts.insert(*it);
    }
  }
  for (const Choice& choice : enumeration.choices) {
    if (searched_copies.count(choice.Key())) again.choices.push_back(choice);
  }
  LOOM_RETURN_IF_ERROR(estimate_new(again.choices, 0));
  LOOM_RETURN_IF_ERROR(search_step_chunks(again, 0));
  find_best();
  // Per candidate, the step with each chunk count (on the program as given):
  // the curve the gate chose k from, for --explain.
  // And for rings, the best form's step with each count of chunks per
  // ring step (1: whole steps).
  std::map<std::string, std::string> chunk_curve;
  for (const Trial& t : trials) {
    if (t.choice.chunks < 2) continue;
    std::string& curve = chunk_curve[t.choice.Key()];
    curve += fmt::format("{}k={} {}", curve.empty() ? "; chunked pair: " : ", ", t.choice.chunks,
                         FormatSeconds(t.step));
  }
  std::map<std::string, std::map<int64_t, double>> ring_chunk_steps;
  for (const Trial& t : trials) {
    if (t.choice.chunks >= 2 || !HasRingForms(t.choice.kind)) continue;
    auto [it, fresh] = ring_chunk_steps[t.choice.Key()].try_emplace(
        std::max<int64_t>(t.choice.step_chunks, 1), t.step);
    if (!fresh) it->second = std::min(it->second, t.step);
  }
  for (const auto& [key, steps] : ring_chunk_steps) {
    if (steps.size() < 2) continue;
    std::string& curve = chunk_curve[key];
    curve += "; ring steps in chunks:";
    for (const auto& [k, seconds] : steps) {
      curve += fmt::format("{} k={} {}", k == steps.begin()->first ? "" : ",", k,
                           FormatSeconds(seconds));
    }
  }
  for (const auto& [key, choice] : pairs_in_copies) {
    if (searched_copies.count(key)) continue;  // its own forms searched
    chunk_curve[key] += fmt::format("; in the form searched in %{}, whose copy this computation is",
                                    original_of.at(choice.computation));
  }

  struct Accepted {
    Choice choice;
    std::vector<Decision> decisions;  // the choice's, then its siblings' (Apply)
    double before = 0, after = 0;
    size_t copies = 1;  // taken with its copies in this many computations, at once
  };
  std::vector<Accepted> accepted;
  std::set<std::string> done;  // candidates rewritten (or excluded)
  int64_t round = 0;
  const std::vector<Trial> first_trials = trials;
  const std::set<std::string> first_seen = seen;
  // Accepts the best trial while it pays, re-pricing the others after each.
  auto greedy = [&]() -> Status {
    while (true) {
      std::erase_if(trials, [&](const Trial& t) { return done.count(t.choice.Key()) > 0; });
      if (trials.empty()) break;
      std::stable_sort(trials.begin(), trials.end(),
                       [](const Trial& a, const Trial& b) { return a.step < b.step; });
      Trial& best = trials.front();
      if (best.round != round) {  // estimated before the last acceptance: redo it
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> again,
                              Apply(*current, best.choice, matching, nullptr));
        if (!again) {
          trials.erase(trials.begin());
          continue;
        }
        LOOM_ASSIGN_OR_RETURN(best.step, step(*again));
        best.round = round;
        continue;  // re-sorted on the next pass
      }
      if (!(best.step < current_step * (1 - options_.min_gain))) break;
      std::vector<Decision> decisions;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> next,
                            Apply(*current, best.choice, matching, &decisions));
      if (!next) {
        trials.erase(trials.begin());
        continue;
      }
      accepted.push_back({best.choice, std::move(decisions), current_step, best.step, 1});
      done.insert(best.choice.Key());
      current_step = best.step;
      current = std::move(next);
      ++round;
      // Rewrites make new candidates (the all-gather of a split all-reduce).
      LOOM_ASSIGN_OR_RETURN(Enumeration more,
                            Enumerate(*current, matching, options_, try_both_dot_users_));
      LOOM_RETURN_IF_ERROR(estimate_new(more.choices, round));
      LOOM_RETURN_IF_ERROR(search_step_chunks(more, round));
    }
    return OkStatus();
  };
  LOOM_RETURN_IF_ERROR(greedy());
  // The greedy search once more from the program as given, never taking the
  // `excluded` candidates; the better of the two stays.
  auto retry_without = [&](const std::set<std::string>& excluded) -> Status {
    std::vector<Accepted> kept = std::move(accepted);
    std::set<std::string> kept_done = std::move(done);
    std::unique_ptr<ir::Module> kept_module = std::move(current);
    const double kept_step = current_step;
    accepted.clear();
    done = excluded;
    trials = first_trials;
    seen = first_seen;
    round = 0;
    current_step = baseline;
    LOOM_ASSIGN_OR_RETURN(current, ir::CloneModule(module));
    LOOM_RETURN_IF_ERROR(greedy());
    for (const std::string& key : excluded) done.erase(key);
    if (!(current_step < kept_step * (1 - options_.min_gain))) {
      accepted = std::move(kept);
      done = std::move(kept_done);
      current = std::move(kept_module);
      current_step = kept_step;
    }
    return OkStatus();
  };
  // The first move can be a trap: the best rewrite alone may leave nothing
  // that pays beside it, where two others together pay more (an exchange
  // that hides the all-to-all the others would have broken up). Once more
  // without the first move's candidate.
  if (!accepted.empty()) LOOM_RETURN_IF_ERROR(retry_without({accepted.front().choice.Key()}));

  // The same pair in copies of one computation (a layer's body in each
  // phase loop of a pipeline) each moves the step too little to pass
  // min-gain alone, where together they move it as much as one loop over
  // every layer would. So the declined candidates are grouped by the pair,
  // its description and their computations' original (OriginalsOfCopies),
  // and each group of two or more is tried at once, every copy in its own
  // best form (the copies whose ring alone gains anything), best group
  // first; a group is kept where the step gains min-gain by it, as any
  // rewrite. A wrong grouping costs a trial, never
  // a slower step.
  // best_of holds each candidate of the program as given once, in its best form.
  std::map<std::string, std::vector<Choice>> copies;
  for (const auto& [key, best] : best_of) {
    // A copy whose ring alone only slows the step stays out of its group.
    if (done.count(key) || !(best.step < baseline)) continue;
    const Choice& c = best.choice;
    const auto original = original_of.find(c.computation);
    const std::string& computation =
        original == original_of.end() ? c.computation : original->second;
    copies[fmt::format("{}/{}/{}/{}", computation, c.collective, c.dot,
                       enumeration.description[key])]
        .push_back(c);
  }
  // Best first: by the sum of what each copy gains alone.
  std::vector<std::pair<double, const std::vector<Choice>*>> groups;
  for (const auto& [name, group] : copies) {
    if (group.size() < 2) continue;
    double gain = 0;
    for (const Choice& c : group) gain += baseline - best_of.at(c.Key()).step;
    groups.emplace_back(gain, &group);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [gain, group] : groups) {
    if (gain <= 0) break;
    std::unique_ptr<ir::Module> next;
    std::vector<std::vector<Decision>> made;
    std::vector<Choice> applied;
    for (const Choice& c : *group) {
      std::vector<Decision> decisions;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> with,
                            Apply(next ? *next : *current, c, matching, &decisions));
      if (!with) continue;
      next = std::move(with);
      made.push_back(std::move(decisions));
      applied.push_back(c);
    }
    if (applied.size() < 2) continue;
    LOOM_ASSIGN_OR_RETURN(const double seconds, step(*next));
    if (!(seconds < current_step * (1 - options_.min_gain))) continue;
    for (size_t i = 0; i < applied.size(); ++i) {
      accepted.push_back({applied[i], std::move(made[i]), current_step, seconds, applied.size()});
      done.insert(applied[i].Key());
    }
    current_step = seconds;
    current = std::move(next);
    ++round;
  }

  // Every candidate rewritten in one form, as collective-matmul does
  // without a target: kept instead when it beats the greedy choice.
  struct Forced {
    CollectiveMatmulOptions options;
    double seconds = 0;
    std::unique_ptr<ir::Module> module;
    std::vector<Decision> decisions;
  };
  std::optional<Forced> forced;
  // Unrolled only where every ring is short enough to unroll (as the
  // candidates' own trials).
  const bool all_unrollable =
      std::all_of(enumeration.choices.begin(), enumeration.choices.end(),
                  [&](const Choice& c) { return c.group_size <= options_.max_unrolled_steps; });
  if (!enumeration.choices.empty()) {
    for (RingDirection direction :
         {RingDirection::kUnidirectional, RingDirection::kBidirectional}) {
      for (RingForm form : {RingForm::kLoop, RingForm::kUnrolled}) {
        if (options_.direction && *options_.direction != direction) continue;
        if (options_.form && *options_.form != form) continue;
        if (form == RingForm::kUnrolled && !all_unrollable && !options_.form) continue;
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> all, ir::CloneModule(module));
        CollectiveMatmulOptions everything = matching;
        everything.gate = nullptr;
        everything.min_bytes = 0;
        everything.direction = direction;
        everything.form = form;
        CollectiveMatmul pass(everything);
        LOOM_ASSIGN_OR_RETURN(const bool changed, pass.Run(*all));
        if (!changed) continue;
        LOOM_ASSIGN_OR_RETURN(const double seconds, step(*all));
        if (seconds < current_step * (1 - options_.min_gain) &&
            (!forced || seconds < forced->seconds)) {
          forced = Forced{everything, seconds, std::move(all), pass.Decisions()};
        }
      }
    }
  }

  for (const Decision& d : enumeration.not_candidates) decisions_.push_back(d);
  if (forced) {
    // Replace the module's computations by the forced rewrite's.
    for (Decision d : forced->decisions) {
      if (!d.rewritten) continue;
      // The pass's reason starts with how it rewrote the pair ("unidirectional
      // loop ring; a 4 MiB collective ...").
      d.reason = fmt::format(
          "{}, as every candidate: step {} -> {} ({}) on {} (the best of the "
          "rewrites one at a time: {})",
          d.reason.substr(0, d.reason.find(';')), FormatSeconds(baseline),
          FormatSeconds(forced->seconds), Change(baseline, forced->seconds), on,
          FormatSeconds(current_step));
      decisions_.push_back(d);
    }
    LOOM_ASSIGN_OR_RETURN(current, ir::CloneModule(*forced->module));
    current_step = forced->seconds;
  } else {
    for (const Accepted& a : accepted) {
      for (Decision d : a.decisions) {
        const std::string copies =
            a.copies > 1 ? fmt::format(", with its copies, in {} computations at once", a.copies)
                         : "";
        const std::string step = fmt::format("{}{}: step {} -> {} ({}) on {}", a.choice.Ring(),
                                             copies, FormatSeconds(a.before),
                                             FormatSeconds(a.after), Change(a.before, a.after), on);
        d.reason = d.dot == a.choice.dot ? step + chunk_curve[a.choice.Key()]
                                         : fmt::format("{}: {}", d.reason, step);
        decisions_.push_back(d);
      }
    }
  }
  // The declined: every candidate of the original program not rewritten.
  std::set<std::string> declined;
  for (const Choice& choice : enumeration.choices) {
    if (done.count(choice.Key()) || declined.count(choice.Key())) continue;
    if (forced) {
      bool rewritten = false;
      for (const Decision& d : decisions_) {
        rewritten |= d.rewritten && d.collective == choice.collective && d.dot == choice.dot;
      }
      if (rewritten) continue;
    }
    declined.insert(choice.Key());
    Decision d{choice.computation,
               choice.collective,
               choice.dot,
               enumeration.description[choice.Key()],
               false,
               ""};
    auto it = best_of.find(choice.Key());
    if (it == best_of.end()) {
      d.reason = "no ring form applies";
    } else if (it->second.step < baseline * (1 - options_.min_gain)) {
      // It pays alone, but the rewrites taken pay more, and it adds nothing to them.
      d.reason = fmt::format(
          "alone its best ring ({}) makes the step {} against {} without it ({}), but the "
          "rewrites taken make it {} ({}), and it gains nothing more after them, on {}{}",
          it->second.choice.Variant(), FormatSeconds(it->second.step), FormatSeconds(baseline),
          Change(baseline, it->second.step), FormatSeconds(current_step),
          Change(baseline, current_step), on, chunk_curve[choice.Key()]);
    } else {
      d.reason = fmt::format(
          "its best ring ({}) makes the step {} against {} without it ({}; needs better than "
          "-{:.1f}%) on {}{}",
          it->second.choice.Variant(), FormatSeconds(it->second.step), FormatSeconds(baseline),
          Change(baseline, it->second.step), 100 * options_.min_gain, on,
          chunk_curve[choice.Key()]);
    }
    decisions_.push_back(std::move(d));
  }
  for (const Decision& d : decisions_) explanation_.push_back(FormatDecision(d));
  explanation_.push_back(fmt::format(
      "step on {}: {} with async-collectives and schedule alone, {} with the rewrites ({})", on,
      FormatSeconds(baseline), FormatSeconds(current_step), Change(baseline, current_step)));

  if (current_step >= baseline) return false;
  // The program as rewritten replaces the module's contents: replay the
  // accepted choices on the module itself, so that it keeps its locations.
  if (forced) {
    CollectiveMatmul pass(forced->options);
    return pass.Run(module);
  }
  for (const Accepted& a : accepted) {
    CollectiveMatmulOptions one = matching;
    if (a.choice.ring_per_dot) one.ring_per_dot = a.choice.ring_per_dot;
    one.gate = [&](const Candidate& c) { return a.choice.Verdict(Matches(c, a.choice)); };
    CollectiveMatmul pass(one);
    LOOM_ASSIGN_OR_RETURN(const bool changed, pass.Run(module));
    if (!changed) {
      return Error{fmt::format("collective-matmul: internal error replaying %{} / %{}",
                               a.choice.collective, a.choice.dot)};
    }
  }
  return true;
}

}  // namespace loom::pass
