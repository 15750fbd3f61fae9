#include "model/hlo_emitter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "ir/shape.h"
#include "support/check.h"

namespace loom::model {
namespace {

std::string Dims(const std::vector<int64_t>& dims) {
  return fmt::format("{}", fmt::join(dims, ","));
}

std::string GroupsText(const Groups& groups) {
  std::vector<std::string> parts;
  for (const auto& group : groups) parts.push_back("{" + Dims(group) + "}");
  return "{" + fmt::format("{}", fmt::join(parts, ",")) + "}";
}

Value ArrayValue(std::string_view type, std::vector<int64_t> dims) {
  return Value{.name = {}, .type = std::string(type), .dims = std::move(dims), .elements = {}};
}

std::string Literal(std::string_view type, double value) {
  if (type == "pred") return value != 0 ? "true" : "false";
  if (type[0] == 's' || type[0] == 'u') return fmt::format("{}", static_cast<int64_t>(value));
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{}", value);
}

}  // namespace

std::string Value::ShapeText() const {
  if (!is_tuple()) return fmt::format("{}[{}]", type, Dims(dims));
  std::vector<std::string> parts;
  for (const Value& element : elements) parts.push_back(element.ShapeText());
  return "(" + fmt::format("{}", fmt::join(parts, ", ")) + ")";
}

Value ComputationEmitter::Emit(std::string_view base, Value shape, const std::string& expression) {
  const int64_t n = counts_[std::string(base)]++;
  shape.name = n == 0 ? std::string(base) : fmt::format("{}.{}", base, n);
  lines_.push_back(fmt::format("  %{} = {} {}", shape.name, shape.ShapeText(), expression));
  return shape;
}

Value ComputationEmitter::Parameter(std::string_view type, std::vector<int64_t> dims,
                                    std::string_view name) {
  const auto number = static_cast<int64_t>(parameters_.size());
  Value value = Emit(name, ArrayValue(type, std::move(dims)), fmt::format("parameter({})", number));
  parameters_.push_back(value);
  return value;
}

Value ComputationEmitter::TupleParameter(const std::vector<Value>& like, std::string_view name) {
  Value shape;
  shape.elements = like;
  const auto number = static_cast<int64_t>(parameters_.size());
  Value value = Emit(name, shape, fmt::format("parameter({})", number));
  parameters_.push_back(value);
  return value;
}

Value ComputationEmitter::Scalar(std::string_view type, double value) {
  return Emit("c", ArrayValue(type, {}), fmt::format("constant({})", Literal(type, value)));
}

Value ComputationEmitter::ScalarInt(int64_t value) {
  return Scalar("s32", static_cast<double>(value));
}

Value ComputationEmitter::IntVector(const std::vector<int64_t>& values) {
  return Emit("c", ArrayValue("s32", {static_cast<int64_t>(values.size())}),
              fmt::format("constant({{{}}})", Dims(values)));
}

Value ComputationEmitter::Full(std::string_view type, double value, std::vector<int64_t> dims) {
  return Broadcast(Scalar(type, value), std::move(dims), {});
}

Value ComputationEmitter::Broadcast(const Value& x, std::vector<int64_t> dims,
                                    std::vector<int64_t> mapped) {
  LOOM_CHECK(static_cast<int64_t>(mapped.size()) == x.rank(), "broadcast: mapped dims vs rank");
  for (size_t i = 0; i < mapped.size(); ++i) {
    LOOM_CHECK(dims[static_cast<size_t>(mapped[i])] == x.dims[i], "broadcast: dimension sizes");
  }
  return Emit("broadcast", ArrayValue(x.type, std::move(dims)),
              fmt::format("broadcast(%{}), dimensions={{{}}}", x.name, Dims(mapped)));
}

Value ComputationEmitter::BroadcastLike(const Value& x, const Value& like,
                                        std::vector<int64_t> mapped) {
  return Broadcast(x, like.dims, std::move(mapped));
}

Value ComputationEmitter::Unary(std::string_view op, const Value& x) {
  return Emit(op, ArrayValue(x.type, x.dims), fmt::format("{}(%{})", op, x.name));
}

Value ComputationEmitter::Binary(std::string_view op, const Value& a, const Value& b) {
  LOOM_CHECK(a.dims == b.dims && a.type == b.type,
             fmt::format("{}: {} vs {}", op, a.ShapeText(), b.ShapeText()));
  return Emit(op, ArrayValue(a.type, a.dims), fmt::format("{}(%{}, %{})", op, a.name, b.name));
}

Value ComputationEmitter::Scale(const Value& x, double s) {
  return Mul(x, Full(x.type, s, x.dims));
}

Value ComputationEmitter::Compare(const Value& a, const Value& b, std::string_view direction) {
  LOOM_CHECK(a.dims == b.dims && a.type == b.type, "compare: shapes");
  return Emit("compare", ArrayValue("pred", a.dims),
              fmt::format("compare(%{}, %{}), direction={}", a.name, b.name, direction));
}

Value ComputationEmitter::Select(const Value& predicate, const Value& a, const Value& b) {
  LOOM_CHECK(predicate.dims == a.dims && a.dims == b.dims && a.type == b.type, "select: shapes");
  return Emit("select", ArrayValue(a.type, a.dims),
              fmt::format("select(%{}, %{}, %{})", predicate.name, a.name, b.name));
}

namespace {
// Whether every value of the floating-point type `from` is exactly a value
// of `to`: a float of more bits (bf16 to f32, f32 to f64).
bool Widens(std::string_view from, std::string_view to) {
  const std::optional<ir::PrimitiveType> a = ir::ParsePrimitiveType(from);
  const std::optional<ir::PrimitiveType> b = ir::ParsePrimitiveType(to);
  return a && b && ir::IsFloatingPoint(*a) && ir::IsFloatingPoint(*b) &&
         ir::PrimitiveTypeBits(*b) > ir::PrimitiveTypeBits(*a);
}
}  // namespace

Value ComputationEmitter::Convert(const Value& x, std::string_view type) {
  if (x.type == type) return x;
  if (!x.widened_from.empty() && x.widened_from.front().type == type) return x.widened_from.front();
  Value converted = Emit("convert", ArrayValue(type, x.dims), fmt::format("convert(%{})", x.name));
  if (Widens(x.type, type)) converted.widened_from = {x};
  return converted;
}

Value ComputationEmitter::Iota(std::string_view type, std::vector<int64_t> dims,
                               int64_t dimension) {
  return Emit("iota", ArrayValue(type, std::move(dims)),
              fmt::format("iota(), iota_dimension={}", dimension));
}

Value ComputationEmitter::Dot(const Value& lhs, const Value& rhs, const DotDims& d,
                              std::string_view result_type) {
  LOOM_CHECK(d.lhs_batch.size() == d.rhs_batch.size() &&
                 d.lhs_contracting.size() == d.rhs_contracting.size(),
             "dot: dimension lists");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    LOOM_CHECK(lhs.dim(d.lhs_batch[i]) == rhs.dim(d.rhs_batch[i]), "dot: batch sizes");
    dims.push_back(lhs.dim(d.lhs_batch[i]));
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    LOOM_CHECK(
        lhs.dim(d.lhs_contracting[i]) == rhs.dim(d.rhs_contracting[i]),
        fmt::format("dot: contracting sizes of {} and {}", lhs.ShapeText(), rhs.ShapeText()));
  }
  const auto free = [&](const Value& v, const std::vector<int64_t>& batch,
                        const std::vector<int64_t>& contracting) {
    for (int64_t i = 0; i < v.rank(); ++i) {
      if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
          std::find(contracting.begin(), contracting.end(), i) == contracting.end()) {
        dims.push_back(v.dim(i));
      }
    }
  };
  free(lhs, d.lhs_batch, d.lhs_contracting);
  free(rhs, d.rhs_batch, d.rhs_contracting);
  std::string attrs;
  if (!d.lhs_batch.empty()) {
    attrs += fmt::format(", lhs_batch_dims={{{}}}, rhs_batch_dims={{{}}}", Dims(d.lhs_batch),
                         Dims(d.rhs_batch));
  }
  attrs += fmt::format(", lhs_contracting_dims={{{}}}, rhs_contracting_dims={{{}}}",
                       Dims(d.lhs_contracting), Dims(d.rhs_contracting));
  return Emit("dot", ArrayValue(result_type, std::move(dims)),
              fmt::format("dot(%{}, %{}){}", lhs.name, rhs.name, attrs));
}

