#include "simulator/buffer_layout.h"

#include <algorithm>
#include <array>
#include <limits>

namespace shardscope::sim {

namespace {
int64_t RoundUp(int64_t v, int64_t m) { return m > 1 ? (v + m - 1) / m * m : v; }
}  // namespace

int64_t SublaneTile(const ChipSpec& chip, PrimitiveType type) {
  if (chip.layout_sublanes <= 0) return 0;
  const int64_t bits = PrimitiveTypeBitWidth(type);
  if (bits <= 0) return 0;
  return chip.layout_sublanes * std::max<int64_t>(1, 32 / bits);
}

int64_t SecondMinorTile(const ChipSpec& chip, PrimitiveType type, int64_t rows) {
  const int64_t full = SublaneTile(chip, type);
  if (full <= 0 || rows >= full) return full;
  // Fewer rows than a full tile: the smallest power-of-two tile that holds them, at least one
  // 32-bit word of packed elements (f32[1,N] -> T(1,128), bf16[1,N] -> T(2,128)(2,1)).
  const int64_t bits = PrimitiveTypeBitWidth(type);
  int64_t tile = std::max<int64_t>(1, bits > 0 ? 32 / bits : 1);
  while (tile < rows) tile *= 2;
  return std::min(tile, full);
}

namespace {

// Bytes of `shape` tiled with `minor` as its minor dimension and `second` (-1: none) as its
// second-minor one. Saturating, like Shape::ByteSize: a nonsense shape must not wrap around.
int64_t TiledBytes(const Shape& shape, const ChipSpec& chip, int64_t minor, int64_t second) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t bytes = PrimitiveTypeBytes(shape.type);
  for (int64_t k = 0; k < shape.rank(); ++k) {
    int64_t d = shape.dims[static_cast<size_t>(k)];
    if (k == minor) d = RoundUp(d, chip.layout_lanes);
    else if (k == second) d = RoundUp(d, SecondMinorTile(chip, shape.type, d));
    bytes = d != 0 && bytes > kMax / d ? kMax : bytes * d;
  }
  return bytes;
}

}  // namespace

int64_t PaddedByteSize(const Shape& shape, const ChipSpec& chip) {
  if (shape.IsTuple()) {
    int64_t sum = 0;
    for (const Shape& e : shape.tuple) sum += PaddedByteSize(e, chip);
    return sum;
  }
  if (!shape.IsArray()) return shape.ByteSize();
  if (chip.layout_lanes <= 0 || shape.rank() == 0) return shape.ByteSize();
  const int64_t rank = shape.rank();
  if (shape.has_layout && static_cast<int64_t>(shape.minor_to_major.size()) == rank) {
    // A layout the module fixed (a dump from XLA): its own minor dimensions.
    const int64_t minor = shape.minor_to_major[0];
    if (minor < 0 || minor >= rank) return shape.ByteSize();
    int64_t second = rank >= 2 ? shape.minor_to_major[1] : -1;
    if (second >= rank) second = -1;
    return TiledBytes(shape, chip, minor, second);
  }
  if (rank == 1) return TiledBytes(shape, chip, 0, -1);
  // No layout yet: the one layout assignment would choose, modelled as the least padded choice of
  // minor and second-minor dimension; XLA's default (the last two) when nothing pads less.
  constexpr int64_t kInline = 12;
  if (rank > kInline) {
    int64_t best = TiledBytes(shape, chip, rank - 1, rank - 2);
    for (int64_t minor = 0; minor < rank; ++minor)
      for (int64_t second = 0; second < rank; ++second)
        if (second != minor) best = std::min(best, TiledBytes(shape, chip, minor, second));
    return best;
  }
  // TiledBytes for every choice, with each dimension's two roundings worked out once (every value
  // of every simulated program is sized here: this was 6000 instructions a rank-4 shape).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::array<int64_t, kInline> as_minor{}, as_second{};
  for (int64_t k = 0; k < rank; ++k) {
    const int64_t d = shape.dims[static_cast<size_t>(k)];
    as_minor[static_cast<size_t>(k)] = RoundUp(d, chip.layout_lanes);
    as_second[static_cast<size_t>(k)] = RoundUp(d, SecondMinorTile(chip, shape.type, d));
  }
  const int64_t element = PrimitiveTypeBytes(shape.type);
  auto tiled = [&](int64_t minor, int64_t second) {
    int64_t bytes = element;
    for (int64_t k = 0; k < rank; ++k) {
      const int64_t d = k == minor    ? as_minor[static_cast<size_t>(k)]
                        : k == second ? as_second[static_cast<size_t>(k)]
                                      : shape.dims[static_cast<size_t>(k)];
      bytes = d != 0 && bytes > kMax / d ? kMax : bytes * d;
    }
    return bytes;
  };
  int64_t best = tiled(rank - 1, rank - 2);
  for (int64_t minor = 0; minor < rank; ++minor)
    for (int64_t second = 0; second < rank; ++second)
      if (second != minor) best = std::min(best, tiled(minor, second));
  return best;
}

}  // namespace shardscope::sim
