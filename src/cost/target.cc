#include "cost/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "support/saturating.h"

namespace loom::cost {

namespace {

// Saturates rather than wraps, so that a bound check on it cannot be fooled.
int64_t Product(const std::vector<int64_t>& dims) {
  int64_t product = 1;
  for (int64_t dim : dims) product = SaturatingMul(product, dim);
  return product;
}

int64_t DeviceCountOf(const Topology& topology) {
  if (const auto* torus = std::get_if<TorusTopology>(&topology)) return Product(torus->dims);
  if (const auto* switched = std::get_if<SwitchedTopology>(&topology)) {
    return switched->devices_per_node * switched->nodes;
  }
  return 1 << 20;  // a bus takes any number of devices
}

}  // namespace

double ComputeSpec::PeakFlops(ir::PrimitiveType type) const {
  std::string key = "f32";
  switch (type) {
    case ir::PrimitiveType::kBF16:
    case ir::PrimitiveType::kF16:
      key = "bf16";
      break;
    case ir::PrimitiveType::kF64:
      key = "f64";
      break;
    case ir::PrimitiveType::kS8:
    case ir::PrimitiveType::kU8:
      key = "s8";
      break;
    default:
      if (ir::IsFloatingPoint(type) && ir::PrimitiveTypeBits(type) == 8) key = "f8";
  }
  if (auto it = peak_flops.find(key); it != peak_flops.end()) return it->second;
  if (key == "f8") {
    if (auto it = peak_flops.find("bf16"); it != peak_flops.end()) return it->second;
  }
  return MustFind(peak_flops, "f32");
}

Target::Target(std::string name, std::string description, ComputeSpec compute, Topology topology)
    : name_(std::move(name)),
      description_(std::move(description)),
      compute_(std::move(compute)),
      topology_(std::move(topology)),
      device_count_(DeviceCountOf(topology_)) {
  if (const auto* torus = std::get_if<TorusTopology>(&topology_)) {
    position_of_device_.resize(static_cast<size_t>(device_count_));
    for (int64_t i = 0; i < device_count_; ++i) {
      const int64_t device =
          torus->device_order.empty() ? i : torus->device_order[static_cast<size_t>(i)];
      position_of_device_[static_cast<size_t>(device)] = i;
    }
  }
}

std::string_view Target::kind() const {
  if (std::holds_alternative<TorusTopology>(topology_)) return "torus";
  if (std::holds_alternative<SwitchedTopology>(topology_)) return "switched";
  return "bus";
}

int64_t Target::TorusPosition(int64_t device) const {
  LOOM_CHECK(std::holds_alternative<TorusTopology>(topology_), name_ + " is not a torus");
  LOOM_CHECK(device >= 0 && device < device_count_,
             "device " + std::to_string(device) + " of " + name_);
  return position_of_device_[static_cast<size_t>(device)];
}

std::vector<int64_t> Target::Coordinates(int64_t device) const {
  if (const auto* torus = std::get_if<TorusTopology>(&topology_)) {
    LOOM_CHECK(device >= 0 && device < device_count_,
               "device " + std::to_string(device) + " of " + name_);
    int64_t position = position_of_device_[static_cast<size_t>(device)];
    std::vector<int64_t> coords;
    for (int64_t dim : torus->dims) {
      coords.push_back(position % dim);
      position /= dim;
    }
    return coords;
  }
  if (const auto* switched = std::get_if<SwitchedTopology>(&topology_)) {
    return {device / switched->devices_per_node, device % switched->devices_per_node};
  }
  return {device};
}

int64_t Target::DeviceAt(const std::vector<int64_t>& coords) const {
  const auto& torus = std::get<TorusTopology>(topology_);
  int64_t position = 0;
  for (size_t i = coords.size(); i-- > 0;) position = position * torus.dims[i] + coords[i];
  return torus.device_order.empty() ? position : torus.device_order[static_cast<size_t>(position)];
}

double MatrixTiling::SpentFlops(int64_t batch, int64_t m, int64_t n, int64_t k) const {
  const auto useful = 2.0 * static_cast<double>(batch) * static_cast<double>(m) *
                      static_cast<double>(n) * static_cast<double>(k);
  if (!present() || useful == 0) return useful;
  auto whole = [](int64_t size, int64_t step) { return (size + step - 1) / step; };
  const auto steps = static_cast<double>(whole(k, tile_k) * tile_k);
  auto spent = [&](int64_t rows, int64_t columns) {
    const int64_t tiles = batch * whole(m, rows) * whole(n, columns);
    const auto waves = static_cast<double>(whole(tiles, units));
    return 2.0 * waves * static_cast<double>(units * rows * columns) * steps;
  };
  return std::min(spent(tile_m, tile_n), spent(tile_n, tile_m));
}

namespace {

// --- built-ins (figures from ../shared/BRIEF.md section 4; latencies and
// launch costs are order-of-magnitude assumptions, marked as such) --------

ComputeSpec TpuV4Compute() {
  ComputeSpec spec;
  // bf16 on the MXUs; f32 as three bf16 passes (XLA's HIGH precision).
  spec.peak_flops = {{"bf16", 275e12}, {"f32", 275e12 / 3}, {"s8", 275e12}};
  spec.memory_bytes_per_second = 1.2e12;
  spec.memory_bytes = 32.0 * (1LL << 30);
  spec.launch_seconds = 1e-6;     // assumption
  spec.fuses_elementwise = true;  // XLA's loop and input fusion
  // Eight 128x128 MXUs (four per TensorCore, two TensorCores): a product
  // contracts and fills its columns 128 at a time, its rows stream through
  // 8 (a vreg's sublanes) at a time.
  spec.tiling = {.units = 8, .tile_m = 8, .tile_n = 128, .tile_k = 128};
  // No public measurement of the rate TPU v4 products sustain was found,
  // so they run at the datasheet peak (matrix_efficiency 1, assumed).
  return spec;
}

Target TpuV4(int64_t x, int64_t y, int64_t z) {
  TorusTopology torus;
  torus.dims = {x, y, z};
  // A dimension wraps around where the slice spans whole 4-chip cube edges
  // (the optical switches close the ring); smaller slices have none.
  for (int64_t d : torus.dims) torus.wraparound.push_back(d % 4 == 0);
  torus.link = {45e9, 1e-6};  // ICI per link per direction; hop latency assumed
  return Target(fmt::format("tpu-v4-{}x{}x{}", x, y, z),
                fmt::format("TPU v4 slice of {} chips, 3D torus {}x{}x{}", x * y * z, x, y, z),
                TpuV4Compute(), torus);
}

// Memory as nvidia-smi reports it (memory.total; the "80GB" of the A100
// and H100 and the "141GB" of the H200 are about as many GiB): A100 80GB
// 81920 MiB, H100 80GB HBM3 81559 MiB, H200 143771 MiB (the table of
// modal-labs/modal-client#2797; H200 nvidia-smi logs).
constexpr double kMiB = 1 << 20;
constexpr double kA100Memory = 81920 * kMiB;
constexpr double kH100Memory = 81559 * kMiB;
constexpr double kH200Memory = 143771 * kMiB;

ComputeSpec A100Compute() {
  ComputeSpec spec;
  spec.peak_flops = {{"bf16", 312e12}, {"f32", 156e12}, {"s8", 624e12}, {"f64", 19.5e12}};
  spec.memory_bytes_per_second = 2.0e12;
  spec.memory_bytes = kA100Memory;
  spec.launch_seconds = 4e-6;     // kernel launch, assumption
  spec.fuses_elementwise = true;  // XLA's loop and input fusion
  // 108 SMs, one 256x128 tile each at a time (the guide's own A100
  // example; CUTLASS's largest Ampere bf16 tile, k in steps of 64).
  spec.tiling = {.units = 108, .tile_m = 256, .tile_n = 128, .tile_k = 64};
  // Measured: 267.9 of 312 bf16 TFLOP/s on an A100 SXM, CUDA 12.1 (the
  // MAMF table of Bekman's ml-engineering, compute/accelerator). The other
  // types are assumed to lose the same fraction.
  spec.matrix_efficiency = 267.9 / 312;
  return spec;
}

// The H200 is the H100's die with more and faster memory at the same 700 W
// limit, so it takes the H100's measured matrix_efficiency (assumed: no
// H200 SXM measurement was found).
ComputeSpec H100Compute(double memory_bandwidth, double memory_bytes) {
  ComputeSpec spec;
  spec.peak_flops = {
      {"bf16", 989e12}, {"f32", 494e12}, {"f8", 1979e12}, {"s8", 1979e12}, {"f64", 67e12}};
  spec.memory_bytes_per_second = memory_bandwidth;
  spec.memory_bytes = memory_bytes;
  spec.launch_seconds = 4e-6;     // kernel launch, assumption
  spec.fuses_elementwise = true;  // XLA's loop and input fusion
  // 132 SMs (SXM), one 128x256 tile each at a time (CUTLASS's Hopper bf16
  // warp-specialized tile, k in steps of 64).
  spec.tiling = {.units = 132, .tile_m = 128, .tile_n = 256, .tile_k = 64};
  // Measured: 792.1 of 989 bf16 TFLOP/s on an H100 SXM, CUDA 12.1 (the same
  // MAMF table as the A100's). The other types are assumed to lose the
  // same fraction.
  spec.matrix_efficiency = 792.1 / 989;
  return spec;
}

Target Dgx(std::string_view gpu, ComputeSpec compute, Link nvlink, Link infiniband, int64_t nodes) {
  SwitchedTopology switched;
  switched.devices_per_node = 8;
  switched.nodes = nodes;
  switched.intra_node = nvlink;
  switched.inter_node = infiniband;
  const std::string name =
      nodes == 1 ? fmt::format("dgx-{}", gpu) : fmt::format("dgx-{}-x{}", gpu, nodes);
  return Target(name,
                fmt::format("{} DGX {} node(s) of 8 GPUs: NVSwitch inside, InfiniBand fat tree "
                            "between",
                            nodes, gpu),
                std::move(compute), switched);
}

Target Loopback() {
  ComputeSpec spec;
  // Loom's executor on the 2-core build machine, two MPI processes computing
  // at once (bench/calibration/run.sh, bench/overlap): OpenBLAS sgemm on the
  // operands' own memory, 7.25 GFLOP (1536^3) in 45 ms, 161 GFLOP/s; bf16
  // widened to f32 in blocks first, a 2048x1024x1024 product in 27.4 ms,
  // 157 GFLOP/s; an f32 add of 16M elements moves its 192 MB in 13.5 ms,
  // 14 GB/s.
  spec.peak_flops = {{"f32", 161e9}, {"bf16", 157e9}};
  spec.memory_bytes_per_second = 14e9;
  spec.memory_bytes = 8e9;
  spec.launch_seconds = 10e-6;
  BusTopology bus;
  // `tc ... tbf rate 2gbit` on loopback, shared by every flow: 32 MiB each
  // way between two MPI processes takes 280 ms (bench/calibration/run.sh:
  // transfer_alone), 239 MB/s in all (the BRIEF measured 0.25 GB/s one way).
  bus.bus = {0.239e9, 50e-6};
  return Target("loopback-2gbit",
                "Loom's executor under mpirun on one machine, loopback shaped to 2 Gbit/s "
                "(BRIEF section 5)",
                spec, bus);
}

Target DgxOf(std::string_view gpu, int64_t nodes) {
  const Link nvlink3{300e9, 2e-6};
  const Link nvlink4{450e9, 2e-6};
  const Link hdr{25e9, 5e-6};
  const Link ndr{50e9, 5e-6};
  if (gpu == "a100") return Dgx("a100", A100Compute(), nvlink3, hdr, nodes);
  if (gpu == "h200") return Dgx("h200", H100Compute(4.8e12, kH200Memory), nvlink4, ndr, nodes);
  return Dgx("h100", H100Compute(3.35e12, kH100Memory), nvlink4, ndr, nodes);
}

std::vector<Target> MakeBuiltins() {
  return {
      TpuV4(2, 2, 1),   TpuV4(4, 4, 4),   TpuV4(8, 8, 8),    TpuV4(8, 16, 16), DgxOf("a100", 1),
      DgxOf("h100", 1), DgxOf("h100", 4), DgxOf("h100", 32), DgxOf("h200", 4), Loopback(),
  };
}

// --- JSON --------------------------------------------------------------------

using Json = nlohmann::json;

constexpr int64_t kLargestTopology = int64_t{1} << 20;  // devices of a target file

Expected<double> Number(const Json& object, std::string_view key, std::string_view where) {
  auto it = object.find(std::string(key));
  if (it == object.end() || !it->is_number() || !std::isfinite(it->get<double>()) ||
      it->get<double>() < 0) {
    return Error{fmt::format("{}: '{}' must be a finite, non-negative number", where, key)};
  }
  return it->get<double>();
}

// A JSON integer in [low, high]. nlohmann keeps integers past int64_t as
// uint64_t, and get<int64_t>() would wrap them: read the kind first.
std::optional<int64_t> IntegerIn(const Json& value, int64_t low, int64_t high) {
  if (value.is_number_unsigned()) {
    const auto unsigned_value = value.get<uint64_t>();
    // Non-negative literals arrive here, 0 included: check both bounds.
    if (unsigned_value > static_cast<uint64_t>(high)) return std::nullopt;
    if (low > 0 && unsigned_value < static_cast<uint64_t>(low)) return std::nullopt;
    return static_cast<int64_t>(unsigned_value);
  }
  if (!value.is_number_integer()) return std::nullopt;
  const auto signed_value = value.get<int64_t>();
  if (signed_value < low || signed_value > high) return std::nullopt;
  return signed_value;
}

Expected<Link> ParseLink(const Json& object, std::string_view where) {
  if (!object.is_object()) return Error{fmt::format("{} must be an object", where)};
  Link link;
  LOOM_ASSIGN_OR_RETURN(link.bytes_per_second, Number(object, "bandwidth", where));
  LOOM_ASSIGN_OR_RETURN(link.latency_seconds, Number(object, "latency", where));
  if (link.bytes_per_second <= 0) return Error{fmt::format("{}: bandwidth must be > 0", where)};
  return link;
}

// {"units": 108, "tile": [256, 128, 64]}: MatrixTiling.
Expected<MatrixTiling> ParseTiling(const Json& json) {
  constexpr std::string_view kForm =
      "compute.tiling must be {\"units\": N, \"tile\": [M, N, K]}, each an integer in 1..65536";
  if (!json.is_object() || !json.contains("units") || !json.contains("tile") ||
      !json["tile"].is_array() || json["tile"].size() != 3) {
    return Error{std::string(kForm)};
  }
  const std::optional<int64_t> units = IntegerIn(json["units"], 1, 65536);
  std::vector<int64_t> tile;
  for (const auto& size : json["tile"]) {
    if (const std::optional<int64_t> value = IntegerIn(size, 1, 65536)) tile.push_back(*value);
  }
  if (!units || tile.size() != 3) return Error{std::string(kForm)};
  return MatrixTiling{.units = *units, .tile_m = tile[0], .tile_n = tile[1], .tile_k = tile[2]};
}

Expected<ComputeSpec> ParseCompute(const Json& json) {
  if (!json.is_object()) return Error{"'compute' must be an object"};
  ComputeSpec spec;
  const auto flops = json.find("peak_flops");
  if (flops == json.end() || !flops->is_object() || !flops->contains("f32")) {
    return Error{"compute: 'peak_flops' must be an object with at least \"f32\""};
  }
  for (const auto& [type, value] : flops->items()) {
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
      return Error{fmt::format("compute.peak_flops: '{}' must be a positive, finite number", type)};
    }
    spec.peak_flops[type] = value.get<double>();
  }
  LOOM_ASSIGN_OR_RETURN(spec.memory_bytes_per_second, Number(json, "memory_bandwidth", "compute"));
  LOOM_ASSIGN_OR_RETURN(spec.memory_bytes, Number(json, "memory_capacity", "compute"));
  LOOM_ASSIGN_OR_RETURN(spec.launch_seconds, Number(json, "launch_latency", "compute"));
  if (const auto fuses = json.find("fuses_elementwise"); fuses != json.end()) {
    if (!fuses->is_boolean()) return Error{"compute: 'fuses_elementwise' must be true or false"};
    spec.fuses_elementwise = fuses->get<bool>();
  }
  if (spec.memory_bytes_per_second <= 0) return Error{"compute: memory_bandwidth must be > 0"};
  if (const auto tiling = json.find("tiling"); tiling != json.end()) {
    LOOM_ASSIGN_OR_RETURN(spec.tiling, ParseTiling(*tiling));
  }
  if (const auto efficiency = json.find("matrix_efficiency"); efficiency != json.end()) {
    const double value = efficiency->is_number() ? efficiency->get<double>() : 0;
    if (!(value > 0 && value <= 1)) {
      return Error{"compute: 'matrix_efficiency' must be a number in (0, 1]"};
    }
    spec.matrix_efficiency = value;
  }
  return spec;
}

Expected<Topology> ParseTorus(const Json& json) {
  TorusTopology torus;
  const auto dims = json.find("dims");
  if (dims == json.end() || !dims->is_array() || dims->empty()) {
    return Error{"topology: a torus needs 'dims', a non-empty array"};
  }
  for (const auto& dim : *dims) {
    const std::optional<int64_t> size = IntegerIn(dim, 1, 4096);
    if (!size) return Error{"topology.dims: each must be an integer in 1..4096"};
    torus.dims.push_back(*size);
  }
  const auto wrap = json.find("wraparound");
  if (wrap == json.end() || !wrap->is_array() || wrap->size() != torus.dims.size()) {
    return Error{"topology: 'wraparound' must be an array of booleans, one per dimension"};
  }
  for (const auto& w : *wrap) {
    if (!w.is_boolean()) return Error{"topology.wraparound: each must be true or false"};
    torus.wraparound.push_back(w.get<bool>());
  }
  LOOM_ASSIGN_OR_RETURN(torus.link, ParseLink(json.value("link", Json()), "topology.link"));
  if (Product(torus.dims) > kLargestTopology) return Error{"topology: more than 2^20 chips"};
  if (const auto order = json.find("device_order"); order != json.end()) {
    std::vector<bool> seen(static_cast<size_t>(Product(torus.dims)), false);
    if (!order->is_array() || order->size() != seen.size()) {
      return Error{"topology: 'device_order' must list every device id once"};
    }
    for (const auto& id : *order) {
      const std::optional<int64_t> device = IntegerIn(id, 0, static_cast<int64_t>(seen.size()) - 1);
      if (!device || seen[static_cast<size_t>(*device)]) {
        return Error{"topology: 'device_order' must list every device id once"};
      }
      seen[static_cast<size_t>(*device)] = true;
      torus.device_order.push_back(*device);
    }
  }
  return Topology(std::move(torus));
}

Expected<Topology> ParseTopology(const Json& json) {
  if (!json.is_object()) return Error{"'topology' must be an object"};
  const std::string kind = json.value("kind", "");
  if (kind == "torus") return ParseTorus(json);
  if (kind == "switched") {
    SwitchedTopology switched;
    const std::optional<int64_t> per_node =
        IntegerIn(json.value("devices_per_node", Json()), 1, kLargestTopology);
    const std::optional<int64_t> nodes =
        IntegerIn(json.value("nodes", Json()), 1, kLargestTopology);
    if (!per_node || !nodes || SaturatingMul(*per_node, *nodes) > kLargestTopology) {
      return Error{
          "topology: 'devices_per_node' and 'nodes' must be positive integers, with at most "
          "2^20 devices in all"};
    }
    switched.devices_per_node = *per_node;
    switched.nodes = *nodes;
    LOOM_ASSIGN_OR_RETURN(switched.intra_node,
                          ParseLink(json.value("intra_node", Json()), "topology.intra_node"));
    LOOM_ASSIGN_OR_RETURN(switched.inter_node,
                          ParseLink(json.value("inter_node", Json()), "topology.inter_node"));
    return Topology(std::move(switched));
  }
  if (kind == "bus") {
    BusTopology bus;
    LOOM_ASSIGN_OR_RETURN(bus.bus, ParseLink(json.value("bus", Json()), "topology.bus"));
    return Topology(std::move(bus));
  }
  return Error{"topology: 'kind' must be \"torus\", \"switched\" or \"bus\""};
}

Json LinkJson(const Link& link) {
  return {{"bandwidth", link.bytes_per_second}, {"latency", link.latency_seconds}};
}

}  // namespace