Value ComputationEmitter::Reduce(const Value& x, std::vector<int64_t> dims, std::string_view kind) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) kept.push_back(x.dim(i));
  }
  const Value init = Scalar(x.type, kind == "add" ? 0.0 : -INFINITY);
  return Emit(kind == "add" ? "sum" : "max", ArrayValue(x.type, std::move(kept)),
              fmt::format("reduce(%{}, %{}), dimensions={{{}}}, to_apply=%{}", x.name, init.name,
                          Dims(dims), module_.Reducer(kind, x.type)));
}

Value ComputationEmitter::ReduceSum(const Value& x, std::vector<int64_t> dims) {
  return Reduce(x, std::move(dims), "add");
}

Value ComputationEmitter::ReduceMax(const Value& x, std::vector<int64_t> dims) {
  return Reduce(x, std::move(dims), "max");
}

Value ComputationEmitter::Transpose(const Value& x, std::vector<int64_t> permutation) {
  std::vector<int64_t> dims;
  for (int64_t p : permutation) dims.push_back(x.dim(p));
  return Emit("transpose", ArrayValue(x.type, std::move(dims)),
              fmt::format("transpose(%{}), dimensions={{{}}}", x.name, Dims(permutation)));
}

Value ComputationEmitter::Reshape(const Value& x, std::vector<int64_t> dims) {
  int64_t a = 1, b = 1;
  for (int64_t d : x.dims) a *= d;
  for (int64_t d : dims) b *= d;
  LOOM_CHECK(a == b, "reshape: element counts");
  if (dims == x.dims) return x;
  return Emit("reshape", ArrayValue(x.type, std::move(dims)), fmt::format("reshape(%{})", x.name));
}

