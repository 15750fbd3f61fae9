// Invariants, apart from errors. An Error (support/status.h) is about the
// input: a user can fix it. A broken invariant is a bug in Loom (an index the
// verifier should have refused, an Expected read without looking at it): it
// stops the process at once with a message naming the place, and never
// travels as an exception, which would be a second, hidden error model.
#pragma once

#include <string>

namespace loom {

// Prints "loom: internal error at FILE:LINE: WHAT" and aborts.
[[noreturn]] void InvariantBroken(const char* file, int line, const std::string& what);

}  // namespace loom

// LOOM_CHECK(condition, message): `message` (anything a std::string can be
// made of) is evaluated only when the condition fails.
#define LOOM_CHECK(condition, message)                        \
  do {                                                        \
    if (!(condition)) [[unlikely]]                            \
      ::loom::InvariantBroken(__FILE__, __LINE__, (message)); \
  } while (false)

namespace loom {

// The value `map` holds for `key`, which it must hold: a lookup whose miss
// is a bug, not bad input (std::map::at would throw instead).
template <typename Map, typename Key>
auto& MustFind(Map& map, const Key& key) {
  auto it = map.find(key);
  LOOM_CHECK(it != map.end(), "a lookup that cannot miss missed");
  return it->second;
}

}  // namespace loom
