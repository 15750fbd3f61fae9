#include "sim/symmetry.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "cost/collective_algorithm.h"
#include "cost/cost_model.h"
#include "cost/step_time.h"
#include "ir/async.h"
#include "ir/computation.h"
#include "sim/plan.h"

namespace loom::sim {

namespace {

using ir::Opcode;

// A move of every device along one digit, computed for a device when first
// asked: a move that maps some collective's first line onto no line costs
// that line, not the whole grid.
class Move {
 public:
  Move(const Network& network, int64_t devices)
      : network_(network), moved_(static_cast<size_t>(devices)), stamp_(moved_.size(), 0) {}

  // Starts another move: along `coordinate`'s digit (stride, size) by `step`.
  void Reset(size_t coordinate, int64_t stride, int64_t size, int64_t step) {
    coordinate_ = coordinate;
    stride_ = stride;
    size_ = size;
    step_ = step;
    ++generation_;
  }

  // Where `device` goes, or -1 where no device of the module is.
  int64_t operator()(int64_t device) {
    const auto d = static_cast<size_t>(device);
    if (stamp_[d] != generation_) {
      network_.CoordinatesOf(device, &at_);
      const int64_t value = at_[coordinate_];
      const int64_t digit = value / stride_ % size_;
      at_[coordinate_] = value + ((digit + step_) % size_ - digit) * stride_;
      moved_[d] = network_.DeviceAt(at_);
      stamp_[d] = generation_;
    }
    return moved_[d];
  }

 private:
  const Network& network_;
  std::vector<int64_t> moved_;
  std::vector<uint32_t> stamp_;
  uint32_t generation_ = 0;
  std::vector<int64_t> at_;
  size_t coordinate_ = 0;
  int64_t stride_ = 1, size_ = 1, step_ = 0;
};

// One collective's plan as the rings and chains it is made of, indexed for
// the checks of a move: its messages are a function of these lines (each
// ring's steps go round it, each chain's along it), so a move that maps
// every line onto a line of the same kind, a ring up to a rotation and a
// chain exactly, maps the collective's messages onto its messages. An
// all-gather, reduce-scatter or all-reduce has the phases of
// cost::AllGatherPhases; an all-to-all its groups as rings (its rounds
// send from member i to member i + k).
class Lines {
 public:
  Lines(const std::vector<std::vector<int64_t>>& groups, bool phased, const cost::Target& target,
        int64_t devices)
      : devices_(devices) {
    for (const auto& group : groups) {
      std::vector<cost::CollectivePhase> phases;
      if (phased) {
        phases = cost::AllGatherPhases(group, 1.0, target);
      } else {
        cost::CollectivePhase ring;
        ring.lines = {group};
        phases.push_back(std::move(ring));
      }
      for (size_t p = 0; p < phases.size(); ++p) {
        const cost::CollectivePhase& phase = phases[p];
        for (const auto& members : phase.lines) {
          lines_.push_back({.members = members,
                            .phase = p,
                            .kind = phase.kind,
                            .dim = phase.dim,
                            .bytes = phase.bytes,
                            .routed = phase.routed});
        }
      }
    }
    for (size_t l = 0; l < lines_.size(); ++l) {
      const Line& line = lines_[l];
      if (line_of_.size() <= line.phase) {
        line_of_.resize(line.phase + 1, std::vector<int32_t>(static_cast<size_t>(devices_), -1));
        position_.resize(line.phase + 1, std::vector<int32_t>(static_cast<size_t>(devices_), 0));
      }
      for (size_t i = 0; i < line.members.size(); ++i) {
        const auto device = static_cast<size_t>(line.members[i]);
        // Messages are named by (phase, direction, step, source): a device
        // on two lines of a phase would name two messages alike.
        if (line_of_[line.phase][device] >= 0) well_formed_ = false;
        line_of_[line.phase][device] = static_cast<int32_t>(l);
        position_[line.phase][device] = static_cast<int32_t>(i);
      }
    }
  }

  // Whether `moved` (device -> device) maps every line onto a line of the
  // same phase and kind.
  bool MapsOntoItself(Move& moved) const {
    if (!well_formed_) return false;
    for (const Line& line : lines_) {
      if (line.members.empty()) continue;
      const int64_t first = moved(line.members[0]);
      if (first < 0) return false;
      const int32_t image_id = line_of_[line.phase][static_cast<size_t>(first)];
      if (image_id < 0) return false;
      const Line& image = lines_[static_cast<size_t>(image_id)];
      if (image.members.size() != line.members.size() || image.kind != line.kind ||
          image.dim != line.dim || image.bytes != line.bytes || image.routed != line.routed) {
        return false;
      }
      const auto offset = static_cast<size_t>(position_[line.phase][static_cast<size_t>(first)]);
      if (line.kind == cost::CollectivePhase::Kind::kLine && offset != 0) return false;
      const size_t n = line.members.size();
      for (size_t i = 1; i < n; ++i) {
        if (moved(line.members[i]) != image.members[(offset + i) % n]) {
          return false;
        }
      }
    }
    return true;
  }

