#include "trace/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

namespace loom::trace {
namespace {

void AppendEscaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
}

void AppendMicros(std::string& out, int64_t picoseconds) {
  if (picoseconds < 0) {
    out += '-';
    picoseconds = -picoseconds;
  }
  out += fmt::format("{}.{:06}", picoseconds / 1000000, picoseconds % 1000000);
}

// Per slice its tid: 0 for compute; for transfers, 1 + the lowest track of
// its device free at its start (greedy interval colouring in order of
// start, which uses as many tracks as the most slices in flight at once).
std::vector<int32_t> AssignTracks(const std::vector<Slice>& slices,
                                  std::map<int64_t, int32_t>* transfer_tracks) {
  std::vector<int32_t> tid(slices.size(), 0);
  std::vector<size_t> order(slices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(slices[a].device, slices[a].start_ps) <
           std::tie(slices[b].device, slices[b].start_ps);
  });
  std::map<int64_t, std::vector<int64_t>> track_ends;  // per device, per transfer track
  for (size_t index : order) {
    const Slice& slice = slices[index];
    if (slice.lane != Lane::kTransfers) continue;
    std::vector<int64_t>& ends = track_ends[slice.device];
    size_t track = 0;
    while (track < ends.size() && ends[track] > slice.start_ps) ++track;
    if (track == ends.size()) ends.push_back(0);
    ends[track] = slice.end_ps;
    tid[index] = static_cast<int32_t>(track) + 1;
  }
  for (const auto& [device, ends] : track_ends) {
    (*transfer_tracks)[device] = static_cast<int32_t>(ends.size());
  }
  return tid;
}

}  // namespace

int64_t PicosecondsFromSeconds(double seconds) {
  return static_cast<int64_t>(std::llround(seconds * 1e12));
}

int64_t PicosecondsFromMicros(double micros) {
  return static_cast<int64_t>(std::llround(micros * 1e6));
}

std::string ChromeTraceJson(const Timeline& timeline) {
  std::map<int64_t, int32_t> transfer_tracks;
  const std::vector<int32_t> tid = AssignTracks(timeline.slices, &transfer_tracks);
  std::set<int64_t> devices(timeline.devices.begin(), timeline.devices.end());
  for (const Slice& slice : timeline.slices) devices.insert(slice.device);
  for (const CounterSample& sample : timeline.counters) devices.insert(sample.device);

  std::string out;
  out.reserve(timeline.slices.size() * 128 + devices.size() * 256 + 64);
  out += "{\"traceEvents\":[";
  bool first = true;
  const auto separator = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (int64_t d : devices) {
    separator();
    out += fmt::format(
        R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"device {}"}}}})", d, d);
    separator();
    out += fmt::format(
        R"({{"name":"process_sort_index","ph":"M","pid":{},"args":{{"sort_index":{}}}}})", d, d);
    separator();
    out += fmt::format(
        R"({{"name":"thread_name","ph":"M","pid":{},"tid":0,"args":{{"name":"compute"}}}})", d);
    const auto tracks = transfer_tracks.find(d);
    for (int32_t track = 1; tracks != transfer_tracks.end() && track <= tracks->second; ++track) {
      separator();
      out += fmt::format(
          R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"transfers {}"}}}})",
          d, track, track);
    }
  }
  for (size_t i = 0; i < timeline.slices.size(); ++i) {
    const Slice& slice = timeline.slices[i];
    separator();
    out += "{\"name\":\"";
    AppendEscaped(out, slice.name);
    out += "\",\"cat\":\"";
    AppendEscaped(out, slice.category);
    out += fmt::format("\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":", slice.device, tid[i]);
    AppendMicros(out, slice.start_ps);
    out += ",\"dur\":";
    AppendMicros(out, std::max<int64_t>(0, slice.end_ps - slice.start_ps));
    if (!slice.op.empty()) {
      out += ",\"args\":{\"op\":\"";
      AppendEscaped(out, slice.op);
      out += "\"}";
    }
    out += "}";
  }
  for (const CounterSample& sample : timeline.counters) {
    separator();
    out += "{\"name\":\"";
    AppendEscaped(out, sample.track);
    out += fmt::format("\",\"ph\":\"C\",\"pid\":{},\"ts\":", sample.device);
    AppendMicros(out, sample.time_ps);
    out += ",\"args\":{\"";
    AppendEscaped(out, sample.series);
    // Shortest round-trip form, and never NaN or infinity (not JSON).
    out += fmt::format("\":{}}}}}", std::isfinite(sample.value) ? sample.value : 0.0);
  }
  out += "],\"displayTimeUnit\":\"ns\"}\n";
  return out;
}

}  // namespace loom::trace