Value ComputationEmitter::DynamicSlice(const Value& x, const std::vector<Value>& starts,
                                       std::vector<int64_t> sizes) {
  LOOM_CHECK(static_cast<int64_t>(starts.size()) == x.rank(), "dynamic-slice: starts");
  std::string operands = "%" + x.name;
  for (const Value& start : starts) operands += ", %" + start.name;
  const std::string attrs = fmt::format("dynamic_slice_sizes={{{}}}", Dims(sizes));
  return Emit("dynamic-slice", ArrayValue(x.type, std::move(sizes)),
              fmt::format("dynamic-slice({}), {}", operands, attrs));
}

Value ComputationEmitter::Slice(const Value& x, int64_t dimension, int64_t begin, int64_t size) {
  LOOM_CHECK(
      dimension >= 0 && dimension < x.rank() && begin >= 0 && begin + size <= x.dim(dimension),
      "slice: bounds");
  std::vector<int64_t> dims = x.dims;
  std::string ranges;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const int64_t from = d == dimension ? begin : 0;
    const int64_t to = d == dimension ? begin + size : x.dim(d);
    ranges += fmt::format("{}[{}:{}]", d == 0 ? "" : ", ", from, to);
  }
  dims[static_cast<size_t>(dimension)] = size;
  return Emit("slice", ArrayValue(x.type, std::move(dims)),
              fmt::format("slice(%{}), slice={{{}}}", x.name, ranges));
}

Value ComputationEmitter::Concatenate(const std::vector<Value>& parts, int64_t dimension) {
  LOOM_CHECK(!parts.empty(), "concatenate: no parts");
  std::vector<int64_t> dims = parts.front().dims;
  std::string operands;
  dims[static_cast<size_t>(dimension)] = 0;
  for (const Value& part : parts) {
    LOOM_CHECK(part.type == parts.front().type && part.rank() == parts.front().rank(),
               "concatenate: parts");
    dims[static_cast<size_t>(dimension)] += part.dim(dimension);
    operands += (operands.empty() ? "%" : ", %") + part.name;
  }
  return Emit("concatenate", ArrayValue(parts.front().type, std::move(dims)),
              fmt::format("concatenate({}), dimensions={{{}}}", operands, dimension));
}