const std::vector<Target>& BuiltinTargets() {
  static const std::vector<Target> targets = MakeBuiltins();
  return targets;
}

Expected<Target> ParseTargetJson(const std::string& text, const std::string& source) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto fail = [&](const Error& error) {
    return Error{fmt::format("{}: {}", source, error.message)};
  };
  if (json.is_discarded()) return Error{fmt::format("{}: not valid JSON", source)};
  if (!json.is_object() || !json.contains("name") || !json["name"].is_string()) {
    return Error{fmt::format("{}: a target is an object with a string 'name'", source)};
  }
  Expected<ComputeSpec> compute = ParseCompute(json.value("compute", Json()));
  if (!compute.ok()) return fail(compute.error());
  Expected<Topology> topology = ParseTopology(json.value("topology", Json()));
  if (!topology.ok()) return fail(topology.error());
  return Target(json["name"].get<std::string>(), json.value("description", ""), std::move(*compute),
                std::move(*topology));
}

std::string TargetToJson(const Target& target) {
  Json compute = {{"peak_flops", target.compute().peak_flops},
                  {"memory_bandwidth", target.compute().memory_bytes_per_second},
                  {"memory_capacity", target.compute().memory_bytes},
                  {"launch_latency", target.compute().launch_seconds},
                  {"fuses_elementwise", target.compute().fuses_elementwise},
                  {"matrix_efficiency", target.compute().matrix_efficiency}};
  if (const MatrixTiling& tiling = target.compute().tiling; tiling.present()) {
    compute["tiling"] = {{"units", tiling.units},
                         {"tile", {tiling.tile_m, tiling.tile_n, tiling.tile_k}}};
  }
  Json topology;
  if (const auto* torus = std::get_if<TorusTopology>(&target.topology())) {
    topology = {{"kind", "torus"},
                {"dims", torus->dims},
                {"wraparound", torus->wraparound},
                {"link", LinkJson(torus->link)}};
    if (!torus->device_order.empty()) topology["device_order"] = torus->device_order;
  } else if (const auto* switched = std::get_if<SwitchedTopology>(&target.topology())) {
    topology = {{"kind", "switched"},
                {"devices_per_node", switched->devices_per_node},
                {"nodes", switched->nodes},
                {"intra_node", LinkJson(switched->intra_node)},
                {"inter_node", LinkJson(switched->inter_node)}};
  } else {
    topology = {{"kind", "bus"}, {"bus", LinkJson(std::get<BusTopology>(target.topology()).bus)}};
  }
  Json json = {{"name", target.name()},
               {"description", target.description()},
               {"compute", compute},
               {"topology", topology}};
  return json.dump(2);
}

