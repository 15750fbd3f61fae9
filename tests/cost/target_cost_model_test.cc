// The target cost model against hand-computed times on tiny topologies of
// each kind (torus with and without wraparound, NVSwitch nodes joined by
// InfiniBand, a shared bus), and the target catalog's JSON form.
#include "cost/target_cost_model.h"

#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom::cost {
namespace {

ComputeSpec SimpleCompute() {
  ComputeSpec spec;
  spec.peak_flops = {{"f32", 1e12}, {"bf16", 4e12}};
  spec.memory_bytes_per_second = 1e12;
  spec.memory_bytes = 1e9;
  spec.launch_seconds = 1e-6;
  return spec;
}

Target Torus(std::vector<int64_t> dims, std::vector<bool> wrap) {
  TorusTopology torus;
  torus.dims = std::move(dims);
  torus.wraparound = std::move(wrap);
  torus.link = {1e9, 1e-6};
  return Target("torus", "", SimpleCompute(), torus);
}

Target Switched() {
  SwitchedTopology switched;
  switched.devices_per_node = 2;
  switched.nodes = 2;
  switched.intra_node = {1e10, 1e-6};
  switched.inter_node = {1e9, 1e-5};
  return Target("switched", "", SimpleCompute(), switched);
}

Target Bus() {
  BusTopology bus;
  bus.bus = {1e8, 1e-4};
  return Target("bus", "", SimpleCompute(), bus);
}

// The bus target, its compiler fusing as XLA does.
Target Fusing() {
  ComputeSpec compute = SimpleCompute();
  compute.fuses_elementwise = true;
  return Target("fusing", "", compute, Bus().topology());
}

TEST(TargetCostModel, RingOverAWrappingDimensionUsesBothDirections) {
  const TargetCostModel model(Torus({4, 1, 1}, {true, false, false}));
  // (N-1) a + (N-1)/N B / (2 bw)
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 1, 2, 3}, 4e6), 3e-6 + 0.75 * 4e6 / 2e9);
  EXPECT_DOUBLE_EQ(model.AllReduceSeconds({0, 1, 2, 3}, 4e6), 2 * (3e-6 + 0.75 * 4e6 / 2e9));
}

TEST(TargetCostModel, TwoDimensionalBoxWithoutWraparoundRunsOnePhasePerDimension) {
  const TargetCostModel model(Torus({2, 2, 1}, {false, false, false}));
  // x phase: a + 1/2 (B 2/4) / bw; y phase: a + 1/2 B / bw.
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 1, 2, 3}, 4e6),
                   (1e-6 + 0.5 * 2e6 / 1e9) + (1e-6 + 0.5 * 4e6 / 1e9));
}

TEST(TargetCostModel, GroupThatIsNotABoxRunsAUnidirectionalRing) {
  const TargetCostModel model(Torus({4, 1, 1}, {true, false, false}));
  // Devices 0 and 2 are two hops apart both ways: one step of 2 a + B/2 / bw.
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 2}, 4e6), 2e-6 + 2e6 / 1e9);
}

TEST(TargetCostModel, PermuteTakesTheSlowestRoute) {
  const TargetCostModel model(Torus({4, 1, 1}, {true, false, false}));
  EXPECT_DOUBLE_EQ(model.PermuteSeconds({{0, 1}, {1, 2}}, 1e6), 1e-6 + 1e-3);
  EXPECT_DOUBLE_EQ(model.PermuteSeconds({{0, 2}}, 1e6), 2e-6 + 1e-3);
  EXPECT_DOUBLE_EQ(model.PermuteSeconds({{3, 0}}, 1e6), 1e-6 + 1e-3);  // wraparound
  const TargetCostModel line(Torus({4, 1, 1}, {false, false, false}));
  EXPECT_DOUBLE_EQ(line.PermuteSeconds({{3, 0}}, 1e6), 3e-6 + 1e-3);
}

TEST(TargetCostModel, SwitchedClusterIsHierarchicalAcrossNodes) {
  const TargetCostModel model(Switched());
  // Inside a node: a + 1/2 B / bw_nv.
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 1}, 8e6), 1e-6 + 0.5 * 8e6 / 1e10);
  // Two nodes of two: across nodes first, over B/2 per device through its
  // own NIC, then inside each node over all of B.
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 1, 2, 3}, 8e6),
                   (1e-5 + 0.5 * 4e6 / 1e9) + (1e-6 + 0.5 * 8e6 / 1e10));
  EXPECT_DOUBLE_EQ(model.PermuteSeconds({{0, 1}}, 1e6), 1e-6 + 1e6 / 1e10);
  EXPECT_DOUBLE_EQ(model.PermuteSeconds({{0, 1}, {1, 2}}, 1e6), 1e-5 + 1e6 / 1e9);
}

