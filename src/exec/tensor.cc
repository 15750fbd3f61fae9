#include "exec/tensor.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace loom::exec {

using ir::PrimitiveType;

namespace {

// A binary floating-point format narrower than f32: exponent and mantissa
// widths, and whether the all-ones exponent encodes inf/NaN (IEEE) or only the
// all-ones pattern is NaN (the "fn" formats).
struct SmallFloatFormat {
  int exponent_bits;
  int mantissa_bits;
  bool ieee;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int total_bits() const { return 1 + exponent_bits + mantissa_bits; }
};

bool SmallFormatOf(PrimitiveType type, SmallFloatFormat& format) {
  switch (type) {
    case PrimitiveType::kBF16:
      format = {8, 7, true};
      return true;
    case PrimitiveType::kF16:
      format = {5, 10, true};
      return true;
    case PrimitiveType::kF8E5M2:
      format = {5, 2, true};
      return true;
    case PrimitiveType::kF8E4M3FN:
      format = {4, 3, false};
      return true;
    default:
      return false;
  }
}

uint64_t NanBits(const SmallFloatFormat& f, bool negative) {
  const uint64_t sign = negative ? uint64_t{1} << (f.total_bits() - 1) : 0;
  const uint64_t all_exponent = ((uint64_t{1} << f.exponent_bits) - 1) << f.mantissa_bits;
  if (!f.ieee) return sign | all_exponent | ((uint64_t{1} << f.mantissa_bits) - 1);
  return sign | all_exponent | (uint64_t{1} << (f.mantissa_bits - 1));
}

uint64_t EncodeSmall(double value, const SmallFloatFormat& f) {
  const bool negative = std::signbit(value);
  const uint64_t sign = negative ? uint64_t{1} << (f.total_bits() - 1) : 0;
  const uint64_t exponent_mask = (uint64_t{1} << f.exponent_bits) - 1;
  const uint64_t mantissa_mask = (uint64_t{1} << f.mantissa_bits) - 1;
  if (std::isnan(value)) return NanBits(f, negative);
  if (std::isinf(value)) {
    return f.ieee ? sign | (exponent_mask << f.mantissa_bits) : NanBits(f, negative);
  }
  const double magnitude = std::fabs(value);
  if (magnitude == 0) return sign;
  const int min_exponent = 1 - f.bias();
  // The spacing of representable values around `magnitude` (subnormals share
  // the spacing of the smallest normal binade); scaling by it is exact.
  const int exponent = std::max(std::ilogb(magnitude), min_exponent);
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  const double rounded = std::nearbyint(magnitude / quantum) * quantum;  // ties to even
  if (rounded == 0) return sign;
  const int rounded_exponent = std::ilogb(rounded);
  if (rounded_exponent < min_exponent) {  // subnormal
    return sign | static_cast<uint64_t>(rounded / std::ldexp(1.0, min_exponent - f.mantissa_bits));
  }
  const uint64_t biased = static_cast<uint64_t>(rounded_exponent + f.bias());
  const uint64_t mantissa =
      static_cast<uint64_t>(rounded / std::ldexp(1.0, rounded_exponent - f.mantissa_bits)) &
      mantissa_mask;
  if (f.ieee) {
    if (biased >= exponent_mask) return sign | (exponent_mask << f.mantissa_bits);  // inf
  } else if (biased > exponent_mask || (biased == exponent_mask && mantissa == mantissa_mask)) {
    return NanBits(f, negative);  // above the largest finite value
  }
  return sign | (biased << f.mantissa_bits) | mantissa;
}

double DecodeSmall(uint64_t bits, const SmallFloatFormat& f) {
  const bool negative = (bits >> (f.total_bits() - 1)) & 1;
  const uint64_t exponent_mask = (uint64_t{1} << f.exponent_bits) - 1;
  const uint64_t mantissa_mask = (uint64_t{1} << f.mantissa_bits) - 1;
  const uint64_t biased = (bits >> f.mantissa_bits) & exponent_mask;
  const uint64_t mantissa = bits & mantissa_mask;
  double magnitude;
  if (f.ieee && biased == exponent_mask) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.ieee && biased == exponent_mask && mantissa == mantissa_mask) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (biased == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.bias() - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa | (mantissa_mask + 1)),
                           static_cast<int>(biased) - f.bias() - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Bits of an integer type, sign-extended for signed types.
int64_t ExtendInteger(uint64_t bits, PrimitiveType type, int width) {
  if (width == 64) return static_cast<int64_t>(bits);
  if (ir::IsSignedInteger(type)) {
    const uint64_t sign_bit = uint64_t{1} << (width - 1);
    return static_cast<int64_t>((bits ^ sign_bit) - sign_bit);
  }
  return static_cast<int64_t>(bits);
}

}  // namespace

