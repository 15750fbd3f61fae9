#include "ir/literal.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace loom::ir {
namespace {

class LiteralReader {
 public:
  LiteralReader(std::string_view text, const Shape& shape, const LiteralSink& sink)
      : text_(text), shape_(shape), sink_(sink), count_(shape.ElementCount()) {}

  Expected<LiteralForm> Read() {
    LiteralForm form = LiteralForm::kElements;
    if (shape_.dims().empty()) {
      LOOM_RETURN_IF_ERROR(ReadScalar());
    } else if (text_.find('{') == std::string_view::npos) {
      if (count_ == 0) return Failure("a scalar for an empty array");
      LOOM_RETURN_IF_ERROR(ReadScalar());
      form = LiteralForm::kScalarForAll;
      next_ = count_;
    } else {
      LOOM_RETURN_IF_ERROR(ReadDimension(0));
    }
    SkipSpace();
    if (pos_ != text_.size()) return Failure("unexpected text after the literal");
    if (next_ != count_) return Failure("too few elements");
    return form;
  }

 private:
  // `{ e, e, ... }` with exactly dims[d] entries.
  Status ReadDimension(size_t d) {
    const auto& dims = shape_.dims();
    if (!Consume('{')) return Failure(fmt::format("expected '{{' for dimension {}", d));
    for (int64_t i = 0; i < dims[d]; ++i) {
      if (i > 0 && !Consume(',')) {
        return Failure(fmt::format("dimension {} has fewer than {} elements", d, dims[d]));
      }
      LOOM_RETURN_IF_ERROR(d + 1 == dims.size() ? ReadScalar() : ReadDimension(d + 1));
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
    if (next_ >= count_) return Failure("too many elements");
    LOOM_ASSIGN_OR_RETURN(const LiteralElement element, Element(token, start));
    if (sink_) sink_(next_, element);
    ++next_;
    return OkStatus();
  }

  Expected<LiteralElement> Element(std::string_view token, size_t at) const {
    const PrimitiveType type = shape_.type();
    if (type == PrimitiveType::kPred) {
      if (token == "true" || token == "1") return LiteralElement{1, 1};
      if (token == "false" || token == "0") return LiteralElement{0, 0};
      return FailureAt(at, fmt::format("'{}' is not a pred (true, false, 0 or 1)", token));
    }
    if (IsInteger(type)) return Integer(token, at);
    return Floating(token, at);
  }

  Expected<LiteralElement> Integer(std::string_view token, size_t at) const {
    const PrimitiveType type = shape_.type();
    const int bits = PrimitiveTypeBits(type);
    const char* begin = token.data();
    const char* end = token.data() + token.size();
    if (*begin == '+') ++begin;
    const auto out_of_range = [&] {
      return FailureAt(at, fmt::format("{} does not fit {}", token, PrimitiveTypeName(type)));
    };
    if (begin == end) return NotAnInteger(token, at);
    if (IsUnsignedInteger(type)) {
      if (*begin == '-') return out_of_range();
      uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(begin, end, value);
      if (ec == std::errc::result_out_of_range) return out_of_range();
      if (ec != std::errc() || ptr != end) return NotAnInteger(token, at);
      if (bits < 64 && value >> bits != 0) return out_of_range();
      return LiteralElement{static_cast<int64_t>(value), static_cast<double>(value)};
    }
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec == std::errc::result_out_of_range) return out_of_range();
    if (ec != std::errc() || ptr != end) return NotAnInteger(token, at);
    if (bits < 64) {
      const int64_t limit = int64_t{1} << (bits - 1);
      if (value < -limit || value >= limit) return out_of_range();
    }
    return LiteralElement{value, static_cast<double>(value)};
  }

  Error NotAnInteger(std::string_view token, size_t at) const {
    return FailureAt(at, fmt::format("'{}' is not an integer", token));
  }

  Expected<LiteralElement> Floating(std::string_view token, size_t at) const {
    const bool negative = token.front() == '-';
    const std::string_view magnitude = token.substr(negative || token.front() == '+' ? 1 : 0);
    double value;
    if (magnitude == "inf") {
      value = std::numeric_limits<double>::infinity();
    } else if (magnitude == "nan" || (magnitude.starts_with("nan(") && magnitude.ends_with(")"))) {
      value = std::numeric_limits<double>::quiet_NaN();
    } else {
      const std::string copy(magnitude);
      char* end = nullptr;
      value = std::strtod(copy.c_str(), &end);
      // strtod also reads hex floats, "infinity" and "nan"; only decimals
      // and the spellings above are literals.
      const bool decimal =
          !copy.empty() && (std::isdigit(static_cast<unsigned char>(copy[0])) || copy[0] == '.');
      if (!decimal || end != copy.c_str() + copy.size() ||
          copy.find_first_of("xX") != std::string::npos) {
        return FailureAt(at, fmt::format("'{}' is not a number", token));
      }
    }
    value = negative ? -value : value;
    return LiteralElement{0, value};
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
  Error Failure(std::string message) const { return FailureAt(pos_, std::move(message)); }
  Error FailureAt(size_t at, std::string message) const {
    return Error{fmt::format("literal of {}: {} at offset {}",
                             shape_.ToString(/*print_layout=*/false), message, at)};
  }

  std::string_view text_;
  const Shape& shape_;
  const LiteralSink& sink_;
  const int64_t count_;
  size_t pos_ = 0;
  int64_t next_ = 0;
};

}  // namespace

Expected<LiteralForm> ReadLiteral(std::string_view text, const Shape& shape,
                                  const LiteralSink& sink) {
  if (!shape.IsArray() || IsComplex(shape.type())) return LiteralForm::kNotRead;
  if (text.find("...") != std::string_view::npos) return LiteralForm::kElided;
  LiteralReader reader(text, shape, sink);
  return reader.Read();
}

}  // namespace loom::ir