TEST(TargetCostModel, SegmentsFollowTheAlgorithmsPhasesOnTheirPorts) {
  // An all-reduce over both nodes: a reduce-scatter inside each node, then
  // across, then the all-gather across, then inside: NVLink, NIC, NIC,
  // NVLink, adding up to the transfer's time.
  auto module = ir::ParseModule(R"(
HloModule ar, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[2000000] parameter(0)
  ROOT %r = f32[2000000] all-reduce(%x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  const TargetCostModel model(Switched());
  const ir::DeviceGrid grid{1, 4};
  const ir::Instruction& all_reduce = *(*module)->entry()->root();
  const TransferSegmentTable table = model.TransferSegmentsByDevice(all_reduce, grid);
  ASSERT_EQ(table.distinct.size(), 1u);  // every device alike
  const std::vector<TransferSegment>& segments = table.Of(2);
  ASSERT_EQ(segments.size(), 4u);
  const std::vector<PortMask> ports = {0b0011, 0b1100, 0b1100, 0b0011};
  double sum = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(segments[i].ports, ports[i]) << i;
    EXPECT_DOUBLE_EQ(segments[i].flows, 1);
    sum += segments[i].seconds;
  }
  EXPECT_DOUBLE_EQ(sum, model.TransferSeconds(all_reduce, grid));
  EXPECT_DOUBLE_EQ(segments[0].seconds, 1e-6 + 0.5 * 8e6 / 1e10);
  EXPECT_DOUBLE_EQ(segments[1].seconds, 1e-5 + 0.5 * 4e6 / 1e9);
}

TEST(TargetCostModel, GroupsWhoseRingsCrossTakeLongerTogether) {
  // Every other chip of a torus ring: the groups' routes cross, four
  // messages on each +x link (collective_algorithm.h's
  // AllGatherPhasesOfGroups); one group alone takes a quarter of the bytes'
  // time.
  auto module = ir::ParseModule(R"(
HloModule crossing, num_partitions=8
ENTRY %main {
  %x = f32[250000] parameter(0)
  ROOT %g = f32[500000] all-gather(%x), channel_id=1, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}, use_global_device_ids=true
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  const TargetCostModel model(Torus({8, 1, 1}, {true, false, false}));
  const ir::Instruction& gather = *(*module)->entry()->root();
  EXPECT_DOUBLE_EQ(model.TransferSeconds(gather, ir::DeviceGrid{1, 8}), 4e-6 + 4 * 1e6 / 1e9);
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 4}, 2e6), 4e-6 + 1e6 / 1e9);
  const TransferSegmentTable table = model.TransferSegmentsByDevice(gather, ir::DeviceGrid{1, 8});
  EXPECT_DOUBLE_EQ(table.Of(5).at(0).flows, 4);
  EXPECT_EQ(table.Of(5).at(0).ports, PortMask{0b01});  // +x only
}

TEST(TargetCostModel, BusCarriesEveryByteOnOneMedium) {
  const TargetCostModel model(Bus());
  EXPECT_DOUBLE_EQ(model.AllGatherSeconds({0, 1, 2}, 3e6), 2e-4 + 2 * 3e6 / 1e8);
  // Both directions of a pair share the medium.
  EXPECT_DOUBLE_EQ(model.PermuteSeconds({{0, 1}, {1, 0}}, 1e6), 1e-4 + 2e6 / 1e8);
}

TEST(TargetCostModel, AFusingTargetPricesAnElementwiseChainAsOneKernel) {
  const TargetCostModel model(Fusing());
  EXPECT_TRUE(model.FusesElementwise());
  EXPECT_FALSE(TargetCostModel(Bus()).FusesElementwise());
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %x = f32[64,32] parameter(0)
  %y = f32[64,32] parameter(1)
  %m = f32[64,32] multiply(%x, %y)
  %t = f32[64,32] tanh(%m)
  ROOT %a = f32[64,32] add(%t, %x)
}
)");
  ASSERT_TRUE(module.ok());
  const ir::Computation& entry = *(*module)->entry();
  const ComputeTimes fused(model);
  // One kernel, all of it the root's: it reads x (which multiply and add
  // both take) and y once (8 KiB each), writes the result and launches once.
  EXPECT_DOUBLE_EQ(fused.Of(*entry.FindInstruction("m")), 0);
  EXPECT_DOUBLE_EQ(fused.Of(*entry.FindInstruction("t")), 0);
  EXPECT_DOUBLE_EQ(fused.Of(*entry.FindInstruction("a")), 3 * 8192 / 1e12 + 1e-6);
  // Unfused, each op is a kernel of its own: 3 + 2 + 3 arrays moved, 3 launches.
  const TargetCostModel unfused_model(Bus());
  const ComputeTimes unfused(unfused_model);
  double total = 0;
  for (const char* name : {"m", "t", "a"}) total += unfused.Of(*entry.FindInstruction(name));
  EXPECT_DOUBLE_EQ(total, 8 * 8192 / 1e12 + 3e-6);
}

