#include "partitioner/spmd/halo.h"

#include <algorithm>
#include <limits>
#include <map>

namespace shardscope::spmd {

namespace {
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
}  // namespace

HaloPlan PlanHalo(int64_t shard, int64_t tiles, int64_t full, const std::vector<int64_t>& start, int64_t size,
                  bool x_sharded, bool pad_is_zero, const std::vector<int64_t>& need) {
  HaloPlan p;
  p.shard = shard;
  p.tiles = tiles;
  p.full = full;
  p.size = size = std::max<int64_t>(size, 0);
  const int64_t T = static_cast<int64_t>(start.size());
  if (shard < 1 || tiles < 1 || (!need.empty() && static_cast<int64_t>(need.size()) != T)) {
    p.link_rows = std::numeric_limits<int64_t>::max() / 4;  // nothing to plan: never worth it
    return p;
  }
  auto at = [](const std::vector<int64_t>& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  auto needed = [&](int64_t i) { return need.empty() ? size : std::clamp<int64_t>(at(need, i), 0, size); };
  // The in-range part of what tile i needs: [lo, hi) in full coordinates (empty: lo >= hi).
  auto valid_lo = [&](int64_t i) { return std::max<int64_t>(at(start, i), 0); };
  auto valid_hi = [&](int64_t i) { return std::min(at(start, i) + needed(i), full); };
  auto has_data = [&](int64_t i) { return valid_lo(i) < valid_hi(i); };
  // The pieces, keyed by hop: for each shard the union of the rows any tile needs from it.
  std::map<int64_t, HaloPiece> by_hop;
  if (x_sharded) {
    for (int64_t i = 0; i < T; ++i) {
      if (!has_data(i)) continue;
      const int64_t lo = valid_lo(i) - i * shard, hi = valid_hi(i) - i * shard;  // relative to own shard
      for (int64_t m = FloorDiv(lo, shard); m * shard < hi; ++m) {
        const int64_t from = std::max(lo - m * shard, int64_t{0}), to = std::min(hi - m * shard, shard);
        auto it = by_hop.find(m);
        if (it == by_hop.end()) by_hop[m] = {m, from, to};
        else it->second = {m, std::min(it->second.from, from), std::max(it->second.to, to)};
      }
    }
    if (by_hop.empty()) by_hop[0] = {0, 0, std::min<int64_t>(1, shard)};  // nothing in range is needed
  } else {
    by_hop[0] = {0, 0, full};
  }
  int64_t total = 0;
  std::map<int64_t, int64_t> cum;  // hop -> layout index of its first row
  for (const auto& [m, piece] : by_hop) {
    cum[m] = total;
    total += piece.to - piece.from;
    p.pieces.push_back(piece);
    if (m != 0) {
      ++p.permutes;
      p.rows_received += piece.to - piece.from;
      p.link_rows += (piece.to - piece.from) * (m < 0 ? -m : m);
    }
  }
  // Layout index of full element g as held by tile i, or -1 when the layout does not hold it.
  auto index_of = [&](int64_t i, int64_t g) -> int64_t {
    const int64_t rel = x_sharded ? g - i * shard : g;
    const int64_t m = x_sharded ? FloorDiv(rel, shard) : 0;
    auto it = by_hop.find(m);
    if (it == by_hop.end()) return -1;
    const int64_t row = rel - m * shard;
    if (row < it->second.from || row >= it->second.to) return -1;
    return cum[m] + row - it->second.from;
  };
  // Window offsets: tiles holding data are pinned by their first in-range element.
  std::vector<int64_t> off(static_cast<size_t>(T), 0);
  int64_t min_off = 0, max_end = total;
  for (int64_t i = 0; i < T; ++i) {
    if (!has_data(i)) continue;
    off[static_cast<size_t>(i)] = index_of(i, valid_lo(i)) - (valid_lo(i) - at(start, i));
    min_off = std::min(min_off, off[static_cast<size_t>(i)]);
    max_end = std::max(max_end, off[static_cast<size_t>(i)] + size);
  }
  p.pad_low = -min_off;
  p.pad_high = max_end - total;
  const int64_t padded = total + p.pad_low + p.pad_high;
  if (padded < size) p.pad_high += size - padded;
  p.offsets.resize(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    int64_t o = off[static_cast<size_t>(i)] + p.pad_low;
    // Tiles needing nothing in range: any window will do (masked where needed below).
    if (!has_data(i)) o = std::clamp<int64_t>(o, 0, total + p.pad_low + p.pad_high - size);
    p.offsets[static_cast<size_t>(i)] = o;
  }
  for (int64_t i = 1; i < T; ++i) p.dynamic |= p.offsets[static_cast<size_t>(i)] != p.offsets[0];
  // Masking: a needed position outside [0, full) must read the pad value. The pad around the
  // layout does; the zeros a collective-permute delivers where no neighbour exists do when the pad
  // value is 0; anything else (the padding of uneven shards, or rows of the layout that are not
  // this position) must be masked.
  for (int64_t i = 0; i < T && !(p.mask_low && p.mask_high); ++i) {
    const int64_t s = at(start, i), n = needed(i);
    auto check = [&](int64_t g) {
      const int64_t k = p.offsets[static_cast<size_t>(i)] + (g - s) - p.pad_low;  // layout index read
      if (k < 0 || k >= total) return false;                                     // the pad
      if (!x_sharded) return true;
      // Which shard row is there: find the piece.
      int64_t acc = 0;
      for (const HaloPiece& pc : p.pieces) {
        const int64_t len = pc.to - pc.from;
        if (k < acc + len) {
          const int64_t src = i + pc.hop;
          if (src < 0 || src >= tiles) return !pad_is_zero;  // zeros from a missing neighbour
          return true;  // a real row (or uneven-shard padding): not the pad value
        }
        acc += len;
      }
      return true;
    };
    for (int64_t g = s; g < std::min(s + n, int64_t{0}) && !p.mask_low; ++g) p.mask_low |= check(g);
    for (int64_t g = std::max(s, full); g < s + n && !p.mask_high; ++g) p.mask_high |= check(g);
  }
  return p;
}

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// The common core of the windowed tilings: tile i computes O windows, `w.stride` apart, each D
// dilated positions wide, the first starting at dilated position a[i] of the padded, base-dilated
// input; valid[i] of them are real outputs. The local window is `w` with `local_size` taps.
// `slice_ok`: tiles at different phases may compute extra windows and slice their own (stride 1,
// the outputs tiled like the windows); otherwise different phases dilate explicitly.
std::optional<WindowedTiling> TileWindowStarts(const std::vector<int64_t>& a, int64_t O, const WindowDimension& w,
                                               int64_t D, int64_t local_size, const std::vector<int64_t>& valid,
                                               bool slice_ok) {
  const int64_t bd = w.base_dilation, s = w.stride, tiles = static_cast<int64_t>(a.size());
  WindowedTiling t;
  t.start.resize(static_cast<size_t>(tiles));
  std::vector<int64_t> phase(static_cast<size_t>(tiles));
  int64_t n = 1, pmax = 0, pmin = bd;
  for (int64_t i = 0; i < tiles; ++i) {
    // Tile i's windows cover [a, e) of the padded, dilated input; its first input element sits
    // phase = P*bd - a positions after a.
    const int64_t ai = a[static_cast<size_t>(i)], e = ai + (O - 1) * s + D, P = CeilDiv(ai, bd);
    t.start[static_cast<size_t>(i)] = P;
    phase[static_cast<size_t>(i)] = P * bd - ai;
    n = std::max(n, CeilDiv(e, bd) - P);
    pmax = std::max(pmax, phase[static_cast<size_t>(i)]);
    pmin = std::min(pmin, phase[static_cast<size_t>(i)]);
  }
  t.size = n;
  t.need.resize(static_cast<size_t>(tiles));
  for (int64_t i = 0; i < tiles; ++i) {
    // The input its valid outputs read (none for a tile entirely in the output's padding).
    const int64_t v = valid[static_cast<size_t>(i)], ai = a[static_cast<size_t>(i)];
    t.need[static_cast<size_t>(i)] =
        v == 0 ? 0 : std::max<int64_t>(0, CeilDiv(ai + (v - 1) * s + D, bd) - t.start[static_cast<size_t>(i)]);
  }
  t.local = w;
  t.local.size = local_size;
  t.out_offset.assign(static_cast<size_t>(tiles), 0);
  if (pmin == pmax || (s == 1 && slice_ok)) {
    t.local.padding_low = pmax;
    // Enough windows for every tile's own outputs, starting at pmax - phase (0 when uniform).
    const int64_t needed = O + (pmax - pmin);
    const int64_t base_len = pmax + (n - 1) * bd + 1;
    t.local.padding_high = std::max<int64_t>(0, (needed - 1) * s + D - base_len);
    t.local_out = (base_len + t.local.padding_high - D) / s + 1;
    for (int64_t i = 0; i < tiles; ++i) t.out_offset[static_cast<size_t>(i)] = pmax - phase[static_cast<size_t>(i)];
    return t;
  }
  // Explicit dilation: element k of the window sits at dilated position pmax + k*bd; tile i's
  // first window starts pmax - phase[i] in.
  t.explicit_dilation = true;
  t.base_dilation = bd;
  t.dilated_pad_low = pmax;
  t.dilated_size = (O - 1) * s + D;
  t.dilated_offset.resize(static_cast<size_t>(tiles));
  int64_t end = 0;
  for (int64_t i = 0; i < tiles; ++i) {
    t.dilated_offset[static_cast<size_t>(i)] = pmax - phase[static_cast<size_t>(i)];
    end = std::max(end, t.dilated_offset[static_cast<size_t>(i)] + t.dilated_size);
  }
  t.dilated_pad_high = std::max<int64_t>(0, end - (pmax + (n - 1) * bd + 1));
  t.local.base_dilation = 1;
  t.local.padding_low = t.local.padding_high = 0;
  t.local_out = O;
  return t;
}

}  // namespace

std::optional<WindowedTiling> TileWindowedDim(const WindowDimension& w, int64_t tiles, int64_t out_shard,
                                              int64_t out_full) {
  const int64_t O = out_shard;
  if (w.base_dilation < 1 || w.stride < 1 || w.window_dilation < 1 || w.size < 1 || O < 1 || tiles < 1)
    return std::nullopt;
  std::vector<int64_t> a(static_cast<size_t>(tiles)), valid(static_cast<size_t>(tiles));
  for (int64_t i = 0; i < tiles; ++i) {
    a[static_cast<size_t>(i)] = i * O * w.stride - w.padding_low;
    valid[static_cast<size_t>(i)] = std::clamp<int64_t>(out_full - i * O, 0, O);
  }
  return TileWindowStarts(a, O, w, (w.size - 1) * w.window_dilation + 1, w.size, valid, /*slice_ok=*/true);
}

std::optional<WindowedTiling> TileKernelDim(const WindowDimension& w, int64_t tiles, int64_t K, int64_t out_full) {
  if (w.base_dilation < 1 || w.stride < 1 || w.window_dilation < 1 || K < 1 || out_full < 1 || tiles < 1)
    return std::nullopt;
  const int64_t ks = (K + tiles - 1) / tiles;
  std::vector<int64_t> a(static_cast<size_t>(tiles));
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t first = w.window_reversal ? K - (j + 1) * ks : j * ks;
    a[static_cast<size_t>(j)] = first * w.window_dilation - w.padding_low;
  }
  return TileWindowStarts(a, out_full, w, (ks - 1) * w.window_dilation + 1, ks,
                          std::vector<int64_t>(static_cast<size_t>(tiles), out_full), /*slice_ok=*/false);
}

