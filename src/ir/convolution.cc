#include "ir/convolution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>

namespace loom::ir {
namespace {

Error Fail(std::string message) { return Error{std::move(message), {}}; }

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text = text.substr(at + 1);
  }
}

// One `key=AxBxC` entry of a window into its field of each dimension (the
// dimensions made by the first entry).
Status SetWindowField(std::string_view key, std::string_view value,
                      std::vector<WindowDimension>& window) {
  const std::vector<std::string_view> items = Split(value, 'x');
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
      const std::vector<std::string_view> ends = Split(items[d], '_');
      const std::optional<int64_t> low = ends.size() == 2 ? ParseInt(ends[0]) : std::nullopt;
      const std::optional<int64_t> high = ends.size() == 2 ? ParseInt(ends[1]) : std::nullopt;
      if (!low || !high) return bad();
      w.pad_low = *low;
      w.pad_high = *high;
      continue;
    }
    const std::optional<int64_t> number = ParseInt(items[d]);
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

// One operand's part of dim_labels: `batch` and `feature` are the letters
// of its two non-spatial dimensions (b and f, or i and o).
Status ParseLabels(std::string_view labels, char batch, char feature, int64_t& batch_dim,
                   int64_t& feature_dim, std::vector<int64_t>& spatial, std::string_view text) {
  batch_dim = feature_dim = -1;
  spatial.assign(labels.size() >= 2 ? labels.size() - 2 : 0, -1);
  for (size_t d = 0; d < labels.size(); ++d) {
    const char c = labels[d];
    const auto dim = static_cast<int64_t>(d);
    int64_t* slot = nullptr;
    if (c == batch) slot = &batch_dim;
    if (c == feature) slot = &feature_dim;
    const int64_t k = c - '0';
    if (c >= '0' && c <= '9' && k < static_cast<int64_t>(spatial.size())) {
      slot = &spatial[static_cast<size_t>(k)];
    }
    if (slot == nullptr || *slot != -1) {
      return Fail(
          fmt::format("dim_labels={}: '{}' takes {}, {} and the spatial digits 0..{} once each",
                      text, labels, batch, feature, static_cast<int64_t>(spatial.size()) - 1));
    }
    *slot = dim;
  }
  if (batch_dim < 0 || feature_dim < 0) {
    return Fail(
        fmt::format("dim_labels={}: '{}' needs both {} and {}", text, labels, batch, feature));
  }
  return OkStatus();
}

