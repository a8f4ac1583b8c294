// Dot (einsum) partitioning — GSPMD §3.2/§4.4 and the four matmul cases of "How To Scale Your
// Model" part 3. The dot's dimensions are labelled batch (B), lhs non-contracting (L), rhs
// non-contracting (R) and contracting (C). A *joint tiling* assigns every device a tile index
// over B,L,R,C; projecting it gives the operand shardings under which the per-device dot is
// local, and the output is a partial sum over the C groups (all-reduce, or reduce-scatter when
// the output wants to stay sharded). Joint tilings are derived from every subset of
// {lhs, rhs, output} shardings: operands or output that agree on a dimension are "grouped" along
// it (batch grouping / recursive partitioning of nested cases collapse into one search over
// these groupings), and the cheapest by bytes moved (resharding + reduction + output reshard)
// wins. So: no communication when nothing conflicts (case 1); all-gather of the operand whose
// contracting dim is sharded (case 2); local dot + all-reduce / reduce-scatter (case 3);
// all-gather of one side when both non-contracting dims use the same axis (case 4).
#include <algorithm>
#include <map>
#include <tuple>

#include "core/sharding/unreduced.h"
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"
#include "partitioner/spmd/windowed_einsum.h"

namespace shardscope::spmd {

namespace {

struct DotLabels {
  int64_t nb = 0, nl = 0, nr = 0, nc = 0;
  std::vector<int64_t> lhs_label, rhs_label;  // operand dim -> joint label
  int64_t num_labels() const { return nb + nl + nr + nc; }
  int64_t out_rank() const { return nb + nl + nr; }
};

DotLabels MakeLabels(const DotDimensionNumbers& dn, const Shape& ls, const Shape& rs) {
  DotLabels L;
  L.nb = static_cast<int64_t>(dn.lhs_batch.size());
  L.nc = static_cast<int64_t>(dn.lhs_contracting.size());
  L.nl = ls.rank() - L.nb - L.nc;
  L.nr = rs.rank() - L.nb - L.nc;
  L.lhs_label.assign(static_cast<size_t>(ls.rank()), -1);
  L.rhs_label.assign(static_cast<size_t>(rs.rank()), -1);
  for (int64_t i = 0; i < L.nb; ++i) {
    L.lhs_label[static_cast<size_t>(dn.lhs_batch[static_cast<size_t>(i)])] = i;
    L.rhs_label[static_cast<size_t>(dn.rhs_batch[static_cast<size_t>(i)])] = i;
  }
  for (int64_t i = 0; i < L.nc; ++i) {
    L.lhs_label[static_cast<size_t>(dn.lhs_contracting[static_cast<size_t>(i)])] = L.nb + L.nl + L.nr + i;
    L.rhs_label[static_cast<size_t>(dn.rhs_contracting[static_cast<size_t>(i)])] = L.nb + L.nl + L.nr + i;
  }
  int64_t j = 0;
  for (auto& l : L.lhs_label)
    if (l < 0) l = L.nb + j++;
  j = 0;
  for (auto& l : L.rhs_label)
    if (l < 0) l = L.nb + L.nl + j++;
  return L;
}

struct DotPlan {
  TileMap joint;
  HloSharding lhs, rhs, partial_out;  // partial_out: after the all-reduce
  bool reduce_scatter = false;
  int64_t rs_dim = -1;
  // The devices whose partial sums combine. While plans are compared only a reduce-scatter's are
  // set (its check reads them); the chosen plan gets the all-reduce's after the search (one
  // GroupsAlong per decision, not one per joint, and no per-device lists copied with every plan).
  std::vector<std::vector<int64_t>> reduce_groups;
  int64_t cost = 0;
  int64_t sources = 0;
  bool windowed = false;  // runs as a windowed einsum loop (windowed_einsum.h)
  bool contracting_all = false;  // every device holds a different part of the contracting dims
  bool reduces = false;  // the contracting dims are split: the products are partial sums
};

// A dot, or an op that multiplies like one: its dimension numbers, its two matrix operands and, for
// a block-scaled dot, the scale of each (split like its operand, the blocked dim's extent divided
// by the block size). The scaled form has no windowed loops.
struct DotLike {
  DotDimensionNumbers dims;
  const Instruction* lhs = nullptr;
  const Instruction* rhs = nullptr;
  const Instruction* lhs_scale = nullptr;
  const Instruction* rhs_scale = nullptr;
  bool scaled() const { return lhs_scale != nullptr; }
};

bool SameGroups(std::vector<std::vector<int64_t>> a, std::vector<std::vector<int64_t>> b) {
  for (auto* v : {&a, &b}) {
    for (auto& g : *v) std::sort(g.begin(), g.end());
    std::sort(v->begin(), v->end());
  }
  return a == b;
}

Status PartitionDotLike(SpmdContext& ctx, const Instruction& dot, const DotLike& like) {
  const DotLabels L = MakeLabels(like.dims, like.lhs->shape(), like.rhs->shape());
  const PartitionedHlo& lv = ctx.Get(like.lhs);
  const PartitionedHlo& rv = ctx.Get(like.rhs);
  const HloSharding target = SpmdContext::ShardingOf(dot);
  auto lm = ctx.maps().Get(lv.sharding, lv.base_shape.rank());
  auto rm = ctx.maps().Get(rv.sharding, rv.base_shape.rank());
  auto om = ctx.maps().Get(target, dot.shape().rank());
  if (!lm.ok() || !rm.ok() || !om.ok()) {
    return PartitionWithFallback(ctx, dot);
  }
  std::vector<int64_t> out_labels(static_cast<size_t>(L.out_rank()));
  for (int64_t i = 0; i < L.out_rank(); ++i) out_labels[static_cast<size_t>(i)] = i;
  std::vector<int64_t> c_labels;
  for (int64_t i = 0; i < L.nc; ++i) c_labels.push_back(L.nb + L.nl + L.nr + i);
  const JointSource ls{&*lm, L.lhs_label}, rs{&*rm, L.rhs_label}, os{&*om, out_labels};
  const int64_t out_elem = PrimitiveTypeBytes(dot.shape().type);

  // The same dot configuration recurs on every layer: decide once.
  std::string key = ShardingKey(lv.sharding) + "|" + ShardingKey(rv.sharding) + "|" + ShardingKey(target) + "|" +
                    lv.base_shape.ToString(false) + "|" + rv.base_shape.ToString(false) + "|" + dot.shape().ToString(false);
  for (auto* dims : {&like.dims.lhs_batch, &like.dims.rhs_batch, &like.dims.lhs_contracting,
                     &like.dims.rhs_contracting}) {
    key += '|';
    for (int64_t d : *dims) key += std::to_string(d) + ",";
  }
  if (like.scaled()) key += "|scaled";
  auto& cache = ctx.Decisions<std::optional<DotPlan>>();
  std::optional<DotPlan> best;
  auto cached = cache.find(key);
  if (cached != cache.end()) {
    best = cached->second;
  } else {
  // XLA's base case: when both operands are already split over every device along their
  // contracting dims (data parallelism's weight gradients), it multiplies the shards and
  // all-reduces the partial sums (then reshards the result), before it considers moving an operand
  // — whatever the bytes.
  auto contracting_partitions = [&](const TileMap& m, const std::vector<int64_t>& dims) {
    int64_t t = 1;
    for (int64_t d : dims) t *= m.tiles(d);
    return t;
  };
  const bool contracting_first = contracting_partitions(*lm, like.dims.lhs_contracting) == ctx.num_devices() &&
                                 contracting_partitions(*rm, like.dims.rhs_contracting) == ctx.num_devices() &&
                                 ctx.num_devices() > 1;
  // The plan a joint tiling gives (nullopt: none); a pure function of the joint's tiles, so
  // evaluated once per distinct joint (JointPlans, joint_tiling.h).
  auto evaluate = [&](const TileMap& joint_map, int64_t sources) -> std::optional<DotPlan> {
    const TileMap* joint = &joint_map;
    DotPlan p{*joint, {}, {}, {}, false, -1, {}, 0, sources};
    auto lsh = joint->ProjectedSharding(L.lhs_label);
    auto rsh = joint->ProjectedSharding(L.rhs_label);
    TileMap partial = joint->Projected(out_labels);
    auto psh = partial.ToSharding();
    if (!lsh.ok() || !rsh.ok() || !psh.ok()) return std::nullopt;
    p.lhs = *lsh;
    p.rhs = *rsh;
    p.partial_out = *psh;
    auto c1 = ctx.resharder().Plan(lv.sharding, p.lhs, lv.base_shape);
    auto c2 = ctx.resharder().Plan(rv.sharding, p.rhs, rv.base_shape);
    if (!c1.ok() || !c2.ok()) return std::nullopt;
    p.cost = c1->bytes + c2->bytes;
    int64_t c_tiles = 1;
    for (int64_t l : c_labels) c_tiles *= joint->tiles(l);
    p.contracting_all = c_tiles == ctx.num_devices();
    const int64_t partial_bytes = ElementsOf(partial.ShardShape(dot.shape().dims)) * out_elem;
    HloSharding after = p.partial_out;
    if (c_tiles > 1) {
      p.reduces = true;
      const int64_t g = c_tiles;
      // Reduce-scatter straight into the target when it splits one output dim over the C groups.
      bool rs_ok = false;
      if (ctx.options().prefer_reduce_scatter) {
        for (int64_t k = 0; k < L.out_rank() && !rs_ok; ++k) {
          if (om->tiles(k) != partial.tiles(k) * g) continue;
          bool ok = true;
          for (int64_t d = 0; d < L.out_rank() && ok; ++d)
            if (d != k && om->tiles(d) != partial.tiles(d)) ok = false;
          const int64_t full = dot.shape().dim(k);
          const int64_t s = partial.ShardSize(k, full);
          if (!ok) continue;
          // Uneven pieces only through the windowed loop, which pads the scattered dim.
          const bool even = s % g == 0 && om->ShardSize(k, full) * g == s;
          const bool windowed = !like.scaled() && c1->bytes == 0 && c2->bytes == 0 &&
                                WindowedReduceScatterApplies(ctx, partial_bytes, g);
          if (!even && !(windowed && partial.tiles(k) == 1 && om->ShardSize(k, full) == (s + g - 1) / g)) continue;
          std::vector<std::vector<int64_t>> groups = joint->GroupsAlong(c_labels);
          for (auto& grp : groups) {
            std::vector<std::pair<int64_t, int64_t>> keyed;
            std::vector<bool> seen(static_cast<size_t>(g), false);
            for (int64_t dev : grp) {
              const auto& ti = om->device(dev).index;
              const auto& pi = partial.device(dev).index;
              for (int64_t d = 0; d < L.out_rank(); ++d)
                if (d != k && ti[static_cast<size_t>(d)] != pi[static_cast<size_t>(d)]) ok = false;
              const int64_t tk = ti[static_cast<size_t>(k)];
              if (tk / g != pi[static_cast<size_t>(k)] || seen[static_cast<size_t>(tk % g)]) ok = false;
              else seen[static_cast<size_t>(tk % g)] = true;
              keyed.emplace_back(tk % g, dev);
            }
            std::sort(keyed.begin(), keyed.end());
            grp.clear();
            for (auto& [o, dev] : keyed) grp.push_back(dev);
          }
          if (!ok) continue;
          rs_ok = true;
          p.reduce_scatter = true;
          p.rs_dim = k;
          p.reduce_groups = groups;
          after = target;
          p.cost += partial_bytes * (g - 1) / g + kCollectiveOverheadBytes;
          // XLA's windowed einsum over the output, taken before the other plans as the
          // operand-windowed loops are (below).
          p.windowed = windowed;
        }
      }
      if (!rs_ok) p.cost += 2 * partial_bytes * (g - 1) / g + kCollectiveOverheadBytes;
    }
    auto c3 = ctx.resharder().Plan(after, target, dot.shape());
    if (!c3.ok()) return std::nullopt;
    p.cost += c3->bytes;
    // With windowed einsum on, XLA's dot handler takes a windowed loop before weighing the other
    // plans: one that keeps one operand and the output as they are and passes the other operand
    // round the ring wins whatever the bytes (its transfers overlap the products, and no device
    // holds the gathered operand). docs/partitioner.md, "Windowed einsum".
    if (ctx.options().windowed_einsum_threshold_mib >= 0 && !like.scaled() && !p.reduces && c3->bytes == 0) {
      const Shape plan_local(dot.shape().type, partial.ShardShape(dot.shape().dims));
      auto w = PlanWindowedDot(ctx, {lv, rv, p.lhs, p.rhs, L.lhs_label, L.rhs_label, L.out_rank(), plan_local});
      p.windowed = w && (w->is_rhs ? c1->bytes : c2->bytes) == 0;
    }
    return p;
  };
  JointPlans<DotPlan> plans;
  for (const auto& subset : ctx.SubsetJointTilings({ls, rs, os}, L.num_labels())) {
    const std::optional<DotPlan> plan = plans.Get(subset.joint, subset.sources, evaluate);
    if (!plan) continue;
    const DotPlan& p = *plan;
    const bool better =
        !best || (p.windowed != best->windowed ? p.windowed
                  : contracting_first && p.contracting_all != best->contracting_all
                      ? p.contracting_all
                      : p.cost < best->cost || (p.cost == best->cost && p.sources > best->sources));
    if (better) best = p;
  }
  if (best && best->reduces && !best->reduce_scatter) best->reduce_groups = best->joint.GroupsAlong(c_labels);
  cache.emplace(key, best);
  }
  if (!best) {
    return PartitionWithFallback(ctx, dot);
  }
  // Padding on a sharded contracting dim must not leak into the sums: zero it on both sides.
  std::vector<int64_t> lpad, rpad;
  for (size_t i = 0; i < like.dims.lhs_contracting.size(); ++i) {
    const int64_t label = L.nb + L.nl + L.nr + static_cast<int64_t>(i);
    if (best->joint.tiles(label) > 1) {
      lpad.push_back(like.dims.lhs_contracting[i]);
      rpad.push_back(like.dims.rhs_contracting[i]);
    }
  }
  // A scale splits like its operand only when every tile holds whole blocks, and no tile holds
  // padding (which would need its scales masked too).
  if (like.scaled()) {
    for (const auto& [operand, scale, sharding] :
         {std::tuple{like.lhs, like.lhs_scale, best->lhs}, std::tuple{like.rhs, like.rhs_scale, best->rhs}}) {
      auto sm = ctx.maps().Get(sharding, operand->shape().rank());
      if (!sm.ok()) return PartitionWithFallback(ctx, dot);
      for (int64_t d = 0; d < operand->shape().rank(); ++d)
        if (scale->shape().dim(d) % sm->tiles(d) != 0 || operand->shape().dim(d) % sm->tiles(d) != 0)
          return PartitionWithFallback(ctx, dot);
    }
  }
  TileMap partial = best->joint.Projected(out_labels);
  Shape local(dot.shape().type, partial.ShardShape(dot.shape().dims));
  Instruction* d = nullptr;
  // An operand the plan all-gathers may instead travel round the ring window by window
  // (windowed_einsum.h; off unless SpmdOptions::windowed_einsum_threshold_mib >= 0).
  if (lpad.empty() && !like.scaled()) {
    auto windowed = TryWindowedDot(ctx, dot, {lv, rv, best->lhs, best->rhs, L.lhs_label, L.rhs_label, L.out_rank(), local});
    if (windowed) {
      if (!windowed->ok()) return Error(dot.name() + ": " + windowed->error().message);
      d = **windowed;
    }
  }
  if (!d) {
    auto lhs = ctx.resharder().Reshard(lv, best->lhs);
    if (!lhs.ok()) return Error(dot.name() + ": " + lhs.error().message);
    auto rhs = ctx.resharder().Reshard(rv, best->rhs);
    if (!rhs.ok()) return Error(dot.name() + ": " + rhs.error().message);
    Instruction* lx = *lhs;
    Instruction* rx = *rhs;
    if (!lpad.empty()) {
      lx = MaskPadding(ctx, {lx, best->lhs, lv.base_shape}, lpad, 0.0);
      rx = MaskPadding(ctx, {rx, best->rhs, rv.base_shape}, rpad, 0.0);
    }
    if (best->windowed && best->reduce_scatter) {
      const int64_t k = best->rs_dim;
      const auto lk = std::find(L.lhs_label.begin(), L.lhs_label.end(), k);
      const auto rk = std::find(L.rhs_label.begin(), L.rhs_label.end(), k);
      d = WindowedReduceScatterDot(
          ctx, dot,
          {lx, rx, lk == L.lhs_label.end() ? -1 : static_cast<int64_t>(lk - L.lhs_label.begin()),
           rk == L.rhs_label.end() ? -1 : static_cast<int64_t>(rk - L.rhs_label.begin()), k, best->reduce_groups, local});
    } else if (like.scaled()) {
      auto ls = ctx.resharder().Reshard(ctx.Get(like.lhs_scale), best->lhs);
      if (!ls.ok()) return Error(dot.name() + ": " + ls.error().message);
      auto rs = ctx.resharder().Reshard(ctx.Get(like.rhs_scale), best->rhs);
      if (!rs.ok()) return Error(dot.name() + ": " + rs.error().message);
      d = ctx.builder().Emit(dot.opcode(), local, {lx, rx, *ls, *rs});
      CopyAttributes(dot, d);
    } else {
      d = ctx.builder().Emit(Opcode::kDot, local, {lx, rx});
      d->dot_dims = dot.dot_dims;
      d->raw_attributes = dot.raw_attributes;
    }
  }
  HloSharding have = best->partial_out;
  if (best->windowed && best->reduce_scatter) {
    have = target;
  } else if (target.kind() == HloSharding::Kind::kUnreduced && !best->reduce_scatter &&
             best->reduce_groups.size() == 1 && static_cast<int64_t>(best->reduce_groups[0].size()) == ctx.num_devices()) {
    // An unreduced result keeps the partial sums: every device's product is one term of the
    // whole, and whoever reads the value reduces it (XLA's unreduced sharding).
    have = target;
  } else if (HasUnreducedSubgroup(target) && !best->reduce_scatter && !best->reduce_groups.empty() &&
             best->partial_out == WithUnreducedReplicated(target) && SameGroups(best->reduce_groups, UnreducedGroups(target))) {
    // Unreduced over the contracting groups: each group's products are the terms of its tile.
    have = target;
  } else if (!best->reduce_groups.empty()) {
    Computation* add = ctx.builder().ScalarReducer(Opcode::kAdd, dot.shape().type);
    if (best->reduce_scatter) {
      d = ctx.builder().ReduceScatter(d, add, best->rs_dim, best->reduce_groups, "dot: contracting dimension sharded");
      have = target;
    } else {
      d = ctx.builder().AllReduce(d, add, best->reduce_groups, "dot: contracting dimension sharded");
    }
  }
  auto fin = ctx.resharder().Reshard({d, have, dot.shape()}, target);
  if (!fin.ok()) return Error(dot.name() + ": " + fin.error().message);
  ctx.Set(&dot, {*fin, target, dot.shape()});
  return Status::Ok();
}

Status HandleDot(SpmdContext& ctx, const Instruction& dot) {
  if (!dot.shape().IsArray() || dot.operand_count() != 2) return Error(dot.name() + ": malformed dot");
  return PartitionDotLike(ctx, dot, {dot.dot_dims, dot.operand(0), dot.operand(1)});
}

}  // namespace

Status PartitionBlockScaledDot(SpmdContext& ctx, const Instruction& cc) {
  if (cc.operand_count() != 4 || !cc.shape().IsArray()) return PartitionWithFallback(ctx, cc);
  const Shape& l = cc.operand(0)->shape();
  const Shape& r = cc.operand(1)->shape();
  const Shape& ls = cc.operand(2)->shape();
  const Shape& rs = cc.operand(3)->shape();
  const int64_t rank = l.rank();
  if ((rank != 2 && rank != 3) || r.rank() != rank || ls.rank() != rank || rs.rank() != rank || cc.shape().rank() != rank)
    return PartitionWithFallback(ctx, cc);
  DotLike like;
  if (rank == 3) {
    like.dims.lhs_batch = {0};
    like.dims.rhs_batch = {0};
  }
  like.dims.lhs_contracting = {rank - 1};
  like.dims.rhs_contracting = {rank - 1};
  like.lhs = cc.operand(0);
  like.rhs = cc.operand(1);
  like.lhs_scale = cc.operand(2);
  like.rhs_scale = cc.operand(3);
  return PartitionDotLike(ctx, cc, like);
}

void RegisterDotHandlers(HandlerTable& table) { table.Add({Opcode::kDot}, HandleDot); }

}  // namespace shardscope::spmd