// A dot that reads its layer's bf16 weights through a convert and a
// dynamic-slice of the f32 stack reads the f32 window, not the stack, and
// the convert and the slice launch nothing; a softmax is one pass.
TEST(TargetCostModel, ADotReadsThroughTheOpsFusedIntoItAndASoftmaxIsOnePass) {
  const TargetCostModel model(Fusing());
  auto module = ir::ParseModule(R"(
HloModule m
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %stacked = f32[8,1024,256] parameter(0)
  %layer = s32[] parameter(1)
  %z = s32[] constant(0)
  %window = f32[1,1024,256] dynamic-slice(%stacked, %layer, %z, %z), dynamic_slice_sizes={1,1024,256}
  %w = f32[1024,256] reshape(%window)
  %wb = bf16[1024,256] convert(%w)
  %x = bf16[2,1024] parameter(2)
  %y = bf16[2,256] dot(%x, %wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s = f32[64,512] parameter(3)
  %zero = f32[] constant(0)
  %e = f32[64,512] exponential(%s)
  %r = f32[64] reduce(%e, %zero), dimensions={1}, to_apply=%add
  %br = f32[64,512] broadcast(%r), dimensions={0}
  %p = f32[64,512] divide(%e, %br)
  ROOT %t = (bf16[2,256], f32[64,512]) tuple(%y, %p)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  const ComputeTimes times(model);
  for (const char* name : {"window", "w", "wb", "e", "r", "br"}) {
    EXPECT_EQ(times.Of(*entry.FindInstruction(name)), 0) << name;
  }
  // 2*2*1024*256 FLOPs at 4e12 (bf16) are far less than the bytes: the f32
  // window (1 MiB), %x, the two indices and the result, at 1e12 bytes/s.
  EXPECT_DOUBLE_EQ(times.Of(*entry.FindInstruction("y")),
                   (1024 * 256 * 4 + 2 * 1024 * 2 + 4 + 4 + 2 * 256 * 2) / 1e12 + 1e-6);
  // The softmax reads %s and the reduction's initial value once, and writes %p.
  EXPECT_DOUBLE_EQ(times.Of(*entry.FindInstruction("p")), (2 * 64 * 512 * 4 + 4) / 1e12 + 1e-6);
}

// An add of a dot's only use is summed in the dot's kernel (output
// fusion): the dot costs nothing of its own, and the add costs the dot's
// roofline with the addend among its reads. Here the bytes bound it: %x,
// %w, %acc, and the sum written, at 1e12 bytes/s.
TEST(TargetCostModel, AnAddThatSumsADotInItsKernelCostsTheDotReadingTheAddend) {
  const TargetCostModel model(Fusing());
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %x = bf16[2,1024] parameter(0)
  %w = bf16[1024,256] parameter(1)
  %acc = f32[2,256] parameter(2)
  %p = f32[2,256] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %s = f32[2,256] add(%acc, %p)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  const ComputeTimes times(model);
  EXPECT_EQ(times.Of(*entry.FindInstruction("p")), 0);
  EXPECT_DOUBLE_EQ(times.Of(*entry.FindInstruction("s")),
                   (2 * 1024 * 2 + 1024 * 256 * 2 + 2 * 256 * 4 + 2 * 256 * 4) / 1e12 + 1e-6);
  EXPECT_EQ(&times.KernelProduct(*entry.FindInstruction("s")), entry.FindInstruction("p"));
}

// A weight gradient summed into its layer's window of a stack: one kernel,
// the product's, reading the window and the product's operands and writing
// the window; the stack's other layers are neither read nor written.
TEST(TargetCostModel, AProductSummedIntoAStacksWindowIsOneKernelWritingTheWindow) {
  const TargetCostModel model(Fusing());
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %x = bf16[2,1024] parameter(0)
  %dy = bf16[2,256] parameter(1)
  %grads = f32[8,1024,256] parameter(2)
  %layer = s32[] parameter(3)
  %z = s32[] constant(0)
  %g = f32[1,1024,256] dynamic-slice(%grads, %layer, %z, %z), dynamic_slice_sizes={1,1024,256}
  %r = f32[1024,256] reshape(%g)
  %p = f32[1024,256] dot(%x, %dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %s = f32[1024,256] add(%r, %p)
  %u = f32[1,1024,256] reshape(%s)
  ROOT %next = f32[8,1024,256] dynamic-update-slice(%grads, %u, %layer, %z, %z)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  const ComputeTimes times(model);
  for (const char* fused : {"g", "r", "p", "s", "u"}) {
    EXPECT_EQ(times.Of(*entry.FindInstruction(fused)), 0) << fused;
  }
  // Bytes: x, dy, the window read, the window written, and the two s32
  // scalars the kernel reads (the layer and the zero, each once).
  const double bytes = 2 * 1024 * 2 + 2 * 256 * 2 + 2 * (1024 * 256 * 4) + 2 * 4;
  EXPECT_DOUBLE_EQ(times.Of(*entry.FindInstruction("next")), bytes / 1e12 + 1e-6);
  EXPECT_EQ(&times.KernelProduct(*entry.FindInstruction("next")), entry.FindInstruction("p"));
}

// A reshape renames its operand for free, but one whose operand is
// computed in its kernel (the tuple takes the reshape, not the multiply)
// roots that kernel: it reads x once and writes the result.
TEST(TargetCostModel, AReshapeThatRootsAKernelCostsTheKernel) {
  const TargetCostModel model(Fusing());
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %x = f32[64,32] parameter(0)
  %m = f32[64,32] multiply(%x, %x)
  %r = f32[2048] reshape(%m)
  %q = f32[2048] reshape(%x)
  ROOT %t = (f32[2048], f32[2048]) tuple(%r, %q)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  const ComputeTimes times(model);
  EXPECT_EQ(times.Of(*entry.FindInstruction("m")), 0);
  EXPECT_DOUBLE_EQ(times.Of(*entry.FindInstruction("r")), 2 * 8192 / 1e12 + 1e-6);
  EXPECT_EQ(times.Of(*entry.FindInstruction("q")), 0);
}

// A fused kernel (flash attention's form: a product, a softmax-like
// chain, a product) reads its operands and writes its result once, and
// runs its dots at the peak: the roofline of the two over the kernel's
// FLOPs and its bytes in and out, not of its [64, 64] temporaries.
TEST(TargetCostModel, AFusedKernelIsARooflineOfItsDotsAndItsInputsAndOutputs) {
  const TargetCostModel model(Bus());
  auto module = ir::ParseModule(R"(
HloModule m
%attention (q: f32[64,32], k: f32[64,32], v: f32[64,32]) -> f32[64,32] {
  %q = f32[64,32] parameter(0)
  %k = f32[64,32] parameter(1)
  %v = f32[64,32] parameter(2)
  %s = f32[64,64] dot(%q, %k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  %e = f32[64,64] exponential(%s)
  ROOT %o = f32[64,32] dot(%e, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY %main {
  %q = f32[64,32] parameter(0)
  %k = f32[64,32] parameter(1)
  %v = f32[64,32] parameter(2)
  %f = f32[64,32] fusion(%q, %k, %v), kind=kCustom, calls=%attention
  %small = f32[1,32] slice(%q), slice={[0:1], [0:32]}
  %n = f32[1,32] fusion(%small), kind=kLoop, calls=%negate
  ROOT %t = (f32[64,32], f32[1,32]) tuple(%f, %n)
}
%negate (x: f32[1,32]) -> f32[1,32] {
  %x = f32[1,32] parameter(0)
  ROOT %y = f32[1,32] negate(%x)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  // Two dots of 2*64*64*32 FLOPs at 1e12 take longer than 4 arrays of
  // 8 KiB at 1e12 bytes/s.
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("f")),
                   2 * (2.0 * 64 * 64 * 32) / 1e12 + 1e-6);
  // A fusion without a dot is priced by its bytes alone, as before.
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("n")), 2 * 128 / 1e12 + 1e-6);
}

// A gather reads the rows it takes, not its table; a scatter updates its
// operand in place: it reads its updates and the rows they land on and
// writes those rows. Fused, a gather's rows are read by the kernel it
// joins, and a scatter computes its updates in its own kernel.
TEST(TargetCostModel, GatherAndScatterMoveTheirRowsNotTheirTable) {
  const TargetCostModel model(Bus());
  auto module = ir::ParseModule(R"(
HloModule m
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %main {
  %table = f32[65536,64] parameter(0)
  %ids = s32[32] parameter(1)
  %rows = f32[32,64] gather(%table, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,64}
  %twice = f32[32,64] add(%rows, %rows)
  %grad = f32[65536,64] scatter(%table, %ids, %twice), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  ROOT %t = (f32[32,64], f32[65536,64]) tuple(%rows, %grad)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  const double rows = 32 * 64 * 4, ids = 32 * 4;
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("rows")),
                   (2 * rows + ids) / 1e12 + 1e-6);
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("grad")),
                   (3 * rows + ids) / 1e12 + 1e-6);
  // Fused: the add joins the scatter's kernel (which reads the gather's
  // result, a tuple's element, from memory).
  const analysis::FusionPlan fusion(entry);
  EXPECT_TRUE(fusion.FusedIntoUsers(*entry.FindInstruction("twice")));
  EXPECT_DOUBLE_EQ(model.FusedComputeSeconds(*entry.FindInstruction("grad"), fusion),
                   (ids + rows + rows + rows) / 1e12 + 1e-6);
}

TEST(TargetCostModel, SolvesAndFactorizationsCostTheirFlopsAtTheMatrixPeak) {
  const TargetCostModel model(Bus());
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %a = f32[4,256,256] parameter(0)
  %b = f32[4,256,64] parameter(1)
  %small = f32[2,2] parameter(2)
  %x = f32[4,256,64] triangular-solve(%a, %b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
  %y = f32[4,64,256] parameter(3)
  %z = f32[4,64,256] triangular-solve(%a, %y), transpose_a=TRANSPOSE
  %l = f32[4,256,256] cholesky(%a), lower=true
  %s = f32[2,2] cholesky(%small)
  ROOT %t = (f32[4,256,64], f32[4,64,256], f32[4,256,256], f32[2,2]) tuple(%x, %z, %l, %s)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Computation& entry = *(*module)->entry();
  const analysis::FusionPlan fusion(entry);
  // m^2 n per solve either side, n^3 / 3 per factorization, at 1e12 FLOP/s
  // (f32), with a 1 us launch; a 2 x 2 factorization is its 32 bytes.
  const double solve = 4.0 * 256 * 256 * 64 / 1e12 + 1e-6;
  const double factor = static_cast<double>(4 * 256 * 256 * 256 / 3) / 1e12 + 1e-6;
  for (const char* name : {"x", "z"}) {
    EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction(name)), solve) << name;
    EXPECT_DOUBLE_EQ(model.FusedComputeSeconds(*entry.FindInstruction(name), fusion), solve);
  }
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("l")), factor);
  EXPECT_DOUBLE_EQ(model.FusedComputeSeconds(*entry.FindInstruction("l"), fusion), factor);
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("s")), 32 / 1e12 + 1e-6);
}

