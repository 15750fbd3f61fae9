// A property test of collective-matmul's all-to-all forms: random expert
// products, random groups, both directions, run against the original.
//
// Each case is drawn from its own seed (std::mt19937_64 reduced to ranges
// by hand, so every platform draws the same cases) as HLO text:
//  - a group size N in {2,3,4,6,8}, one or two groups (N*G <= 8 devices),
//    over partitions (channel_id=1) or replicas (no channel_id), the
//    devices dealt into groups in a shuffled order (the ring order is the
//    group order);
//  - a dot with 0-1 batch dimensions, one contracting dimension and 1-2
//    free dimensions per operand, in a random order within each operand,
//    sizes 1..4, element type f32 or bf16;
//  - the direction: an all-to-all before the dot (of the lhs or rhs, along
//    one of its free or batch dimensions: the dispatch before an expert
//    product) or after it (along one output dimension: the combine), that
//    dimension N x (1..3);
//  - a third of them with a chain op between the two: a copy, a convert to
//    the other float type, a transpose, or a reshape that merges the
//    exchanged dimension with a minor one (before the dot) or splits it
//    (after);
//  - about 8% that must be declined: the all-to-all along a contracting
//    dimension of the dot;
//  - the rounds multiplied per product: a random divisor of N below N.
// The rewritten module must verify, print as a fixed point, hold no
// all-to-all, and compute bitwise the original's outputs on every device of
// the threads backend with the deterministic dot kernels (every output
// element is the same dot product as before). A declined case must come
// back unchanged.
//
// LOOM_PROPERTY_SEED and LOOM_PROPERTY_CASES override the seed and the
// number of cases; case i uses seed SEED+i.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "pass/collective_matmul.h"
#include "pass/module_testing.h"
#include "pass/portable_random.h"

