#include "sim/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <queue>
#include <variant>

#include "cost/collective_algorithm.h"

namespace loom::sim {

namespace {

constexpr const char* kAxes = "xyzwuv";

std::string AxisName(size_t dim) {
  return dim < 6 ? std::string(1, kAxes[dim]) : fmt::format("d{}", dim);
}

}  // namespace

// --- Network -------------------------------------------------------------------

Expected<Network> Network::Build(const cost::Target& target, int64_t devices,
                                 const LinkScales& scales) {
  Network network;
  network.target_ = target;
  network.devices_ = devices;
  if (const auto* torus = std::get_if<cost::TorusTopology>(&target.topology())) {
    network.kind_ = Kind::kTorus;
    network.dims_ = torus->dims;
    network.wraparound_ = torus->wraparound;
    network.wraparound_.resize(network.dims_.size(), false);
    network.hop_latency_ = torus->link.latency_seconds;
    const int64_t chips = target.device_count();
    network.position_.resize(static_cast<size_t>(chips));
    network.device_at_.resize(static_cast<size_t>(chips));
    for (int64_t position = 0; position < chips; ++position) {
      const int64_t device = torus->device_order.empty()
                                 ? position
                                 : torus->device_order[static_cast<size_t>(position)];
      network.device_at_[static_cast<size_t>(position)] = device;
      network.position_[static_cast<size_t>(device)] = position;
    }
    network.capacity_.assign(static_cast<size_t>(chips) * network.dims_.size() * 2,
                             torus->link.bytes_per_second);
  } else if (const auto* switched = std::get_if<cost::SwitchedTopology>(&target.topology())) {
    network.kind_ = Kind::kSwitched;
    network.devices_per_node_ = std::max<int64_t>(1, switched->devices_per_node);
    network.intra_latency_ = switched->intra_node.latency_seconds;
    network.inter_latency_ = switched->inter_node.latency_seconds;
    network.capacity_.resize(static_cast<size_t>(devices) * 4);
    for (int64_t d = 0; d < devices; ++d) {
      for (int k = 0; k < 2; ++k) {
        network.capacity_[static_cast<size_t>(d * 4 + k)] = switched->intra_node.bytes_per_second;
        network.capacity_[static_cast<size_t>(d * 4 + 2 + k)] =
            switched->inter_node.bytes_per_second;
      }
    }
  } else {
    const auto& bus = std::get<cost::BusTopology>(target.topology());
    network.kind_ = Kind::kBus;
    network.hop_latency_ = bus.bus.latency_seconds;
    network.capacity_ = {bus.bus.bytes_per_second};
  }
  for (const auto& [pair, scale] : scales) {
    LOOM_RETURN_IF_ERROR(network.Scale(pair.first, pair.second, scale));
  }
  return network;
}

Status Network::Scale(int64_t from, int64_t to, double scale) {
  if (!(scale > 0)) {
    return Error{fmt::format("link {}>{}: scale must be positive, got {}", from, to, scale)};
  }
  scaled_ = scaled_ || scale != 1;
  if (kind_ == Kind::kBus) {
    capacity_[0] *= scale;
    return OkStatus();
  }
  if (from < 0 || to < 0 || from >= devices_ || to >= devices_ || from == to) {
    return Error{
        fmt::format("link {}>{}: needs two distinct devices in 0..{}", from, to, devices_ - 1)};
  }
  if (kind_ == Kind::kSwitched) {
    for (LinkId link : RouteBetween(from, to).links) capacity_[static_cast<size_t>(link)] *= scale;
    return OkStatus();
  }
  bool found = false;
  const int64_t position = position_[static_cast<size_t>(from)];
  for (size_t dim = 0; dim < dims_.size(); ++dim) {
    for (int direction : {+1, -1}) {
      if (Neighbor(from, dim, direction) == to) {
        capacity_[static_cast<size_t>(TorusLink(position, dim, direction))] *= scale;
        found = true;
      }
    }
  }
  if (!found) {
    return Error{
        fmt::format("link {}>{}: devices {} and {} are not torus neighbours", from, to, from, to)};
  }
  return OkStatus();
}

LinkId Network::TorusLink(int64_t position, size_t dim, int direction) const {
  return static_cast<LinkId>(cost::TorusLinkId(*target_, position, dim, direction));
}

std::string Network::LinkName(LinkId link) const {
  switch (kind_) {
    case Kind::kBus:
      return "bus";
    case Kind::kSwitched: {
      const int64_t device = link / 4;
      static constexpr const char* kPorts[] = {"nvlink out", "nvlink in", "nic out", "nic in"};
      return fmt::format("device {} {}", device, kPorts[link % 4]);
    }
    case Kind::kTorus: {
      const int64_t rank = static_cast<int64_t>(dims_.size());
      const int64_t position = link / 2 / rank;
      const auto dim = static_cast<size_t>(link / 2 % rank);
      int64_t rest = position;
      std::string coords;
      for (size_t d = 0; d < dims_.size(); ++d) {
        coords += fmt::format("{}{}", d ? "," : "", rest % dims_[d]);
        rest /= dims_[d];
      }
      return fmt::format("chip {} ({}) {}{}", device_at_[static_cast<size_t>(position)], coords,
                         link % 2 == 0 ? "+" : "-", AxisName(dim));
    }
  }
  return "?";
}

int64_t Network::LinkDevice(LinkId link) const {
  switch (kind_) {
    case Kind::kBus:
      return 0;
    case Kind::kSwitched:
      return link / 4;
    case Kind::kTorus:
      return device_at_[static_cast<size_t>(link / 2 / static_cast<int64_t>(dims_.size()))];
  }
  return 0;
}

int64_t Network::Neighbor(int64_t device, size_t dim, int direction) const {
  int64_t position = position_[static_cast<size_t>(device)];
  int64_t stride = 1;
  for (size_t d = 0; d < dim; ++d) stride *= dims_[d];
  const int64_t coord = position / stride % dims_[dim];
  int64_t next = coord + direction;
  if (next < 0 || next >= dims_[dim]) {
    if (!wraparound_[dim] || dims_[dim] < 2) return -1;
    next = (next + dims_[dim]) % dims_[dim];
  }
  if (next == coord) return -1;
  position += (next - coord) * stride;
  return device_at_[static_cast<size_t>(position)];
}

Route Network::Hop(int64_t device, size_t dim, int direction) const {
  return Route{{TorusLink(position_[static_cast<size_t>(device)], dim, direction)}, hop_latency_};
}

std::vector<Network::Coordinate> Network::Coordinates() const {
  using Along = Coordinate::Kind;
  switch (kind_) {
    case Kind::kBus:
      return {{devices_, Along::kInterchangeable, "device"}};
    case Kind::kSwitched:
      // One node, or some of one: its devices are interchangeable.
      if (devices_ <= devices_per_node_) {
        return {{devices_, Along::kInterchangeable, "device in node"}};
      }
      if (devices_ % devices_per_node_ != 0) return {{devices_, Along::kFixed, "device"}};
      return {{devices_ / devices_per_node_, Along::kInterchangeable, "node"},
              {devices_per_node_, Along::kInterchangeable, "device in node"}};
    case Kind::kTorus: {
      std::vector<Coordinate> coordinates;
      for (size_t d = 0; d < dims_.size(); ++d) {
        coordinates.push_back({dims_[d],
                               wraparound_[d] && dims_[d] > 1 ? Along::kCyclic : Along::kFixed,
                               AxisName(d)});
      }
      return coordinates;
    }
  }
  return {};
}

// The target's coordinates (cost::Target::Coordinates and DeviceAt), but
// one for the whole of a partly used switched node or cluster.
void Network::CoordinatesOf(int64_t device, std::vector<int64_t>* coordinates) const {
  if (kind_ == Kind::kSwitched &&
      (devices_ <= devices_per_node_ || devices_ % devices_per_node_ != 0)) {
    *coordinates = {device};
    return;
  }
  *coordinates = target_->Coordinates(device);
}

int64_t Network::DeviceAt(const std::vector<int64_t>& coordinates) const {
  int64_t device = coordinates[0];
  if (kind_ == Kind::kTorus) {
    device = target_->DeviceAt(coordinates);
  } else if (coordinates.size() == 2) {
    device = coordinates[0] * devices_per_node_ + coordinates[1];
  }
  return device >= 0 && device < devices_ ? device : -1;
}

LinkId Network::LinkAt(LinkId link, int64_t device) const {
  switch (kind_) {
    case Kind::kBus:
      return link;
    case Kind::kSwitched:
      return static_cast<LinkId>(device * 4 + link % 4);
    case Kind::kTorus: {
      const auto rank = static_cast<int64_t>(dims_.size());
      const auto dim = static_cast<size_t>(link / 2 % rank);
      return TorusLink(position_[static_cast<size_t>(device)], dim, link % 2 == 0 ? +1 : -1);
    }
  }
  return link;
}

Route Network::RouteBetween(int64_t from, int64_t to) const {
  Route route;
  for (int64_t link : cost::RouteLinks(*target_, from, to)) {
    route.links.push_back(static_cast<LinkId>(link));
  }
  switch (kind_) {
    case Kind::kSwitched:
      route.latency_seconds =
          from / devices_per_node_ != to / devices_per_node_ ? inter_latency_ : intra_latency_;
      break;
    case Kind::kTorus:
    case Kind::kBus:
      route.latency_seconds = hop_latency_ * static_cast<double>(route.links.size());
      break;
  }
  return route;
}

// --- FairShareNetwork --------------------------------------------------------------

double FairShareNetwork::WeightOn(const Flow& flow, LinkId link) {
  if (flow.weights.empty()) return 1;
  double weight = 0;
  for (size_t i = 0; i < flow.links.size(); ++i) {
    if (flow.links[i] == link) weight += flow.weights[i];
  }
  return weight;
}

FairShareNetwork::FairShareNetwork(std::vector<double> capacities)
    : capacity_(std::move(capacities)), links_(capacity_.size()) {}

void FairShareNetwork::MarkDirty(LinkId link) {
  LinkState& state = links_[static_cast<size_t>(link)];
  if (!state.dirty) {
    state.dirty = true;
    dirty_.push_back(link);
  }
}

int32_t FairShareNetwork::Add(const LinkId* links, const double* weights, int32_t link_count,
                              double bytes, double now, int64_t tag) {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<int32_t>(flows_.size());
    flows_.emplace_back();
  }
  Flow& flow = flows_[static_cast<size_t>(id)];
  flow.links.assign(links, links + link_count);
  if (weights != nullptr) {
    flow.weights.assign(weights, weights + link_count);
  } else {
    flow.weights.clear();
  }
  flow.slot.resize(static_cast<size_t>(link_count));
  flow.remaining = bytes;
  flow.rate = 0;
  flow.updated = now;
  flow.tag = tag;
  flow.version++;
  flow.frozen = false;
  flow.live = true;
  for (int32_t i = 0; i < link_count; ++i) {
    LinkState& link = links_[static_cast<size_t>(links[i])];
    flow.slot[static_cast<size_t>(i)] = static_cast<int32_t>(link.flows.size());
    link.flows.push_back(id);
    MarkDirty(links[i]);
  }
  ++active_;
  return id;
}

