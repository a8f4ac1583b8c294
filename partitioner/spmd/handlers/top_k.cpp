// Top-k along a sharded dimension (XLA's TopK handling of sort): a sort of (values, iota) along a
// dimension the values are split on, read only through slices of its first k elements, is
// partitioned as a distributed top-k instead of moving the whole array:
//
//   1. every device sorts its own shard (the iota's shard holds the global indices);
//   2. keeps the first k of its shard (k below the shard size, else this is no saving);
//   3. the k candidates of every shard are gathered along the dimension (k x shards elements;
//      the other dimensions stay as they are split);
//   4. a second sort of the candidates and the first k of it give the slices' values.
//
// Bytes moved: k x shards per row instead of the whole dimension. The sort and the
// get-tuple-elements between it and the slices are absorbed; each slice is a root of the pattern
// and the first one partitioned emits the whole top-k. A shard with padding (the dimension not a
// multiple of the shards) is filled with the lowest value and the largest index, which needs a
// comparator known to sort descending: a compare GT of the two values. Otherwise (or when the
// pattern cannot be partitioned as one) the sort and its readers are partitioned one by one.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {
namespace {

struct TopK {
  const Instruction* sort = nullptr;
  int64_t dim = 0, k = 0;
};

bool IsRoot(const Instruction& inst) { return inst.parent() && inst.parent()->root() == &inst; }

// The comparator orders the first operand's values descending: its root is compare(p0, p1) GT.
bool Descending(const Instruction& sort) {
  if (sort.called_computations().size() != 1 || !sort.called_computations()[0]) return false;
  const Instruction* root = sort.called_computations()[0]->root();
  if (!root || root->opcode() != Opcode::kCompare || root->operand_count() != 2 ||
      root->comparison != ComparisonDirection::kGt)
    return false;
  const Instruction* a = root->operand(0);
  const Instruction* b = root->operand(1);
  return a->opcode() == Opcode::kParameter && b->opcode() == Opcode::kParameter && a->parameter_number == 0 &&
         b->parameter_number == 1;
}

// The slice of the first k along `dim` that reads get-tuple-element `gte` (its only user), or k = -1.
int64_t FirstK(const Instruction& gte, int64_t dim) {
  if (gte.opcode() != Opcode::kGetTupleElement || gte.users().size() != 1 || IsRoot(gte)) return -1;
  const Instruction& s = *gte.users()[0];
  const int64_t rank = gte.shape().rank();
  if (s.opcode() != Opcode::kSlice || !s.shape().IsArray() || static_cast<int64_t>(s.slice.starts.size()) != rank)
    return -1;
  for (int64_t d = 0; d < rank; ++d) {
    const auto u = static_cast<size_t>(d);
    if (s.slice.starts[u] != 0 || s.slice.strides[u] != 1) return -1;
    if (d != dim && s.slice.limits[u] != gte.shape().dim(d)) return -1;
  }
  return s.slice.limits[static_cast<size_t>(dim)];
}

std::optional<TopK> MatchTopK(const Instruction& sort) {
  if (sort.opcode() != Opcode::kSort || sort.operand_count() != 2 || sort.dimensions.size() != 1 ||
      !sort.shape().IsTuple() || IsRoot(sort) || sort.users().empty())
    return std::nullopt;
  const Instruction* values = sort.operand(0);
  const Instruction* index = sort.operand(1);
  const int64_t dim = sort.dimensions[0];
  if (!values->shape().IsArray() || dim < 0 || dim >= values->shape().rank() || index->opcode() != Opcode::kIota ||
      index->iota_dimension != dim || !values->has_sharding() || !values->sharding()->IsTiled())
    return std::nullopt;
  const HloSharding& s = *values->sharding();
  if (dim >= s.TiledDataRank()) return std::nullopt;
  const int64_t shards = s.tile_assignment().dim(dim), n = values->shape().dim(dim);
  if (shards < 2) return std::nullopt;
  int64_t k = -1;
  for (const Instruction* u : sort.users()) {
    const int64_t uk = FirstK(*u, dim);
    if (uk < 1 || (k >= 0 && uk != k)) return std::nullopt;
    k = uk;
  }
  const int64_t shard = (n + shards - 1) / shards;
  if (k >= shard) return std::nullopt;
  if (n % shards != 0 && !Descending(sort)) return std::nullopt;
  return TopK{&sort, dim, k};
}

bool AbsorbedByTopK(const Instruction& inst) {
  if (inst.opcode() == Opcode::kSort) return MatchTopK(inst).has_value();
  return inst.opcode() == Opcode::kGetTupleElement && MatchTopK(*inst.operand(0)).has_value();
}

// The lowest value of a type (sorts last under a descending comparator) and the largest.
double Lowest(PrimitiveType t) {
  if (IsFloatingPoint(t)) return -std::numeric_limits<double>::infinity();
  return IsSignedInteger(t) ? -std::ldexp(1.0, static_cast<int>(PrimitiveTypeBitWidth(t)) - 1) : 0.0;
}
double Largest(PrimitiveType t) {
  if (IsFloatingPoint(t)) return std::numeric_limits<double>::infinity();
  const int bits = static_cast<int>(PrimitiveTypeBitWidth(t)) - (IsSignedInteger(t) ? 1 : 0);
  return std::ldexp(1.0, std::min(bits, 53)) - 1;
}

// Emits the distributed top-k; returns the two results (values, indices), each [..., k, ...] with
// `out` sharding (the values' sharding with the dimension whole).
Result<std::array<Instruction*, 2>> EmitTopK(SpmdContext& ctx, const TopK& t, HloSharding* out) {
  const Instruction& sort = *t.sort;
  const Instruction* values = sort.operand(0);
  const Instruction* index = sort.operand(1);
  const HloSharding work = *values->sharding();
  auto map = ctx.maps().Get(work, values->shape().rank());
  if (!map.ok()) return map.error();
  auto v = ctx.resharder().Reshard(ctx.Get(values), work);
  if (!v.ok()) return v.error();
  auto i = ctx.resharder().Reshard(ctx.Get(index), work);
  if (!i.ok()) return i.error();
  Instruction* vx = *v;
  Instruction* ix = *i;
  const int64_t d = t.dim, n = values->shape().dim(d);
  if (map->HasPadding(d, n)) {
    vx = MaskPadding(ctx, {vx, work, values->shape()}, {d}, Lowest(values->shape().type));
    ix = MaskPadding(ctx, {ix, work, index->shape()}, {d}, Largest(index->shape().type));
  }
  SpmdBuilder& b = ctx.builder();
  Computation* cmp = b.CloneScalarComputation(sort.called_computations()[0]);
  auto sort_of = [&](Instruction* a, Instruction* c) {
    Instruction* s = b.Emit(Opcode::kSort, Shape::Tuple({a->shape(), c->shape()}), {a, c});
    s->dimensions = {d};
    s->has_dimensions_attr = true;
    s->is_stable = sort.is_stable;
    s->mutable_called_computations() = {cmp};
    return s;
  };
  auto first_k = [&](Instruction* sorted, int64_t element) {
    Instruction* g = b.Emit(Opcode::kGetTupleElement, sorted->shape().tuple[static_cast<size_t>(element)], {sorted});
    g->tuple_index = element;
    return b.SliceDim(g, d, 0, t.k);
  };
  // 1-2: each shard's own top k.
  Instruction* local = sort_of(vx, ix);
  // 3: the candidates of every shard along the dimension: a value of k x shards there.
  auto gathered = map->Gathered({d}).ToSharding();
  if (!gathered.ok()) return gathered.error();
  const HloSharding gathered_sharding = *gathered;
  std::array<Instruction*, 2> candidates{};
  for (int64_t e = 0; e < 2; ++e) {
    Shape base = sort.operand(e)->shape();
    base.dims[static_cast<size_t>(d)] = t.k * map->tiles(d);
    auto r = ctx.resharder().Reshard({first_k(local, e), work, base}, gathered_sharding);
    if (!r.ok()) return r.error();
    candidates[static_cast<size_t>(e)] = *r;
  }
  // 4: the top k of the candidates.
  Instruction* final_sort = sort_of(candidates[0], candidates[1]);
  *out = gathered_sharding;
  return std::array<Instruction*, 2>{first_k(final_sort, 0), first_k(final_sort, 1)};
}

std::optional<Status> PartitionTopKSlice(SpmdContext& ctx, const Instruction& slice) {
  if (slice.opcode() != Opcode::kSlice || slice.operand_count() != 1) return std::nullopt;
  const Instruction& gte = *slice.operand(0);
  if (gte.opcode() != Opcode::kGetTupleElement) return std::nullopt;
  const std::optional<TopK> t = MatchTopK(*gte.operand(0));
  if (!t) return std::nullopt;
  // Not as one (the top-k could not be emitted): the parts one by one.
  auto by_parts = [&]() -> Status {
    if (!ctx.Get(t->sort).hlo) {
      Status s = ctx.PartitionNow(*t->sort);
      if (!s.ok()) return s;
    }
    if (!ctx.Get(&gte).hlo) {
      Status s = ctx.PartitionNow(gte);
      if (!s.ok()) return s;
    }
    return ctx.PartitionNow(slice);
  };
  if (ctx.Get(t->sort).hlo) return by_parts();
  // The first slice of the sort emits the top-k and gives each get-tuple-element (absorbed, read
  // only by its slice) its result: [..., k, ...] in the values' sharding with the dim whole. The
  // run's values hold them, so nothing outlives the run (the memo tables may: partition_memo.h).
  if (!ctx.Get(&gte).hlo) {
    HloSharding sharding;
    auto r = EmitTopK(ctx, *t, &sharding);
    if (!r.ok()) return by_parts();
    for (const Instruction* u : t->sort->users()) {
      const int64_t e = u->tuple_index;
      if (e < 0 || e > 1) continue;
      ctx.Set(u, {(*r)[static_cast<size_t>(e)], sharding, u->users()[0]->shape()});
    }
  }
  const PartitionedHlo& v = ctx.Get(&gte);
  if (!v.hlo) return by_parts();
  const HloSharding target = SpmdContext::ShardingOf(slice);
  auto fin = ctx.resharder().Reshard(v, target);
  if (!fin.ok()) return Error(slice.name() + ": " + fin.error().message);
  ctx.Set(&slice, {*fin, target, slice.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterTopKPattern(HandlerTable& table) {
  table.AddPattern({"sort then the first k along a sharded dim as a distributed top-k", &AbsorbedByTopK, &PartitionTopKSlice});
}

}  // namespace shardscope::spmd
