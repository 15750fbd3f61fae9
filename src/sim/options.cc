#include "sim/options.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace loom::sim {
namespace {

Expected<double> ParseNumber(std::string_view text, std::string_view what) {
  double value = 0;
  const std::string copy(text);
  char* end = nullptr;
  value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value)) {
    return Error{fmt::format("{}: '{}' is not a number", what, text)};
  }
  return value;
}

Expected<int64_t> ParseDevice(std::string_view text, std::string_view what) {
  int64_t value = 0;
  const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || ptr != text.data() + text.size() || value < 0) {
    return Error{fmt::format("{}: '{}' is not a device id", what, text)};
  }
  return value;
}

}  // namespace

// --- options --------------------------------------------------------------------------

Status ParseComputeScale(std::string_view spec, SimOptions* options) {
  const std::string what = fmt::format("compute scale '{}' (want DEVICE=SCALE)", spec);
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) return Error{what};
  LOOM_ASSIGN_OR_RETURN(const int64_t device, ParseDevice(spec.substr(0, eq), what));
  LOOM_ASSIGN_OR_RETURN(const double scale, ParseNumber(spec.substr(eq + 1), what));
  if (!(scale > 0)) return Error{fmt::format("{}: the scale must be positive", what)};
  if (device > (1 << 24)) return Error{fmt::format("{}: device id too large", what)};
  auto& scales = options->compute_scale;
  if (scales.size() <= static_cast<size_t>(device))
    scales.resize(static_cast<size_t>(device) + 1, 1);
  scales[static_cast<size_t>(device)] = scale;
  return OkStatus();
}

Status ParseLinkScale(std::string_view spec, SimOptions* options) {
  const std::string what = fmt::format("link scale '{}' (want A-B=SCALE or A>B=SCALE)", spec);
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) return Error{what};
  const std::string_view link = spec.substr(0, eq);
  const size_t dash = link.find_first_of("->");
  if (dash == std::string_view::npos) return Error{what};
  const bool both = link[dash] == '-';
  LOOM_ASSIGN_OR_RETURN(const int64_t a, ParseDevice(link.substr(0, dash), what));
  LOOM_ASSIGN_OR_RETURN(const int64_t b, ParseDevice(link.substr(dash + 1), what));
  LOOM_ASSIGN_OR_RETURN(const double scale, ParseNumber(spec.substr(eq + 1), what));
  if (!(scale > 0)) return Error{fmt::format("{}: the scale must be positive", what)};
  if (a == b) return Error{fmt::format("{}: a link joins two different devices", what)};
  options->link_scale[{a, b}] = scale;
  if (both) options->link_scale[{b, a}] = scale;
  return OkStatus();
}

}  // namespace loom::sim