TEST(TargetCostModel, ComputeIsARooflinePlusLaunch) {
  const TargetCostModel model(Torus({4, 1, 1}, {true, false, false}));
  auto module = ir::ParseModule(R"(
HloModule m, num_partitions=4
ENTRY %main {
  %a = f32[64,128] parameter(0)
  %b = f32[128,32] parameter(1)
  %d = f32[64,32] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %e = f32[64,32] add(%d, %d)
  %g = f32[256,32] all-gather(%e), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT %t = (f32[64,32], f32[256,32]) tuple(%e, %g)
}
)");
  ASSERT_TRUE(module.ok());
  const ir::Computation& entry = *(*module)->entry();
  // dot: 2*64*32*128 FLOPs at 1e12 beats (8192+4096+2048)*4 bytes at 1e12.
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("d")),
                   2.0 * 64 * 32 * 128 / 1e12 + 1e-6);
  // add: two operands and a result of 8 KiB each.
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(*entry.FindInstruction("e")), 3 * 8192 / 1e12 + 1e-6);
  EXPECT_EQ(model.ComputeSeconds(*entry.FindInstruction("t")), 0);
  EXPECT_EQ(model.ComputeSeconds(*entry.FindInstruction("g")), 0);
  const ir::DeviceGrid grid{1, 4};
  EXPECT_DOUBLE_EQ(model.TransferSeconds(*entry.FindInstruction("g"), grid),
                   3e-6 + 0.75 * 32768 / 2e9);
  EXPECT_EQ(model.TransferSeconds(*entry.FindInstruction("d"), grid), 0);
}

