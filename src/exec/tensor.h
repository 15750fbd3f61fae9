// Tensors of the executor: an array value (shape + packed row-major bytes) or a
// tuple of tensors, with element access through double / int64 and the
// rounding rules of every element type Loom executes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/shape.h"
#include "support/status.h"

namespace loom::exec {

// f32, f64, bf16, f16, f8e4m3fn, f8e5m2, s8-s64, u8-u64 and pred.
bool IsExecutableType(ir::PrimitiveType type);

// Rounds `value` to the nearest value of the floating-point `type`
// (ties to even) and returns its bit pattern. Overflow follows the type:
//  - f16, bf16, f8e5m2 (IEEE-like, with infinities): to +-inf;
//  - f8e4m3fn (no infinities, max 448): to NaN. This is the non-saturating
//    conversion of ml_dtypes (float8.h ConvertImpl, kSaturate=false) that
//    XLA's convert uses: round first, and a result above 448 (so any input
//    at or above 464, the midpoint between 448 and the NaN encoding) is NaN;
//    +-inf is NaN too.
uint64_t EncodeFloat(double value, ir::PrimitiveType type);
// The value of a floating-point bit pattern of `type`.
double DecodeFloat(uint64_t bits, ir::PrimitiveType type);
// `value` rounded to `type` and back: what storing it in a `type` tensor keeps.
double RoundToType(double value, ir::PrimitiveType type);
// XLA's float-to-integer convert to the integer `type` of `width` bits:
// truncate, saturate to the type's range, NaN to 0 (a u64 above 2^63 as
// its bits).
int64_t SaturatingFloatToInteger(double value, ir::PrimitiveType type, int width);

// Element i of row-major bytes of `type`, with the rules of Tensor's
// accessors below: the one definition that Tensor and the kernels' generic
// paths share.
double LoadDouble(const std::byte* data, ir::PrimitiveType type, int64_t i);
int64_t LoadInt(const std::byte* data, ir::PrimitiveType type, int64_t i);
uint64_t LoadBits(const std::byte* data, ir::PrimitiveType type, int64_t i);
void StoreDouble(std::byte* data, ir::PrimitiveType type, int64_t i, double value);
void StoreInt(std::byte* data, ir::PrimitiveType type, int64_t i, int64_t value);
void StoreBits(std::byte* data, ir::PrimitiveType type, int64_t i, uint64_t bits);

class Tensor {
 public:
  // An empty tuple.
  Tensor() : shape_(ir::Shape::Tuple({})) {}

  // A zero-filled array of `shape`; an error for types Loom does not execute.
  static Expected<Tensor> Zeros(const ir::Shape& shape);
  // An array of `shape` holding `bytes` (which must be its packed size).
  static Expected<Tensor> FromBytes(const ir::Shape& shape, std::vector<std::byte> bytes);
  static Tensor Tuple(std::vector<Tensor> elements);

  const ir::Shape& shape() const { return shape_; }
  ir::PrimitiveType type() const { return shape_.type(); }
  bool IsTuple() const { return shape_.IsTuple(); }
  int64_t ElementCount() const { return shape_.IsTuple() ? 0 : shape_.ElementCount(); }

  const std::vector<Tensor>& tuple_elements() const { return elements_; }
  std::vector<Tensor>& mutable_tuple_elements() { return elements_; }

  // Element `i` of the row-major order. Floats: their value; integers: their
  // value (u64 above 2^63 as its two's complement int64); pred: 0 or 1.
  double GetDouble(int64_t i) const;
  int64_t GetInt(int64_t i) const;
  // Stores `value` converted to the element type: floats round to nearest
  // even; integers truncate toward zero and saturate, NaN becoming 0 (XLA's
  // float-to-int convert); pred is value != 0.
  void SetDouble(int64_t i, double value);
  // Integers wrap (two's complement); floats round to nearest even.
  void SetInt(int64_t i, int64_t value);
  // The raw element bits, zero-extended.
  uint64_t GetBits(int64_t i) const;
  void SetBits(int64_t i, uint64_t bits);

  int64_t ElementBytes() const;
  std::span<const std::byte> bytes() const { return data_; }
  std::span<std::byte> mutable_bytes() { return data_; }
  // Hands the bytes over, leaving the tensor empty.
  std::vector<std::byte> TakeBytes() { return std::move(data_); }

  // Same shape (layouts ignored) and the same bytes, recursively.
  bool BitwiseEqual(const Tensor& other) const;
  // `f32[2]{1, 2}` for small tensors, for test messages.
  std::string ToString() const;

 private:
  ir::Shape shape_;
  std::vector<std::byte> data_;
  std::vector<Tensor> elements_;
};

}  // namespace loom::exec