namespace {

// Parses "AxBxC" (or "N" with `parts` 1) into positive integers.
std::optional<std::vector<int64_t>> ParseSizes(std::string_view text, size_t parts) {
  std::vector<int64_t> sizes;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find('x', begin), text.size());
    const std::string_view part = text.substr(begin, end - begin);
    if (part.empty() || part.size() > 7 ||
        part.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    const int64_t value = std::stoll(std::string(part));
    if (value < 1) return std::nullopt;
    sizes.push_back(value);
    begin = end + 1;
  }
  if (sizes.size() != parts) return std::nullopt;
  return sizes;
}

// The TPU v4 slice of `chips` chips: the most cubic x <= y <= z whose sides
// of four or more are whole cube edges (so that they wrap around), sizes of
// 1 last (2x2x1, as slices are named).
std::vector<int64_t> TpuSliceOf(int64_t chips) {
  std::vector<int64_t> best;
  double best_score = 0;
  for (int64_t x = 1; x * x * x <= chips; ++x) {
    if (chips % x != 0) continue;
    for (int64_t y = x; x * y * y <= chips; ++y) {
      if ((chips / x) % y != 0) continue;
      const int64_t z = chips / x / y;
      const bool edges = (x < 4 || x % 4 == 0) && (y < 4 || y % 4 == 0) && (z < 4 || z % 4 == 0);
      const double score = (edges ? 0 : 1e9) + static_cast<double>(z) / static_cast<double>(x);
      if (best.empty() || score < best_score) {
        best = {x, y, z};
        best_score = score;
      }
    }
  }
  std::stable_partition(best.begin(), best.end(), [](int64_t d) { return d != 1; });
  return best;
}

