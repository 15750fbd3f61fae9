// The simulator at scale: the demo MLP block (examples/mlp_block_tp4.hlo,
// 4-way tensor parallel) as many 4-device groups side by side on TPU v4
// slices of 64, 512 and 2048 chips, before and after the collective-matmul
// rewrite, with and without a concurrent data-parallel gradient all-reduce
// across the groups (traffic of two mesh axes contending for links).
//
//   loom_sim_bench [--quick] [--no-dp]
//
// Prints one row per run: chips, torus, variant, simulated step time (and
// the cost model's, which ignores contention), MFU, events, flows, wall
// time and events per second, the devices replayed (one per class of
// symmetric devices, sim/symmetry.h) and, side by side in the same run, the
// wall time of replaying every device, its ratio and the relative
// difference of the two steps; then how wall time and events grow with the
// number of chips.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cost/target.h"
#include "cost/target_cost_model.h"
#include "ir/parser.h"
#include "pass/async_collectives.h"
#include "pass/collective_matmul.h"
#include "pass/schedule.h"
#include "sim/simulator.h"

namespace {

using namespace loom;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void ReplaceAll(std::string& text, std::string_view from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
}

// The demo block on `chips` devices: chips/4 tensor-parallel groups of 4
// consecutive partitions (replica_groups=[G,4]<=[chips]). With
// `data_parallel`, each device also all-reduces its W1 shard's gradient
// (bf16 1024x1024, 2 MiB) over the G devices that hold the same shard
// (replica_groups=[4,G]<=[G,4]T(1,0)), started first and finished last, so
// that it overlaps the whole block.
std::string ScaledDemo(const std::string& demo, int64_t chips, bool data_parallel) {
  std::string text = demo;
  const int64_t groups = chips / 4;
  ReplaceAll(text, "num_partitions=4", fmt::format("num_partitions={}", chips));
  ReplaceAll(text, "replica_groups={{0,1,2,3}}",
             fmt::format("replica_groups=[{},4]<=[{}]", groups, chips));
  if (data_parallel) {
    ReplaceAll(text, "  %w2 = bf16[1024,1024] parameter(2)\n",
               fmt::format("  %w2 = bf16[1024,1024] parameter(2)\n"
                           "  %grad = bf16[1024,1024] all-reduce-start(%w1), channel_id=9, "
                           "replica_groups=[4,{0}]<=[{0},4]T(1,0), use_global_device_ids=true, "
                           "to_apply=%add\n",
                           groups));
    ReplaceAll(text, "  ROOT %out = bf16[512,1024] reduce-scatter(",
               "  %grad.done = bf16[1024,1024] all-reduce-done(%grad)\n"
               "  %out = bf16[512,1024] reduce-scatter(");
    // The block's result and the reduced gradient.
    const size_t end = text.rfind('}');
    text.insert(end,
                "  ROOT %result = (bf16[512,1024], bf16[1024,1024]) tuple(%out, %grad.done)\n");
    ReplaceAll(text, "-> bf16[512,1024] {", "-> (bf16[512,1024], bf16[1024,1024]) {");
  }
  return text;
}

struct Variant {
  std::string name;
  bool data_parallel = false;
  bool collective_matmul = false;
  bool schedule = false;  // async collectives + the list scheduler
};

struct Row {
  int64_t chips = 0;
  std::string variant;
  double wall = 0;
  int64_t events = 0;
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  bool dp = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--no-dp") == 0) dp = false;
  }
  const std::string demo = ReadFile(std::string(LOOM_EXAMPLES_DIR) + "/mlp_block_tp4.hlo");
  if (demo.empty()) {
    std::cerr << "cannot read examples/mlp_block_tp4.hlo\n";
    return 1;
  }
  struct Slice {
    int64_t chips;
    std::string target;
  };
  std::vector<Slice> slices = {{64, "tpu-v4-4x4x4"}, {512, "tpu-v4-8x8x8"}};
  if (!quick) slices.push_back({2048, "tpu-v4-8x16x16"});
  std::vector<Variant> variants = {
      {"original", false, false, false},
      {"collective-matmul", false, true, false},
      {"cm+async+schedule", false, true, true},
  };
  if (dp) {
    variants.push_back({"original+dp", true, false, false});
    variants.push_back({"cm+async+schedule+dp", true, true, true});
  }

