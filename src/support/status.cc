#include "support/status.h"

#include <fmt/format.h>

namespace loom {

std::string Error::ToString() const {
  if (!loc.known()) return message;
  return fmt::format("{}:{}: {}", loc.line, loc.col, message);
}

std::string Error::ToString(const std::string& file) const {
  if (!loc.known()) return fmt::format("{}: error: {}", file, message);
  return fmt::format("{}:{}:{}: error: {}", file, loc.line, loc.col, message);
}

}  // namespace loom
