#include "ir/gather_scatter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>

namespace loom::ir {
namespace {

Error At(const Instruction& instruction, const SourceLoc& loc, std::string_view message) {
  return Error{fmt::format("%{}: {}", instruction.name(), message), loc};
}

// "{1,2}" or "{}" as integers.
std::optional<std::vector<int64_t>> ParseIntList(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  text = trim(text);
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') return std::nullopt;
  text = trim(text.substr(1, text.size() - 2));
  std::vector<int64_t> values;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    int64_t value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (error != std::errc() || end != item.data() + item.size()) return std::nullopt;
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return values;
}

// A list attribute; absent ones are empty when `optional`, else an error.
Expected<std::vector<int64_t>> ListAttribute(const Instruction& instruction, std::string_view key,
                                             bool optional) {
  const RawAttribute* raw = instruction.attrs().FindRaw(key);
  if (raw == nullptr) {
    if (optional) return std::vector<int64_t>{};
    return At(instruction, instruction.loc(),
              fmt::format("{} needs {}={{...}}", OpcodeName(instruction.opcode()), key));
  }
  std::optional<std::vector<int64_t>> values = ParseIntList(raw->value);
  if (!values) {
    return At(instruction, raw->loc,
              fmt::format("{} must be a list of integers like {{0,1}}, got {}", key, raw->value));
  }
  return *values;
}

Expected<int64_t> IntAttribute(const Instruction& instruction, std::string_view key) {
  const RawAttribute* raw = instruction.attrs().FindRaw(key);
  if (raw == nullptr) {
    return At(instruction, instruction.loc(),
              fmt::format("{} needs {}=N", OpcodeName(instruction.opcode()), key));
  }
  const std::optional<int64_t> value = ParseInteger(raw->value);
  if (!value) {
    return At(instruction, raw->loc, fmt::format("{} must be an integer, got {}", key, raw->value));
  }
  return *value;
}

Error Fail(std::string message) { return Error{std::move(message), {}}; }

// `dims` are distinct, in [0, limit), and (where `sorted`) increasing.
Status CheckDimensionList(const std::vector<int64_t>& dims, int64_t limit, std::string_view what,
                          bool sorted) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= limit) {
      return Fail(fmt::format("{} {{{}}}: {} is outside [0, {})", what, fmt::join(dims, ","),
                              dims[i], limit));
    }
    for (size_t j = 0; j < i; ++j) {
      if (sorted ? dims[j] >= dims[i] : dims[j] == dims[i]) {
        return Fail(fmt::format("{} {{{}}} must be {}", what, fmt::join(dims, ","),
                                sorted ? "increasing" : "distinct"));
      }
    }
  }
  return OkStatus();
}

bool Contains(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

// The indices' batch dimensions and the length of an index vector, after
// checking that index_vector_dim fits.
Expected<std::pair<std::vector<int64_t>, int64_t>> BatchAndVector(const Shape& indices,
                                                                  int64_t index_vector_dim) {
  if (!indices.IsArray() || !IsInteger(indices.type())) {
    return Fail(fmt::format("the indices {} must be an integer array", indices.ToString(false)));
  }
  if (index_vector_dim < 0 || index_vector_dim > indices.rank()) {
    return Fail(fmt::format("index_vector_dim={} is outside [0, {}] for the indices {}",
                            index_vector_dim, indices.rank(), indices.ToString(false)));
  }
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d != index_vector_dim) batch.push_back(indices.dim(d));
  }
  const int64_t length = index_vector_dim < indices.rank() ? indices.dim(index_vector_dim) : 1;
  return std::make_pair(std::move(batch), length);
}

