// The property tests' random source: std::mt19937_64 (whose sequence the
// standard fixes) with our own reductions to ranges, since the library's
// distributions differ between platforms and every platform must draw the
// same cases from a seed.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace loom::test {

class PortableRandom {
 public:
  explicit PortableRandom(uint64_t seed) : engine_(seed) {}
  int64_t Int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(engine_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(double p) { return static_cast<double>(engine_() >> 11) * 0x1p-53 < p; }
  template <typename T>
  T Pick(const std::vector<T>& values) {
    return values[static_cast<size_t>(Int(0, static_cast<int64_t>(values.size()) - 1))];
  }
  template <typename T>
  void Shuffle(std::vector<T>& values) {
    for (size_t i = values.size(); i > 1; --i) {
      std::swap(values[i - 1], values[static_cast<size_t>(Int(0, static_cast<int64_t>(i) - 1))]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace loom::test