  // links/upd: links whose flows' rates were recomputed per update, on
  // average. Events at one instant share one update, which recomputes the
  // connected components they touched (in a synchronous SPMD step every
  // group's ring steps end at the same instant: all their links, each its
  // own small component).
  fmt::print(
      "{:>6} {:>8} {:<22} {:>11} {:>11} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8} {:>9} {:>7} "
      "{:>8}\n",
      "chips", "torus", "variant", "step", "cost model", "MFU", "events", "flows", "wall",
      "events/s", "links/upd", "replayed", "every dev", "faster", "diff");
  std::vector<Row> rows;
  for (const Slice& slice : slices) {
    auto target = cost::FindTarget(slice.target);
    if (!target.ok()) {
      std::cerr << target.error().message << "\n";
      return 1;
    }
    const auto& torus = std::get<cost::TorusTopology>(target->topology());
    const std::string shape = fmt::format("{}x{}x{}", torus.dims[0], torus.dims[1], torus.dims[2]);
    for (const Variant& variant : variants) {
      auto module = ir::ParseModule(ScaledDemo(demo, slice.chips, variant.data_parallel));
      if (!module.ok()) {
        std::cerr << variant.name << ": " << module.error().ToString() << "\n";
        return 1;
      }
      if (variant.collective_matmul) {
        pass::CollectiveMatmulOptions options;
        options.min_bytes = 0;
        pass::CollectiveMatmul rewrite(options);
        auto changed = rewrite.Run(**module);
        if (!changed.ok()) {
          std::cerr << "collective-matmul: " << changed.error().ToString() << "\n";
          return 1;
        }
      }
      const cost::TargetCostModel model(*target);
      if (variant.schedule) {
        pass::AsyncCollectives async;
        auto changed = async.Run(**module);
        if (changed.ok()) {
          pass::Schedule schedule(model);
          changed = schedule.Run(**module);
        }
        if (!changed.ok()) {
          std::cerr << "async+schedule: " << changed.error().ToString() << "\n";
          return 1;
        }
      }
      auto report = sim::Simulate(**module, *target, {});
      if (!report.ok()) {
        std::cerr << slice.target << " " << variant.name << ": " << report.error().ToString()
                  << "\n";
        return 1;
      }
      sim::SimOptions every_device;
      every_device.exploit_symmetry = false;
      auto all = sim::Simulate(**module, *target, every_device);
      if (!all.ok()) {
        std::cerr << slice.target << " " << variant.name << ": " << all.error().ToString() << "\n";
        return 1;
      }
      fmt::print(
          "{:>6} {:>8} {:<22} {:>8.1f} us {:>8.1f} us {:>5.1f}% {:>9} {:>9} {:>7.3f} s {:>10.3g} "
          "{:>9.1f} {:>8} {:>7.3f} s {:>6.1f}x {:>8.1e}\n",
          slice.chips, shape, variant.name, report->step_seconds * 1e6,
          report->cost_model_step_seconds * 1e6, report->mfu * 100, report->events, report->flows,
          report->wall_seconds, static_cast<double>(report->events) / report->wall_seconds,
          report->mean_component_links, report->simulated_devices, all->wall_seconds,
          all->wall_seconds / report->wall_seconds,
          std::abs(report->step_seconds - all->step_seconds) / all->step_seconds);
      std::fflush(stdout);
      rows.push_back({slice.chips, variant.name, report->wall_seconds, report->events});
    }
  }
  // Growth: each variant against itself on the smallest slice.
  fmt::print("\ngrowth against {} chips (x chips: x events, x wall time):\n", slices[0].chips);
  for (const Variant& variant : variants) {
    const Row* base = nullptr;
    for (const Row& row : rows) {
      if (row.variant != variant.name) continue;
      if (base == nullptr) {
        base = &row;
        continue;
      }
      fmt::print("  {:<22} {:>5} chips: x{:<5.0f} chips, x{:<6.1f} events, x{:<6.1f} wall\n",
                 variant.name, row.chips,
                 static_cast<double>(row.chips) / static_cast<double>(base->chips),
                 static_cast<double>(row.events) / static_cast<double>(base->events),
                 row.wall / base->wall);
    }
  }
  return 0;
}