Value ComputationEmitter::DynamicUpdateSlice(const Value& x, const Value& update,
                                             const std::vector<Value>& starts) {
  LOOM_CHECK(static_cast<int64_t>(starts.size()) == x.rank() && update.type == x.type,
             "dynamic-update-slice: starts or type");
  std::string operands = "%" + x.name + ", %" + update.name;
  for (const Value& start : starts) operands += ", %" + start.name;
  return Emit("dynamic-update-slice", ArrayValue(x.type, x.dims),
              fmt::format("dynamic-update-slice({})", operands));
}

Value ComputationEmitter::TakeRows(const Value& table, const Value& ids) {
  LOOM_CHECK(table.rank() == 2 && ids.rank() == 1 && ids.type == "s32", "gather: shapes");
  return Emit("gather", ArrayValue(table.type, {ids.dim(0), table.dim(1)}),
              fmt::format("gather(%{}, %{}), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
                          "start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,{}}}",
                          table.name, ids.name, table.dim(1)));
}

Value ComputationEmitter::ScatterAddRows(const Value& base, const Value& ids, const Value& rows) {
  LOOM_CHECK(base.rank() == 2 && ids.rank() == 1 && ids.type == "s32" && rows.rank() == 2 &&
                 rows.dim(0) == ids.dim(0) && rows.dim(1) == base.dim(1) && rows.type == base.type,
             "scatter: shapes");
  return Emit("scatter", ArrayValue(base.type, base.dims),
              fmt::format("scatter(%{}, %{}, %{}), update_window_dims={{1}}, "
                          "inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, "
                          "index_vector_dim=1, to_apply=%{}",
                          base.name, ids.name, rows.name, module_.Reducer("add", base.type)));
}

Value ComputationEmitter::AllReduce(const Value& x, const Groups& groups, std::string_view kind) {
  if (groups.empty() || groups.front().size() <= 1) return x;
  return Emit("all-reduce", ArrayValue(x.type, x.dims),
              fmt::format("all-reduce(%{}), channel_id={}, replica_groups={}, "
                          "use_global_device_ids=true, to_apply=%{}",
                          x.name, module_.NextChannel(), GroupsText(groups),
                          module_.Reducer(kind, x.type)));
}

Value ComputationEmitter::PartitionId() {
  const Value id = Emit("partition-id", ArrayValue("u32", {}), "partition-id()");
  return Convert(id, "s32");
}

Value ComputationEmitter::Clamp(const Value& lo, const Value& x, const Value& hi) {
  LOOM_CHECK(lo.dims == x.dims && x.dims == hi.dims && lo.type == x.type && x.type == hi.type,
             "clamp: shapes");
  return Emit("clamp", ArrayValue(x.type, x.dims),
              fmt::format("clamp(%{}, %{}, %{})", lo.name, x.name, hi.name));
}

Value ComputationEmitter::CollectivePermute(const Value& x,
                                            const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::string text;
  for (const auto& [source, target] : pairs) {
    text += fmt::format("{}{{{},{}}}", text.empty() ? "" : ",", source, target);
  }
  return Emit("collective-permute", ArrayValue(x.type, x.dims),
              fmt::format("collective-permute(%{}), channel_id={}, source_target_pairs={{{}}}",
                          x.name, module_.NextChannel(), text));
}

Value ComputationEmitter::AllGather(const Value& x, int64_t dimension, const Groups& groups) {
  if (groups.empty() || groups.front().size() <= 1) return x;
  std::vector<int64_t> dims = x.dims;
  dims[static_cast<size_t>(dimension)] *= static_cast<int64_t>(groups.front().size());
  return Emit("all-gather", ArrayValue(x.type, std::move(dims)),
              fmt::format("all-gather(%{}), channel_id={}, replica_groups={}, dimensions={{{}}}, "
                          "use_global_device_ids=true",
                          x.name, module_.NextChannel(), GroupsText(groups), dimension));
}

