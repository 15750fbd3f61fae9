#include "exec/trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "support/output_file.h"

namespace loom::exec {

std::string TraceEventsToJson(const std::vector<TraceEvent>& events) {
  nlohmann::json array = nlohmann::json::array();
  for (const TraceEvent& event : events) {
    array.push_back({event.name, event.category, event.device, static_cast<int>(event.track),
                     event.start_us, event.duration_us});
  }
  return array.dump();
}

Expected<std::vector<TraceEvent>> TraceEventsFromJson(const std::string& text) {
  const nlohmann::json array = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) return Error{"malformed trace events"};
  std::vector<TraceEvent> events;
  for (const nlohmann::json& item : array) {
    if (!item.is_array() || item.size() != 6) return Error{"malformed trace event"};
    events.push_back({item[0].get<std::string>(), item[1].get<std::string>(),
                      item[2].get<int64_t>(), static_cast<Track>(item[3].get<int>()),
                      item[4].get<double>(), item[5].get<double>()});
  }
  return events;
}

Status WriteChromeTrace(const std::string& path, const std::vector<TraceEvent>& events) {
  nlohmann::json trace_events = nlohmann::json::array();
  std::set<int64_t> devices;
  for (const TraceEvent& event : events) {
    devices.insert(event.device);
    trace_events.push_back({{"name", event.name},
                            {"cat", event.category},
                            {"ph", "X"},
                            {"pid", event.device},
                            {"tid", static_cast<int>(event.track)},
                            {"ts", event.start_us},
                            {"dur", event.duration_us}});
  }
  // Name the processes and tracks so the timeline reads by itself.
  for (int64_t device : devices) {
    trace_events.push_back({{"name", "process_name"},
                            {"ph", "M"},
                            {"pid", device},
                            {"args", {{"name", fmt::format("device {}", device)}}}});
    for (auto [track, name] : {std::pair{Track::kCompute, "compute"},
                               std::pair{Track::kCommunication, "communication"}}) {
      trace_events.push_back({{"name", "thread_name"},
                              {"ph", "M"},
                              {"pid", device},
                              {"tid", static_cast<int>(track)},
                              {"args", {{"name", name}}}});
    }
  }
  return WriteOutputFile(
      path, nlohmann::json{{"traceEvents", trace_events}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace loom::exec
