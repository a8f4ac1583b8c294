#include "simulator/buffer_layout.h"

#include <algorithm>
#include <limits>
#include <vector>

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

int64_t PaddedByteSize(const Shape& shape, const ChipSpec& chip) {
  if (shape.IsTuple()) {
    int64_t sum = 0;
    for (const Shape& e : shape.tuple) sum += PaddedByteSize(e, chip);
    return sum;
  }
  if (!shape.IsArray()) return shape.ByteSize();
  if (chip.layout_lanes <= 0 || shape.rank() == 0) return shape.ByteSize();
  std::vector<int64_t> dims = shape.dims;
  const int64_t rank = shape.rank();
  const bool layout = shape.has_layout && static_cast<int64_t>(shape.minor_to_major.size()) == rank;
  const int64_t minor = layout ? shape.minor_to_major[0] : rank - 1;
  if (minor < 0 || minor >= rank) return shape.ByteSize();
  dims[static_cast<size_t>(minor)] = RoundUp(dims[static_cast<size_t>(minor)], chip.layout_lanes);
  if (rank >= 2) {
    const int64_t second = layout ? shape.minor_to_major[1] : rank - 2;
    if (second >= 0 && second < rank) {
      dims[static_cast<size_t>(second)] = RoundUp(dims[static_cast<size_t>(second)], SecondMinorTile(chip, shape.type, dims[static_cast<size_t>(second)]));
    }
  }
  // Saturating, like Shape::ByteSize: a nonsense shape must not wrap around to a small size.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t bytes = PrimitiveTypeBytes(shape.type);
  for (int64_t d : dims) bytes = d != 0 && bytes > kMax / d ? kMax : bytes * d;
  return bytes;
}

}  // namespace shardscope::sim
