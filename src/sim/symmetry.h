// Symmetric devices: the translations of a module's devices that map the
// network and every collective of the module onto themselves, so that the
// simulator can replay one device of each class and let each of its flows
// stand for the flows of its class (FairShareNetwork's weights).
//
// Why the replay of the classes is the replay of every device: an SPMD
// module runs one tape on every device (tape.h prices compute once, and a
// conditional takes the same branch everywhere). A translation g that maps
// the network onto itself (links to links of the same capacity, routes to
// routes) and each collective's plan onto itself (below) maps the whole
// replay onto itself: device g(d) does at
// every instant what d does, message g(m) moves when m does, and the
// max-min fair rates, being unique, are the same for the two. So the
// devices of a class finish their collectives at the same instants, and a
// flow of the class's representative, weighted by the flows of its class
// on each link it crosses, gets the rate every one of them gets.
//
// What a move must map onto itself is each collective's plan: the rings
// and chains of cost::AllGatherPhases (a ring up to a rotation, a chain
// exactly), an all-to-all's groups as rings, a collective-permute's pairs.
// A group's own order matters only through these: on a switch the ring
// across nodes goes in node order whatever the group's order.
//
// The translations: a device has its network's coordinates
// (Network::Coordinates). A kCyclic coordinate is one digit; a
// kInterchangeable one of size M (whose values any permutation may move)
// may be read as two digits, M = A x B with value a B + b, each moved
// cyclically, so that a mesh axis laid over part of a coordinate (the data
// axis over the low digit of the node index, the pipeline over its high
// digit) has a digit of its own. Along each digit Find takes the smallest
// step s (a divisor of its size) by which a move maps every collective
// onto itself; the translations are the products of those moves. A class
// is a residue of every digit modulo its step: classes = the product of
// the steps, each of the same size (the order), and its representative is
// the device whose digits are the residues.
//
// Find tries every split of the interchangeable coordinates and keeps the
// one with fewest classes. What it cannot see (a symmetry that is no
// product of digit moves, such as a reflection) it leaves out: fewer
// translations only mean more classes, never a wrong replay. A plan over
// classes names what each message waits for by its image at a
// representative (plan.h); a name no representative's message has sends
// the module back to the device-by-device replay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost/target.h"
#include "ir/collective_groups.h"
#include "ir/module.h"
#include "sim/network.h"

namespace loom::sim {

class Symmetry {
 public:
  // Every device a class of its own.
  static Symmetry None(int64_t devices);
  // The translations of the module's devices on `network` (of `target`)
  // that map every collective of `module` onto itself (None where there
  // are no such, or a collective's groups cannot be read: the
  // device-by-device replay then says why).
  static Symmetry Find(const ir::Module& module, const ir::DeviceGrid& grid,
                       const cost::Target& target, const Network& network);

  int64_t devices() const { return static_cast<int64_t>(class_of_.size()); }
  int64_t classes() const { return static_cast<int64_t>(representatives_.size()); }
  // Devices per class.
  int64_t order() const { return classes() > 0 ? devices() / classes() : 1; }
  bool trivial() const { return classes() == devices(); }

  int64_t ClassOf(int64_t device) const { return class_of_[static_cast<size_t>(device)]; }
  int64_t Representative(int64_t device_class) const {
    return representatives_[static_cast<size_t>(device_class)];
  }
  bool IsRepresentative(int64_t device) const { return Representative(ClassOf(device)) == device; }

  // The link of `link`'s orbit at a representative.
  LinkId CanonicalLink(LinkId link) const;
  // How many flows of its class a flow stands for on each link it crosses
  // (at a representative): 1 where translations move links, `order` where
  // every flow shares one medium.
  double LinkWeight() const {
    return network_ != nullptr && network_->shared_medium() ? static_cast<double>(order()) : 1.0;
  }

  // "8 class(es) of 16 devices (moves: node by 1 of 16)".
  const std::string& description() const { return description_; }

 private:
  // A digit of a coordinate: (value / stride) % size, moved by multiples
  // of step.
  struct Digit {
    size_t coordinate = 0;
    int64_t stride = 1;
    int64_t size = 1;
    int64_t step = 1;
  };
  static Symmetry FromDigits(const Network& network, int64_t devices,
                             const std::vector<Digit>& digits);

  const Network* network_ = nullptr;  // null: None
  std::vector<int64_t> class_of_;
  std::vector<int64_t> representatives_;
  std::string description_;
};

}  // namespace loom::sim
