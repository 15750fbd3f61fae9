// Shapes of HLO values: element type, dimensions, optional layout, tuples.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/check.h"

namespace loom::ir {

// Every element type XLA's text format names. Columns: enumerator, HLO
// spelling, storage bits per element.
#define LOOM_PRIMITIVE_TYPES(X)         \
  X(kPred, "pred", 8)                   \
  X(kS2, "s2", 2)                       \
  X(kS4, "s4", 4)                       \
  X(kS8, "s8", 8)                       \
  X(kS16, "s16", 16)                    \
  X(kS32, "s32", 32)                    \
  X(kS64, "s64", 64)                    \
  X(kU2, "u2", 2)                       \
  X(kU4, "u4", 4)                       \
  X(kU8, "u8", 8)                       \
  X(kU16, "u16", 16)                    \
  X(kU32, "u32", 32)                    \
  X(kU64, "u64", 64)                    \
  X(kF16, "f16", 16)                    \
  X(kBF16, "bf16", 16)                  \
  X(kF32, "f32", 32)                    \
  X(kF64, "f64", 64)                    \
  X(kF4E2M1FN, "f4e2m1fn", 4)           \
  X(kF8E3M4, "f8e3m4", 8)               \
  X(kF8E4M3, "f8e4m3", 8)               \
  X(kF8E4M3FN, "f8e4m3fn", 8)           \
  X(kF8E4M3FNUZ, "f8e4m3fnuz", 8)       \
  X(kF8E4M3B11FNUZ, "f8e4m3b11fnuz", 8) \
  X(kF8E5M2, "f8e5m2", 8)               \
  X(kF8E5M2FNUZ, "f8e5m2fnuz", 8)       \
  X(kF8E8M0FNU, "f8e8m0fnu", 8)         \
  X(kC64, "c64", 64)                    \
  X(kC128, "c128", 128)                 \
  X(kToken, "token", 0)                 \
  X(kTuple, "tuple", 0)                 \
  X(kOpaque, "opaque", 0)

enum class PrimitiveType {
#define LOOM_ENUM(e, name, bits) e,
  LOOM_PRIMITIVE_TYPES(LOOM_ENUM)
#undef LOOM_ENUM
};

std::string_view PrimitiveTypeName(PrimitiveType type);
std::optional<PrimitiveType> ParsePrimitiveType(std::string_view name);
int PrimitiveTypeBits(PrimitiveType type);
bool IsFloatingPoint(PrimitiveType type);  // f*, bf16 (not complex)
bool IsComplex(PrimitiveType type);
bool IsSignedInteger(PrimitiveType type);
bool IsUnsignedInteger(PrimitiveType type);
inline bool IsInteger(PrimitiveType t) { return IsSignedInteger(t) || IsUnsignedInteger(t); }
bool IsArrayType(PrimitiveType type);  // not tuple, token or opaque

// One attribute of a layout after the ':' — `T(8,128)(2,1)`, `S(1)`, `L(4)`,
// `D(D,C)` ... — kept as its tag and the text of its parenthesised groups so
// that layouts Loom does not interpret still print back unchanged.
struct LayoutItem {
  std::string tag;   // "T", "S", "L", "E", "D", "#", "*", "SC", ...
  std::string args;  // "(8,128)(2,1)": every parenthesised group, verbatim
  friend bool operator==(const LayoutItem&, const LayoutItem&) = default;
};

// `{2,1,0:T(8,128)S(1)}`.
struct Layout {
  std::vector<int64_t> minor_to_major;
  std::vector<LayoutItem> items;

  // The tiles of `T(...)(...)`, outermost first; -1 stands for `*`.
  std::vector<std::vector<int64_t>> Tiles() const;
  // The memory space of `S(n)`, 0 (the default space) when absent.
  int64_t MemorySpace() const;
  std::string ToString() const;
  friend bool operator==(const Layout&, const Layout&) = default;
};

// An array shape (element type + dimensions), a tuple of shapes, or a token.
// A dimension may be dynamic with an upper bound (`f32[<=8]`); its bound is
// stored as the dimension size.
class Shape {
 public:
  Shape() = default;
  Shape(PrimitiveType type, std::vector<int64_t> dims);
  static Shape Tuple(std::vector<Shape> elements);
  static Shape Token();

  PrimitiveType type() const { return type_; }
  bool IsTuple() const { return type_ == PrimitiveType::kTuple; }
  bool IsToken() const { return type_ == PrimitiveType::kToken; }
  bool IsArray() const { return IsArrayType(type_); }

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int64_t i) const {
    LOOM_CHECK(i >= 0 && i < rank(), "dimension " + std::to_string(i) + " of " + ToString());
    return dims_[static_cast<size_t>(i)];
  }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  const std::vector<bool>& dynamic() const { return dynamic_; }
  void set_dynamic(std::vector<bool> dynamic) { dynamic_ = std::move(dynamic); }

  const std::optional<Layout>& layout() const { return layout_; }
  void set_layout(std::optional<Layout> layout) { layout_ = std::move(layout); }

  const std::vector<Shape>& tuple_elements() const { return elements_; }
  const Shape& tuple_element(int64_t i) const {
    LOOM_CHECK(i >= 0 && i < tuple_size(), "element " + std::to_string(i) + " of " + ToString());
    return elements_[static_cast<size_t>(i)];
  }
  int64_t tuple_size() const { return static_cast<int64_t>(elements_.size()); }

  int64_t ElementCount() const;  // 1 for scalars; 0 for tuples and tokens
  int64_t ByteSize() const;      // arrays: packed size; tuples: sum of elements (saturating)

  // Same type and dimensions (and same elements for tuples), layouts ignored.
  bool Compatible(const Shape& other) const;
  // `f32[8,16]{1,0}`, `(f32[2], s32[])`, `token[]`.
  std::string ToString(bool print_layout = true) const;
  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  PrimitiveType type_ = PrimitiveType::kF32;
  std::vector<int64_t> dims_;
  std::vector<bool> dynamic_;
  std::optional<Layout> layout_;
  std::vector<Shape> elements_;
};

}  // namespace loom::ir