void FairShareNetwork::Remove(int32_t id, double /*now*/) {
  Flow& flow = flows_[static_cast<size_t>(id)];
  if (!flow.live) return;
  for (size_t i = 0; i < flow.links.size(); ++i) {
    const LinkId link_id = flow.links[i];
    LinkState& link = links_[static_cast<size_t>(link_id)];
    const auto slot = static_cast<size_t>(flow.slot[i]);
    const int32_t moved = link.flows.back();
    link.flows[slot] = moved;
    link.flows.pop_back();
    if (moved != id) {
      Flow& other = flows_[static_cast<size_t>(moved)];
      for (size_t j = 0; j < other.links.size(); ++j) {
        if (other.links[j] == link_id) {
          other.slot[j] = static_cast<int32_t>(slot);
          break;
        }
      }
    }
    MarkDirty(link_id);
  }
  flow.live = false;
  flow.version++;
  flow.rate = 0;
  free_.push_back(id);
  --active_;
}

double FairShareNetwork::Load(LinkId link) const {
  double load = 0;
  for (int32_t id : links_[static_cast<size_t>(link)].flows) {
    const Flow& flow = flows_[static_cast<size_t>(id)];
    load += flow.rate * WeightOn(flow, link);
  }
  return load;
}

void FairShareNetwork::Reallocate(double now, std::vector<std::pair<int32_t, double>>* changed) {
  changed->clear();
  component_links_.clear();
  if (dirty_.empty()) return;
  ++reallocations_;
  ++stamp_;
  // The connected components of the dirty links: breadth first over
  // link -> flows crossing it -> their other links.
  component_links_.clear();
  component_flows_.clear();
  for (LinkId link : dirty_) {
    LinkState& state = links_[static_cast<size_t>(link)];
    state.dirty = false;
    if (state.stamp != stamp_) {
      state.stamp = stamp_;
      component_links_.push_back(link);
    }
  }
  dirty_.clear();
  for (size_t i = 0; i < component_links_.size(); ++i) {
    const LinkState& state = links_[static_cast<size_t>(component_links_[i])];
    for (int32_t id : state.flows) {
      Flow& flow = flows_[static_cast<size_t>(id)];
      if (flow.stamp == stamp_) continue;
      flow.stamp = stamp_;
      component_flows_.push_back(id);
      for (LinkId other : flow.links) {
        LinkState& other_state = links_[static_cast<size_t>(other)];
        if (other_state.stamp != stamp_) {
          other_state.stamp = stamp_;
          component_links_.push_back(other);
        }
      }
    }
  }
  links_recomputed_ += static_cast<int64_t>(component_links_.size());
  flows_recomputed_ += static_cast<int64_t>(component_flows_.size());

  // Bring every flow's bytes up to `now` at its old rate.
  for (int32_t id : component_flows_) {
    Flow& flow = flows_[static_cast<size_t>(id)];
    flow.remaining = std::max(0.0, flow.remaining - flow.rate * (now - flow.updated));
    flow.updated = now;
    flow.frozen = false;
  }

  // Progressive filling: the link with the smallest fair share freezes its
  // flows at that share, which the other links they cross give up.
  using Entry = std::tuple<double, uint32_t, LinkId>;  // share, key, link
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (LinkId link : component_links_) {
    LinkState& state = links_[static_cast<size_t>(link)];
    state.left = capacity_[static_cast<size_t>(link)];
    state.unfrozen = static_cast<int32_t>(state.flows.size());
    state.unfrozen_weight = 0;
    for (int32_t id : state.flows) {
      state.unfrozen_weight += WeightOn(flows_[static_cast<size_t>(id)], link);
    }
    state.key++;
    if (state.unfrozen > 0) queue.emplace(state.left / state.unfrozen_weight, state.key, link);
  }
  while (!queue.empty()) {
    const auto [share, key, link] = queue.top();
    queue.pop();
    LinkState& state = links_[static_cast<size_t>(link)];
    if (key != state.key || state.unfrozen == 0) continue;
    for (int32_t id : state.flows) {
      Flow& flow = flows_[static_cast<size_t>(id)];
      if (flow.frozen) continue;
      flow.frozen = true;
      const double old_rate = flow.rate;
      flow.rate = share;
      if (old_rate != share) {
        flow.version++;
        const double finish =
            share > 0 ? now + flow.remaining / share : std::numeric_limits<double>::infinity();
        changed->emplace_back(id, finish);
      }
      for (size_t i = 0; i < flow.links.size(); ++i) {
        const LinkId other = flow.links[i];
        if (other == link) continue;
        const double weight = flow.weights.empty() ? 1.0 : flow.weights[i];
        LinkState& other_state = links_[static_cast<size_t>(other)];
        other_state.left = std::max(0.0, other_state.left - share * weight);
        other_state.unfrozen--;
        other_state.unfrozen_weight -= weight;
        other_state.key++;
        if (other_state.unfrozen > 0) {
          queue.emplace(other_state.left / other_state.unfrozen_weight, other_state.key, other);
        }
      }
    }
    state.unfrozen = 0;
  }
}

}  // namespace loom::sim
