#include "trace/chrome_trace.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace loom::trace {
namespace {

// The "X" events by name: (tid, ts, dur) as written.
struct Written {
  int tid;
  std::string ts;
  std::string dur;
};

std::map<std::string, Written> SlicesOf(const std::string& json_text) {
  const nlohmann::json json = nlohmann::json::parse(json_text);
  std::map<std::string, Written> slices;
  for (const nlohmann::json& event : json["traceEvents"]) {
    if (event["ph"] != "X") continue;
    slices[event["name"].get<std::string>()] = {event["tid"].get<int>(), event["ts"].dump(),
                                                event["dur"].dump()};
  }
  return slices;
}

TEST(ChromeTrace, PacksOverlappingTransfersOntoTheFewestTracks) {
  Timeline timeline;
  // a [0,10) and b [5,15) overlap; c [10,20) starts where a ends and
  // reuses its track; d on another device starts its own tracks.
  timeline.slices = {
      {.device = 0, .lane = Lane::kTransfers, .name = "a", .start_ps = 0, .end_ps = 10},
      {.device = 0, .lane = Lane::kTransfers, .name = "b", .start_ps = 5, .end_ps = 15},
      {.device = 0, .lane = Lane::kTransfers, .name = "c", .start_ps = 10, .end_ps = 20},
      {.device = 1, .lane = Lane::kTransfers, .name = "d", .start_ps = 7, .end_ps = 8},
      {.device = 0, .lane = Lane::kCompute, .name = "dot", .start_ps = 0, .end_ps = 30},
  };
  const std::string json = ChromeTraceJson(timeline);
  const auto slices = SlicesOf(json);
  EXPECT_EQ(slices.at("a").tid, 1);
  EXPECT_EQ(slices.at("b").tid, 2);
  EXPECT_EQ(slices.at("c").tid, 1);
  EXPECT_EQ(slices.at("d").tid, 1);
  EXPECT_EQ(slices.at("dot").tid, 0);
  // Device 0 names two transfer tracks, device 1 one.
  int names0 = 0, names1 = 0;
  const nlohmann::json parsed = nlohmann::json::parse(json);
  for (const auto& event : parsed["traceEvents"]) {
    if (event["name"] != "thread_name" || event["tid"] == 0) continue;
    (event["pid"] == 0 ? names0 : names1)++;
  }
  EXPECT_EQ(names0, 2);
  EXPECT_EQ(names1, 1);
}

TEST(ChromeTrace, WritesExactMicrosecondsAndEscapesNames) {
  Timeline timeline;
  timeline.devices = {0, 3};
  timeline.slices = {{.device = 0,
                      .name = "say \"hi\"\n",
                      .category = "dot",
                      .op = "dot",
                      .start_ps = PicosecondsFromSeconds(1.5e-6),
                      .end_ps = PicosecondsFromSeconds(1.5e-6) + 1}};
  const std::string json = ChromeTraceJson(timeline);
  const auto slices = SlicesOf(json);
  ASSERT_EQ(slices.count("say \"hi\"\n"), 1u);
  EXPECT_EQ(slices.at("say \"hi\"\n").ts, "1.5");
  EXPECT_EQ(slices.at("say \"hi\"\n").dur, "1e-06");  // one picosecond, not rounded away
  EXPECT_NE(json.find("\"ts\":1.500000,"), std::string::npos);
  EXPECT_NE(json.find("\"dur\":0.000001"), std::string::npos);
  // Device 3 has no slices and is named all the same.
  EXPECT_NE(json.find(R"("args":{"name":"device 3"})"), std::string::npos);
  EXPECT_EQ(PicosecondsFromMicros(2.25), 2'250'000);
}

}  // namespace
}  // namespace loom::trace
