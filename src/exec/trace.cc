#include "exec/trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "support/output_file.h"

namespace loom::exec {

std::string TraceEventsToJson(const std::vector<TraceEvent>& events) {
  nlohmann::json array = nlohmann::json::array();
  for (const TraceEvent& event : events) {
    array.push_back({event.name, event.category, event.device, static_cast<int>(event.lane),
                     event.start_us, event.duration_us});
  }
  return array.dump();
}

Expected<std::vector<TraceEvent>> TraceEventsFromJson(const std::string& text) {
  const nlohmann::json array = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) return Error{"malformed trace events"};
  std::vector<TraceEvent> events;
  for (const nlohmann::json& item : array) {
    if (!item.is_array() || item.size() != 6 || !item[3].is_number_integer() ||
        item[3].get<int>() < 0 || item[3].get<int>() > static_cast<int>(trace::Lane::kTransfers)) {
      return Error{"malformed trace event"};
    }
    events.push_back({item[0].get<std::string>(), item[1].get<std::string>(),
                      item[2].get<int64_t>(), static_cast<trace::Lane>(item[3].get<int>()),
                      item[4].get<double>(), item[5].get<double>()});
  }
  return events;
}

Status WriteChromeTrace(const std::string& path, const std::vector<TraceEvent>& events) {
  trace::Timeline timeline;
  timeline.slices.reserve(events.size());
  for (const TraceEvent& event : events) {
    const int64_t start = trace::PicosecondsFromMicros(event.start_us);
    timeline.slices.push_back({.device = event.device,
                               .lane = event.lane,
                               .name = event.name,
                               .category = event.category,
                               .op = event.category,
                               .start_ps = start,
                               .end_ps = start + trace::PicosecondsFromMicros(event.duration_us)});
  }
  return WriteOutputFile(path, trace::ChromeTraceJson(timeline));
}

}  // namespace loom::exec