struct Family {
  std::string_view name;
  std::string_view gpu;  // empty: TPU v4
};
constexpr Family kFamilies[] = {
    {"tpu-v4", ""}, {"dgx-a100", "a100"}, {"dgx-h100", "h100"}, {"dgx-h200", "h200"}};

constexpr int64_t kLargestTarget = int64_t{1} << 20;  // chips or GPUs

Expected<Target> SizedTarget(const Family& family, std::string_view size, const std::string& spec) {
  if (family.gpu.empty()) {
    const std::optional<std::vector<int64_t>> dims = ParseSizes(size, 3);
    if (!dims || (*dims)[0] * (*dims)[1] * (*dims)[2] > kLargestTarget) {
      return Error{
          fmt::format("target '{}': a TPU v4 slice is XxYxZ chips (e.g. tpu-v4:4x4x8)", spec)};
    }
    return TpuV4((*dims)[0], (*dims)[1], (*dims)[2]);
  }
  const std::optional<std::vector<int64_t>> nodes = ParseSizes(size, 1);
  if (!nodes || (*nodes)[0] * 8 > kLargestTarget) {
    return Error{fmt::format("target '{}': a DGX cluster is a count of 8-GPU nodes (e.g. {}:16)",
                             spec, family.name)};
  }
  return DgxOf(family.gpu, (*nodes)[0]);
}

}  // namespace