std::vector<int64_t> SortedUnion(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

// What a gather's or a scatter's batching dimensions must be, by XLA's
// rules, with the attributes named as the op spells them.
struct BatchingRule {
  const std::vector<int64_t>& operand_dims;  // operand_batching_dims, input_batching_dims
  std::string_view operand_name;
  const std::vector<int64_t>& indices_dims;  // start_indices_batching_dims, ...
  std::string_view indices_name;
  const std::vector<int64_t>& unwalked;  // collapsed_slice_dims, inserted_window_dims
  std::string_view unwalked_name;
  const std::vector<int64_t>& start_map;  // start_index_map, scatter_dims_to_operand_dims
  std::string_view start_map_name;
};

Status CheckBatchingDims(const Shape& operand, const Shape& indices, int64_t index_vector_dim,
                         const BatchingRule& rule) {
  LOOM_RETURN_IF_ERROR(
      CheckDimensionList(rule.operand_dims, operand.rank(), rule.operand_name, true));
  LOOM_RETURN_IF_ERROR(
      CheckDimensionList(rule.indices_dims, indices.rank(), rule.indices_name, false));
  if (rule.operand_dims.size() != rule.indices_dims.size()) {
    return Fail(fmt::format("{} has {} entries but {} has {}", rule.operand_name,
                            rule.operand_dims.size(), rule.indices_name, rule.indices_dims.size()));
  }
  for (size_t i = 0; i < rule.operand_dims.size(); ++i) {
    const int64_t d = rule.operand_dims[i];
    const int64_t s = rule.indices_dims[i];
    if (s == index_vector_dim) {
      return Fail(fmt::format("{} holds index_vector_dim={}", rule.indices_name, s));
    }
    for (const auto& [other, name] : {std::pair{&rule.unwalked, rule.unwalked_name},
                                      std::pair{&rule.start_map, rule.start_map_name}}) {
      if (Contains(*other, d)) {
        return Fail(
            fmt::format("operand dimension {} is in both {} and {}", d, rule.operand_name, name));
      }
    }
    if (operand.dim(d) != indices.dim(s)) {
      return Fail(fmt::format(
          "batching dimension {} of the operand {} has {} elements but dimension {} of the "
          "indices {} has {}",
          d, operand.ToString(false), operand.dim(d), s, indices.ToString(false), indices.dim(s)));
    }
  }
  return OkStatus();
}

}  // namespace

std::vector<int64_t> GatherDimensions::UnwalkedOperandDims() const {
  return SortedUnion(collapsed_slice_dims, operand_batching_dims);
}

std::vector<int64_t> ScatterDimensions::UnwalkedOperandDims() const {
  return SortedUnion(inserted_window_dims, input_batching_dims);
}

std::vector<int64_t> WindowOperandDims(int64_t rank, const std::vector<int64_t>& skipped) {
  std::vector<int64_t> walked;
  for (int64_t d = 0; d < rank; ++d) {
    if (!Contains(skipped, d)) walked.push_back(d);
  }
  return walked;
}

Expected<GatherDimensions> GatherDimensionsOf(const Instruction& gather) {
  GatherDimensions dims;
  LOOM_ASSIGN_OR_RETURN(dims.offset_dims, ListAttribute(gather, "offset_dims", false));
  LOOM_ASSIGN_OR_RETURN(dims.collapsed_slice_dims,
                        ListAttribute(gather, "collapsed_slice_dims", false));
  LOOM_ASSIGN_OR_RETURN(dims.start_index_map, ListAttribute(gather, "start_index_map", false));
  LOOM_ASSIGN_OR_RETURN(dims.index_vector_dim, IntAttribute(gather, "index_vector_dim"));
  LOOM_ASSIGN_OR_RETURN(dims.slice_sizes, ListAttribute(gather, "slice_sizes", false));
  LOOM_ASSIGN_OR_RETURN(dims.operand_batching_dims,
                        ListAttribute(gather, "operand_batching_dims", true));
  LOOM_ASSIGN_OR_RETURN(dims.start_indices_batching_dims,
                        ListAttribute(gather, "start_indices_batching_dims", true));
  return dims;
}

Expected<ScatterDimensions> ScatterDimensionsOf(const Instruction& scatter) {
  ScatterDimensions dims;
  LOOM_ASSIGN_OR_RETURN(dims.update_window_dims,
                        ListAttribute(scatter, "update_window_dims", false));
  LOOM_ASSIGN_OR_RETURN(dims.inserted_window_dims,
                        ListAttribute(scatter, "inserted_window_dims", false));
  LOOM_ASSIGN_OR_RETURN(dims.scatter_dims_to_operand_dims,
                        ListAttribute(scatter, "scatter_dims_to_operand_dims", false));
  LOOM_ASSIGN_OR_RETURN(dims.index_vector_dim, IntAttribute(scatter, "index_vector_dim"));
  LOOM_ASSIGN_OR_RETURN(dims.input_batching_dims,
                        ListAttribute(scatter, "input_batching_dims", true));
  LOOM_ASSIGN_OR_RETURN(dims.scatter_indices_batching_dims,
                        ListAttribute(scatter, "scatter_indices_batching_dims", true));
  return dims;
}

