#include "support/status.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace loom {

std::string Error::ToString() const {
  if (!loc.known()) return message;
  return fmt::format("{}:{}: {}", loc.line, loc.col, message);
}

std::string Error::ToString(const std::string& file) const {
  if (!loc.known()) return fmt::format("{}: error: {}", file, message);
  return fmt::format("{}:{}:{}: error: {}", file, loc.line, loc.col, message);
}

void InvariantBroken(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "loom: internal error at %s:%d: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace loom