namespace loom::pass {
namespace {

using Dims = std::vector<int64_t>;

constexpr uint64_t kDefaultSeed = 20261201;
constexpr int64_t kDefaultCases = 120;

using Random = test::PortableRandom;

enum class Role { kBatch, kContracting, kFree };

// One operand: its dimensions' roles and sizes, in operand order.
struct Operand {
  std::vector<Role> roles;
  Dims sizes;
  Dims Indices(Role role) const {
    Dims out;
    for (size_t i = 0; i < roles.size(); ++i) {
      if (roles[i] == role) out.push_back(static_cast<int64_t>(i));
    }
    return out;
  }
};

std::string Shape(std::string_view type, const Dims& dims) {
  return fmt::format("{}[{}]", type, fmt::join(dims, ","));
}

std::string Braces(const Dims& dims) { return fmt::format("{{{}}}", fmt::join(dims, ",")); }

struct Case {
  std::string text;
  int64_t devices = 0;
  int64_t rounds_per_product = 1;
  bool declined = false;
  std::string what;
};

// The dot's output dimensions: batch, lhs free, rhs free.
Dims OutputDims(const Operand& lhs, const Operand& rhs) {
  Dims out;
  for (int64_t i : lhs.Indices(Role::kBatch)) out.push_back(lhs.sizes[static_cast<size_t>(i)]);
  for (int64_t i : lhs.Indices(Role::kFree)) out.push_back(lhs.sizes[static_cast<size_t>(i)]);
  for (int64_t i : rhs.Indices(Role::kFree)) out.push_back(rhs.sizes[static_cast<size_t>(i)]);
  return out;
}

// Roles in a random order: `batch` batch, one contracting, 1-2 free.
Operand DrawOperand(Random& random, int64_t batch, int64_t free) {
  Operand operand;
  for (int64_t i = 0; i < batch; ++i) operand.roles.push_back(Role::kBatch);
  operand.roles.push_back(Role::kContracting);
  for (int64_t i = 0; i < free; ++i) operand.roles.push_back(Role::kFree);
  random.Shuffle(operand.roles);
  for (size_t i = 0; i < operand.roles.size(); ++i) operand.sizes.push_back(random.Int(1, 4));
  return operand;
}

// The replica groups: `groups` groups of n, devices dealt in a shuffled order.
std::string Groups(Random& random, int64_t n, int64_t groups) {
  Dims ids(static_cast<size_t>(n * groups));
  std::iota(ids.begin(), ids.end(), 0);
  random.Shuffle(ids);
  std::vector<std::string> out;
  for (int64_t g = 0; g < groups; ++g) {
    out.push_back(Braces(Dims(ids.begin() + g * n, ids.begin() + (g + 1) * n)));
  }
  return fmt::format("{{{}}}", fmt::join(out, ","));
}

Case Draw(uint64_t seed) {
  Random random(seed);
  const int64_t n = random.Pick<int64_t>({2, 3, 4, 6, 8});
  const int64_t groups = n <= 4 && random.Chance(0.4) ? 2 : 1;
  const int64_t devices = n * groups;
  const bool partitions = random.Chance(0.7);
  const std::string type = random.Chance(0.5) ? "f32" : "bf16";
  const std::string other_type = type == "f32" ? "bf16" : "f32";
  const int64_t batch = random.Int(0, 1);
  Operand lhs = DrawOperand(random, batch, random.Int(1, 2));
  Operand rhs = DrawOperand(random, batch, random.Int(1, 2));
  // Matching batch and contracting sizes.
  const Dims lb = lhs.Indices(Role::kBatch), rb = rhs.Indices(Role::kBatch);
  for (size_t i = 0; i < lb.size(); ++i) {
    rhs.sizes[static_cast<size_t>(rb[i])] = lhs.sizes[static_cast<size_t>(lb[i])];
  }
  const int64_t lc = lhs.Indices(Role::kContracting)[0], rc = rhs.Indices(Role::kContracting)[0];
  rhs.sizes[static_cast<size_t>(rc)] = lhs.sizes[static_cast<size_t>(lc)];

  Case c;
  c.devices = devices;
  // Rounds per product: a divisor of N below N.
  Dims divisors;
  for (int64_t g = 1; g < n; ++g) {
    if (n % g == 0) divisors.push_back(g);
  }
  c.rounds_per_product = random.Pick(divisors);
  const bool before = random.Chance(0.5);
  const int64_t chain =
      random.Chance(0.33) ? random.Int(1, 4) : 0;  // copy convert transpose reshape
  const std::string attrs = fmt::format("{}replica_groups={}", partitions ? "channel_id=1, " : "",
                                        Groups(random, n, groups));
  const std::string header = fmt::format("HloModule a2a_{}, {}={}\n\nENTRY %main {{\n", seed,
                                         partitions ? "num_partitions" : "replica_count", devices);
  const auto dot_line = [&](std::string_view l, std::string_view r, const Dims& out) {
    return fmt::format(
        "  {} = {} dot({}, {}), lhs_batch_dims={}, lhs_contracting_dims={{{}}}, "
        "rhs_batch_dims={}, rhs_contracting_dims={{{}}}\n",
        "%y", Shape(type, out), l, r, Braces(lb), lc, Braces(rb), rc);
  };

  if (before) {
    // The exchanged operand and dimension: free or batch, or (declined)
    // contracting.
    const int64_t which = random.Int(0, 1);
    Operand& x = which == 0 ? lhs : rhs;
    c.declined = random.Chance(0.08);
    Dims candidates = x.Indices(Role::kFree);
    for (int64_t i : x.Indices(Role::kBatch)) candidates.push_back(i);
    const int64_t d = c.declined ? x.Indices(Role::kContracting)[0] : random.Pick(candidates);
    x.sizes[static_cast<size_t>(d)] = n * random.Int(1, 3);
    // The batch or contracting partner keeps the same size.
    Operand& y = which == 0 ? rhs : lhs;
    const Role role = x.roles[static_cast<size_t>(d)];
    if (role != Role::kFree) {
      const Dims xs = x.Indices(role), ys = y.Indices(role);
      for (size_t i = 0; i < xs.size(); ++i) {
        if (xs[i] == d) y.sizes[static_cast<size_t>(ys[i])] = x.sizes[static_cast<size_t>(d)];
      }
    }
    const Dims out = OutputDims(lhs, rhs);
    // The all-to-all's operand and the chain that makes the dot's operand.
    Dims exchanged_shape = x.sizes;
    int64_t exchanged_dim = d;
    std::string exchanged_type = type;
    std::string chain_text;
    const std::string operand_shape = Shape(type, x.sizes);
    switch (c.declined ? 0 : chain) {
      case 1:
        chain_text = fmt::format("  %c = {} copy(%e)\n", operand_shape);
        break;
      case 2:
        exchanged_type = other_type;
        chain_text = fmt::format("  %c = {} convert(%e)\n", operand_shape);
        break;
      case 3: {
        // transpose(pre, dims=P) has dim i of size pre[P[i]].
        Dims permutation(x.sizes.size());
        std::iota(permutation.begin(), permutation.end(), 0);
        random.Shuffle(permutation);
        for (size_t i = 0; i < permutation.size(); ++i) {
          exchanged_shape[static_cast<size_t>(permutation[i])] = x.sizes[i];
        }
        exchanged_dim = permutation[static_cast<size_t>(d)];
        chain_text = fmt::format("  %c = {} transpose(%e), dimensions={}\n", operand_shape,
                                 Braces(permutation));
        break;
      }
      case 4: {
        // The exchanged dimension N*k split in two, (N*k/m, m) merged back.
        const int64_t size = x.sizes[static_cast<size_t>(d)];
        const int64_t m = size % (n * 2) == 0 ? 2 : 1;
        if (m == 1) break;
        exchanged_shape.insert(exchanged_shape.begin() + d + 1, m);
        exchanged_shape[static_cast<size_t>(d)] = size / m;
        chain_text = fmt::format("  %c = {} reshape(%e)\n", operand_shape);
        break;
      }
      default:
        break;
    }
    const std::string exchanged = Shape(exchanged_type, exchanged_shape);
    c.text = header + fmt::format("  %x = {} parameter(0)\n  %w = {} parameter(1)\n", exchanged,
                                  Shape(type, (which == 0 ? rhs : lhs).sizes));
    c.text += fmt::format("  %e = {} all-to-all(%x), {}, dimensions={{{}}}\n", exchanged, attrs,
                          exchanged_dim);
    c.text += chain_text;
    const std::string operand = chain_text.empty() ? "%e" : "%c";
    c.text += which == 0 ? dot_line(operand, "%w", out) : dot_line("%w", operand, out);
    c.text += fmt::format("  ROOT %r = {} copy(%y)\n}}\n", Shape(type, out));
    c.what = fmt::format(
        "all-to-all -> dot, {} dimension {}, N={}, G={}, {} round(s) per product, chain {}",
        which == 0 ? "lhs" : "rhs", d, n, groups, c.rounds_per_product,
        chain_text.empty() ? 0 : chain);
    return c;
  }

  // dot -> all-to-all along an output dimension.
  Dims out = OutputDims(lhs, rhs);
  const auto o = static_cast<size_t>(random.Int(0, static_cast<int64_t>(out.size()) - 1));
  // Resize the operand dimension that supplies output dimension o.
  const int64_t factor = random.Int(1, 3);
  {
    size_t k = 0;
    for (size_t i = 0; i < lb.size(); ++i) {
      if (k++ == o) {
        lhs.sizes[static_cast<size_t>(lb[i])] = n * factor;
        rhs.sizes[static_cast<size_t>(rb[i])] = n * factor;
      }
    }
    for (int64_t i : lhs.Indices(Role::kFree)) {
      if (k++ == o) lhs.sizes[static_cast<size_t>(i)] = n * factor;
    }
    for (int64_t i : rhs.Indices(Role::kFree)) {
      if (k++ == o) rhs.sizes[static_cast<size_t>(i)] = n * factor;
    }
  }
  out = OutputDims(lhs, rhs);
  Dims exchanged_shape = out;
  auto exchanged_dim = static_cast<int64_t>(o);
  std::string exchanged_type = type;
  std::string chain_text;
  switch (chain) {
    case 1:
      chain_text = fmt::format("  %c = {} copy(%y)\n", Shape(type, out));
      break;
    case 2:
      exchanged_type = other_type;
      chain_text = fmt::format("  %c = {} convert(%y)\n", Shape(other_type, out));
      break;
    case 3: {
      Dims permutation(out.size());
      std::iota(permutation.begin(), permutation.end(), 0);
      random.Shuffle(permutation);
      for (size_t i = 0; i < permutation.size(); ++i) {
        exchanged_shape[i] = out[static_cast<size_t>(permutation[i])];
        if (permutation[i] == static_cast<int64_t>(o)) exchanged_dim = static_cast<int64_t>(i);
      }
      chain_text = fmt::format("  %c = {} transpose(%y), dimensions={}\n",
                               Shape(type, exchanged_shape), Braces(permutation));
      break;
    }
    case 4:
      // Output dimension N*k split into (N*k/m, m) when m = 2 keeps N | N*k/m.
      if (out[o] % (n * 2) == 0) {
        exchanged_shape.insert(exchanged_shape.begin() + static_cast<int64_t>(o) + 1, 2);
        exchanged_shape[o] = out[o] / 2;
        chain_text = fmt::format("  %c = {} reshape(%y)\n", Shape(type, exchanged_shape));
      }
      break;
    default:
      break;
  }
  const std::string exchanged = Shape(exchanged_type, exchanged_shape);
  c.text = header + fmt::format("  %a = {} parameter(0)\n  %b = {} parameter(1)\n",
                                Shape(type, lhs.sizes), Shape(type, rhs.sizes));
  c.text += dot_line("%a", "%b", out);
  c.text += chain_text;
  c.text += fmt::format("  ROOT %e = {} all-to-all({}), {}, dimensions={{{}}}\n}}\n", exchanged,
                        chain_text.empty() ? "%y" : "%c", attrs, exchanged_dim);
  c.what = fmt::format(
      "dot -> all-to-all, output dimension {}, N={}, G={}, {} round(s) per product, chain {}", o, n,
      groups, c.rounds_per_product, chain_text.empty() ? 0 : chain);
  return c;
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoull(value, nullptr, 10) : fallback;
}

TEST(AllToAllMatmulProperty, RandomExpertProductsAreBitwiseExact) {
  const uint64_t seed = EnvOr("LOOM_PROPERTY_SEED", kDefaultSeed);
  const auto cases = static_cast<int64_t>(EnvOr("LOOM_PROPERTY_CASES", kDefaultCases));
  int64_t rewritten = 0, declined = 0, before = 0, chained = 0, grouped = 0;
  for (int64_t i = 0; i < cases; ++i) {
    const uint64_t case_seed = seed + static_cast<uint64_t>(i);
    const Case c = Draw(case_seed);
    SCOPED_TRACE(fmt::format("LOOM_PROPERTY_SEED={} LOOM_PROPERTY_CASES=1: {}\n{}", case_seed,
                             c.what, c.text));
    auto module = test::ParseOrFail(c.text);
    ASSERT_TRUE(module);
    test::ExpectVerifies(*module);
    const std::string original = ir::PrintModule(*module);
    CollectiveMatmulOptions options;
    options.min_bytes = 0;
    options.rounds_per_product = c.rounds_per_product;
    CollectiveMatmul pass(options);
    Expected<bool> changed = pass.Run(*module);
    ASSERT_TRUE(changed.ok()) << changed.error().ToString();
    const std::string after = ir::PrintModule(*module);
    if (c.declined) {
      EXPECT_FALSE(*changed);
      EXPECT_EQ(after, original);
      ++declined;
      continue;
    }
    ASSERT_TRUE(*changed) << fmt::format("{}", fmt::join(pass.Explain(), "\n"));
    test::ExpectVerifies(*module);
    EXPECT_EQ(after.find("all-to-all("), std::string::npos) << after;
    auto reparsed = test::ParseOrFail(after);
    ASSERT_TRUE(reparsed);
    EXPECT_EQ(ir::PrintModule(*reparsed), after);
    test::ExpectSameResults(c.text, after, c.devices, 0, case_seed);
    if (HasFailure()) return;
    ++rewritten;
    grouped += c.rounds_per_product > 1 ? 1 : 0;
    before += c.what.starts_with("all-to-all") ? 1 : 0;
    chained += c.what.ends_with("chain 0") ? 0 : 1;
  }
  std::cout << fmt::format(
      "{} cases: {} rewritten bitwise exact ({} before a dot, {} after; {} through a chain op; "
      "{} with several rounds per product), {} declined\n",
      cases, rewritten, before, rewritten - before, chained, grouped, declined);
  EXPECT_GT(rewritten, cases / 2);
  EXPECT_GT(declined, 0);
  EXPECT_GT(chained, 0);
  EXPECT_GT(grouped, 0);
}

}  // namespace
}  // namespace loom::pass