// A target that cuts products into tiles: 4 units, 2x4 tiles, k in steps
// of 8. Its products take whole waves of whole tiles.
TEST(TargetCostModel, AProductTakesWholeWavesOfWholeTiles) {
  const MatrixTiling tiling{.units = 4, .tile_m = 2, .tile_n = 4, .tile_k = 8};
  // [4, 8] x [8, 16]: 2 x 4 = 8 tiles, two full waves, no padding.
  EXPECT_DOUBLE_EQ(tiling.SpentFlops(1, 4, 16, 8), 2.0 * 4 * 16 * 8);
  // m = 5 pads to 6 rows: 3 x 4 = 12 tiles of 2x4 (as 4x2, 2 x 8 = 16):
  // three waves of 4 tiles of 2 x 4 x 8.
  EXPECT_DOUBLE_EQ(tiling.SpentFlops(1, 5, 16, 8), 2.0 * 3 * 4 * (2 * 4) * 8);
  // One row of a batch of 3: each product one 2x4 tile (or one 4x2 one),
  // three tiles in one wave of four; k = 5 pads to 8.
  EXPECT_DOUBLE_EQ(tiling.SpentFlops(3, 1, 2, 5), 2.0 * 1 * 4 * (2 * 4) * 8);
  // The other way round takes fewer waves: a [16, 2] result is 4 tiles of
  // 4x2, one wave, where as 2x4 tiles it is 8, padded to 4 columns.
  EXPECT_DOUBLE_EQ(tiling.SpentFlops(1, 16, 2, 8), 2.0 * 16 * 2 * 8);
  EXPECT_DOUBLE_EQ(MatrixTiling{}.SpentFlops(3, 5, 7, 9), 2.0 * 3 * 5 * 7 * 9);

  ComputeSpec compute = SimpleCompute();
  compute.tiling = tiling;
  const TargetCostModel model(Target("tiled", "", compute, Bus().topology()));
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %a = f32[3,1,5] parameter(0)
  %b = f32[3,5,2] parameter(1)
  ROOT %d = f32[3,1,2] dot(%a, %b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Instruction& dot = *(*module)->entry()->FindInstruction("d");
  const analysis::DotDims dims = analysis::DotDimsOf(dot);
  EXPECT_EQ(dims.batch, 3);
  EXPECT_EQ(dims.m, 1);
  EXPECT_EQ(dims.n, 2);
  EXPECT_EQ(dims.k, 5);
  // The padded FLOPs (512) at 1e12 outlast the 27 elements' bytes.
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(dot), 2.0 * 4 * 8 * 8 / 1e12 + 1e-6);

  // Products that sustain a quarter of the peak take four times as long;
  // the memory-bound time and the launch do not change.
  compute.matrix_efficiency = 0.25;
  const TargetCostModel slower(Target("tiled", "", compute, Bus().topology()));
  EXPECT_DOUBLE_EQ(slower.ComputeSeconds(dot), 4 * 2.0 * 4 * 8 * 8 / 1e12 + 1e-6);
  const analysis::KernelDots none;
  EXPECT_DOUBLE_EQ(slower.DotSeconds(none, 1e9), model.DotSeconds(none, 1e9));
}