int64_t SaturatingFloatToInteger(double value, PrimitiveType type, int width) {
  if (std::isnan(value)) return 0;
  const double truncated = std::trunc(value);
  if (ir::IsSignedInteger(type)) {
    const double low = -std::ldexp(1.0, width - 1);
    const double high = std::ldexp(1.0, width - 1);  // exclusive
    if (truncated <= low)
      return width == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (width - 1));
    if (truncated >= high)
      return width == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (width - 1)) - 1;
    return static_cast<int64_t>(truncated);
  }
  if (truncated <= 0) return 0;
  if (truncated >= std::ldexp(1.0, width)) {
    return static_cast<int64_t>(width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1);
  }
  return static_cast<int64_t>(static_cast<uint64_t>(truncated));
}

bool IsExecutableType(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kPred:
    case PrimitiveType::kS8:
    case PrimitiveType::kS16:
    case PrimitiveType::kS32:
    case PrimitiveType::kS64:
    case PrimitiveType::kU8:
    case PrimitiveType::kU16:
    case PrimitiveType::kU32:
    case PrimitiveType::kU64:
    case PrimitiveType::kF16:
    case PrimitiveType::kBF16:
    case PrimitiveType::kF32:
    case PrimitiveType::kF64:
    case PrimitiveType::kF8E4M3FN:
    case PrimitiveType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

uint64_t EncodeFloat(double value, PrimitiveType type) {
  if (type == PrimitiveType::kF64) return std::bit_cast<uint64_t>(value);
  if (type == PrimitiveType::kF32) {
    return std::bit_cast<uint32_t>(static_cast<float>(value));  // hardware RNE
  }
  SmallFloatFormat format;
  if (!SmallFormatOf(type, format)) return 0;
  return EncodeSmall(value, format);
}

double DecodeFloat(uint64_t bits, PrimitiveType type) {
  if (type == PrimitiveType::kF64) return std::bit_cast<double>(bits);
  if (type == PrimitiveType::kF32) return std::bit_cast<float>(static_cast<uint32_t>(bits));
  SmallFloatFormat format;
  if (!SmallFormatOf(type, format)) return 0;
  return DecodeSmall(bits, format);
}

double RoundToType(double value, PrimitiveType type) {
  return DecodeFloat(EncodeFloat(value, type), type);
}

Expected<Tensor> Tensor::Zeros(const ir::Shape& shape) {
  if (shape.IsTuple()) {
    std::vector<Tensor> elements;
    for (const ir::Shape& element : shape.tuple_elements()) {
      LOOM_ASSIGN_OR_RETURN(Tensor tensor, Zeros(element));
      elements.push_back(std::move(tensor));
    }
    return Tuple(std::move(elements));
  }
  if (!IsExecutableType(shape.type())) {
    return Error{
        fmt::format("element type {} is not executable", ir::PrimitiveTypeName(shape.type())),
        SourceLoc{}};
  }
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.data_.assign(static_cast<size_t>(shape.ElementCount() * tensor.ElementBytes()),
                      std::byte{0});
  return tensor;
}

Expected<Tensor> Tensor::FromBytes(const ir::Shape& shape, std::vector<std::byte> bytes) {
  if (shape.IsTuple() || !IsExecutableType(shape.type())) {
    return Error{fmt::format("{} is not an executable array shape", shape.ToString(false)),
                 SourceLoc{}};
  }
  if (static_cast<int64_t>(bytes.size()) != shape.ByteSize()) {
    return Error{fmt::format("{} bytes for {}, which holds {}", bytes.size(), shape.ToString(false),
                             shape.ByteSize()),
                 SourceLoc{}};
  }
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.data_ = std::move(bytes);
  return tensor;
}

Tensor Tensor::Tuple(std::vector<Tensor> elements) {
  std::vector<ir::Shape> shapes;
  shapes.reserve(elements.size());
  for (const Tensor& element : elements) shapes.push_back(element.shape());
  Tensor tensor;
  tensor.shape_ = ir::Shape::Tuple(std::move(shapes));
  tensor.elements_ = std::move(elements);
  return tensor;
}

int64_t Tensor::ElementBytes() const { return ir::PrimitiveTypeBits(type()) / 8; }

uint64_t LoadBits(const std::byte* data, PrimitiveType type, int64_t i) {
  uint64_t bits = 0;
  const int64_t width = ir::PrimitiveTypeBits(type) / 8;
  std::memcpy(&bits, data + i * width, static_cast<size_t>(width));  // little-endian host
  return bits;
}

void StoreBits(std::byte* data, PrimitiveType type, int64_t i, uint64_t bits) {
  const int64_t width = ir::PrimitiveTypeBits(type) / 8;
  std::memcpy(data + i * width, &bits, static_cast<size_t>(width));
}

double LoadDouble(const std::byte* data, PrimitiveType type, int64_t i) {
  if (ir::IsFloatingPoint(type)) return DecodeFloat(LoadBits(data, type, i), type);
  if (ir::IsUnsignedInteger(type)) return static_cast<double>(LoadBits(data, type, i));
  return static_cast<double>(LoadInt(data, type, i));
}

int64_t LoadInt(const std::byte* data, PrimitiveType type, int64_t i) {
  if (ir::IsFloatingPoint(type)) {
    return SaturatingFloatToInteger(LoadDouble(data, type, i), PrimitiveType::kS64, 64);
  }
  if (type == PrimitiveType::kPred) return LoadBits(data, type, i) != 0 ? 1 : 0;
  return ExtendInteger(LoadBits(data, type, i), type, ir::PrimitiveTypeBits(type));
}

void StoreDouble(std::byte* data, PrimitiveType type, int64_t i, double value) {
  if (ir::IsFloatingPoint(type)) return StoreBits(data, type, i, EncodeFloat(value, type));
  if (type == PrimitiveType::kPred) return StoreBits(data, type, i, value != 0 ? 1 : 0);
  StoreBits(
      data, type, i,
      static_cast<uint64_t>(SaturatingFloatToInteger(value, type, ir::PrimitiveTypeBits(type))));
}

void StoreInt(std::byte* data, PrimitiveType type, int64_t i, int64_t value) {
  if (ir::IsFloatingPoint(type)) {
    return StoreBits(data, type, i, EncodeFloat(static_cast<double>(value), type));
  }
  if (type == PrimitiveType::kPred) return StoreBits(data, type, i, value != 0 ? 1 : 0);
  StoreBits(data, type, i, static_cast<uint64_t>(value));  // keeps the low bytes: wraps
}

uint64_t Tensor::GetBits(int64_t i) const { return LoadBits(data_.data(), type(), i); }
void Tensor::SetBits(int64_t i, uint64_t bits) { StoreBits(data_.data(), type(), i, bits); }
double Tensor::GetDouble(int64_t i) const { return LoadDouble(data_.data(), type(), i); }
int64_t Tensor::GetInt(int64_t i) const { return LoadInt(data_.data(), type(), i); }
void Tensor::SetDouble(int64_t i, double value) { StoreDouble(data_.data(), type(), i, value); }
void Tensor::SetInt(int64_t i, int64_t value) { StoreInt(data_.data(), type(), i, value); }

bool Tensor::BitwiseEqual(const Tensor& other) const {
  if (!shape_.Compatible(other.shape_)) return false;
  if (IsTuple()) {
    for (size_t i = 0; i < elements_.size(); ++i) {
      if (!elements_[i].BitwiseEqual(other.elements_[i])) return false;
    }
    return true;
  }
  return data_ == other.data_;
}

std::string Tensor::ToString() const {
  if (IsTuple()) {
    std::string out = "(";
    for (size_t i = 0; i < elements_.size(); ++i) {
      out += (i ? ", " : "") + elements_[i].ToString();
    }
    return out + ")";
  }
  std::string out = shape_.ToString(/*print_layout=*/false) + "{";
  const int64_t count = ElementCount();
  const bool integer = !ir::IsFloatingPoint(type());
  for (int64_t i = 0; i < count && i < 64; ++i) {
    if (i) out += ", ";
    out += integer ? fmt::format("{}", GetInt(i)) : fmt::format("{}", GetDouble(i));
  }
  if (count > 64) out += ", ...";
  return out + "}";
}

}  // namespace loom::exec
