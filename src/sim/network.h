// The links of a target's topology, the routes transfers take over them,
// and the bandwidth each transfer in flight gets: the network half of the
// simulator (simulator.h).
//
// Links, by topology (cost/target.h; the numbering and the routes are
// cost::RouteLinks', which the cost model's concurrency rule uses too):
//   torus     one link per (chip, dimension, direction), carrying
//             link.bytes_per_second with link.latency_seconds per hop. A
//             route is dimension-ordered (x, then y, then z), each
//             dimension the shorter way round where it wraps (a tie goes
//             the positive way), as TargetCostModel counts hops.
//   switched  per device an NVLink egress and ingress port (flows inside a
//             node) and a NIC egress and ingress port (flows between
//             nodes). The NVSwitch and the fat tree are full bisection, so
//             only the ports constrain: a route is the sender's egress and
//             the receiver's ingress port, one hop of latency.
//   bus       one link that every flow crosses, one hop of latency.
//
// Bandwidth sharing (FairShareNetwork): max-min fair, computed by
// progressive filling. Every flow in flight crosses the links of its route;
// the rates are the unique allocation in which no flow can get more without
// taking from a flow that has no more than it. Progressive filling finds it
// by repeatedly taking the link whose remaining capacity divided by its
// unfrozen flows is smallest (a priority queue of links), freezing those
// flows at that share and taking the share off every other link they
// cross. The rates change only when a flow starts or ends, and then only
// in the connected component (links joined by flows that cross them) of
// the links that flow crosses; only that component is recomputed, in
// O((L + F h) log L) for its L links, F flows and h hops per route. Ring
// steps on disjoint links are components of one link and one flow.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cost/target.h"
#include "support/status.h"

namespace loom::sim {

using LinkId = int32_t;

struct Route {
  std::vector<LinkId> links;
  double latency_seconds = 0;
};

// Bandwidth multipliers for links, keyed by (from device, to device):
//   torus     the link(s) from `from` to its neighbour `to` (two on a
//             wrapping dimension of size 2); they must be neighbours;
//   switched  the ports a `from` -> `to` flow uses: `from`'s egress and
//             `to`'s ingress port (NVLink inside a node, NIC across);
//   bus       the one medium, whatever the pair.
// A device's scale is the product over the keys that touch one link.
using LinkScales = std::map<std::pair<int64_t, int64_t>, double>;

class Network {
 public:
  // The links of `target` for its first `devices` devices (the ones a
  // module uses), with `scales` applied. Fails on a pair that names no
  // link, a device out of range, or a scale that is not positive.
  static Expected<Network> Build(const cost::Target& target, int64_t devices,
                                 const LinkScales& scales);

  int64_t link_count() const { return static_cast<int64_t>(capacity_.size()); }
  // Bytes per second the link carries (its scale applied).
  double capacity(LinkId link) const { return capacity_[static_cast<size_t>(link)]; }
  const std::vector<double>& capacities() const { return capacity_; }
  // "chip 5 (1,1,0) +x", "device 3 nvlink out", "device 3 nic in", "bus".
  std::string LinkName(LinkId link) const;

  // The device a link leaves from or enters (its chip on a torus, its
  // port's device when switched); 0 for the bus.
  int64_t LinkDevice(LinkId link) const;

  // The route of a transfer from `from` to `to` (distinct devices).
  Route RouteBetween(int64_t from, int64_t to) const;

  // Torus only: the device one hop from `device` along dimension `dim`
  // in `direction` (+1 or -1), wrapping where the dimension does, or -1 off
  // the edge; and the route of that one hop.
  int64_t Neighbor(int64_t device, size_t dim, int direction) const;
  Route Hop(int64_t device, size_t dim, int direction) const;

  // The network's symmetries, for sim/symmetry.h: the coordinates of a
  // device along which the network looks the same. Moving every device by
  // one along a kCyclic coordinate (modulo its size) maps links to links of
  // the same capacity and routes to routes; along a kInterchangeable one,
  // any permutation of its values does; a kFixed one admits no move.
  //   torus     a chip's position per dimension: kCyclic where the
  //             dimension wraps, else kFixed;
  //   switched  (node, device in its node), both kInterchangeable (the
  //             NVSwitch and the fat tree are full bisection); kFixed when
  //             the last node is partly used;
  //   bus       the device id, kInterchangeable.
  // Only with no link scales: a slowed link breaks every symmetry.
  struct Coordinate {
    enum class Kind { kFixed, kCyclic, kInterchangeable };
    int64_t size = 1;
    Kind kind = Kind::kFixed;
    std::string name;  // "x", "node", "device in node", "device"
  };
  std::vector<Coordinate> Coordinates() const;
  void CoordinatesOf(int64_t device, std::vector<int64_t>* coordinates) const;
  // The device at `coordinates`, or -1 where no device of the module is.
  int64_t DeviceAt(const std::vector<int64_t>& coordinates) const;
  // The link that plays at `device` the part `link` plays at
  // LinkDevice(link): the same port (switched), the same dimension and
  // direction (torus), the one medium (bus).
  LinkId LinkAt(LinkId link, int64_t device) const;
  // Whether every flow shares one link (a bus), which no move of devices
  // moves.
  bool shared_medium() const { return kind_ == Kind::kBus; }
  bool scaled() const { return scaled_; }

