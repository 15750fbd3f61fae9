#include "pass/collective_matmul_gate.h"

#include <fmt/format.h>

#include <algorithm>

#include "analysis/flops.h"
#include "pass/ring/dot_geometry.h"
#include "support/units.h"

namespace loom::pass {

namespace {

double Bytes(const ir::Instruction& instruction) {
  return static_cast<double>(instruction.shape().ByteSize());
}

// t_c: one partial product and the ops that feed and merge it, each costed
// as the cost model costs the op the ring emits (so that the gate agrees
// with the step estimate of the rewritten program): a dynamic-slice of an
// operand, a dynamic-update-slice of the result's block, an add of partial
// results.
double StepCompute(const cost::TargetCostModel& model, const Candidate& c) {
  const ir::Instruction& dot = *c.dot_instruction;
  const auto n = static_cast<double>(c.group_size);
  const double launch = model.target().compute().launch_seconds;
  const auto memory = [&](double bytes) { return model.MemorySeconds(bytes) + launch; };
  const double out = Bytes(dot);
  const double lhs = Bytes(*dot.operand(0));
  const double rhs = Bytes(*dot.operand(1));
  const double flops = static_cast<double>(analysis::DotFlops(dot)) / n;
  const ir::PrimitiveType type = dot.operand(0)->shape().type();
  if (c.kind != CandidateKind::kAllGather) {
    // Slice the operand(s) that supply output block q, multiply, add the
    // partial sum received.
    double sliced = lhs + rhs;  // batch: both
    if (c.dimension_class == "lhs free") sliced = lhs;
    if (c.dimension_class == "rhs free") sliced = rhs;
    const double slices = c.dimension_class == "batch" ? 2 : 1;
    return model.DotSeconds(flops, lhs + rhs - sliced + sliced / n + out / n, type) +
           slices * launch + model.MemorySeconds(2 * sliced / n) + memory(3 * out / n);
  }
  const double window = static_cast<double>(c.shard_bytes);
  const double other = std::max(0.0, lhs + rhs - static_cast<double>(c.collective_bytes));
  if (c.dimension_class == "free") {
    return model.DotSeconds(flops, window + other + out / n, type) + memory(2 * out / n);
  }
  if (c.dimension_class == "batch") {
    return model.DotSeconds(flops, window + other / n + out / n, type) + memory(2 * other / n) +
           memory(2 * out / n);
  }
  // Contracting: slice the other operand, accumulate the whole result.
  return model.DotSeconds(flops, window + other / n + out, type) + memory(2 * other / n) +
         memory(3 * out);
}

std::vector<std::pair<int64_t, int64_t>> BothWays(
    const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  auto both = pairs;
  for (const auto& [from, to] : pairs) both.emplace_back(to, from);
  return both;
}

// Loop iterations of a ring form (the steps that go into the while body).
int64_t LoopIterations(const Candidate& c, RingDirection direction) {
  const int64_t n = c.group_size;
  if (direction == RingDirection::kBidirectional && n >= 3)
    return std::max<int64_t>((n - 1) / 2 - 1, 0);
  return c.kind == CandidateKind::kAllGather ? n - 1 : n - 2;
}

}  // namespace

RingEstimate EstimateRing(const cost::TargetCostModel& model, const Candidate& c,
                          int64_t permutes_in_flight) {
  RingEstimate e;
  const auto n = static_cast<double>(c.group_size);
  e.collective = model.TransferSeconds(*c.collective_instruction, c.grid);
  e.dot = model.ComputeSeconds(*c.dot_instruction);
  e.original = e.collective + e.dot;
  e.step_compute = StepCompute(model, c);
  // Each collective-permute is an op of its own and pays a launch.
  const double launch = model.target().compute().launch_seconds;
  const auto shard = static_cast<double>(c.shard_bytes);
  e.step_transfer = model.PermuteSeconds(c.ring_pairs, shard) + launch;
  const double both = permutes_in_flight >= 2
                          ? model.PermuteSeconds(BothWays(c.ring_pairs), shard) + 2 * launch
                          : 2 * e.step_transfer;
  const double tc = e.step_compute;
  const double tp = e.step_transfer;
  e.unidirectional = (n - 1) * std::max(tc, tp) + tc;
  e.bidirectional = e.unidirectional;
  if (c.group_size >= 3) {
    const auto a = static_cast<double>(c.group_size / 2);        // ceil((N-1)/2)
    const auto b = static_cast<double>((c.group_size - 1) / 2);  // floor((N-1)/2)
    if (c.kind == CandidateKind::kAllGather) {
      e.bidirectional =
          std::max(tc, both) + (a - 1) * std::max(2 * tc, both) + (a == b ? 2 : 1) * tc;
    } else {
      e.bidirectional = b * std::max(2 * tc, both) + (a - b) * std::max(tc, tp) + tc;
    }
  }
  if (c.kind == CandidateKind::kAllReduce) {
    // The all-gather half stays a native collective (a later candidate may
    // decompose it against the dot that consumes it).
    e.unidirectional += e.collective / 2;
    e.bidirectional += e.collective / 2;
  }
  e.loop_overhead = 2 * model.target().compute().launch_seconds;
  return e;
}

Gate MakeCostGate(std::shared_ptr<const cost::TargetCostModel> model, GateOptions options) {
  return [model = std::move(model), options](const Candidate& c) {
    const RingEstimate e = EstimateRing(*model, c, options.permutes_in_flight);
    GateVerdict verdict;
    verdict.form = options.form.value_or(
        c.group_size <= options.max_unrolled_steps ? RingForm::kUnrolled : RingForm::kLoop);
    const auto total = [&](RingDirection direction) {
      const double ring =
          direction == RingDirection::kBidirectional ? e.bidirectional : e.unidirectional;
      return ring + (verdict.form == RingForm::kLoop
                         ? e.loop_overhead * static_cast<double>(LoopIterations(c, direction))
                         : 0.0);
    };
    const double uni = total(RingDirection::kUnidirectional);
    const double bi = total(RingDirection::kBidirectional);
    verdict.direction = options.direction.value_or(bi < uni ? RingDirection::kBidirectional
                                                            : RingDirection::kUnidirectional);
    const double ring = verdict.direction == RingDirection::kBidirectional ? bi : uni;
    verdict.benefit = e.original - ring;
    verdict.rewrite = ring < e.original * (1 - options.min_gain);
    verdict.reason = fmt::format(
        "on {}: original {} ({} {} + dot {}); ring {} (unidirectional {}, bidirectional {}; "
        "per step: product {}, transfer {}){}",
        model->target().name(), FormatSeconds(e.original), CandidateKindName(c.kind),
        FormatSeconds(e.collective), FormatSeconds(e.dot), FormatSeconds(ring), FormatSeconds(uni),
        FormatSeconds(bi), FormatSeconds(e.step_compute), FormatSeconds(e.step_transfer),
        verdict.rewrite     ? fmt::format("; saves {:.0f}%", 100 * (1 - ring / e.original))
        : ring < e.original ? fmt::format("; the ring saves only {:.1f}% (< {:.0f}% required)",
                                          100 * (1 - ring / e.original), 100 * options.min_gain)
                            : std::string("; the ring does not pay"));
    return verdict;
  };
}

}  // namespace loom::pass