// A convolution is the implicit GEMM of the taps that land on the input:
// here 1-D, 10 positions padded 1 each side, 3 taps, so the two edge
// positions read 2 taps and the 8 inner ones 3 (28 of 30 pairs).
TEST(TargetCostModel, AConvolutionIsTheProductOfTheTapsThatLand) {
  const TargetCostModel model(Torus({1, 1, 1}, {false, false, false}));
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %main {
  %x = f32[4,10,16] parameter(0)
  %w = f32[3,16,64] parameter(1)
  ROOT %y = f32[4,10,64] convolution(%x, %w), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  const ir::Instruction& y = *(*module)->entry()->FindInstruction("y");
  const std::optional<analysis::ConvolutionWork> work = analysis::ConvolutionWorkOf(y);
  ASSERT_TRUE(work.has_value());
  EXPECT_EQ(work->flops, 2 * 4 * 64 * 16 * 28);
  EXPECT_EQ(work->dims.batch, 1);
  EXPECT_EQ(work->dims.m, 4 * 10);
  EXPECT_EQ(work->dims.n, 64);
  EXPECT_EQ(work->dims.k, 16 * 3);  // 2.8 taps a position, rounded up
  EXPECT_EQ(analysis::KernelDotsOf(y).flops, work->flops);
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(y), 2.0 * 40 * 64 * 48 / 1e12 + 1e-6);
  EXPECT_EQ(analysis::SumLength(y, ir::DeviceGrid{1, 1}), 3 * 16);
}

