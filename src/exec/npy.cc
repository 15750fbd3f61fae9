#include "exec/npy.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "support/output_file.h"
#include "support/units.h"

namespace loom::exec {
namespace {

using ir::PrimitiveType;

constexpr char kMagic[] = "\x93NUMPY";

// The NumPy dtype descriptor a tensor of `type` is stored as.
std::string Descr(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kPred:
      return "|b1";
    case PrimitiveType::kS8:
      return "|i1";
    case PrimitiveType::kS16:
      return "<i2";
    case PrimitiveType::kS32:
      return "<i4";
    case PrimitiveType::kS64:
      return "<i8";
    case PrimitiveType::kU8:
      return "|u1";
    case PrimitiveType::kU16:
      return "<u2";
    case PrimitiveType::kU32:
      return "<u4";
    case PrimitiveType::kU64:
      return "<u8";
    case PrimitiveType::kF16:
      return "<f2";
    case PrimitiveType::kF64:
      return "<f8";
    default:
      return "<f4";  // f32, and bf16 / f8 widened exactly
  }
}

// The element type a descriptor denotes, for reading.
std::optional<PrimitiveType> TypeOfDescr(const std::string& descr) {
  for (PrimitiveType type :
       {PrimitiveType::kPred, PrimitiveType::kS8, PrimitiveType::kS16, PrimitiveType::kS32,
        PrimitiveType::kS64, PrimitiveType::kU8, PrimitiveType::kU16, PrimitiveType::kU32,
        PrimitiveType::kU64, PrimitiveType::kF16, PrimitiveType::kF32, PrimitiveType::kF64}) {
    if (Descr(type) == descr) return type;
  }
  return std::nullopt;
}

ir::Shape WithType(const ir::Shape& shape, PrimitiveType type) {
  return ir::Shape(type, shape.dims());
}

std::string ShapeTuple(const ir::Shape& shape) {
  if (shape.rank() == 1) return fmt::format("({},)", shape.dim(0));
  return fmt::format("({})", fmt::join(shape.dims(), ", "));
}

// Converts element by element between tensors of the same dimensions.
Expected<Tensor> ConvertElements(const Tensor& from, PrimitiveType to) {
  LOOM_ASSIGN_OR_RETURN(Tensor result, Tensor::Zeros(WithType(from.shape(), to)));
  const bool integral = !ir::IsFloatingPoint(from.type()) && !ir::IsFloatingPoint(to);
  for (int64_t i = 0; i < from.ElementCount(); ++i) {
    if (integral) {
      result.SetInt(i, from.GetInt(i));
    } else {
      result.SetDouble(i, from.GetDouble(i));
    }
  }
  return result;
}

// The value of `key` in a header dict such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
std::string HeaderValue(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  size_t start = header.find(':', at);
  if (start == std::string::npos) return "";
  ++start;
  while (start < header.size() && header[start] == ' ') ++start;
  size_t end = start;
  if (header[start] == '(') {
    end = header.find(')', start) + 1;
  } else if (header[start] == '\'') {
    end = header.find('\'', start + 1) + 1;
  } else {
    end = header.find_first_of(",}", start);
  }
  return header.substr(start, end - start);
}

}  // namespace

Status WriteNpy(const std::string& path, const Tensor& tensor) {
  if (tensor.IsTuple()) return Error{fmt::format("{}: cannot write a tuple as one .npy", path)};
  const PrimitiveType stored = TypeOfDescr(Descr(tensor.type())).value_or(PrimitiveType::kF32);
  LOOM_ASSIGN_OR_RETURN(Tensor data, stored == tensor.type() ? Expected<Tensor>(tensor)
                                                             : ConvertElements(tensor, stored));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   Descr(stored), ShapeTuple(tensor.shape()));
  // Magic (6) + version (2) + length (2) + header, padded to 64 with '\n' last.
  const size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  if (header.size() > 0xffff) return Error{fmt::format("{}: the .npy header is too long", path)};
  const auto length = static_cast<uint16_t>(header.size());
  std::string file(kMagic, 6);
  file += '\x01';
  file += '\x00';
  file += static_cast<char>(length & 0xff);
  file += static_cast<char>(length >> 8);
  file += header;
  file.append(reinterpret_cast<const char*>(data.bytes().data()), data.bytes().size());
  return WriteOutputFile(path, file);
}

Expected<Tensor> ReadNpy(const std::string& path, const ir::Shape& shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("cannot read {}", path)};
  char prefix[10];
  if (!in.read(prefix, 10) || std::memcmp(prefix, kMagic, 6) != 0) {
    return Error{fmt::format("{}: not a .npy file", path)};
  }
  if (prefix[6] != 1) return Error{fmt::format("{}: only .npy format version 1.0 is read", path)};
  const uint16_t length = static_cast<uint8_t>(prefix[8]) | (static_cast<uint8_t>(prefix[9]) << 8);
  std::string header(length, '\0');
  if (!in.read(header.data(), length)) return Error{fmt::format("{}: truncated header", path)};
  const std::string descr = HeaderValue(header, "descr");
  const std::optional<PrimitiveType> stored =
      descr.size() > 2 ? TypeOfDescr(descr.substr(1, descr.size() - 2)) : std::nullopt;
  if (!stored) return Error{fmt::format("{}: unsupported dtype {}", path, descr)};
  // Only the dtype the parameter is written as (its own, or float32 for the
  // types NumPy lacks): converting anything else would change values
  // silently (a float NaN read as an integer).
  if (Descr(*stored) != Descr(shape.type())) {
    return Error{fmt::format("{}: dtype {} does not match the parameter's {} (want '{}')", path,
                             descr, ir::PrimitiveTypeName(shape.type()), Descr(shape.type()))};
  }
  if (HeaderValue(header, "fortran_order") != "False") {
    return Error{fmt::format("{}: Fortran-order arrays are not supported", path)};
  }
  const ir::Shape expected = WithType(shape, *stored);
  if (HeaderValue(header, "shape") != ShapeTuple(expected)) {
    return Error{fmt::format("{}: shape {} does not match the parameter's {}", path,
                             HeaderValue(header, "shape"), shape.ToString(false))};
  }
  LOOM_ASSIGN_OR_RETURN(Tensor data, Tensor::Zeros(expected));
  auto bytes = data.mutable_bytes();
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
    return Error{
        fmt::format("{}: truncated data: {} bytes, wanted {}", path, in.gcount(), bytes.size())};
  }
  if (in.peek() != std::ifstream::traits_type::eof()) {
    return Error{fmt::format("{}: bytes after the {} of data its header describes", path,
                             FormatBytes(static_cast<int64_t>(bytes.size())))};
  }
  if (*stored == shape.type()) return data;
  return ConvertElements(data, shape.type());
}

}  // namespace loom::exec