Expected<Shape> InferGatherShape(const Shape& operand, const Shape& indices,
                                 const GatherDimensions& dims) {
  if (!operand.IsArray()) return Fail("the operand of gather must be an array");
  LOOM_ASSIGN_OR_RETURN(const auto batch_and_vector,
                        BatchAndVector(indices, dims.index_vector_dim));
  const auto& [batch, length] = batch_and_vector;
  const int64_t rank = operand.rank();
  if (static_cast<int64_t>(dims.slice_sizes.size()) != rank) {
    return Fail(fmt::format("slice_sizes has {} entries but the operand {} has rank {}",
                            dims.slice_sizes.size(), operand.ToString(false), rank));
  }
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = dims.slice_sizes[static_cast<size_t>(d)];
    if (size < 0 || size > operand.dim(d)) {
      return Fail(fmt::format("slice size {} in dimension {} is outside [0, {}] for {}", size, d,
                              operand.dim(d), operand.ToString(false)));
    }
  }
  LOOM_RETURN_IF_ERROR(
      CheckDimensionList(dims.collapsed_slice_dims, rank, "collapsed_slice_dims", true));
  for (int64_t d : dims.collapsed_slice_dims) {
    if (dims.slice_sizes[static_cast<size_t>(d)] > 1) {
      return Fail(fmt::format("collapsed dimension {} has slice size {}, not 1", d,
                              dims.slice_sizes[static_cast<size_t>(d)]));
    }
  }
  LOOM_RETURN_IF_ERROR(CheckDimensionList(dims.start_index_map, rank, "start_index_map", false));
  if (static_cast<int64_t>(dims.start_index_map.size()) != length) {
    return Fail(fmt::format("start_index_map has {} entries but an index vector of {} has {}",
                            dims.start_index_map.size(), indices.ToString(false), length));
  }
  LOOM_RETURN_IF_ERROR(CheckBatchingDims(
      operand, indices, dims.index_vector_dim,
      {dims.operand_batching_dims, "operand_batching_dims", dims.start_indices_batching_dims,
       "start_indices_batching_dims", dims.collapsed_slice_dims, "collapsed_slice_dims",
       dims.start_index_map, "start_index_map"}));
  for (int64_t d : dims.operand_batching_dims) {
    if (dims.slice_sizes[static_cast<size_t>(d)] > 1) {
      return Fail(fmt::format("batching dimension {} has slice size {}, not 1", d,
                              dims.slice_sizes[static_cast<size_t>(d)]));
    }
  }
  const std::vector<int64_t> walked = WindowOperandDims(rank, dims.UnwalkedOperandDims());
  const auto offsets = static_cast<int64_t>(walked.size());
  if (static_cast<int64_t>(dims.offset_dims.size()) != offsets) {
    return Fail(fmt::format(
        "offset_dims has {} entries but the operand has {} dimensions neither collapsed nor "
        "batching",
        dims.offset_dims.size(), offsets));
  }
  const int64_t out_rank = static_cast<int64_t>(batch.size()) + offsets;
  LOOM_RETURN_IF_ERROR(CheckDimensionList(dims.offset_dims, out_rank, "offset_dims", true));
  std::vector<int64_t> out;
  size_t next_batch = 0, next_window = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (Contains(dims.offset_dims, i)) {
      out.push_back(dims.slice_sizes[static_cast<size_t>(walked[next_window++])]);
    } else {
      out.push_back(batch[next_batch++]);
    }
  }
  return Shape(operand.type(), std::move(out));
}