Value ComputationEmitter::AllToAll(const Value& x, int64_t dimension, const Groups& groups) {
  if (groups.empty() || groups.front().size() <= 1) return x;
  LOOM_CHECK(
      x.dims[static_cast<size_t>(dimension)] % static_cast<int64_t>(groups.front().size()) == 0,
      "all-to-all: divisibility");
  return Emit("all-to-all", ArrayValue(x.type, x.dims),
              fmt::format("all-to-all(%{}), channel_id={}, replica_groups={}, dimensions={{{}}}, "
                          "use_global_device_ids=true",
                          x.name, module_.NextChannel(), GroupsText(groups), dimension));
}

Value ComputationEmitter::ReduceScatter(const Value& x, int64_t dimension, const Groups& groups) {
  if (groups.empty() || groups.front().size() <= 1) return x;
  std::vector<int64_t> dims = x.dims;
  const auto n = static_cast<int64_t>(groups.front().size());
  LOOM_CHECK(dims[static_cast<size_t>(dimension)] % n == 0, "reduce-scatter: divisibility");
  dims[static_cast<size_t>(dimension)] /= n;
  return Emit("reduce-scatter", ArrayValue(x.type, std::move(dims)),
              fmt::format("reduce-scatter(%{}), channel_id={}, replica_groups={}, "
                          "dimensions={{{}}}, use_global_device_ids=true, to_apply=%{}",
                          x.name, module_.NextChannel(), GroupsText(groups), dimension,
                          module_.Reducer("add", x.type)));
}

