#include "ir/convolution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>
#include <string_view>

#include "ir/attributes.h"

namespace loom::ir {
namespace {

Error Fail(std::string message) { return Error{std::move(message), {}}; }

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
  const std::optional<int64_t> value = ParseInteger(raw->value);
  if (!value || *value < 1) {
    return Error{fmt::format("%{}: {} must be a positive integer, got {}", convolution.name(), key,
                             raw->value),
                 raw->loc};
  }
  return *value;
}

}  // namespace

Expected<ConvolutionDimensions> ParseDimLabels(std::string_view text) {
  const size_t arrow = text.find("->");
  const std::vector<std::string_view> operands = SplitText(text.substr(0, arrow), '_');
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
    const Expected<int64_t> extent = WindowOutputExtent(w, input.dim(d.input_spatial[k]));
    if (!extent.ok()) {
      return Fail(fmt::format("spatial dimension {}: {}", k, extent.error().message));
    }
    out[static_cast<size_t>(d.output_spatial[k])] = *extent;
  }
  return out;
}

}  // namespace loom::ir