Expected<Target> FindTarget(const std::string& spec, int64_t devices) {
  for (const Target& target : BuiltinTargets()) {
    if (target.name() == spec) return target;
  }
  if (spec.ends_with(".json")) {
    std::ifstream in(spec);
    if (!in) return Error{fmt::format("cannot read target file {}", spec)};
    std::stringstream text;
    text << in.rdbuf();
    return ParseTargetJson(text.str(), spec);
  }
  for (const Family& family : kFamilies) {
    const std::string_view name = family.name;
    if (spec == name || spec == std::string(name) + ":auto") {
      if (devices <= 0) {
        return Error{
            fmt::format("target '{}' is sized to the module, and there is none here; "
                        "give a size ({})",
                        spec, family.gpu.empty() ? "tpu-v4:4x4x8" : "dgx-h100:16")};
      }
      if (devices > kLargestTarget) {
        return Error{
            fmt::format("target '{}': {} devices are more than Loom models", spec, devices)};
      }
      if (family.gpu.empty()) {
        const std::vector<int64_t> dims = TpuSliceOf(devices);
        return TpuV4(dims[0], dims[1], dims[2]);
      }
      return DgxOf(family.gpu, (devices + 7) / 8);
    }
    // "tpu-v4:4x4x8", "dgx-h100:16", and the catalog's spelling at any size:
    // "tpu-v4-4x4x8", "dgx-h100-x16".
    const std::string colon = std::string(name) + ":";
    const std::string dash = std::string(name) + (family.gpu.empty() ? "-" : "-x");
    if (spec.starts_with(colon)) return SizedTarget(family, spec.substr(colon.size()), spec);
    if (spec.starts_with(dash)) return SizedTarget(family, spec.substr(dash.size()), spec);
  }
  std::string known;
  for (const Target& target : BuiltinTargets()) known += " " + target.name();
  return Error{fmt::format(
      "unknown target '{}' (built-in:{}; any size: tpu-v4:XxYxZ, dgx-a100:N, dgx-h100:N, "
      "dgx-h200:N nodes; sized to the module: tpu-v4, dgx-h100, ...; or a .json file)",
      spec, known)};
}

}  // namespace loom::cost