// A reduce-window reads its input and writes its result once (memory
// bound); one of its sums adds at most its window's taps.
TEST(TargetCostModel, AReduceWindowIsPricedByItsBytes) {
  const TargetCostModel model(Torus({1, 1, 1}, {false, false, false}));
  auto module = ir::ParseModule(R"(
HloModule m
%max {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}
ENTRY %main {
  %x = f32[8,32,32,64] parameter(0)
  %z = f32[] constant(0)
  ROOT %y = f32[8,16,16,64] reduce-window(%x, %z), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}, to_apply=%max
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  ASSERT_TRUE(ir::VerifyModule(**module).ok());
  const ir::Instruction& y = *(*module)->entry()->FindInstruction("y");
  const double bytes = 4.0 * (8 * 32 * 32 * 64 + 1 + 8 * 16 * 16 * 64);
  const auto& compute = model.target().compute();
  EXPECT_DOUBLE_EQ(model.ComputeSeconds(y),
                   bytes / compute.memory_bytes_per_second + compute.launch_seconds);
  EXPECT_EQ(analysis::SumLength(y, ir::DeviceGrid{1, 1}), 9);
}

// Its gradient sums onto one element the windows that overlap there: 3
// taps at stride 2 overlap at most twice per dimension.
TEST(TargetCostModel, ASelectAndScattersSumsItsOverlappingWindows) {
  auto module = ir::ParseModule(R"(
HloModule m
%ge {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=GE
}
%add {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[8,32,32,64] parameter(0)
  %dy = f32[8,16,16,64] parameter(1)
  %z = f32[] constant(0)
  ROOT %dx = f32[8,32,32,64] select-and-scatter(%x, %dy, %z), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}, select=%ge, scatter=%add
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  ASSERT_TRUE(ir::VerifyModule(**module).ok());
  const ir::Instruction& dx = *(*module)->entry()->FindInstruction("dx");
  EXPECT_EQ(analysis::SumLength(dx, ir::DeviceGrid{1, 1}), 4);
}

TEST(TargetCatalog, BuiltinsHaveTheirShapes) {
  auto cube = FindTarget("tpu-v4-4x4x4");
  ASSERT_TRUE(cube.ok());
  EXPECT_EQ(cube->device_count(), 64);
  EXPECT_EQ(std::get<TorusTopology>(cube->topology()).wraparound, std::vector<bool>(3, true));
  EXPECT_EQ(cube->Coordinates(5), (std::vector<int64_t>{1, 1, 0}));  // x fastest
  auto small = FindTarget("tpu-v4-2x2x1");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(std::get<TorusTopology>(small->topology()).wraparound, std::vector<bool>(3, false));
  auto dgx = FindTarget("dgx-h100-x4");
  ASSERT_TRUE(dgx.ok());
  EXPECT_EQ(dgx->device_count(), 32);
  EXPECT_EQ(dgx->Coordinates(9), (std::vector<int64_t>{1, 1}));
  EXPECT_DOUBLE_EQ(dgx->compute().PeakFlops(ir::PrimitiveType::kBF16), 989e12);
  EXPECT_EQ(dgx->compute().tiling.units, 132);  // SMs
  // Products sustain the measured 792.1 of the datasheet's 989 TFLOP/s.
  EXPECT_DOUBLE_EQ(dgx->compute().MatrixFlops(ir::PrimitiveType::kBF16), 792.1e12);
  EXPECT_DOUBLE_EQ(cube->compute().matrix_efficiency, 1);  // no measurement
  EXPECT_TRUE(FindTarget("loopback-2gbit").ok());
  EXPECT_FALSE(FindTarget("tpu-v9").ok());
}

TEST(TargetCatalog, JsonRoundTripsAndNamesBadFields) {
  for (const Target& target : BuiltinTargets()) {
    auto again = ParseTargetJson(TargetToJson(target), "t.json");
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(TargetToJson(*again), TargetToJson(target));
  }
  auto bad = ParseTargetJson(R"({"name": "x", "compute": {"peak_flops": {"f32": 1e12},
      "memory_bandwidth": 1e12, "memory_capacity": 1, "launch_latency": 0},
      "topology": {"kind": "torus", "dims": [2, 2], "wraparound": [true],
                   "link": {"bandwidth": 1, "latency": 0}}})",
                             "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "bad.json: topology: 'wraparound' must be an array of booleans, one per dimension");
  EXPECT_FALSE(ParseTargetJson("{", "x.json").ok());
  // 0 is a non-negative literal, which nlohmann keeps unsigned: the lower
  // bound must still refuse it.
  auto empty_axis = ParseTargetJson(R"({"name": "x", "compute": {"peak_flops": {"f32": 1e12},
      "memory_bandwidth": 1e12, "memory_capacity": 1, "launch_latency": 0},
      "topology": {"kind": "torus", "dims": [0, 2], "wraparound": [true, true],
                   "link": {"bandwidth": 1, "latency": 0}}})",
                                    "empty.json");
  ASSERT_FALSE(empty_axis.ok());
  EXPECT_EQ(empty_axis.error().message,
            "empty.json: topology.dims: each must be an integer in 1..4096");
  // fuses_elementwise is optional (false), and must be a boolean.
  const std::string compute =
      R"({"name": "x", "compute": {"peak_flops": {"f32": 1e12}, "memory_bandwidth": 1e12,
      "memory_capacity": 1, "launch_latency": 0)";
  const std::string topology =
      R"(}, "topology": {"kind": "bus", "bus": {"bandwidth": 1, "latency": 0}}})";
  auto plain = ParseTargetJson(compute + topology, "plain.json");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(plain->compute().fuses_elementwise);
  auto fusing = ParseTargetJson(compute + R"(, "fuses_elementwise": true)" + topology, "f.json");
  ASSERT_TRUE(fusing.ok()) << fusing.error().message;
  EXPECT_TRUE(fusing->compute().fuses_elementwise);
  auto wrong = ParseTargetJson(compute + R"(, "fuses_elementwise": 1)" + topology, "w.json");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().message, "w.json: compute: 'fuses_elementwise' must be true or false");
  // tiling is optional (products at the peak whatever their shape).
  EXPECT_FALSE(plain->compute().tiling.present());
  auto tiled = ParseTargetJson(
      compute + R"(, "tiling": {"units": 108, "tile": [256, 128, 64]})" + topology, "t.json");
  ASSERT_TRUE(tiled.ok()) << tiled.error().message;
  EXPECT_EQ(tiled->compute().tiling.tile_m, 256);
  EXPECT_EQ(tiled->compute().tiling.tile_k, 64);
  auto untiled = ParseTargetJson(
      compute + R"(, "tiling": {"units": 108, "tile": [256, 0, 64]})" + topology, "u.json");
  ASSERT_FALSE(untiled.ok());
  EXPECT_EQ(untiled.error().message,
            "u.json: compute.tiling must be {\"units\": N, \"tile\": [M, N, K]}, each an integer "
            "in 1..65536");
  // matrix_efficiency is optional (1: the datasheet peak), in (0, 1].
  EXPECT_DOUBLE_EQ(plain->compute().matrix_efficiency, 1);
  auto measured = ParseTargetJson(compute + R"(, "matrix_efficiency": 0.8)" + topology, "m.json");
  ASSERT_TRUE(measured.ok()) << measured.error().message;
  EXPECT_DOUBLE_EQ(measured->compute().MatrixFlops(ir::PrimitiveType::kF32), 0.8e12);
  for (const char* efficiency : {"0", "1.5", "-0.5", "\"high\""}) {
    auto refused =
        ParseTargetJson(compute + R"(, "matrix_efficiency": )" + efficiency + topology, "e.json");
    ASSERT_FALSE(refused.ok()) << efficiency;
    EXPECT_EQ(refused.error().message,
              "e.json: compute: 'matrix_efficiency' must be a number in (0, 1]");
  }
}

