// Shifts and rotations along a sharded dimension (GSPMD §4.6 pre-processing, what pipelining as
// sharding needs, §3.3): two patterns of several instructions partitioned as one.
//
//   slice(pad(x))                    the shifting buffer's move by one stage (pad one row in front
//                                    of L, drop the last; copies between the two skipped): merged
//                                    into one pad of x whose padding may be negative, partitioned
//                                    as a windowed op — each device receives the rows it needs
//                                    from its neighbour, one collective-permute per shift instead
//                                    of a halo exchange for the pad and another for the slice.
//   concatenate(a[k:], a[:k])        a rotation (XLA's SPMD_Rotate): when the dimension is sharded
//                                    evenly, tile i of the result is tile i + k/S of a (S the shard
//                                    size) — one collective-permute along the dimension's device
//                                    groups, cyclic; two when k is not a multiple of S.
//
// The inner instructions (the pad; the two slices) are absorbed: they get no partitioned value of
// their own and no SPMD instructions, and their only user partitions the whole pattern. When the
// pattern cannot be partitioned as one (a sharding with no tile map, an uneven rotation), the
// absorbed instructions are partitioned after all and the root by its own handler.
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"
#include "partitioner/spmd/handlers/windowed.h"

namespace shardscope::spmd {
namespace {

bool IsRoot(const Instruction& inst) { return inst.parent() && inst.parent()->root() == &inst; }

bool UnitStrides(const Instruction& slice) {
  for (int64_t s : slice.slice.strides)
    if (s != 1) return false;
  return true;
}

// ---- slice(pad(x)) ----------------------------------------------------------------------------------

// The instruction a single-use chain of copies leads back to from `x` (x itself when it is no copy).
const Instruction* SkipCopies(const Instruction* x) {
  while (x->opcode() == Opcode::kCopy && x->operand_count() == 1 && x->users().size() == 1) x = x->operand(0);
  return x;
}

bool TiledAlong(const Instruction& inst, int64_t d) {
  if (!inst.has_sharding() || !inst.sharding()->IsTiled()) return false;
  const HloSharding& s = *inst.sharding();
  return d < s.TiledDataRank() && s.tile_assignment().dim(d) > 1;
}

// The pad a slice reads (through single-use copies) when the two are one shift, as XLA merges them:
// the pad (used only on the way to this slice) and the slice have the same sharding, no interior
// padding, unit strides, and some dimension is padded, sliced and sharded — where the two would
// exchange halos one after the other. We also ask that the pad's operand be sharded along such a
// dimension: a replicated operand is padded locally anyway, and the slice's own exchange is what
// XLA gives there.
const Instruction* MergeablePad(const Instruction& slice) {
  if (slice.opcode() != Opcode::kSlice || slice.operand_count() != 1 || !slice.shape().IsArray() || !slice.has_sharding())
    return nullptr;
  const Instruction* in = slice.operand(0);
  if (in->users().size() != 1) return nullptr;
  const Instruction* pad = SkipCopies(in);
  if (pad->opcode() != Opcode::kPad || pad->operand_count() != 2 || pad->users().size() != 1 || IsRoot(*pad) ||
      !pad->has_sharding() || !(*pad->sharding() == *slice.sharding()))
    return nullptr;
  const int64_t rank = slice.shape().rank();
  if (static_cast<int64_t>(pad->padding.size()) != rank || static_cast<int64_t>(slice.slice.starts.size()) != rank ||
      static_cast<int64_t>(slice.slice.limits.size()) != rank || !UnitStrides(slice))
    return nullptr;
  bool exchanges_twice = false;
  for (int64_t d = 0; d < rank; ++d) {
    const PaddingDim& p = pad->padding[static_cast<size_t>(d)];
    if (p.interior != 0) return nullptr;
    if ((p.low != 0 || p.high != 0) && slice.shape().dim(d) != pad->shape().dim(d) && TiledAlong(slice, d) &&
        TiledAlong(*pad->operand(0), d))
      exchanges_twice = true;
  }
  return exchanges_twice ? pad : nullptr;
}

// The pad and the copies between it and the slice that merges them.
bool AbsorbedByPadSlice(const Instruction& inst) {
  if (inst.opcode() != Opcode::kPad && inst.opcode() != Opcode::kCopy) return false;
  const Instruction* x = &inst;
  while (x->users().size() == 1 && x->users()[0]->opcode() == Opcode::kCopy) x = x->users()[0];
  if (x->users().size() != 1) return false;
  const Instruction* pad = MergeablePad(*x->users()[0]);
  if (!pad) return false;
  for (const Instruction* y = x; y != pad; y = y->operand(0))
    if (y == &inst) return true;  // a copy on the way
  return &inst == pad;
}

std::optional<Status> PartitionPadSlice(SpmdContext& ctx, const Instruction& slice) {
  const Instruction* pad = MergeablePad(slice);
  if (!pad) return std::nullopt;
  // slice[start, limit) of x padded by (low, high) is x padded by
  // (low - start, high - (padded extent - limit)).
  std::vector<PaddingDim> merged = pad->padding;
  for (size_t d = 0; d < merged.size(); ++d) {
    merged[d].low -= slice.slice.starts[d];
    merged[d].high -= pad->shape().dim(static_cast<int64_t>(d)) - slice.slice.limits[d];
  }
  return PartitionPadded(ctx, slice, *pad->operand(0), merged, *pad->operand(1), "shift (pad + slice)", [&]() {
    // Not as one after all: the pad, the copies and the slice one by one.
    std::vector<const Instruction*> chain;
    for (const Instruction* y = slice.operand(0); y != pad; y = y->operand(0)) chain.push_back(y);
    chain.push_back(pad);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Status s = ctx.PartitionNow(**it);
      if (!s.ok()) return s;
    }
    return ctx.PartitionNow(slice);
  });
}

// ---- concatenate(a[k:], a[:k]) ----------------------------------------------------------------------

struct Rotation {
  const Instruction* a = nullptr;
  int64_t dim = 0, k = 0;  // result[j] = a[(j + k) mod n] along dim
};

std::optional<Rotation> MatchRotation(const Instruction& concat) {
  if (concat.opcode() != Opcode::kConcatenate || concat.operand_count() != 2 || concat.dimensions.size() != 1 ||
      !concat.shape().IsArray())
    return std::nullopt;
  const Instruction* hi = concat.operand(0);
  const Instruction* lo = concat.operand(1);
  if (hi->opcode() != Opcode::kSlice || lo->opcode() != Opcode::kSlice || hi == lo || hi->operand(0) != lo->operand(0))
    return std::nullopt;
  for (const Instruction* s : {hi, lo})
    if (s->users().size() != 1 || IsRoot(*s) || !UnitStrides(*s)) return std::nullopt;
  const Instruction* a = hi->operand(0);
  const int64_t d = concat.dimensions[0], rank = a->shape().rank(), n = a->shape().dim(d);
  const int64_t k = hi->slice.starts[static_cast<size_t>(d)];
  for (int64_t i = 0; i < rank; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t full = a->shape().dim(i);
    if (i == d) {
      if (hi->slice.limits[u] != n || lo->slice.starts[u] != 0 || lo->slice.limits[u] != k) return std::nullopt;
      continue;
    }
    for (const Instruction* s : {hi, lo})
      if (s->slice.starts[u] != 0 || s->slice.limits[u] != full) return std::nullopt;
  }
  if (k <= 0 || k >= n) return std::nullopt;
  return Rotation{a, d, k};
}

// XLA's own rotation op, "_SPMDInternalOp_RotateRight" with backend_config
// "dimension=D,amount=A": a rotation right by A, i.e. left by n - A.
std::optional<Rotation> MatchRotateCustomCall(const Instruction& cc) {
  if (cc.opcode() != Opcode::kCustomCall || cc.custom_call_target != "_SPMDInternalOp_RotateRight" ||
      cc.operand_count() != 1 || !cc.shape().IsArray() || !cc.shape().Compatible(cc.operand(0)->shape()))
    return std::nullopt;  // a rotation keeps the shape; anything else is an opaque custom call
  auto field = [&](const std::string& key) -> std::optional<int64_t> {
    const size_t at = cc.backend_config.find(key + "=");
    if (at == std::string::npos) return std::nullopt;
    size_t i = at + key.size() + 1;
    int64_t v = 0;
    bool any = false;
    while (i < cc.backend_config.size() && std::isdigit(static_cast<unsigned char>(cc.backend_config[i]))) {
      v = v * 10 + (cc.backend_config[i++] - '0');
      any = true;
    }
    return any ? std::optional<int64_t>(v) : std::nullopt;
  };
  const auto d = field("dimension"), amount = field("amount");
  if (!d || !amount || *d >= cc.shape().rank()) return std::nullopt;
  const int64_t n = cc.shape().dim(*d), k = ((n - *amount) % n + n) % n;
  if (n < 1 || k == 0) return std::nullopt;
  return Rotation{cc.operand(0), *d, k};
}

bool AbsorbedByRotation(const Instruction& inst) {
  return inst.opcode() == Opcode::kSlice && inst.users().size() == 1 && MatchRotation(*inst.users()[0]).has_value();
}

std::optional<Status> PartitionRotation(SpmdContext& ctx, const Instruction& concat) {
  std::optional<Rotation> rot = MatchRotation(concat);
  const bool custom_call = !rot;
  if (!rot) rot = MatchRotateCustomCall(concat);
  if (!rot) return std::nullopt;
  auto by_parts = [&]() -> Status {
    if (!custom_call)
      for (const Instruction* s : concat.operands()) {
        Status st = ctx.PartitionNow(*s);
        if (!st.ok()) return st;
      }
    return ctx.PartitionNow(concat);
  };
  const HloSharding target = SpmdContext::ShardingOf(concat);
  auto map = ctx.maps().Get(target, concat.shape().rank());
  const int64_t d = rot->dim, n = concat.shape().dim(d);
  if (!map.ok() || map->tiles(d) < 2 || n % map->tiles(d) != 0) return by_parts();
  const int64_t tiles = map->tiles(d), shard = n / tiles;
  const int64_t q = rot->k / shard, rem = rot->k % shard;
  auto x = ctx.resharder().Reshard(ctx.Get(rot->a), target);
  if (!x.ok()) return Error(concat.name() + ": " + x.error().message);
  SpmdBuilder& b = ctx.builder();
  // Devices ordered by tile index along d, one group per combination of the other indices; the
  // piece of tile (i + hop) mod tiles goes to tile i.
  const auto groups = map->GroupsAlong({d});
  const std::string reason = "rotate: dim " + std::to_string(d) + " by " + std::to_string(rot->k) + " of " +
                             std::to_string(n) + (custom_call ? " (RotateRight)" : " (concatenate of two slices)");
  auto from_tiles_away = [&](Instruction* piece, int64_t hop) -> Instruction* {
    hop %= tiles;
    if (hop == 0) return piece;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const auto& g : groups)
      for (int64_t j = 0; j < tiles; ++j)
        pairs.emplace_back(g[static_cast<size_t>((j + hop) % tiles)], g[static_cast<size_t>(j)]);
    std::sort(pairs.begin(), pairs.end());
    return b.CollectivePermute(piece, pairs, reason);
  };
  auto rows = [&](Instruction* v, int64_t from, int64_t to) -> Instruction* {
    if (from == 0 && to == shard) return v;
    std::vector<int64_t> starts(v->shape().dims.size(), 0), limits = v->shape().dims;
    starts[static_cast<size_t>(d)] = from;
    limits[static_cast<size_t>(d)] = to;
    std::vector<int64_t> dims = limits;
    dims[static_cast<size_t>(d)] = to - from;
    Instruction* s = b.Emit(Opcode::kSlice, Shape(v->shape().type, dims), {v});
    s->slice.starts = starts;
    s->slice.limits = limits;
    s->slice.strides.assign(dims.size(), 1);
    return s;
  };
  Instruction* out = nullptr;
  if (rem == 0) {
    out = from_tiles_away(*x, q);
  } else {
    Instruction* first = from_tiles_away(rows(*x, rem, shard), q);
    Instruction* second = from_tiles_away(rows(*x, 0, rem), q + 1);
    out = b.Emit(Opcode::kConcatenate, (*x)->shape(), {first, second});
    out->dimensions = {d};
    out->has_dimensions_attr = true;
  }
  ctx.Set(&concat, {out, target, concat.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterShiftPatterns(HandlerTable& table) {
  table.AddPattern({"slice(pad(x)) as one shift", &AbsorbedByPadSlice, &PartitionPadSlice});
  table.AddPattern({"concatenate(a[k:], a[:k]) as a rotation", &AbsorbedByRotation, &PartitionRotation});
}

}  // namespace shardscope::spmd