Expected<int64_t> GroupCount(const Instruction& convolution, std::string_view key) {
  const RawAttribute* raw = convolution.attrs().FindRaw(key);
  if (raw == nullptr) return int64_t{1};
  const std::optional<int64_t> value = ParseInt(raw->value);
  if (!value || *value < 1) {
    return Error{fmt::format("%{}: {} must be a positive integer, got {}", convolution.name(), key,
                             raw->value),
                 raw->loc};
  }
  return *value;
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
  for (std::string_view entry : Split(text.substr(1, text.size() - 2), ' ')) {
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

Expected<ConvolutionDimensions> ParseDimLabels(std::string_view text) {
  const size_t arrow = text.find("->");
  const std::vector<std::string_view> operands = Split(text.substr(0, arrow), '_');
  if (arrow == std::string_view::npos || operands.size() != 2) {
    return Fail(fmt::format(
        "dim_labels must be INPUT_KERNEL->OUTPUT (e.g. b01f_01io->b01f), got {}", text));
  }
  const std::string_view output = text.substr(arrow + 2);
  if (operands[0].size() != operands[1].size() || output.size() != operands[0].size()) {
    return Fail(
        fmt::format("dim_labels={}: the input, kernel and output labels differ in rank", text));
  }
  ConvolutionDimensions dims;
  LOOM_RETURN_IF_ERROR(ParseLabels(operands[0], 'b', 'f', dims.input_batch, dims.input_feature,
                                   dims.input_spatial, text));
  LOOM_RETURN_IF_ERROR(ParseLabels(operands[1], 'o', 'i', dims.kernel_output_feature,
                                   dims.kernel_input_feature, dims.kernel_spatial, text));
  LOOM_RETURN_IF_ERROR(ParseLabels(output, 'b', 'f', dims.output_batch, dims.output_feature,
                                   dims.output_spatial, text));
  return dims;
}

Expected<Convolution> ConvolutionOf(const Instruction& convolution) {
  const auto located = [&](const RawAttribute& raw, const Error& error) {
    return Error{fmt::format("%{}: {}", convolution.name(), error.message), raw.loc};
  };
  Convolution c;
  const RawAttribute* labels = convolution.attrs().FindRaw("dim_labels");
  if (labels == nullptr) {
    return Error{fmt::format("%{}: convolution needs dim_labels=... (e.g. b01f_01io->b01f)",
                             convolution.name()),
                 convolution.loc()};
  }
  Expected<ConvolutionDimensions> dims = ParseDimLabels(labels->value);
  if (!dims.ok()) return located(*labels, dims.error());
  c.dims = *std::move(dims);
  if (const RawAttribute* window = convolution.attrs().FindRaw("window")) {
    Expected<std::vector<WindowDimension>> parsed = ParseWindow(window->value);
    if (!parsed.ok()) return located(*window, parsed.error());
    c.window = *std::move(parsed);
  }
  if (c.window.empty()) c.window.resize(c.dims.input_spatial.size());
  if (c.window.size() != c.dims.input_spatial.size()) {
    return Error{fmt::format("%{}: the window has {} dimensions but dim_labels {} spatial ones",
                             convolution.name(), c.window.size(), c.dims.input_spatial.size()),
                 convolution.loc()};
  }
  LOOM_ASSIGN_OR_RETURN(c.feature_groups, GroupCount(convolution, "feature_group_count"));
  LOOM_ASSIGN_OR_RETURN(c.batch_groups, GroupCount(convolution, "batch_group_count"));
  return c;
}

Expected<std::vector<int64_t>> InferConvolutionDims(const Shape& input, const Shape& kernel,
                                                    const Convolution& c) {
  const ConvolutionDimensions& d = c.dims;
  const auto rank = static_cast<int64_t>(d.input_spatial.size() + 2);
  if (!input.IsArray() || !kernel.IsArray() || input.rank() != rank || kernel.rank() != rank) {
    return Fail(fmt::format("dim_labels take rank-{} input and kernel, got {} and {}", rank,
                            input.ToString(false), kernel.ToString(false)));
  }
  const bool floats = IsFloatingPoint(input.type()), integers = IsInteger(input.type());
  if (input.type() != kernel.type() || !(floats || integers)) {
    return Fail(fmt::format("the input {} and kernel {} must be of one float or integer type",
                            input.ToString(false), kernel.ToString(false)));
  }
  if (c.feature_groups > 1 && c.batch_groups > 1) {
    return Fail(fmt::format("feature_group_count={} and batch_group_count={}: one must be 1",
                            c.feature_groups, c.batch_groups));
  }
  const int64_t batch = input.dim(d.input_batch), features = input.dim(d.input_feature);
  const int64_t outputs = kernel.dim(d.kernel_output_feature);
  if (features % c.feature_groups != 0 ||
      features / c.feature_groups != kernel.dim(d.kernel_input_feature)) {
    return Fail(fmt::format(
        "the input's {} features in {} group(s) do not match the kernel's {} input features",
        features, c.feature_groups, kernel.dim(d.kernel_input_feature)));
  }
  const int64_t groups = c.feature_groups * c.batch_groups;
  if (outputs % groups != 0 || batch % c.batch_groups != 0) {
    return Fail(fmt::format(
        "the kernel's {} output features (and the input's batch of {}) must divide into {} "
        "groups",
        outputs, batch, groups));
  }
  std::vector<int64_t> out(static_cast<size_t>(rank));
  out[static_cast<size_t>(d.output_batch)] = batch / c.batch_groups;
  out[static_cast<size_t>(d.output_feature)] = outputs;
  for (size_t k = 0; k < c.window.size(); ++k) {
    const WindowDimension& w = c.window[k];
    if (w.size != kernel.dim(d.kernel_spatial[k])) {
      return Fail(fmt::format("window size {} in spatial dimension {} but the kernel {} has {}",
                              w.size, k, kernel.ToString(false), kernel.dim(d.kernel_spatial[k])));
    }
    const std::optional<int64_t> dilated =
        DilatedExtent(input.dim(d.input_spatial[k]), w.lhs_dilate);
    const std::optional<int64_t> window = DilatedExtent(w.size, w.rhs_dilate);
    int64_t padded = 0;
    if (!dilated || !window || __builtin_add_overflow(*dilated, w.pad_low, &padded) ||
        __builtin_add_overflow(padded, w.pad_high, &padded)) {
      return Fail(fmt::format("spatial dimension {}: the dilated, padded extents overflow", k));
    }
    out[static_cast<size_t>(d.output_spatial[k])] =
        padded < *window ? 0 : (padded - *window) / w.stride + 1;
  }
  return out;
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