// Integers past int64_t, products that wrap, and numbers that are not
// finite are refused, not read as small or endless targets.
TEST(TargetCatalog, RefusesHugeAndNonFiniteNumbers) {
  const auto target = [](const std::string& topology, const std::string& bandwidth = "1e12") {
    return ParseTargetJson(R"({"name": "x", "compute": {"peak_flops": {"f32": 1e12},
        "memory_bandwidth": )" +
                               bandwidth +
                               R"(, "memory_capacity": 1, "launch_latency": 0}, "topology": )" +
                               topology + "}",
                           "t.json");
  };
  const std::string link = R"("intra_node": {"bandwidth": 1, "latency": 0},
      "inter_node": {"bandwidth": 1, "latency": 0})";
  const auto switched = [&](const std::string& per_node, const std::string& nodes) {
    return target(R"({"kind": "switched", "devices_per_node": )" + per_node + R"(, "nodes": )" +
                  nodes + ", " + link + "}");
  };
  ASSERT_TRUE(switched("8", "4").ok());
  EXPECT_EQ(switched("8", "4")->device_count(), 32);
  // 4 x (2^62 + 1) wraps to 4 in int64_t.
  EXPECT_FALSE(switched("4", "4611686018427387905").ok());
  EXPECT_FALSE(switched("1", "18446744073709551615").ok());  // uint64_t max
  EXPECT_FALSE(switched("1024", "2048").ok());               // 2^21 devices
  EXPECT_FALSE(switched("2.0", "4").ok());
  // Six torus sides of 4096 multiply past int64_t.
  EXPECT_FALSE(target(R"({"kind": "torus", "dims": [4096, 4096, 4096, 4096, 4096, 4096],
      "wraparound": [true, true, true, true, true, true],
      "link": {"bandwidth": 1, "latency": 0}})")
                   .ok());
  EXPECT_FALSE(target(R"({"kind": "torus", "dims": [2, 2], "wraparound": [true, true],
      "link": {"bandwidth": 1, "latency": 0}, "device_order": [0, 1, 2, 18446744073709551615]})")
                   .ok());
  // 1e400 overflows a double: nlohmann refuses the text as JSON (Number
  // also refuses a non-finite value, should one get through).
  EXPECT_FALSE(target(R"({"kind": "bus", "bus": {"bandwidth": 1, "latency": 0}})", "1e400").ok());
}

// The model keeps each transfer's prices by what they depend on (opcode,
// bytes, how ids are read, the groups or pairs, the grid): a kept price is
// the one a fresh model computes, and transfers that differ in any of those
// are priced apart, in whatever order they are asked for.
TEST(TargetCostModel, KeptPricesAreThoseAFreshModelComputes) {
  auto module = ir::ParseModule(R"(
HloModule kept, num_partitions=4
ENTRY %main {
  %x = f32[1000000] parameter(0)
  %in_nodes = f32[2000000] all-gather(%x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  %across = f32[2000000] all-gather(%x), channel_id=2, replica_groups={{0,2},{1,3}}, dimensions={0}, use_global_device_ids=true
  %iota = f32[2000000] all-gather(%x), channel_id=3, replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}, use_global_device_ids=true
  %smaller = f32[500000] slice(%x), slice={[0:500000]}
  %half = f32[1000000] all-gather(%smaller), channel_id=4, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  %ring = f32[1000000] collective-permute(%x), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %swap = f32[1000000] collective-permute(%x), channel_id=6, source_target_pairs={{0,2},{2,0},{1,3},{3,1}}
  %exchange = f32[1000000] all-to-all(%x), channel_id=7, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %t = (f32[2000000], f32[2000000], f32[2000000], f32[1000000], f32[1000000], f32[1000000], f32[1000000]) tuple(%in_nodes, %across, %iota, %half, %ring, %swap, %exchange)
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  const ir::DeviceGrid grid{1, 4};
  std::vector<const ir::Instruction*> transfers;
  for (const auto& instruction : (*module)->entry()->instructions()) {
    if (ir::IsCollective(instruction->opcode())) transfers.push_back(instruction.get());
  }
  ASSERT_EQ(transfers.size(), 7u);
  const TargetCostModel kept(Switched());
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reads what the first kept
    for (size_t i = 0; i < transfers.size(); ++i) {
      const ir::Instruction& t = *transfers[pass == 0 ? i : transfers.size() - 1 - i];
      const TargetCostModel fresh(Switched());
      EXPECT_EQ(kept.TransferSeconds(t, grid), fresh.TransferSeconds(t, grid)) << t.name();
      EXPECT_EQ(kept.TransferSecondsByDevice(t, grid), fresh.TransferSecondsByDevice(t, grid))
          << t.name();
      EXPECT_EQ(kept.TransferLinks(t, grid), fresh.TransferLinks(t, grid)) << t.name();
      const TransferSegmentTable a = kept.TransferSegmentsByDevice(t, grid);
      const TransferSegmentTable b = fresh.TransferSegmentsByDevice(t, grid);
      EXPECT_EQ(a.row_of_device, b.row_of_device) << t.name();
      ASSERT_EQ(a.distinct.size(), b.distinct.size()) << t.name();
      for (size_t r = 0; r < a.distinct.size(); ++r) {
        ASSERT_EQ(a.distinct[r].size(), b.distinct[r].size());
        for (size_t k = 0; k < a.distinct[r].size(); ++k) {
          EXPECT_EQ(a.distinct[r][k].seconds, b.distinct[r][k].seconds) << t.name();
          EXPECT_EQ(a.distinct[r][k].ports, b.distinct[r][k].ports) << t.name();
        }
      }
    }
  }
  // Alike but for their groups, bytes or pairs, and priced apart: inside a
  // node over NVLink, across nodes over the NICs; half the bytes; a ring
  // (NVLink and NICs) and a swap across nodes (NICs only).
  auto seconds = [&](size_t i) { return kept.TransferSeconds(*transfers[i], grid); };
  EXPECT_LT(seconds(0), seconds(1));
  EXPECT_EQ(seconds(1), seconds(2));  // the iota form names the same groups
  EXPECT_LT(seconds(3), seconds(0));
  EXPECT_NE(kept.TransferLinks(*transfers[4], grid), kept.TransferLinks(*transfers[5], grid));
}

}  // namespace
}  // namespace loom::cost
