#include "cost/transfer_flights.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace loom::cost {

namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();
constexpr int kPorts = 32;

}  // namespace

void TransferFlights::Advance(const std::vector<Flight>& flights, std::vector<Progress>& progress,
                              double& clock, double until) {
  const size_t n = flights.size();
  auto finished = [&](size_t i) { return progress[i].segment == flights[i].segments.size(); };
  // Skips the finished segments of a transfer that has begun.
  auto settle = [&](size_t i, double at) {
    Progress& p = progress[i];
    const auto& segments = flights[i].segments;
    while (p.segment < segments.size() && p.left <= 0) {
      if (++p.segment < segments.size()) p.left = segments[p.segment].seconds;
    }
    if (p.segment == segments.size()) p.end = at;
  };
  std::vector<double> rate(n);
  while (clock < until) {
    std::array<double, kPorts> running_on{};
    double next = until;
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
      if (finished(i)) continue;
      if (flights[i].begin > clock) {
        next = std::min(next, flights[i].begin);
        any = true;
        continue;
      }
      settle(i, clock);
      if (finished(i)) continue;
      const TransferSegment& segment = flights[i].segments[progress[i].segment];
      for (PortMask ports = segment.ports; ports != 0; ports &= ports - 1) {
        running_on[static_cast<size_t>(std::countr_zero(ports))] += segment.flows;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      rate[i] = 0;
      if (finished(i) || flights[i].begin > clock) continue;
      const TransferSegment& segment = flights[i].segments[progress[i].segment];
      double busiest = segment.flows;
      for (PortMask ports = segment.ports; ports != 0; ports &= ports - 1) {
        busiest = std::max(busiest, running_on[static_cast<size_t>(std::countr_zero(ports))]);
      }
      rate[i] = segment.flows / busiest;
      next = std::min(next, clock + progress[i].left / rate[i]);
      any = true;
    }
    if (!any || next == kForever) break;
    for (size_t i = 0; i < n; ++i) {
      if (rate[i] == 0) continue;
      // The one (or ones) that finish their segment now finish exactly.
      double& left = progress[i].left;
      left = clock + left / rate[i] <= next ? 0 : left - (next - clock) * rate[i];
    }
    clock = next;
    for (size_t i = 0; i < n; ++i) {
      if (!finished(i) && flights[i].begin <= clock) settle(i, clock);
    }
  }
  if (until != kForever) clock = std::max(clock, until);
}

std::vector<TransferFlights::Progress> TransferFlights::ProgressNow() const {
  std::vector<Progress> progress;
  progress.reserve(flights_.size());
  for (const Flight& flight : flights_) progress.push_back(flight.now);
  return progress;
}

void TransferFlights::Commit(double now) {
  if (now <= clock_) return;
  std::vector<Progress> progress = ProgressNow();
  Advance(flights_, progress, clock_, now);
  for (size_t i = 0; i < flights_.size(); ++i) flights_[i].now = progress[i];
  std::erase_if(flights_, [&](const Flight& flight) {
    if (flight.now.segment < flight.segments.size()) return false;
    if (!flight.released) finished_[flight.id] = flight.now.end;
    return true;
  });
}

void TransferFlights::Project() {
  std::vector<Progress> progress = ProgressNow();
  double clock = clock_;
  Advance(flights_, progress, clock, kForever);
  for (size_t i = 0; i < flights_.size(); ++i) flights_[i].end = progress[i].end;
}

TransferFlights::Id TransferFlights::Launch(double now, double begin, int kind,
                                            std::vector<int64_t> links,
                                            std::vector<TransferSegment> segments) {
  Commit(now);
  Flight flight;
  flight.id = next_id_++;
  flight.kind = kind;
  flight.begin = std::max(begin, clock_);
  flight.links = std::move(links);
  std::erase_if(segments, [](const TransferSegment& segment) { return segment.seconds <= 0; });
  for (TransferSegment& segment : segments) segment.flows = std::max(segment.flows, 1.0);
  flight.segments = std::move(segments);
  flight.now.left = flight.segments.empty() ? 0 : flight.segments[0].seconds;
  flight.now.end = flight.begin;
  flight.end = flight.begin;
  flights_.push_back(std::move(flight));
  Project();
  return flights_.back().id;
}

double TransferFlights::End(Id id) const {
  for (const Flight& flight : flights_) {
    if (flight.id == id) return flight.end;
  }
  auto it = finished_.find(id);
  return it == finished_.end() ? clock_ : it->second;
}

void TransferFlights::Release(Id id) {
  for (Flight& flight : flights_) {
    if (flight.id == id) {
      flight.released = true;
      return;
    }
  }
  finished_.erase(id);
}

double TransferFlights::LatestEndOfKind(int kind, const std::vector<int64_t>& links,
                                        double now) const {
  double latest = now;
  for (const Flight& flight : flights_) {
    if (flight.kind == kind && !LinksDisjoint(flight.links, links)) {
      latest = std::max(latest, flight.end);
    }
  }
  return latest;
}

std::array<double, TransferFlights::kKinds> TransferFlights::Backlog(double now) const {
  std::array<double, kKinds> backlog{};
  for (const Flight& flight : flights_) {
    auto& kind = backlog[static_cast<size_t>(flight.kind)];
    kind = std::max(kind, flight.end - now);
  }
  return backlog;
}

void TransferFlights::Delay(double now, double seconds) {
  Commit(now);
  clock_ += seconds;
  for (Flight& flight : flights_) {
    flight.begin = std::max(flight.begin, now) + seconds;
    flight.end += seconds;
  }
}

}  // namespace loom::cost