 private:
  struct Line {
    std::vector<int64_t> members;
    size_t phase = 0;
    cost::CollectivePhase::Kind kind = cost::CollectivePhase::Kind::kRing;
    size_t dim = 0;
    double bytes = 0;
    bool routed = false;
  };
  int64_t devices_;
  bool well_formed_ = true;
  std::vector<Line> lines_;
  // Per phase, per device: the line it is on in that phase (-1: none), and
  // its place in it.
  std::vector<std::vector<int32_t>> line_of_;
  std::vector<std::vector<int32_t>> position_;
};

class Pairs {
 public:
  Pairs(const std::vector<std::pair<int64_t, int64_t>>& pairs, int64_t devices)
      : devices_(devices) {
    for (const auto& [source, target] : pairs) {
      if (source != target) keys_.push_back(Key(source, target));
    }
    std::sort(keys_.begin(), keys_.end());
  }

  bool MapsOntoItself(Move& moved) const {
    for (const uint64_t key : keys_) {
      const auto source = moved(static_cast<int64_t>(key / static_cast<uint64_t>(devices_)));
      const auto target = moved(static_cast<int64_t>(key % static_cast<uint64_t>(devices_)));
      if (source < 0 || target < 0 ||
          !std::binary_search(keys_.begin(), keys_.end(), Key(source, target))) {
        return false;
      }
    }
    return true;
  }

 private:
  uint64_t Key(int64_t source, int64_t target) const {
    return static_cast<uint64_t>(source) * static_cast<uint64_t>(devices_) +
           static_cast<uint64_t>(target);
  }
  int64_t devices_;
  std::vector<uint64_t> keys_;
};

// Every distinct participant structure of the module's collectives, or
// nothing where one cannot be read.
struct Structures {
  std::vector<Lines> lines;
  std::vector<Pairs> pairs;
};

std::optional<Structures> StructuresOf(const ir::Module& module, const ir::DeviceGrid& grid,
                                       const cost::Target& target) {
  std::set<std::pair<std::vector<std::vector<int64_t>>, bool>> group_sets;  // groups, phased
  std::set<std::vector<std::pair<int64_t, int64_t>>> pair_sets;
  for (const auto& computation : module.computations()) {
    for (const auto& owned : computation->instructions()) {
      const cost::TransferRole role = cost::TransferRoleOf(*owned);
      if (role != cost::TransferRole::kSynchronous && role != cost::TransferRole::kStart) continue;
      const ir::Instruction* op = cost::TransferOp(*owned);
      if (op == nullptr) continue;
      auto participants = sim::ParticipantsOf(*op, grid);
      if (!participants.ok()) return std::nullopt;
      if (!participants->pairs.empty()) pair_sets.insert(std::move(participants->pairs));
      if (!participants->groups.empty()) {
        const bool phased = participants->opcode != Opcode::kAllToAll;
        group_sets.emplace(std::move(participants->groups), phased);
      }
    }
  }
  Structures structures;
  for (const auto& [groups, phased] : group_sets) {
    structures.lines.emplace_back(groups, phased, target, grid.size());
  }
  for (const auto& pairs : pair_sets) structures.pairs.emplace_back(pairs, grid.size());
  return structures;
}

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    divisors.push_back(d);
    if (d != n / d) divisors.push_back(n / d);
  }
  std::sort(divisors.begin(), divisors.end());
  return divisors;
}

}  // namespace

Symmetry Symmetry::None(int64_t devices) {
  Symmetry symmetry;
  symmetry.class_of_.resize(static_cast<size_t>(devices));
  symmetry.representatives_.resize(static_cast<size_t>(devices));
  for (int64_t d = 0; d < devices; ++d) {
    symmetry.class_of_[static_cast<size_t>(d)] = d;
    symmetry.representatives_[static_cast<size_t>(d)] = d;
  }
  symmetry.description_ = "none: every device simulated";
  return symmetry;
}

