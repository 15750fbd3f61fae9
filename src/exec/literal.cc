#include "exec/literal.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace loom::exec {
namespace {

class LiteralReader {
 public:
  LiteralReader(std::string_view text, Tensor& tensor) : text_(text), tensor_(tensor) {}

  Status Read() {
    const auto& dims = tensor_.shape().dims();
    if (dims.empty()) {
      LOOM_RETURN_IF_ERROR(ReadScalar());
    } else if (text_.find('{') == std::string_view::npos) {
      // `bf16[512,128] constant(0.)`: XLA's parser accepts one scalar for a
      // whole array and broadcasts it.
      if (tensor_.ElementCount() == 0) return Failure("a scalar for an empty array");
      LOOM_RETURN_IF_ERROR(ReadScalar());
      for (int64_t i = 1; i < tensor_.ElementCount(); ++i) tensor_.SetBits(i, tensor_.GetBits(0));
      next_ = tensor_.ElementCount();
    } else {
      LOOM_RETURN_IF_ERROR(ReadDimension(0));
    }
    SkipSpace();
    if (pos_ != text_.size()) return Failure("unexpected text after the literal");
    if (next_ != tensor_.ElementCount()) return Failure("too few elements");
    return OkStatus();
  }

 private:
  // `{ e, e, ... }` with exactly dims[d] entries.
  Status ReadDimension(size_t d) {
    const auto& dims = tensor_.shape().dims();
    if (!Consume('{')) return Failure(fmt::format("expected '{{' for dimension {}", d));
    for (int64_t i = 0; i < dims[d]; ++i) {
      if (i > 0 && !Consume(',')) return Failure("expected ','");
      if (d + 1 == dims.size()) {
        LOOM_RETURN_IF_ERROR(ReadScalar());
      } else {
        LOOM_RETURN_IF_ERROR(ReadDimension(d + 1));
      }
    }
    if (!Consume('}')) {
      return Failure(fmt::format("dimension {} has more than {} elements", d, dims[d]));
    }
    return OkStatus();
  }

  Status ReadScalar() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_])) &&
           text_[pos_] != ',' && text_[pos_] != '}' && text_[pos_] != '{') {
      // `nan(0x7fffff)`: a payload in parentheses belongs to the token.
      if (text_[pos_] == '(') {
        const size_t close = text_.find(')', pos_);
        pos_ = close == std::string_view::npos ? text_.size() : close;
      }
      ++pos_;
    }
    const std::string_view token = text_.substr(start, pos_ - start);
    if (token.empty()) return Failure("expected a number");
    if (next_ >= tensor_.ElementCount()) return Failure("too many elements");
    return Store(token, next_++);
  }

  Status Store(std::string_view token, int64_t index) {
    if (token == "true") return tensor_.SetInt(index, 1), OkStatus();
    if (token == "false") return tensor_.SetInt(index, 0), OkStatus();
    const ir::PrimitiveType type = tensor_.type();
    if (ir::IsInteger(type) || type == ir::PrimitiveType::kPred) {
      return StoreInteger(token, index);
    }
    const bool negative = !token.empty() && token.front() == '-';
    std::string_view magnitude = token.substr(negative || token.front() == '+' ? 1 : 0);
    double value;
    if (magnitude == "inf") {
      value = std::numeric_limits<double>::infinity();
    } else if (magnitude.starts_with("nan")) {
      value = std::numeric_limits<double>::quiet_NaN();
    } else {
      std::string copy(magnitude);
      char* end = nullptr;
      value = std::strtod(copy.c_str(), &end);
      if (end != copy.c_str() + copy.size()) {
        return Failure(fmt::format("'{}' is not a number", token));
      }
    }
    tensor_.SetDouble(index, negative ? -value : value);
    return OkStatus();
  }

  Status StoreInteger(std::string_view token, int64_t index) {
    const char* begin = token.data();
    const char* end = token.data() + token.size();
    if (*begin == '+') ++begin;
    int64_t value = 0;
    auto result = std::from_chars(begin, end, value);
    if (result.ec == std::errc::result_out_of_range && *begin != '-') {
      uint64_t unsigned_value = 0;  // u64 above 2^63
      result = std::from_chars(begin, end, unsigned_value);
      value = static_cast<int64_t>(unsigned_value);
    }
    if (result.ec != std::errc() || result.ptr != end) {
      return Failure(fmt::format("'{}' is not an integer", token));
    }
    tensor_.SetInt(index, value);
    return OkStatus();
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  Error Failure(std::string message) const {
    return Error{fmt::format("literal of {}: {} at offset {}",
                             tensor_.shape().ToString(/*print_layout=*/false), message, pos_),
                 SourceLoc{}};
  }

  std::string_view text_;
  Tensor& tensor_;
  size_t pos_ = 0;
  int64_t next_ = 0;
};

}  // namespace

Expected<Tensor> ParseLiteral(std::string_view literal, const ir::Shape& shape) {
  if (literal.find("...") != std::string_view::npos) {
    return Error{"the literal was elided ({...}) when the module was printed", SourceLoc{}};
  }
  if (shape.IsTuple()) return Error{"tuple literals are not supported", SourceLoc{}};
  LOOM_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Zeros(shape));
  LiteralReader reader(literal, tensor);
  LOOM_RETURN_IF_ERROR(reader.Read());
  return tensor;
}

Expected<Tensor> EvaluateConstant(const ir::Instruction& constant) {
  Expected<Tensor> tensor = ParseLiteral(constant.literal(), constant.shape());
  if (tensor.ok()) return tensor;
  return Error{fmt::format("constant %{}: {}", constant.name(), tensor.error().message),
               constant.loc()};
}

}  // namespace loom::exec