Status CheckScatterShapes(const Shape& operand, const Shape& indices, const Shape& updates,
                          const ScatterDimensions& dims) {
  if (!operand.IsArray() || !updates.IsArray()) {
    return Fail("the operand and the updates of scatter must be arrays");
  }
  if (updates.type() != operand.type()) {
    return Fail(fmt::format("the updates {} and the operand {} have different element types",
                            updates.ToString(false), operand.ToString(false)));
  }
  LOOM_ASSIGN_OR_RETURN(const auto batch_and_vector,
                        BatchAndVector(indices, dims.index_vector_dim));
  const auto& [batch, length] = batch_and_vector;
  const int64_t rank = operand.rank();
  LOOM_RETURN_IF_ERROR(
      CheckDimensionList(dims.update_window_dims, updates.rank(), "update_window_dims", true));
  LOOM_RETURN_IF_ERROR(
      CheckDimensionList(dims.inserted_window_dims, rank, "inserted_window_dims", true));
  LOOM_RETURN_IF_ERROR(CheckDimensionList(dims.scatter_dims_to_operand_dims, rank,
                                          "scatter_dims_to_operand_dims", false));
  if (static_cast<int64_t>(dims.scatter_dims_to_operand_dims.size()) != length) {
    return Fail(
        fmt::format("scatter_dims_to_operand_dims has {} entries but an index vector of {} has {}",
                    dims.scatter_dims_to_operand_dims.size(), indices.ToString(false), length));
  }
  LOOM_RETURN_IF_ERROR(CheckBatchingDims(
      operand, indices, dims.index_vector_dim,
      {dims.input_batching_dims, "input_batching_dims", dims.scatter_indices_batching_dims,
       "scatter_indices_batching_dims", dims.inserted_window_dims, "inserted_window_dims",
       dims.scatter_dims_to_operand_dims, "scatter_dims_to_operand_dims"}));
  const size_t listed = dims.update_window_dims.size() + dims.inserted_window_dims.size() +
                        dims.input_batching_dims.size();
  if (static_cast<int64_t>(listed) != rank) {
    return Fail(fmt::format(
        "update_window_dims, inserted_window_dims and input_batching_dims have {} entries, the "
        "operand {} has rank {}",
        listed, operand.ToString(false), rank));
  }
  const std::vector<int64_t> walked = WindowOperandDims(rank, dims.UnwalkedOperandDims());
  size_t next_batch = 0, next_window = 0;
  for (int64_t i = 0; i < updates.rank(); ++i) {
    if (Contains(dims.update_window_dims, i)) {
      const int64_t d = walked[next_window++];
      if (updates.dim(i) > operand.dim(d)) {
        return Fail(
            fmt::format("update window dimension {} ({}) is larger than operand "
                        "dimension {} ({})",
                        i, updates.dim(i), d, operand.dim(d)));
      }
    } else {
      if (next_batch >= batch.size() || updates.dim(i) != batch[next_batch]) {
        return Fail(
            fmt::format("the updates {} do not match the indices {}: their scatter "
                        "dimensions must be the indices' batch dimensions",
                        updates.ToString(false), indices.ToString(false)));
      }
      ++next_batch;
    }
  }
  if (next_batch != batch.size()) {
    return Fail(fmt::format("the updates {} have {} scatter dimensions, the indices {} {}",
                            updates.ToString(false), next_batch, indices.ToString(false),
                            batch.size()));
  }
  return OkStatus();
}

IndexVectors IndexVectorsOf(const Shape& indices, int64_t index_vector_dim) {
  IndexVectors vectors;
  vectors.index_vector_dim = index_vector_dim;
  std::vector<int64_t> strides(static_cast<size_t>(indices.rank()), 1);
  for (int64_t d = indices.rank() - 2; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = strides[static_cast<size_t>(d + 1)] * indices.dim(d + 1);
  }
  std::vector<int64_t> batch_strides;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d == index_vector_dim) {
      vectors.length = indices.dim(d);
      vectors.vector_stride = strides[static_cast<size_t>(d)];
    } else {
      vectors.batch_dims.push_back(indices.dim(d));
      batch_strides.push_back(strides[static_cast<size_t>(d)]);
    }
  }
  int64_t count = 1;
  for (int64_t size : vectors.batch_dims) count *= size;
  vectors.first_element.resize(static_cast<size_t>(count));
  std::vector<int64_t> index(vectors.batch_dims.size(), 0);
  for (int64_t b = 0; b < count; ++b) {
    int64_t element = 0;
    for (size_t d = 0; d < index.size(); ++d) element += index[d] * batch_strides[d];
    vectors.first_element[static_cast<size_t>(b)] = element;
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < vectors.batch_dims[d]) break;
      index[d] = 0;
    }
  }
  return vectors;
}

int64_t IndexVectors::Coordinate(int64_t batch, int64_t indices_dim) const {
  const auto position = static_cast<size_t>(indices_dim - (indices_dim > index_vector_dim ? 1 : 0));
  for (size_t d = batch_dims.size(); d-- > position + 1;) batch /= batch_dims[d];
  return batch % batch_dims[position];
}

}  // namespace loom::ir