Symmetry Symmetry::Find(const ir::Module& module, const ir::DeviceGrid& grid,
                        const cost::Target& target, const Network& network) {
  const int64_t devices = grid.size();
  if (network.scaled() || devices < 2) return None(devices);
  const std::optional<Structures> structures = StructuresOf(module, grid, target);
  if (!structures) return None(devices);
  const std::vector<Network::Coordinate> coordinates = network.Coordinates();

  // The smallest step of a digit's moves that maps the devices, and every
  // collective, onto themselves (its size: no move does).
  Move moved(network, devices);
  std::map<std::tuple<size_t, int64_t, int64_t>, int64_t> memo;
  const auto smallest_step = [&](const Digit& digit) {
    const auto key = std::make_tuple(digit.coordinate, digit.stride, digit.size);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    int64_t found = digit.size;
    for (int64_t step : Divisors(digit.size)) {
      if (step == digit.size) break;
      moved.Reset(digit.coordinate, digit.stride, digit.size, step);
      // The collectives first (a move that fails usually fails on the first
      // line), then every device must land on one.
      bool valid = true;
      for (const Lines& lines : structures->lines) valid = valid && lines.MapsOntoItself(moved);
      for (const Pairs& pairs : structures->pairs) valid = valid && pairs.MapsOntoItself(moved);
      for (int64_t d = 0; d < devices && valid; ++d) valid = moved(d) >= 0;
      if (valid) {
        found = step;
        break;
      }
    }
    memo[key] = found;
    return found;
  };

  std::vector<Digit> digits;
  for (size_t c = 0; c < coordinates.size(); ++c) {
    const Network::Coordinate& coordinate = coordinates[c];
    const Digit whole{
        .coordinate = c, .stride = 1, .size = coordinate.size, .step = coordinate.size};
    if (coordinate.kind == Network::Coordinate::Kind::kFixed || coordinate.size < 2) {
      digits.push_back(whole);
      continue;
    }
    // The reading of the coordinate with fewest classes: whole, or (for an
    // interchangeable one) split as high x low digits.
    std::vector<Digit> best = {whole};
    best[0].step = smallest_step(whole);
    // A whole coordinate that moves by one is one class already.
    if (coordinate.kind == Network::Coordinate::Kind::kInterchangeable && best[0].step > 1) {
      for (int64_t low : Divisors(coordinate.size)) {
        if (low == 1 || low == coordinate.size) continue;
        Digit low_digit{.coordinate = c, .stride = 1, .size = low, .step = 1};
        Digit high_digit{.coordinate = c, .stride = low, .size = coordinate.size / low, .step = 1};
        low_digit.step = smallest_step(low_digit);
        high_digit.step = smallest_step(high_digit);
        if (low_digit.step * high_digit.step <
            best[0].step * (best.size() > 1 ? best[1].step : 1)) {
          best = {high_digit, low_digit};
        }
      }
    }
    digits.insert(digits.end(), best.begin(), best.end());
  }
  return FromDigits(network, devices, digits);
}

Symmetry Symmetry::FromDigits(const Network& network, int64_t devices,
                              const std::vector<Digit>& digits) {
  Symmetry symmetry;
  symmetry.network_ = &network;
  int64_t classes = 1;
  for (const Digit& digit : digits) classes *= digit.step;
  // A class is numbered by its residues, then the numbers are made dense:
  // on a torus the module may leave whole classes of chips unused.
  symmetry.class_of_.resize(static_cast<size_t>(devices));
  std::vector<int64_t> representative_of(static_cast<size_t>(classes), -1);
  std::vector<int64_t> at;
  for (int64_t d = 0; d < devices; ++d) {
    network.CoordinatesOf(d, &at);
    int64_t index = 0;
    bool representative = true;
    for (const Digit& digit : digits) {
      const int64_t value = at[digit.coordinate] / digit.stride % digit.size;
      index = index * digit.step + value % digit.step;
      representative = representative && value < digit.step;
    }
    symmetry.class_of_[static_cast<size_t>(d)] = index;
    if (representative) representative_of[static_cast<size_t>(index)] = d;
  }
  std::vector<int64_t> dense(static_cast<size_t>(classes), -1);
  for (int64_t index = 0; index < classes; ++index) {
    const int64_t device = representative_of[static_cast<size_t>(index)];
    if (device < 0) continue;
    dense[static_cast<size_t>(index)] = static_cast<int64_t>(symmetry.representatives_.size());
    symmetry.representatives_.push_back(device);
  }
  for (int64_t& index : symmetry.class_of_) index = dense[static_cast<size_t>(index)];
  classes = symmetry.classes();
  const auto coordinates = network.Coordinates();
  std::vector<std::string> moves;
  for (const Digit& digit : digits) {
    if (digit.step == digit.size) continue;
    const std::string& name = coordinates[digit.coordinate].name;
    const int64_t coordinate_size = coordinates[digit.coordinate].size;
    moves.push_back(digit.size == coordinate_size
                        ? fmt::format("{} by {} of {}", name, digit.step, digit.size)
                        : fmt::format("{} digit of {} (stride {}) by {}", name, digit.size,
                                      digit.stride, digit.step));
  }
  symmetry.description_ = moves.empty()
                              ? "none: every device simulated"
                              : fmt::format("{} class(es) of {} devices (moves: {})", classes,
                                            devices / classes, fmt::join(moves, ", "));
  return symmetry;
}

LinkId Symmetry::CanonicalLink(LinkId link) const {
  if (network_ == nullptr) return link;
  const int64_t device = network_->LinkDevice(link);
  return network_->LinkAt(link, Representative(ClassOf(device)));
}

}  // namespace loom::sim
