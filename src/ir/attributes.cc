#include "ir/attributes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <numeric>

namespace loom::ir {

std::optional<int64_t> ParseInteger(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> SplitText(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text = text.substr(at + 1);
  }
}

namespace {

constexpr std::array<std::string_view, 6> kDirectionNames = {"EQ", "NE", "LT", "LE", "GT", "GE"};

// The product of `values`, or -1 when it overflows int64_t.
int64_t Product(const std::vector<int64_t>& values) {
  int64_t product = 1;
  for (int64_t value : values) {
    if (__builtin_mul_overflow(product, value, &product)) return -1;
  }
  return product;
}

bool IsPermutation(const std::vector<int64_t>& perm) {
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)]) {
      return false;
    }
    seen[static_cast<size_t>(p)] = true;
  }
  return true;
}

// Device ids of the iota form in flattened order: iota over `dims`,
// transposed by `perm`.
std::vector<int64_t> TransposedIota(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& perm) {
  const int64_t total = Product(dims);
  const size_t rank = dims.size();
  // Strides of the source (row-major over dims).
  std::vector<int64_t> stride(rank, 1);
  for (size_t i = rank; i-- > 1;) stride[i - 1] = stride[i] * dims[i];
  // The transposed array has dims[perm[k]] along its axis k.
  std::vector<int64_t> out_dims(rank);
  for (size_t k = 0; k < rank; ++k) out_dims[k] = dims[static_cast<size_t>(perm[k])];
  std::vector<int64_t> index(rank, 0);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(total));
  for (int64_t n = 0; n < total; ++n) {
    int64_t source = 0;
    for (size_t k = 0; k < rank; ++k) source += index[k] * stride[static_cast<size_t>(perm[k])];
    ids.push_back(source);
    for (size_t k = rank; k-- > 0;) {
      if (++index[k] < out_dims[k]) break;
      index[k] = 0;
    }
  }
  return ids;
}

}  // namespace

std::vector<int64_t> FreeDimensions(int64_t rank, const std::vector<int64_t>& batch,
                                    const std::vector<int64_t>& contracting) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
      free.push_back(d);
    }
  }
  return free;
}

std::string_view ComparisonDirectionName(ComparisonDirection direction) {
  return kDirectionNames[static_cast<size_t>(direction)];
}

ComparisonDirection SwappedDirection(ComparisonDirection direction) {
  switch (direction) {
    case ComparisonDirection::kLt:
      return ComparisonDirection::kGt;
    case ComparisonDirection::kLe:
      return ComparisonDirection::kGe;
    case ComparisonDirection::kGt:
      return ComparisonDirection::kLt;
    case ComparisonDirection::kGe:
      return ComparisonDirection::kLe;
    default:
      return direction;  // EQ, NE
  }
}

std::optional<ComparisonDirection> ParseComparisonDirection(std::string_view name) {
  for (size_t i = 0; i < kDirectionNames.size(); ++i) {
    if (kDirectionNames[i] == name) return static_cast<ComparisonDirection>(i);
  }
  return std::nullopt;
}

ReplicaGroups ReplicaGroups::Explicit(std::vector<std::vector<int64_t>> groups) {
  ReplicaGroups result;
  result.groups_ = std::move(groups);
  return result;
}

ReplicaGroups ReplicaGroups::Iota(IotaReplicaGroups iota) {
  ReplicaGroups result;
  result.iota_ = std::move(iota);
  return result;
}

std::string ReplicaGroups::ValidateIota() const {
  if (!iota_) return "";
  const IotaReplicaGroups& iota = *iota_;
  if (iota.num_groups <= 0 || iota.group_size <= 0) {
    return "iota replica groups need a positive group count and size";
  }
  // Device ids are ints in every runtime; larger groups are not meaningful.
  constexpr int64_t kMaxDevices = int64_t{1} << 31;
  if (iota.num_groups > kMaxDevices / iota.group_size) {
    return "iota replica groups list more than 2^31 ids";
  }
  if (!iota.reshape_dims.empty()) {
    for (int64_t d : iota.reshape_dims) {
      if (d <= 0) return "iota replica groups have a non-positive reshape dimension";
    }
    const int64_t product = Product(iota.reshape_dims);
    if (product < 0 || product != iota.num_groups * iota.group_size) {
      return fmt::format("iota replica groups [{},{}] list {} ids but reshape dims [{}] hold {}",
                         iota.num_groups, iota.group_size, iota.num_groups * iota.group_size,
                         fmt::join(iota.reshape_dims, ","), product);
    }
  }
  if (!iota.transpose.empty()) {
    if (iota.transpose.size() != iota.reshape_dims.size() || !IsPermutation(iota.transpose)) {
      return fmt::format(
          "iota replica groups transpose T({}) is not a permutation of the {} "
          "reshape dimensions",
          fmt::join(iota.transpose, ","), iota.reshape_dims.size());
    }
  }
  return "";
}

std::vector<std::vector<int64_t>> ReplicaGroups::Groups(int64_t device_count) const {
  if (!iota_) {
    if (!groups_.empty()) return groups_;
    std::vector<int64_t> all(static_cast<size_t>(std::max<int64_t>(device_count, 0)));
    std::iota(all.begin(), all.end(), 0);
    return {all};
  }
  const IotaReplicaGroups& iota = *iota_;
  std::vector<int64_t> dims = iota.reshape_dims;
  if (dims.empty()) dims = {iota.num_groups * iota.group_size};
  std::vector<int64_t> perm = iota.transpose;
  if (perm.empty()) {
    perm.resize(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
  }
  const std::vector<int64_t> ids = TransposedIota(dims, perm);
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(iota.num_groups));
  for (size_t i = 0; i < ids.size(); ++i) {
    groups[i / static_cast<size_t>(iota.group_size)].push_back(ids[i]);
  }
  return groups;
}

std::string ReplicaGroups::ToString() const {
  if (iota_) {
    std::string out =
        fmt::format("[{},{}]<=[{}]", iota_->num_groups, iota_->group_size,
                    fmt::join(iota_->reshape_dims.empty()
                                  ? std::vector<int64_t>{iota_->num_groups * iota_->group_size}
                                  : iota_->reshape_dims,
                              ","));
    if (!iota_->transpose.empty()) out += fmt::format("T({})", fmt::join(iota_->transpose, ","));
    return out;
  }
  std::string out = "{";
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (i > 0) out += ",";
    out += fmt::format("{{{}}}", fmt::join(groups_[i], ","));
  }
  return out + "}";
}

const RawAttribute* Attributes::FindRaw(std::string_view key) const {
  for (const RawAttribute& attribute : raw) {
    if (attribute.key == key) return &attribute;
  }
  return nullptr;
}

}  // namespace loom::ir
