#include "support/units.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace loom {

std::string FormatSeconds(double seconds) {
  const double magnitude = std::abs(seconds);
  if (magnitude >= 1) return fmt::format("{:.3f} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.3f} us", seconds * 1e6);
}

std::string FormatBytes(int64_t bytes) {
  // A total that saturated (support/saturating.h): a bound, not a size.
  if (bytes == std::numeric_limits<int64_t>::max()) return "at least 8.00 EiB";
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace loom
