#include "ir/window.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <optional>
#include <string>

#include "ir/attributes.h"

namespace loom::ir {
namespace {

Error Fail(std::string message) { return Error{std::move(message), {}}; }

// One `key=AxBxC` entry of a window into its field of each dimension (the
// dimensions made by the first entry).
Status SetWindowField(std::string_view key, std::string_view value,
                      std::vector<WindowDimension>& window) {
  const std::vector<std::string_view> items = SplitText(value, 'x');
  if (window.empty()) window.resize(items.size());
  if (items.size() != window.size()) {
    return Fail(fmt::format("window {}={} has {} entries where the window has {} dimensions", key,
                            value, items.size(), window.size()));
  }
  for (size_t d = 0; d < items.size(); ++d) {
    WindowDimension& w = window[d];
    const auto bad = [&] {
      return Fail(fmt::format("window {}={}: '{}' is not {}", key, value, items[d],
                              key == "pad" ? "LOW_HIGH (two integers)" : "an integer"));
    };
    if (key == "pad") {
      const std::vector<std::string_view> ends = SplitText(items[d], '_');
      const std::optional<int64_t> low = ends.size() == 2 ? ParseInteger(ends[0]) : std::nullopt;
      const std::optional<int64_t> high = ends.size() == 2 ? ParseInteger(ends[1]) : std::nullopt;
      if (!low || !high) return bad();
      w.pad_low = *low;
      w.pad_high = *high;
      continue;
    }
    const std::optional<int64_t> number = ParseInteger(items[d]);
    if (!number) return bad();
    if (key == "rhs_reversal") {
      if (*number != 0 && *number != 1) return bad();
      w.reversal = *number == 1;
      continue;
    }
    if (*number < 1) {
      return Fail(fmt::format("window {}={}: {} must be at least 1", key, value, *number));
    }
    if (key == "size") w.size = *number;
    if (key == "stride") w.stride = *number;
    if (key == "lhs_dilate") w.lhs_dilate = *number;
    if (key == "rhs_dilate") w.rhs_dilate = *number;
  }
  return OkStatus();
}

// (extent - 1) * dilation + 1 (0 for no elements), or none where it
// overflows.
std::optional<int64_t> DilatedExtent(int64_t extent, int64_t dilation) {
  int64_t span = 0;
  if (extent == 0) return 0;
  if (__builtin_mul_overflow(extent - 1, dilation, &span) || span == INT64_MAX) {
    return std::nullopt;
  }
  return span + 1;
}

// x with a x = 1 (mod m), for a and m coprime, m >= 1.
int64_t ModularInverse(int64_t a, int64_t m) {
  __int128 r0 = m, r1 = ((a % m) + m) % m, t0 = 0, t1 = 1;
  while (r1 != 0) {
    const __int128 q = r0 / r1;
    r0 -= q * r1;
    std::swap(r0, r1);
    t0 -= q * t1;
    std::swap(t0, t1);
  }
  return static_cast<int64_t>(((t0 % m) + m) % m);
}

}  // namespace

Expected<std::vector<WindowDimension>> ParseWindow(std::string_view text) {
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') {
    return Fail(fmt::format("window must be {{size=... stride=... pad=...}}, got {}", text));
  }
  std::vector<WindowDimension> window;
  bool sized = false;
  for (std::string_view entry : SplitText(text.substr(1, text.size() - 2), ' ')) {
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    const std::string_view key = entry.substr(0, eq);
    if (eq == std::string_view::npos ||
        (key != "size" && key != "stride" && key != "pad" && key != "lhs_dilate" &&
         key != "rhs_dilate" && key != "rhs_reversal")) {
      return Fail(
          fmt::format("window entry '{}' is not one of size, stride, pad, lhs_dilate, rhs_dilate, "
                      "rhs_reversal =AxB...",
                      entry));
    }
    LOOM_RETURN_IF_ERROR(SetWindowField(key, entry.substr(eq + 1), window));
    sized = sized || key == "size";
  }
  if (!window.empty() && !sized) return Fail(fmt::format("window {} has no size=", text));
  return window;
}

Expected<int64_t> WindowOutputExtent(const WindowDimension& w, int64_t extent) {
  const std::optional<int64_t> dilated = DilatedExtent(extent, w.lhs_dilate);
  const std::optional<int64_t> window = DilatedExtent(w.size, w.rhs_dilate);
  int64_t padded = 0;
  if (!dilated || !window || __builtin_add_overflow(*dilated, w.pad_low, &padded) ||
      __builtin_add_overflow(padded, w.pad_high, &padded)) {
    return Fail("the dilated, padded extents overflow");
  }
  return padded < *window ? 0 : (padded - *window) / w.stride + 1;
}

int64_t InputPosition(const WindowDimension& w, int64_t extent, int64_t out, int64_t tap) {
  const int64_t dilated = out * w.stride - w.pad_low + tap * w.rhs_dilate;
  if (dilated < 0 || dilated % w.lhs_dilate != 0) return -1;
  const int64_t position = dilated / w.lhs_dilate;
  return position < extent ? position : -1;
}

// Per tap, the output positions y whose y * stride + c (c = tap *
// rhs_dilate - pad_low) lands on an input element: in the input's dilated
// span, and a multiple of lhs_dilate, which y is every period-th from a
// first solution on (a linear congruence). Arithmetic, so that a window
// over a huge declared shape costs no loop over it.
int64_t ValidTapPairs(const WindowDimension& w, int64_t input_extent, int64_t output_extent) {
  if (input_extent == 0 || output_extent == 0) return 0;
  const __int128 span = static_cast<__int128>(input_extent - 1) * w.lhs_dilate;
  const int64_t g = std::gcd(w.stride, w.lhs_dilate), period = w.lhs_dilate / g;
  int64_t pairs = 0;
  for (int64_t t = 0; t < w.size; ++t) {
    const __int128 c = static_cast<__int128>(t) * w.rhs_dilate - w.pad_low;
    // 0 <= y * stride + c <= span, within the output.
    const __int128 low = std::max<__int128>(0, -c <= 0 ? 0 : (-c + w.stride - 1) / w.stride);
    const __int128 reach = span - c;
    if (reach < 0) continue;
    const __int128 high = std::min<__int128>(output_extent - 1, reach / w.stride);
    if (high < low) continue;
    // y * stride = -c (mod lhs_dilate).
    const auto residue =
        static_cast<int64_t>((((-c) % w.lhs_dilate) + w.lhs_dilate) % w.lhs_dilate);
    if (residue % g != 0) continue;
    const int64_t y0 = static_cast<int64_t>(static_cast<__int128>(residue / g) *
                                            ModularInverse(w.stride / g, period) % period);
    // The solutions y0 + j * period in [low, high].
    const __int128 first = low + ((y0 - low) % period + period) % period;
    if (first <= high) pairs += static_cast<int64_t>((high - first) / period + 1);
  }
  return pairs;
}

}  // namespace loom::ir