namespace {
// The operand list `%a, %b, ...` of one variadic collective over `xs`, all
// of one type.
std::string VariadicOperands(std::string_view op, const std::vector<Value>& xs) {
  LOOM_CHECK(!xs.empty(), fmt::format("{}: no operands", op));
  std::vector<std::string> names;
  for (const Value& x : xs) {
    LOOM_CHECK(x.type == xs.front().type, fmt::format("{}: operands of two types", op));
    names.push_back("%" + x.name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}
}  // namespace

std::vector<Value> ComputationEmitter::ReduceScatter(const std::vector<Value>& xs,
                                                     int64_t dimension, const Groups& groups) {
  if (xs.size() == 1 || groups.empty() || groups.front().size() <= 1) {
    std::vector<Value> each;
    for (const Value& x : xs) each.push_back(ReduceScatter(x, dimension, groups));
    return each;
  }
  const auto n = static_cast<int64_t>(groups.front().size());
  Value shape;
  for (const Value& x : xs) {
    std::vector<int64_t> dims = x.dims;
    LOOM_CHECK(dims[static_cast<size_t>(dimension)] % n == 0, "reduce-scatter: divisibility");
    dims[static_cast<size_t>(dimension)] /= n;
    shape.elements.push_back(ArrayValue(x.type, std::move(dims)));
  }
  const Value tuple =
      Emit("reduce-scatter", shape,
           fmt::format("reduce-scatter({}), channel_id={}, replica_groups={}, dimensions={{{}}}, "
                       "use_global_device_ids=true, to_apply=%{}",
                       VariadicOperands("reduce-scatter", xs), module_.NextChannel(),
                       GroupsText(groups), dimension, module_.Reducer("add", xs.front().type)));
  std::vector<Value> each;
  for (size_t k = 0; k < xs.size(); ++k) each.push_back(Element(tuple, static_cast<int64_t>(k)));
  return each;
}

std::vector<Value> ComputationEmitter::AllReduce(const std::vector<Value>& xs,
                                                 const Groups& groups) {
  if (xs.size() == 1 || groups.empty() || groups.front().size() <= 1) {
    std::vector<Value> each;
    for (const Value& x : xs) each.push_back(AllReduce(x, groups));
    return each;
  }
  Value shape;
  for (const Value& x : xs) shape.elements.push_back(ArrayValue(x.type, x.dims));
  const Value tuple =
      Emit("all-reduce", shape,
           fmt::format("all-reduce({}), channel_id={}, replica_groups={}, "
                       "use_global_device_ids=true, to_apply=%{}",
                       VariadicOperands("all-reduce", xs), module_.NextChannel(),
                       GroupsText(groups), module_.Reducer("add", xs.front().type)));
  std::vector<Value> each;
  for (size_t k = 0; k < xs.size(); ++k) each.push_back(Element(tuple, static_cast<int64_t>(k)));
  return each;
}

Value ComputationEmitter::Tuple(const std::vector<Value>& elements) {
  Value shape;
  shape.elements = elements;
  std::vector<std::string> names;
  for (const Value& element : elements) names.push_back("%" + element.name);
  return Emit("tuple", shape, fmt::format("tuple({})", fmt::join(names, ", ")));
}

Value ComputationEmitter::Element(const Value& tuple, int64_t index) {
  LOOM_CHECK(tuple.is_tuple() && index < static_cast<int64_t>(tuple.elements.size()),
             "get-tuple-element: index");
  Value shape = tuple.elements[static_cast<size_t>(index)];
  shape.name.clear();
  return Emit("gte", shape, fmt::format("get-tuple-element(%{}), index={}", tuple.name, index));
}

std::vector<Value> ComputationEmitter::Elements(const Value& tuple) {
  std::vector<Value> elements;
  for (size_t i = 0; i < tuple.elements.size(); ++i) {
    elements.push_back(Element(tuple, static_cast<int64_t>(i)));
  }
  return elements;
}

Value ComputationEmitter::While(const Value& init, const ComputationEmitter& condition,
                                const ComputationEmitter& body) {
  Value shape = init;
  shape.name.clear();
  return Emit(
      "while", shape,
      fmt::format("while(%{}), condition=%{}, body=%{}", init.name, condition.name(), body.name()));
}

Value ComputationEmitter::Fusion(const std::vector<Value>& operands,
                                 const ComputationEmitter& callee) {
  Value shape = callee.root();
  shape.name.clear();
  std::vector<std::string> names;
  for (const Value& operand : operands) names.push_back("%" + operand.name);
  return Emit(
      "fusion", shape,
      fmt::format("fusion({}), kind=kCustom, calls=%{}", fmt::join(names, ", "), callee.name()));
}

std::string ComputationEmitter::Text(bool entry) const {
  std::vector<std::string> params;
  for (const Value& p : parameters_) params.push_back(fmt::format("{}: {}", p.name, p.ShapeText()));
  std::string out = fmt::format("{}%{} ({}) -> {} {{\n", entry ? "ENTRY " : "", name_,
                                fmt::join(params, ", "), root_.ShapeText());
  for (size_t i = 0; i < lines_.size(); ++i) {
    const bool is_root = lines_[i].starts_with("  %" + root_.name + " =");
    out += is_root ? "  ROOT " + lines_[i].substr(2) : lines_[i];
    out += "\n";
  }
  out += "}\n";
  return out;
}

ComputationEmitter& ModuleEmitter::AddComputation(std::string_view name) {
  const int64_t n = computation_names_[std::string(name)]++;
  computations_.push_back(std::make_unique<ComputationEmitter>(
      n == 0 ? std::string(name) : fmt::format("{}.{}", name, n), *this));
  return *computations_.back();
}

ComputationEmitter& ModuleEmitter::Entry() {
  if (!entry_) entry_ = std::make_unique<ComputationEmitter>("main", *this);
  return *entry_;
}

std::string ModuleEmitter::Reducer(std::string_view kind, std::string_view type) {
  const std::string name = fmt::format("{}.{}", kind, type);
  if (reducers_.emplace(name, name).second) {
    reducer_text_.push_back(fmt::format(
        "%{0} (a: {1}[], b: {1}[]) -> {1}[] {{\n  %a = {1}[] parameter(0)\n  %b = {1}[] "
        "parameter(1)\n  ROOT %r = {1}[] {2}(%a, %b)\n}}\n",
        name, type, kind == "add" ? "add" : "maximum"));
  }
  return name;
}

std::string ModuleEmitter::Text() const {
  std::string out = fmt::format("HloModule {}, num_partitions={}\n\n", name_, partitions_);
  for (const std::string& reducer : reducer_text_) out += reducer + "\n";
  for (const auto& computation : computations_) out += computation->Text(false) + "\n";
  if (entry_) out += entry_->Text(true);
  return out;
}

}  // namespace loom::model
