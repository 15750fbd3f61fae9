#include "ir/shape.h"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "support/saturating.h"

namespace loom::ir {
namespace {

struct TypeInfo {
  PrimitiveType type;
  std::string_view name;
  int bits;
};

constexpr std::array kTypes = {
#define LOOM_INFO(e, name, bits) TypeInfo{PrimitiveType::e, name, bits},
    LOOM_PRIMITIVE_TYPES(LOOM_INFO)
#undef LOOM_INFO
};

const TypeInfo& Info(PrimitiveType type) { return kTypes[static_cast<size_t>(type)]; }

std::string JoinInts(const std::vector<int64_t>& values) {
  return fmt::format("{}", fmt::join(values, ","));
}

}  // namespace

std::string_view PrimitiveTypeName(PrimitiveType type) { return Info(type).name; }

std::optional<PrimitiveType> ParsePrimitiveType(std::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (info.name == name && info.type != PrimitiveType::kTuple) return info.type;
  }
  return std::nullopt;
}

int PrimitiveTypeBits(PrimitiveType type) { return Info(type).bits; }

bool IsFloatingPoint(PrimitiveType type) {
  const std::string_view name = Info(type).name;
  return name.front() == 'f' || type == PrimitiveType::kBF16;
}
bool IsComplex(PrimitiveType type) {
  return type == PrimitiveType::kC64 || type == PrimitiveType::kC128;
}
bool IsSignedInteger(PrimitiveType type) { return Info(type).name.front() == 's'; }
bool IsUnsignedInteger(PrimitiveType type) { return Info(type).name.front() == 'u'; }
bool IsArrayType(PrimitiveType type) {
  return type != PrimitiveType::kTuple && type != PrimitiveType::kToken &&
         type != PrimitiveType::kOpaque;
}

std::vector<std::vector<int64_t>> Layout::Tiles() const {
  std::vector<std::vector<int64_t>> tiles;
  for (const LayoutItem& item : items) {
    if (item.tag != "T") continue;
    std::vector<int64_t>* tile = nullptr;
    const char* p = item.args.data();
    const char* end = p + item.args.size();
    while (p < end) {
      if (*p == '(') {
        tile = &tiles.emplace_back();
        ++p;
      } else if (*p == '*') {
        if (tile) tile->push_back(-1);
        ++p;
      } else if ((*p >= '0' && *p <= '9') || *p == '-') {
        int64_t value = 0;
        auto [next, ec] = std::from_chars(p, end, value);
        if (ec != std::errc() || !tile) break;
        tile->push_back(value);
        p = next;
      } else {
        ++p;
      }
    }
  }
  return tiles;
}

int64_t Layout::MemorySpace() const {
  for (const LayoutItem& item : items) {
    if (item.tag != "S" || item.args.size() < 3) continue;
    int64_t value = 0;
    std::from_chars(item.args.data() + 1, item.args.data() + item.args.size() - 1, value);
    return value;
  }
  return 0;
}

std::string Layout::ToString() const {
  std::string out = "{" + JoinInts(minor_to_major);
  if (!items.empty()) {
    out += ":";
    for (const LayoutItem& item : items) out += item.tag + item.args;
  }
  return out + "}";
}

Shape::Shape(PrimitiveType type, std::vector<int64_t> dims)
    : type_(type), dims_(std::move(dims)), dynamic_(dims_.size(), false) {}

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape shape;
  shape.type_ = PrimitiveType::kTuple;
  shape.elements_ = std::move(elements);
  return shape;
}

Shape Shape::Token() {
  Shape shape;
  shape.type_ = PrimitiveType::kToken;
  return shape;
}

int64_t Shape::ElementCount() const {
  if (!IsArray()) return 0;
  int64_t count = 1;
  for (int64_t d : dims_) count *= d;
  return count;
}

int64_t Shape::ByteSize() const {
  if (IsTuple()) {
    int64_t total = 0;
    for (const Shape& element : elements_) total = SaturatingAdd(total, element.ByteSize());
    return total;
  }
  if (!IsArray()) return 0;
  return (ElementCount() * PrimitiveTypeBits(type_) + 7) / 8;
}

bool Shape::Compatible(const Shape& other) const {
  if (type_ != other.type_) return false;
  if (IsTuple()) {
    if (elements_.size() != other.elements_.size()) return false;
    for (size_t i = 0; i < elements_.size(); ++i) {
      if (!elements_[i].Compatible(other.elements_[i])) return false;
    }
    return true;
  }
  return dims_ == other.dims_;
}

std::string Shape::ToString(bool print_layout) const {
  if (IsTuple()) {
    std::string out = "(";
    for (size_t i = 0; i < elements_.size(); ++i) {
      if (i > 0) out += ", ";
      out += elements_[i].ToString(print_layout);
    }
    return out + ")";
  }
  std::string out = std::string(PrimitiveTypeName(type_)) + "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i > 0) out += ",";
    if (dynamic_[i]) out += "<=";
    out += std::to_string(dims_[i]);
  }
  out += "]";
  if (print_layout && layout_) out += layout_->ToString();
  return out;
}

}  // namespace loom::ir