Result<Instruction*> DilateWindows(SpmdBuilder& b, Instruction* x, const TileMap& map, int64_t dim,
                                   const WindowedTiling& t, double pad_value, Instruction* pad_scalar) {
  if (!t.explicit_dilation) return x;
  if (!x || !x->shape().IsArray() || dim < 0 || dim >= x->shape().rank() || x->shape().dim(dim) != t.size)
    return Error("explicit dilation: dimension " + std::to_string(dim) + " does not hold the exchanged window");
  const PrimitiveType type = x->shape().type;
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] = t.dilated_pad_low + (t.size - 1) * t.base_dilation + 1 + t.dilated_pad_high;
  Instruction* pad = b.Emit(Opcode::kPad, Shape(type, dims), {x, pad_scalar ? pad_scalar : b.ConstantScalar(type, pad_value)});
  pad->padding.resize(dims.size());
  pad->padding[static_cast<size_t>(dim)] = {t.dilated_pad_low, t.dilated_pad_high, t.base_dilation - 1};
  std::vector<int64_t> table(static_cast<size_t>(map.num_devices()));
  for (int64_t dev = 0; dev < map.num_devices(); ++dev)
    table[static_cast<size_t>(dev)] = t.dilated_offset[static_cast<size_t>(map.device(dev).index[static_cast<size_t>(dim)])];
  std::vector<Instruction*> offsets;
  for (int64_t d = 0; d < pad->shape().rank(); ++d)
    offsets.push_back(d == dim ? b.TableLookup(table) : b.ConstantScalar(PrimitiveType::kS32, 0));
  std::vector<int64_t> sizes = dims;
  sizes[static_cast<size_t>(dim)] = t.dilated_size;
  return b.DynamicSlice(pad, offsets, sizes);
}

