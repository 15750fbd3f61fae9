// sort with a comparator that is one compare of one operand's elements
// (ir/sort.h): each slice's keys loaded once into 64-bit keys that order as
// the compare does, the positions sorted stably by them, every operand
// permuted alike. The same std::stable_sort over the same positions with
// the same answers as the reference's comparator calls: the same order.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <vector>

#include "exec/cpu/kernels.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"

namespace loom::exec::cpu {
namespace {

using ir::PrimitiveType;

// Calls run(before) with `direction` as "a goes before b" over two keys.
template <typename Run>
void WithDirection(ir::ComparisonDirection direction, Run&& run) {
  switch (direction) {
    case ir::ComparisonDirection::kEq:
      return run([](auto a, auto b) { return a == b; });
    case ir::ComparisonDirection::kNe:
      return run([](auto a, auto b) { return a != b; });
    case ir::ComparisonDirection::kLt:
      return run([](auto a, auto b) { return a < b; });
    case ir::ComparisonDirection::kLe:
      return run([](auto a, auto b) { return a <= b; });
    case ir::ComparisonDirection::kGt:
      return run([](auto a, auto b) { return a > b; });
    case ir::ComparisonDirection::kGe:
      return run([](auto a, auto b) { return a >= b; });
  }
}

uint64_t LoadBits(const HostArray& array, int64_t i) {
  uint64_t bits = 0;
  const int64_t width = array.element_bytes();
  std::memcpy(&bits, array.data + i * width, static_cast<size_t>(width));  // little-endian
  return bits;
}

template <typename T, typename From>
void PermuteAs(const HostArray& in, const HostArray& out, int64_t start, int64_t stride,
               From&& from, size_t n) {
  const T* source = reinterpret_cast<const T*>(in.data) + start;
  T* target = reinterpret_cast<T*>(out.data) + start;
  for (size_t j = 0; j < n; ++j)
    target[static_cast<int64_t>(j) * stride] = source[from(j) * stride];
}

// Element j of the slice at `start` of `out` is element from(j) of `in`'s.
template <typename From>
void Permute(const HostArray& in, const HostArray& out, int64_t start, int64_t stride, From&& from,
             size_t n) {
  switch (in.element_bytes()) {
    case 1:
      return PermuteAs<uint8_t>(in, out, start, stride, from, n);
    case 2:
      return PermuteAs<uint16_t>(in, out, start, stride, from, n);
    case 4:
      return PermuteAs<uint32_t>(in, out, start, stride, from, n);
    case 8:
      return PermuteAs<uint64_t>(in, out, start, stride, from, n);
    default: {
      const int64_t width = in.element_bytes();
      for (size_t j = 0; j < n; ++j) {
        std::memcpy(out.data + (start + static_cast<int64_t>(j) * stride) * width,
                    in.data + (start + from(j) * stride) * width, static_cast<size_t>(width));
      }
    }
  }
}

// Sorts positions 0..n-1 (of type P) of every slice by keys of type K
// that load(element index) gives.
template <typename K, typename P, typename Load>
void SortSlicesBy(const ir::SortSlices& slices, ir::ComparisonDirection direction, Load&& load,
                  std::span<const HostArray> operands, std::span<const HostArray> outs) {
  const auto n = static_cast<size_t>(slices.length);
  // Each key beside its position, both as narrow as they can be: the sort
  // moves them together, in cache.
  struct Keyed {
    K key;
    P position;
  };
  std::vector<Keyed> keyed(n);
  WithDirection(direction, [&](auto before) {
    for (int64_t s = 0; s < slices.count; ++s) {
      const int64_t start = slices.Start(s);
      for (size_t j = 0; j < n; ++j) {
        const auto position = static_cast<int64_t>(j);
        keyed[j] = {load(start + position * slices.stride), static_cast<P>(position)};
      }
      std::stable_sort(keyed.begin(), keyed.end(),
                       [&](const Keyed& a, const Keyed& b) { return before(a.key, b.key); });
      for (size_t k = 0; k < operands.size(); ++k) {
        Permute(
            operands[k], outs[k], start, slices.stride,
            [&](size_t j) { return static_cast<int64_t>(keyed[j].position); }, n);
      }
    }
  });
}

// One operand whose keys map back to its elements bit for bit: the keys
// alone sorted (the same comparisons, the same moves), then written back
// through store(element index, key).
template <typename K, typename Load, typename Store>
void SortKeysOnly(const ir::SortSlices& slices, ir::ComparisonDirection direction, Load&& load,
                  Store&& store) {
  const auto n = static_cast<size_t>(slices.length);
  std::vector<K> keys(n);
  WithDirection(direction, [&](auto before) {
    for (int64_t s = 0; s < slices.count; ++s) {
      const int64_t start = slices.Start(s);
      for (size_t j = 0; j < n; ++j)
        keys[j] = load(start + static_cast<int64_t>(j) * slices.stride);
      std::stable_sort(keys.begin(), keys.end(), before);
      for (size_t j = 0; j < n; ++j)
        store(start + static_cast<int64_t>(j) * slices.stride, keys[j]);
    }
  });
}

template <typename K, typename Load>
void SortSlicesBy(const ir::SortSlices& slices, ir::ComparisonDirection direction, Load&& load,
                  std::span<const HostArray> operands, std::span<const HostArray> outs) {
  if (slices.length <= int64_t{UINT32_MAX}) {
    SortSlicesBy<K, uint32_t>(slices, direction, load, operands, outs);
  } else {
    SortSlicesBy<K, int64_t>(slices, direction, load, operands, outs);
  }
}

// Calls use(load), load(i) a key of element i of `keys` that orders as
// compare does over the elements (TOTALORDER's or IEEE's for floats), as
// narrow as the type allows: keys of 32 bits or fewer as 32-bit ones.
template <typename Use>
void WithOrderKeys(const HostArray& keys, bool total_order, Use&& use) {
  const PrimitiveType type = keys.type();
  const int width = ir::PrimitiveTypeBits(type);
  const bool narrow = width <= 32;
  if (ir::IsFloatingPoint(type) && total_order) {
    // Loaded as their own width of bits, the key computed inline.
    const auto total = [&]<typename Bits, typename Key>(Bits, Key) {
      const Bits* bits = keys.as<Bits>();
      return use([bits, width](int64_t i) {
        return static_cast<Key>(scalar::TotalOrderKey(bits[i], width));
      });
    };
    switch (width) {
      case 8:
        return total(uint8_t{}, int32_t{});
      case 16:
        return total(uint16_t{}, int32_t{});
      case 32:
        return total(uint32_t{}, int32_t{});
      case 64:
        return total(uint64_t{}, int64_t{});
      default:
        return use([&](int64_t i) { return scalar::TotalOrderKey(LoadBits(keys, i), width); });
    }
  }
  if (ir::IsFloatingPoint(type)) {
    // IEEE's comparisons on the values (exact as floats for the narrow
    // types): a NaN is unordered.
    const auto value = [&](int64_t i) { return LoadDouble(keys.data, type, i); };
    if (narrow) return use([&](int64_t i) { return static_cast<float>(value(i)); });
    return use(value);
  }
  // Unsigned ones (and pred) with the sign bit flipped order as signed.
  const bool is_unsigned = scalar::IsUnsignedLike(type);
  const auto bits = [&](int64_t i) { return static_cast<uint64_t>(LoadInt(keys.data, type, i)); };
  if (narrow) {
    const uint32_t flip = is_unsigned ? uint32_t{1} << 31 : 0;
    return use(
        [&](int64_t i) { return static_cast<int32_t>(static_cast<uint32_t>(bits(i)) ^ flip); });
  }
  const uint64_t flip = is_unsigned ? uint64_t{1} << 63 : 0;
  return use([&](int64_t i) { return static_cast<int64_t>(bits(i) ^ flip); });
}

// The first k of each slice of n keys in the order `first` (a strict
// total order over key and position, so no two are equivalent and any
// selection finds the stable sort's k first): a partial sort for a few,
// else nth_element, then the k sorted. Calls emit(slice, j, position) for the j-th of them.
template <typename K, typename P, bool kLargest, typename Load, typename Emit>
void FirstKOfSlices(int64_t count, int64_t n, int64_t k, Load&& load, Emit&& emit) {
  struct Keyed {
    K key;
    P position;
  };
  const auto first = [](const Keyed& a, const Keyed& b) {
    if (a.key != b.key) return kLargest ? a.key > b.key : a.key < b.key;
    return a.position < b.position;
  };
  std::vector<Keyed> keyed(static_cast<size_t>(n));
  for (int64_t s = 0; s < count; ++s) {
    for (int64_t j = 0; j < n; ++j)
      keyed[static_cast<size_t>(j)] = {load(s * n + j), static_cast<P>(j)};
    const auto kth = keyed.begin() + k;
    if (k < n / 8) {
      // Few: a heap of k, which most elements only pass by.
      std::partial_sort(keyed.begin(), kth, keyed.end(), first);
    } else {
      if (k < n) std::nth_element(keyed.begin(), kth, keyed.end(), first);
      std::sort(keyed.begin(), kth, first);
    }
    for (int64_t j = 0; j < k; ++j)
      emit(s, j, static_cast<int64_t>(keyed[static_cast<size_t>(j)].position));
  }
}

}  // namespace

Status Sort(const ir::Instruction& op, const ir::SortKey& key, std::span<const HostArray> operands,
            std::span<const HostArray> outs) {
  const std::vector<int64_t> dims = op.attrs().dimensions.value_or(std::vector<int64_t>{});
  if (operands.empty() || operands.size() != outs.size() || dims.size() != 1 || key.operand < 0 ||
      key.operand >= static_cast<int64_t>(operands.size())) {
    return KernelError(op, "sort needs operands, one dimension and a key among them");
  }
  const ir::Shape& shape = *operands[0].shape;
  if (dims[0] < 0 || dims[0] >= shape.rank()) return KernelError(op, "bad sort dimension");
  for (size_t k = 0; k < operands.size(); ++k) {
    if (operands[k].data == outs[k].data || operands[k].elements() != outs[k].elements()) {
      return KernelError(op, "sort writes new arrays of its operands' shapes");
    }
  }
  const ir::SortSlices slices = ir::SlicesAlong(shape.dims(), dims[0]);
  const HostArray& keys = operands[static_cast<size_t>(key.operand)];
  if (keys.type() == PrimitiveType::kF32 && key.total_order && operands.size() == 1) {
    // The total-order key of an f32 (scalar::TotalOrderKey, inline) is a
    // bijection of its bits.
    const auto* in = keys.as<uint32_t>();
    float* out = outs[0].as<float>();
    SortKeysOnly<int32_t>(
        slices, key.direction,
        [&](int64_t i) {
          const uint32_t bits = in[i], magnitude = bits & 0x7fffffffu;
          return bits >> 31 ? -static_cast<int32_t>(magnitude) - 1
                            : static_cast<int32_t>(magnitude);
        },
        [&](int64_t i, int32_t k) {
          const uint32_t magnitude = k < 0 ? static_cast<uint32_t>(-(k + 1)) : k;
          out[i] = std::bit_cast<float>(k < 0 ? magnitude | 0x80000000u : magnitude);
        });
    return OkStatus();
  }
  WithOrderKeys(keys, key.total_order, [&](auto load) {
    using K = decltype(load(int64_t{0}));
    SortSlicesBy<K>(slices, key.direction, load, operands, outs);
  });
  return OkStatus();
}

Status TopK(const ir::Instruction& op, int64_t k, const ir::SortKey& key, const HostArray& operand,
            const HostArray& values, const HostArray& positions) {
  const ir::Shape& shape = *operand.shape;
  if (shape.rank() == 0 || values.type() != operand.type() ||
      positions.type() != PrimitiveType::kS32) {
    return KernelError(op,
                       "topk takes an array of rank 1 or more into its values and s32 positions");
  }
  const int64_t n = shape.dims().back();
  const int64_t count = n == 0 ? 0 : operand.elements() / n;
  if (n > int64_t{INT32_MAX}) return KernelError(op, "topk's positions outgrow s32");
  if (k > n || values.elements() != count * k || positions.elements() != count * k) {
    return KernelError(op, "topk's outputs hold k of each last-dimension slice");
  }
  int32_t* position_out = positions.as<int32_t>();
  if (!key.total_order || (key.direction != ir::ComparisonDirection::kGt &&
                           key.direction != ir::ComparisonDirection::kLt)) {
    return KernelError(op, "topk selects by GT or LT in TOTALORDER only");
  }
  const bool largest = key.direction == ir::ComparisonDirection::kGt;
  const auto select = [&]<typename T>(T) {
    const T* in = operand.as<T>();
    T* out = values.as<T>();
    const auto emit = [&](int64_t s, int64_t j, int64_t position) {
      out[s * k + j] = in[s * n + position];
      position_out[s * k + j] = static_cast<int32_t>(position);
    };
    WithOrderKeys(operand, /*total_order=*/true, [&](auto load) {
      using K = decltype(load(int64_t{0}));
      if (largest) {
        FirstKOfSlices<K, uint32_t, true>(count, n, k, load, emit);
      } else {
        FirstKOfSlices<K, uint32_t, false>(count, n, k, load, emit);
      }
    });
  };
  switch (operand.element_bytes()) {
    case 1:
      select(uint8_t{});
      break;
    case 2:
      select(uint16_t{});
      break;
    case 4:
      select(uint32_t{});
      break;
    case 8:
      select(uint64_t{});
      break;
    default:
      return KernelError(op, "topk of elements that are not 1, 2, 4 or 8 bytes");
  }
  return OkStatus();
}

}  // namespace loom::exec::cpu