 private:
  enum class Kind { kTorus, kSwitched, kBus };
  Network() = default;
  LinkId TorusLink(int64_t position, size_t dim, int direction) const;
  Status Scale(int64_t from, int64_t to, double scale);

  Kind kind_ = Kind::kBus;
  std::optional<cost::Target> target_;  // its routes: cost::RouteLinks
  std::vector<double> capacity_;
  // Torus.
  std::vector<int64_t> dims_;
  std::vector<bool> wraparound_;
  std::vector<int64_t> position_;   // device -> linear chip position
  std::vector<int64_t> device_at_;  // linear chip position -> device
  double hop_latency_ = 0;
  // Switched.
  int64_t devices_per_node_ = 1;
  double intra_latency_ = 0;
  double inter_latency_ = 0;
  int64_t devices_ = 0;
  bool scaled_ = false;
};

// Flows in flight and their max-min fair rates. Times are the caller's
// clock in seconds; bytes are what is left to send.
class FairShareNetwork {
 public:
  explicit FairShareNetwork(std::vector<double> capacities);

  // A flow that starts crossing `links` at `now` with `bytes` to send. It
  // gets a rate at the next Reallocate. Returns its id (ids are reused once
  // a flow is removed).
  //
  // `weights` (null: all 1) makes the flow stand for several: on
  // links[i] it takes weights[i] times its rate, the load of that many
  // flows of its rate. A simulation of one device per class of symmetric
  // devices (sim/symmetry.h) gives each flow the flows of its class that
  // cross each link of its class; the max-min fair rates are then those of
  // the whole network.
  int32_t Add(const LinkId* links, const double* weights, int32_t link_count, double bytes,
              double now, int64_t tag);
  // Takes a finished (or abandoned) flow off its links.
  void Remove(int32_t flow, double now);

  // Recomputes the rates of every flow in a component touched since the
  // last call; `changed` receives each flow whose rate changed, with the
  // time it will finish at its new rate.
  void Reallocate(double now, std::vector<std::pair<int32_t, double>>* changed);

  int64_t tag(int32_t flow) const { return flows_[static_cast<size_t>(flow)].tag; }
  double rate(int32_t flow) const { return flows_[static_cast<size_t>(flow)].rate; }
  // Bumped whenever the flow's finish time changes (or the id is reused),
  // so a stale finish event can be told from the current one.
  uint32_t version(int32_t flow) const { return flows_[static_cast<size_t>(flow)].version; }
  int64_t active_flows() const { return active_; }
  // Bytes per second the flows crossing `link` move now, all together.
  double Load(LinkId link) const;
  // The links the last Reallocate recomputed: the only ones whose load can
  // have changed since the one before.
  const std::vector<LinkId>& recomputed_links() const { return component_links_; }

  // Statistics: Reallocate calls that had work, and the links and flows
  // they recomputed in all.
  int64_t reallocations() const { return reallocations_; }
  int64_t links_recomputed() const { return links_recomputed_; }
  int64_t flows_recomputed() const { return flows_recomputed_; }

 private:
  struct Flow {
    std::vector<LinkId> links;
    std::vector<double> weights;  // per link; empty: all 1
    std::vector<int32_t> slot;    // index of this flow in each link's list
    double remaining = 0;
    double rate = 0;
    double updated = 0;  // when `remaining` was last brought up to date
    int64_t tag = 0;
    uint32_t version = 0;
    uint32_t stamp = 0;  // visit mark
    bool frozen = false;
    bool live = false;
  };
  struct LinkState {
    std::vector<int32_t> flows;
    uint32_t stamp = 0;  // visit mark
    bool dirty = false;
    double left = 0;  // capacity not yet handed out (progressive filling)
    int32_t unfrozen = 0;
    double unfrozen_weight = 0;  // the unfrozen flows' weights on this link
    uint32_t key = 0;            // bumped when its entry in the filling queue changes
  };

  void MarkDirty(LinkId link);
  // The flow's weight on `link` (a flow lists each link once, weighted).
  static double WeightOn(const Flow& flow, LinkId link);

  std::vector<double> capacity_;
  std::vector<LinkState> links_;
  std::vector<Flow> flows_;
  std::vector<int32_t> free_;
  std::vector<LinkId> dirty_;
  uint32_t stamp_ = 0;
  int64_t active_ = 0;
  int64_t reallocations_ = 0;
  int64_t links_recomputed_ = 0;
  int64_t flows_recomputed_ = 0;
  // Scratch, kept to avoid reallocating.
  std::vector<LinkId> component_links_;
  std::vector<int32_t> component_flows_;
};

}  // namespace loom::sim