Result<Instruction*> ExchangeHalo(SpmdBuilder& b, Instruction* x, const TileMap& map, int64_t dim, int64_t full,
                                  const std::vector<int64_t>& start, int64_t size, double pad_value, bool x_sharded,
                                  const std::string& what, const std::vector<int64_t>& need, Instruction* pad_scalar) {
  if (!x || !x->shape().IsArray() || dim < 0 || dim >= x->shape().rank() || dim >= map.rank())
    return Error("halo exchange: dimension " + std::to_string(dim) + " out of range");
  const int64_t tiles = map.tiles(dim);
  if (static_cast<int64_t>(start.size()) != tiles || size < 1)
    return Error("halo exchange: " + std::to_string(start.size()) + " windows for " + std::to_string(tiles) + " tiles");
  const int64_t shard = x_sharded ? map.ShardSize(dim, full) : full;
  if (shard < 1) return Error("halo exchange: dimension " + std::to_string(dim) + " is empty");
  if (x->shape().dim(dim) != shard)
    return Error("halo exchange: dimension " + std::to_string(dim) + " holds " + std::to_string(x->shape().dim(dim)) +
                 " elements, expected " + std::to_string(shard));
  if (!need.empty() && static_cast<int64_t>(need.size()) != tiles) return Error("halo exchange: need per tile expected");
  const int64_t n = map.num_devices();
  const HaloPlan p = PlanHalo(shard, tiles, full, start, size, x_sharded, !pad_scalar && pad_value == 0.0, need);
  if (pad_scalar && (!pad_scalar->shape().IsArray() || pad_scalar->shape().rank() != 0 ||
                     pad_scalar->shape().type != x->shape().type))
    return Error("halo exchange: the pad value must be a scalar of the array's type");
  auto pad_constant = [&]() { return pad_scalar ? pad_scalar : b.ConstantScalar(x->shape().type, pad_value); };
  const PrimitiveType type = x->shape().type;
  const std::string where = "halo exchange: " + what + " dim " + std::to_string(dim);
  auto slice_rows = [&](Instruction* v, int64_t from, int64_t to) { return b.SliceDim(v, dim, from, to); };
  // The tile index of every device along dim (who needs which window).
  std::vector<int64_t> tile_of(static_cast<size_t>(n));
  for (int64_t dev = 0; dev < n; ++dev) tile_of[static_cast<size_t>(dev)] = map.device(dev).index[static_cast<size_t>(dim)];
  auto per_device = [&](const std::vector<int64_t>& per_tile) {
    std::vector<int64_t> t(static_cast<size_t>(n));
    for (int64_t dev = 0; dev < n; ++dev) t[static_cast<size_t>(dev)] = per_tile[static_cast<size_t>(tile_of[static_cast<size_t>(dev)])];
    return t;
  };
  Instruction* cur = x;
  if (x_sharded) {
    // Devices ordered by tile index along dim, one group per combination of the other indices.
    const auto groups = map.GroupsAlong({dim});
    auto hop_pairs = [&](int64_t hop) {  // source tile j + hop -> target tile j
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (const auto& g : groups)
        for (int64_t j = 0; j < static_cast<int64_t>(g.size()); ++j)
          if (j + hop >= 0 && j + hop < static_cast<int64_t>(g.size()))
            pairs.emplace_back(g[static_cast<size_t>(j + hop)], g[static_cast<size_t>(j)]);
      std::sort(pairs.begin(), pairs.end());
      return pairs;
    };
    std::vector<Instruction*> parts;
    for (const HaloPiece& pc : p.pieces) {
      Instruction* piece = slice_rows(x, pc.from, pc.to);
      if (pc.hop == 0) {
        parts.push_back(piece);
        continue;
      }
      const int64_t hops = pc.hop < 0 ? -pc.hop : pc.hop;
      parts.push_back(b.CollectivePermute(piece, hop_pairs(pc.hop),
                                        where + (pc.hop < 0 ? " left" : " right") + " halo " +
                                            std::to_string(pc.to - pc.from) + " row(s) from " + std::to_string(hops) +
                                            " tile(s) away"));
    }
    if (parts.size() > 1) {
      std::vector<int64_t> dims = x->shape().dims;
      dims[static_cast<size_t>(dim)] = 0;
      for (Instruction* q : parts) dims[static_cast<size_t>(dim)] += q->shape().dim(dim);
      cur = b.Emit(Opcode::kConcatenate, Shape(type, dims), parts);
      cur->dimensions = {dim};
      cur->has_dimensions_attr = true;
    } else {
      cur = parts[0];
    }
  }
  if (p.pad_low > 0 || p.pad_high > 0) {
    std::vector<int64_t> dims = cur->shape().dims;
    dims[static_cast<size_t>(dim)] += p.pad_low + p.pad_high;
    Instruction* pad = b.Emit(Opcode::kPad, Shape(type, dims), {cur, pad_constant()});
    pad->padding.resize(dims.size());
    pad->padding[static_cast<size_t>(dim)].low = p.pad_low;
    pad->padding[static_cast<size_t>(dim)].high = p.pad_high;
    cur = pad;
  }
  if (p.dynamic) {
    std::vector<Instruction*> offsets;
    std::vector<int64_t> sizes = cur->shape().dims;
    sizes[static_cast<size_t>(dim)] = size;
    for (int64_t d = 0; d < cur->shape().rank(); ++d)
      offsets.push_back(d == dim ? b.TableLookup(per_device(p.offsets)) : b.ConstantScalar(PrimitiveType::kS32, 0));
    cur = b.DynamicSlice(cur, offsets, sizes);
  } else {
    cur = slice_rows(cur, p.offsets[0], p.offsets[0] + size);
  }
  if (p.mask_low || p.mask_high) {
    const Shape local = cur->shape();
    const Shape s32(PrimitiveType::kS32, local.dims);
    const Shape pred(PrimitiveType::kPred, local.dims);
    Instruction* iota = b.Emit(Opcode::kIota, s32, {});
    iota->iota_dimension = dim;
    Instruction* pos = b.Emit(Opcode::kAdd, s32, {iota, b.Broadcast(b.TableLookup(per_device(start)), s32)});
    Instruction* mask = nullptr;
    if (p.mask_low) {
      Instruction* ge = b.Emit(Opcode::kCompare, pred, {pos, b.Broadcast(b.ConstantScalar(PrimitiveType::kS32, 0), s32)});
      ge->comparison = ComparisonDirection::kGe;
      mask = ge;
    }
    if (p.mask_high) {
      Instruction* lt = b.Emit(Opcode::kCompare, pred,
                             {pos, b.Broadcast(b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(full)), s32)});
      lt->comparison = ComparisonDirection::kLt;
      mask = mask ? b.Emit(Opcode::kAnd, pred, {mask, lt}) : lt;
    }
    cur = b.Emit(Opcode::kSelect, local, {mask, cur, b.Broadcast(pad_constant(), local)});
  }
  return cur;
}

}  // namespace shardscope::spmd
