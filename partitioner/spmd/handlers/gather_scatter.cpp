// Gather and scatter (GSPMD §3.3 / XLA's SPMD partitioner strategies), as one search over joint
// tilings, like the dot. Every dimension of the op gets a label:
//  - B (index batch): an index dim other than index_vector_dim, the output batch dim (gather) or
//    the updates' scatter dim (scatter) it becomes, and the operand batching dim it pairs with
//    (explicit operand_batching_dims / input_batching_dims). Sharded B runs locally ("index
//    passthrough" / "index parallel"); for a scatter whose B has no operand dim (a *free* B) each
//    device applies its part of the updates to a partial result, combined by an all-reduce with
//    the scatter's combiner (add, multiply, max, min, and, or).
//  - P (operand passthrough): an operand dim kept whole in every slice / update window; the output
//    offset dim (gather) or the updates' window dim (scatter) shares it. Runs locally.
//  - T (trivially sliced indexed dim): an operand dim indexed with slice / window size 1. Each
//    device indexes its own shard with the indices offset by its shard start: a gather clamps
//    first (XLA's semantics), masks results outside its shard to zero and sums over the devices
//    sharing that dim (all-reduce add); a scatter's out-of-shard updates fall outside the local
//    operand and are skipped (scatter's out-of-bounds rule), so the result stays sharded with no
//    communication.
// Candidate tilings come from every subset of {operand, indices, updates, output} shardings that
// agree on shared labels, each also with one untiled label split over the tiles' copies; they are
// ordered as XLA orders its strategies, memory first (Better, below), and the all-replicated
// tiling is always a candidate (the op then runs whole).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>

#include "partitioner/hlo_sharding_util.h"
#include "core/collectives/reduction.h"
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope::spmd {
namespace {

bool Has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Index batch dim j of the indices (j-th dim other than index_vector_dim).
std::vector<int64_t> IndexBatchDims(int64_t index_rank, int64_t ivd) {
  std::vector<int64_t> r;
  for (int64_t d = 0; d < index_rank; ++d)
    if (d != ivd) r.push_back(d);
  return r;
}

struct Labels {
  int64_t num = 0;
  std::vector<int64_t> operand, indices, updates, output;  // dim -> label (-1: whole)
  std::vector<int64_t> t_labels;                           // labels of trivially sliced indexed dims
  std::vector<int64_t> free_b;                             // scatter: B labels without an operand dim
  int64_t indices_input = 1;                               // the op's operand that holds the indices
};

struct Plan {
  TileMap joint;
  std::vector<HloSharding> in;  // per operand of the op
  HloSharding partial_out;      // result sharding of the local op (before the all-reduce)
  std::vector<int64_t> reduce_labels;
  int64_t cost = 0;     // bytes received per device (+ a latency term per collective)
  int64_t sources = 0;
  int64_t peak = 0;          // the largest per-device buffers of one instruction (the local op or a collective)
  int64_t index_tiles = 1;   // tiles of the indices' batch dims (B labels) in the joint
  int64_t operand_cost = 0;  // the part of `cost` that reshards the operand(s)
  int64_t index_cost = 0;    // the part of `cost` that reshards the indices
};

// Plans are ordered as XLA orders its gather/scatter strategies (by their memory cost first):
//  1. the smaller peak: the largest per-device footprint of the local op or of any collective the
//     plan needs (an op's operands and result; a scatter and an all-reduce update in place, so
//     their operands only); peaks within 1/32 of each other count as equal (a few indices beside
//     a large table are no reason to move more data);
//  2. the indices split over more devices (XLA's index passthrough: once the operand's sharding is
//     settled, its grouping partitions each group's op again over the indices' batch dims, using
//     the operand's replication, rather than replicating the indices);
//  3. the operand moved least, then the indices (XLA keeps the operand's sharding where it can,
//     "typically operand is larger in size than indices", and regroups the indices to it; else
//     it takes the indices' sharding as given and moves the updates or result to it);
//  4. the fewest bytes received (+ a latency term per collective), then the most sources agreeing.
bool SamePeak(int64_t a, int64_t b) { return std::abs(a - b) * 32 <= std::max(a, b); }

bool Better(const Plan& a, const Plan& b) {
  if (!SamePeak(a.peak, b.peak)) return a.peak < b.peak;
  if (a.index_tiles != b.index_tiles) return a.index_tiles > b.index_tiles;
  if (a.operand_cost != b.operand_cost) return a.operand_cost < b.operand_cost;
  if (a.index_cost != b.index_cost) return a.index_cost < b.index_cost;
  if (a.cost != b.cost) return a.cost < b.cost;
  return a.sources > b.sources;
}

int64_t BytesOf(const std::vector<int64_t>& dims, PrimitiveType t) { return ElementsOf(dims) * PrimitiveTypeBytes(t); }

// The largest per-device footprint of one collective of a reshard plan (its input and output
// shards; an all-reduce's output replaces its input).
int64_t PeakOfReshard(const ReshardPlan& plan, const Shape& base) {
  int64_t peak = 0;
  for (const ReshardStep& st : plan.steps) {
    if (st.kind == ReshardStep::Kind::kDynamicSlice) continue;
    const int64_t after = BytesOf(st.after.ShardShape(base.dims), base.type);
    const bool in_place = st.kind == ReshardStep::Kind::kMaskedAllReduce ||
                          st.kind == ReshardStep::Kind::kBroadcastFromDevice ||
                          st.kind == ReshardStep::Kind::kReduceUnreduced;
    peak = std::max(peak, in_place ? after : after + BytesOf(st.before.ShardShape(base.dims), base.type));
  }
  return peak;
}

// The joint tiling with label `l` (untiled in it) split f ways over the copies of each tile (f
// divides the replication): device replica k of its tile takes index k mod f along l and stays
// copy k / f (XLA's merged strategies, e.g. index passthrough on the indices' tiles and operand
// passthrough over their replication).
std::optional<TileMap> FilledWithReplicas(const TileMap& joint, int64_t l, int64_t f) {
  const int64_t r = joint.replication();
  if (f < 2 || r % f != 0 || joint.tiles(l) != 1) return std::nullopt;
  std::vector<int64_t> tiles = joint.tiles();
  tiles[static_cast<size_t>(l)] = f;
  std::vector<DeviceTile> devs;
  devs.reserve(static_cast<size_t>(joint.num_devices()));
  for (int64_t d = 0; d < joint.num_devices(); ++d) {
    DeviceTile dt = joint.device(d);
    dt.index[static_cast<size_t>(l)] = dt.replica % f;
    dt.replica /= f;
    devs.push_back(std::move(dt));
  }
  return TileMap(std::move(tiles), std::move(devs));
}

std::optional<Plan> SearchPlansUncached(SpmdContext& ctx, const Labels& L, const std::vector<JointSource>& sources,
                                        const std::vector<const PartitionedHlo*>& ins,
                                        const std::vector<std::vector<int64_t>>& in_labels,
                                        const std::vector<int64_t>& out_labels, const Shape& out_leaf,
                                        const HloSharding& target_leaf, const std::vector<int64_t>& reducible,
                                        bool can_reduce, int64_t outputs);

// Searches the joint tilings built from subsets of `sources` (each: map + labels), and each of
// them with one untiled label split over (part of) its replication.
std::optional<Plan> SearchPlans(SpmdContext& ctx, const Labels& L, const std::vector<JointSource>& sources,
                                const std::vector<const PartitionedHlo*>& ins, const std::vector<std::vector<int64_t>>& in_labels,
                                const std::vector<int64_t>& out_labels, const Shape& out_leaf, const HloSharding& target_leaf,
                                const std::vector<int64_t>& reducible, bool can_reduce, int64_t outputs) {
  // The same gather or scatter recurs on every layer (a pipelined stage's weights, each layer's
  // gradient accumulation): the search is a pure function of what the key holds, decided once.
  std::string key;
  auto add = [&](const std::vector<int64_t>& v) {
    key += '|';
    for (int64_t x : v) key.append(std::to_string(x)).push_back(',');
  };
  key = std::to_string(L.num) + ':' + std::to_string(L.indices_input);
  for (const auto* v : {&L.operand, &L.indices, &L.updates, &L.output, &L.t_labels, &L.free_b, &out_labels, &reducible})
    add(*v);
  for (const auto& v : in_labels) add(v);
  for (const PartitionedHlo* in : ins) {
    key += '|';
    AppendShardingKey(key, in->sharding);
    key += in->base_shape.ToString(false);
  }
  for (const JointSource& src : sources) {
    auto sh = src.map->ToSharding();
    if (!sh.ok()) return std::nullopt;
    key += '|';
    AppendShardingKey(key, *sh);
    add(src.label_of_dim);
  }
  key += '|';
  AppendShardingKey(key, target_leaf);
  key += out_leaf.ToString(false) + (can_reduce ? "|r" : "|-") + std::to_string(outputs);
  auto& cache = ctx.Decisions<std::optional<Plan>>();
  if (auto hit = cache.find(key); hit != cache.end()) return hit->second;
  std::optional<Plan> best = SearchPlansUncached(ctx, L, sources, ins, in_labels, out_labels, out_leaf, target_leaf,
                                                 reducible, can_reduce, outputs);
  cache.emplace(std::move(key), best);
  return best;
}

std::optional<Plan> SearchPlansUncached(SpmdContext& ctx, const Labels& L, const std::vector<JointSource>& sources,
                                        const std::vector<const PartitionedHlo*>& ins,
                                        const std::vector<std::vector<int64_t>>& in_labels,
                                        const std::vector<int64_t>& out_labels, const Shape& out_leaf,
                                        const HloSharding& target_leaf, const std::vector<int64_t>& reducible,
                                        bool can_reduce, int64_t outputs) {
  std::optional<Plan> best;
  // A scatter updates its operand in place (XLA counts its operands only); a gather also holds its
  // result.
  const bool in_place = !L.updates.empty();
  // The smallest extent each label has (a label is split only over at most that many tiles).
  std::vector<int64_t> extent(static_cast<size_t>(L.num), std::numeric_limits<int64_t>::max());
  auto note = [&](const std::vector<int64_t>& labels, const Shape& shape) {
    for (size_t d = 0; d < labels.size() && static_cast<int64_t>(d) < shape.rank(); ++d)
      if (labels[d] >= 0) extent[static_cast<size_t>(labels[d])] = std::min(extent[static_cast<size_t>(labels[d])], shape.dim(static_cast<int64_t>(d)));
  };
  for (size_t i = 0; i < ins.size(); ++i) note(in_labels[i], ins[i]->base_shape);
  note(out_labels, out_leaf);
  // The plan a joint tiling gives (nullopt: none), a pure function of the joint's tiles:
  // evaluated once per distinct joint (different source subsets often give the same one).
  auto plan_of = [&](const TileMap& joint, int64_t nsources) -> std::optional<Plan> {
    Plan p{joint, {}, {}, {}, 0, nsources};
    int64_t local = 0;  // the local op's buffers per device
    for (int64_t l : L.indices)
      if (l >= 0) p.index_tiles *= joint.tiles(l);
    for (size_t i = 0; i < ins.size(); ++i) {
      const TileMap m = joint.Projected(in_labels[i]);
      auto s = m.ToSharding();
      if (!s.ok()) return std::nullopt;
      auto c = ctx.resharder().Plan(ins[i]->sharding, *s, ins[i]->base_shape);
      if (!c.ok()) return std::nullopt;
      p.cost += c->bytes;
      if (static_cast<int64_t>(i) < L.indices_input) p.operand_cost += c->bytes;
      if (static_cast<int64_t>(i) == L.indices_input) p.index_cost = c->bytes;
      p.peak = std::max(p.peak, PeakOfReshard(*c, ins[i]->base_shape));
      local += BytesOf(m.ShardShape(ins[i]->base_shape.dims), ins[i]->base_shape.type);
      p.in.push_back(*s);
    }
    for (int64_t l : reducible)
      if (joint.tiles(l) > 1) p.reduce_labels.push_back(l);
    if (!p.reduce_labels.empty() && !can_reduce) return std::nullopt;
    TileMap partial = joint.Projected(out_labels);
    auto psh = partial.ToSharding();
    if (!psh.ok()) return std::nullopt;
    p.partial_out = *psh;
    const int64_t out_bytes = ElementsOf(partial.ShardShape(out_leaf.dims)) * PrimitiveTypeBytes(out_leaf.type) * outputs;
    if (!in_place) local += out_bytes;
    p.peak = std::max(p.peak, local);
    if (!p.reduce_labels.empty()) {
      int64_t g = 1;
      for (int64_t l : p.reduce_labels) g *= joint.tiles(l);
      p.cost += 2 * out_bytes * (g - 1) / g + kCollectiveOverheadBytes;
      p.peak = std::max(p.peak, out_bytes);
    }
    auto c3 = ctx.resharder().Plan(p.partial_out, target_leaf, out_leaf);
    if (!c3.ok()) return std::nullopt;
    p.cost += c3->bytes * outputs;
    p.peak = std::max(p.peak, PeakOfReshard(*c3, out_leaf) * outputs);
    return p;
  };
  JointPlans<Plan> plans;
  auto evaluate = [&](const TileMap& joint, int64_t nsources) {
    const std::optional<Plan> plan = plans.Get(joint, nsources, plan_of);
    if (!plan) return;
    if (!best || Better(*plan, *best)) best = plan;
  };
  // The split factors worth trying for a label: the tile counts some source gives it (XLA's merged
  // strategies take a label's split from the operand or result that has it). Every divisor of the
  // replication would plan thousands of reshards at 2048 devices.
  std::vector<std::vector<int64_t>> factors(static_cast<size_t>(L.num));
  for (const JointSource& s : sources)
    for (size_t d = 0; d < s.label_of_dim.size() && static_cast<int64_t>(d) < s.map->rank(); ++d) {
      const int64_t l = s.label_of_dim[d], t = s.map->tiles(static_cast<int64_t>(d));
      if (l >= 0 && t > 1 && !Has(factors[static_cast<size_t>(l)], t)) factors[static_cast<size_t>(l)].push_back(t);
    }
  for (const auto& [joint, nsources] : ctx.SubsetJointTilings(sources, L.num)) {
    evaluate(joint, nsources);
    const int64_t r = joint.replication();
    for (int64_t l = 0; l < L.num; ++l) {
      std::vector<int64_t> tried;
      for (int64_t t : factors[static_cast<size_t>(l)]) {
        // A source's split, or the part of it the joint's replication can hold (XLA groups the
        // indices within the operand's groups, splitting them over what copies there are).
        const int64_t f = std::gcd(t, r);
        if (f < 2 || f > extent[static_cast<size_t>(l)] || Has(tried, f)) continue;
        tried.push_back(f);
        if (auto filled = FilledWithReplicas(joint, l, f)) evaluate(*filled, nsources);
      }
    }
  }
  return best;
}

// The indices split into their index-vector components (each of the batch shape).
struct IndexParts {
  std::vector<Instruction*> comps;
  Shape batch;
};

IndexParts SplitIndices(SpmdContext& ctx, Instruction* idx, int64_t ivd) {
  IndexParts r;
  const Shape& s = idx->shape();
  if (ivd == s.rank()) {
    r.comps = {idx};
    r.batch = s;
    return r;
  }
  std::vector<int64_t> bd;
  for (int64_t d = 0; d < s.rank(); ++d)
    if (d != ivd) bd.push_back(s.dim(d));
  r.batch = Shape(s.type, bd);
  for (int64_t k = 0; k < s.dim(ivd); ++k) {
    std::vector<int64_t> lim = s.dims;
    lim[static_cast<size_t>(ivd)] = 1;
    Instruction* sl = ctx.builder().Emit(Opcode::kSlice, Shape(s.type, lim), {idx});
    sl->slice.starts.assign(lim.size(), 0);
    sl->slice.starts[static_cast<size_t>(ivd)] = k;
    sl->slice.limits = s.dims;
    sl->slice.limits[static_cast<size_t>(ivd)] = k + 1;
    sl->slice.strides.assign(lim.size(), 1);
    r.comps.push_back(ctx.builder().Reshape(sl, bd));
  }
  return r;
}

Instruction* JoinIndices(SpmdContext& ctx, const IndexParts& parts, const Shape& full, int64_t ivd) {
  if (ivd == full.rank()) return parts.comps[0];
  std::vector<int64_t> one = full.dims;
  one[static_cast<size_t>(ivd)] = 1;
  std::vector<Instruction*> pieces;
  for (Instruction* c : parts.comps) pieces.push_back(ctx.builder().Reshape(c, one));
  if (pieces.size() == 1) return pieces[0];
  Instruction* cat = ctx.builder().Emit(Opcode::kConcatenate, full, pieces);
  cat->dimensions = {ivd};
  cat->has_dimensions_attr = true;
  return cat;
}

Instruction* Splat(SpmdContext& ctx, PrimitiveType t, double v, const Shape& like) {
  return ctx.builder().Broadcast(ctx.builder().ConstantScalar(t, v), Shape(t, like.dims));
}

Instruction* Offset(SpmdContext& ctx, const TileMap& m, int64_t d, int64_t full, const Shape& like) {
  Instruction* off = ctx.builder().TableLookup(m.OffsetTable(d, full));
  if (like.type != PrimitiveType::kS32) off = ctx.builder().Emit(Opcode::kConvert, Shape::Scalar(like.type), {off});
  return ctx.builder().Broadcast(off, like);
}

Instruction* Cmp(SpmdContext& ctx, Instruction* a, Instruction* b, ComparisonDirection dir) {
  Instruction* c = ctx.builder().Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, a->shape().dims), {a, b});
  c->comparison = dir;
  return c;
}

std::string LabelDims(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
Status HandleGather(SpmdContext& ctx, const Instruction& g) {
  if (!g.shape().IsArray() || g.operand_count() != 2) return PartitionWithFallback(ctx, g);
  const auto& dn = g.gather_dims;
  const auto& ss = g.gather_slice_sizes;
  const PartitionedHlo& ov = ctx.Get(g.operand(0));
  const PartitionedHlo& iv = ctx.Get(g.operand(1));
  const Shape& os = ov.base_shape;
  const Shape& is = iv.base_shape;
  const int64_t r = os.rank(), ir = is.rank(), R = g.shape().rank(), ivd = dn.index_vector_dim;
  if (static_cast<int64_t>(ss.size()) != r || ivd < 0 || ivd > ir) return PartitionWithFallback(ctx, g);
  const HloSharding target = SpmdContext::ShardingOf(g);
  auto om = ctx.maps().Get(ov.sharding, r);
  auto im = ctx.maps().Get(iv.sharding, ir);
  auto tm = ctx.maps().Get(target, R);
  if (!om.ok() || !im.ok() || !tm.ok()) return PartitionWithFallback(ctx, g);

  Labels L;
  L.operand.assign(static_cast<size_t>(r), -1);
  L.indices.assign(static_cast<size_t>(ir), -1);
  L.output.assign(static_cast<size_t>(R), -1);
  std::vector<int64_t> batch_out, offset_sorted;
  for (int64_t d = 0; d < R; ++d) (Has(dn.offset_dims, d) ? offset_sorted : batch_out).push_back(d);
  const std::vector<int64_t> ib = IndexBatchDims(ir, ivd);
  if (ib.size() != batch_out.size()) return PartitionWithFallback(ctx, g);
  for (size_t j = 0; j < ib.size(); ++j) {
    const int64_t l = L.num++;
    L.indices[static_cast<size_t>(ib[j])] = l;
    L.output[static_cast<size_t>(batch_out[j])] = l;
    for (size_t i = 0; i < dn.start_indices_batching_dims.size(); ++i)
      if (dn.start_indices_batching_dims[i] == ib[j] && i < dn.operand_batching_dims.size())
        L.operand[static_cast<size_t>(dn.operand_batching_dims[i])] = l;
  }
  // Parallel dims (GSPMD's iota case): an indexed operand dim whose index component is iota along an
  // index batch dim of the same extent behaves like a batch dim — tiled alike, each device's indices
  // point into its own shard (moved by the shard start below). The analysis is propagation's own.
  std::vector<int64_t> parallel_operand;
  if (auto pd = hlo_sharding_util::GatherParallelDims(g)) {
    for (size_t k = 0; k < pd->operand_dims.size() && k < pd->indices_dims.size(); ++k) {
      const int64_t od = pd->operand_dims[k];
      const int64_t id = pd->indices_dims[k];
      if (od < 0 || od >= r || id < 0 || id >= ir || L.operand[static_cast<size_t>(od)] >= 0) continue;
      if (L.indices[static_cast<size_t>(id)] < 0) continue;
      L.operand[static_cast<size_t>(od)] = L.indices[static_cast<size_t>(id)];
      parallel_operand.push_back(od);
    }
  }
  std::vector<int64_t> offset_operand;
  for (int64_t d = 0; d < r; ++d)
    if (!Has(dn.collapsed_slice_dims, d) && !Has(dn.operand_batching_dims, d)) offset_operand.push_back(d);
  if (offset_operand.size() != offset_sorted.size()) return PartitionWithFallback(ctx, g);
  for (size_t k = 0; k < offset_operand.size(); ++k) {
    const int64_t d = offset_operand[k];
    if (ss[static_cast<size_t>(d)] != os.dim(d)) continue;
    const int64_t l = L.num++;
    L.operand[static_cast<size_t>(d)] = l;
    L.output[static_cast<size_t>(offset_sorted[k])] = l;
  }
  for (int64_t d : dn.start_index_map) {
    if (d < 0 || d >= r || L.operand[static_cast<size_t>(d)] >= 0 || ss[static_cast<size_t>(d)] != 1) continue;
    const int64_t l = L.num++;
    L.operand[static_cast<size_t>(d)] = l;
    L.t_labels.push_back(l);
  }
  // Operand labels without T: the operand's passthrough / batch sharding alone.
  std::vector<int64_t> operand_no_t = L.operand;
  for (auto& l : operand_no_t)
    if (Has(L.t_labels, l)) l = -1;
  const std::vector<JointSource> sources = {{&*om, L.operand}, {&*om, operand_no_t}, {&*im, L.indices}, {&*tm, L.output}};
  auto plan = SearchPlans(ctx, L, sources, {&ov, &iv}, {L.operand, L.indices}, L.output, g.shape(), target,
                          L.t_labels, true, 1);
  if (!plan) return PartitionWithFallback(ctx, g);

  auto op = ctx.resharder().Reshard(ov, plan->in[0]);
  if (!op.ok()) return Error(g.name() + ": " + op.error().message);
  auto idx = ctx.resharder().Reshard(iv, plan->in[1]);
  if (!idx.ok()) return Error(g.name() + ": " + idx.error().message);
  const TileMap lop = plan->joint.Projected(L.operand);
  Instruction* ix = *idx;
  Instruction* valid = nullptr;
  std::vector<int64_t> sharded_t;
  bool parallel_sharded = false;
  for (int64_t d : parallel_operand) parallel_sharded = parallel_sharded || lop.tiles(d) > 1;
  if (!plan->reduce_labels.empty() || parallel_sharded) {
    IndexParts parts = SplitIndices(ctx, ix, ivd);
    for (size_t k = 0; k < dn.start_index_map.size() && k < parts.comps.size(); ++k) {
      const int64_t d = dn.start_index_map[k];
      if (lop.tiles(d) > 1 && Has(parallel_operand, d)) {
        // In range by construction (iota over the whole extent): only moved into the local shard.
        Instruction* c = parts.comps[k];
        parts.comps[k] = ctx.builder().Emit(Opcode::kSubtract, c->shape(), {c, Offset(ctx, lop, d, os.dim(d), c->shape())});
        continue;
      }
      if (lop.tiles(d) == 1 || !Has(L.t_labels, L.operand[static_cast<size_t>(d)])) continue;
      sharded_t.push_back(d);
      Instruction* c = parts.comps[k];
      const Shape& bs = c->shape();
      // Clamp as the full gather would (start in [0, D - 1]), then move into the local shard.
      c = ctx.builder().Emit(Opcode::kClamp, bs, {Splat(ctx, bs.type, 0, bs), c, Splat(ctx, bs.type, static_cast<double>(os.dim(d) - 1), bs)});
      c = ctx.builder().Emit(Opcode::kSubtract, bs, {c, Offset(ctx, lop, d, os.dim(d), bs)});
      Instruction* in = ctx.builder().Emit(Opcode::kAnd, Shape(PrimitiveType::kPred, bs.dims),
                                 {Cmp(ctx, c, Splat(ctx, bs.type, 0, bs), ComparisonDirection::kGe),
                                  Cmp(ctx, c, Splat(ctx, bs.type, static_cast<double>(lop.ShardSize(d, os.dim(d))), bs),
                                      ComparisonDirection::kLt)});
      valid = valid ? ctx.builder().Emit(Opcode::kAnd, in->shape(), {valid, in}) : in;
      parts.comps[k] = c;
    }
    ix = JoinIndices(ctx, parts, ix->shape(), ivd);
  }
  const TileMap partial = plan->joint.Projected(L.output);
  Shape local(g.shape().type, partial.ShardShape(g.shape().dims));
  Instruction* x = ctx.builder().Emit(Opcode::kGather, local, {*op, ix});
  CopyAttributes(g, x);
  x->clear_sharding();
  for (int64_t d = 0; d < r; ++d)
    if (L.operand[static_cast<size_t>(d)] >= 0 && ss[static_cast<size_t>(d)] == os.dim(d))
      x->gather_slice_sizes[static_cast<size_t>(d)] = lop.ShardSize(d, os.dim(d));
  if (valid) {
    Instruction* vb = ctx.builder().Emit(Opcode::kBroadcast, Shape(PrimitiveType::kPred, local.dims), {valid});
    vb->dimensions = batch_out;
    vb->has_dimensions_attr = true;
    x = ctx.builder().Emit(Opcode::kSelect, local, {vb, x, Splat(ctx, local.type, 0, local)});
    const Opcode rop = local.type == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd;
    x = ctx.builder().AllReduce(x, ctx.builder().ScalarReducer(rop, local.type), plan->joint.GroupsAlong(plan->reduce_labels),
                      "gather: operand sharded on indexed dim " + LabelDims(sharded_t) + ", masked + all-reduce");
  }
  auto fin = ctx.resharder().Reshard({x, plan->partial_out, g.shape()}, target);
  if (!fin.ok()) return Error(g.name() + ": " + fin.error().message);
  ctx.Set(&g, {*fin, target, g.shape()});
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
Status HandleScatter(SpmdContext& ctx, const Instruction& sc) {
  const int64_t nops = sc.operand_count();
  if (nops < 3 || (nops - 1) % 2 != 0) return PartitionWithFallback(ctx, sc);
  const int64_t n = (nops - 1) / 2;
  const auto& dn = sc.scatter_dims;
  std::vector<const PartitionedHlo*> vals;
  for (int64_t i = 0; i < nops; ++i) vals.push_back(&ctx.Get(sc.operand(i)));
  const Shape& os = vals[0]->base_shape;
  const Shape& is = vals[static_cast<size_t>(n)]->base_shape;
  const Shape& us = vals[static_cast<size_t>(n + 1)]->base_shape;
  const int64_t r = os.rank(), ir = is.rank(), ur = us.rank(), ivd = dn.index_vector_dim;
  if (ivd < 0 || ivd > ir || !os.IsArray() || !us.IsArray()) return PartitionWithFallback(ctx, sc);
  const HloSharding target = SpmdContext::ShardingOf(sc);
  const HloSharding target_leaf =
      target.IsTuple() ? (target.tuple_elements().empty() ? HloSharding::Replicate() : target.tuple_elements()[0]) : target;
  auto tm = ctx.maps().Get(target_leaf, r);
  if (!tm.ok()) return PartitionWithFallback(ctx, sc);
  std::vector<TileMap> maps;
  for (int64_t i = 0; i < nops; ++i) {
    auto m = ctx.maps().Get(vals[static_cast<size_t>(i)]->sharding, vals[static_cast<size_t>(i)]->base_shape.rank());
    if (!m.ok() || vals[static_cast<size_t>(i)]->base_shape.IsTuple()) return PartitionWithFallback(ctx, sc);
    maps.push_back(*m);
  }

  Labels L;
  L.operand.assign(static_cast<size_t>(r), -1);
  L.indices.assign(static_cast<size_t>(ir), -1);
  L.updates.assign(static_cast<size_t>(ur), -1);
  L.indices_input = n;
  std::vector<int64_t> upd_scatter, uwd;
  for (int64_t d = 0; d < ur; ++d) (Has(dn.update_window_dims, d) ? uwd : upd_scatter).push_back(d);
  const std::vector<int64_t> ib = IndexBatchDims(ir, ivd);
  if (ib.size() != upd_scatter.size()) return PartitionWithFallback(ctx, sc);
  for (size_t j = 0; j < ib.size(); ++j) {
    const int64_t l = L.num++;
    L.indices[static_cast<size_t>(ib[j])] = l;
    L.updates[static_cast<size_t>(upd_scatter[j])] = l;
    bool batched = false;
    for (size_t i = 0; i < dn.scatter_indices_batching_dims.size(); ++i)
      if (dn.scatter_indices_batching_dims[i] == ib[j] && i < dn.input_batching_dims.size()) {
        L.operand[static_cast<size_t>(dn.input_batching_dims[i])] = l;
        batched = true;
      }
    if (!batched) L.free_b.push_back(l);
  }
  // Parallel dims (iota indices along an index batch dim of the same extent), as for gather: the
  // operand dim is tiled with that batch dim, and its indices are moved into the local shard below.
  std::vector<int64_t> parallel_operand;
  if (auto pd = hlo_sharding_util::ScatterParallelDims(sc)) {
    for (size_t k = 0; k < pd->operand_dims.size() && k < pd->indices_dims.size(); ++k) {
      const int64_t od = pd->operand_dims[k];
      const int64_t id = pd->indices_dims[k];
      if (od < 0 || od >= r || id < 0 || id >= ir || L.operand[static_cast<size_t>(od)] >= 0) continue;
      const int64_t l = L.indices[static_cast<size_t>(id)];
      if (l < 0) continue;
      L.operand[static_cast<size_t>(od)] = l;
      L.free_b.erase(std::remove(L.free_b.begin(), L.free_b.end(), l), L.free_b.end());
      parallel_operand.push_back(od);
    }
  }
  std::vector<int64_t> window_operand;
  for (int64_t d = 0; d < r; ++d)
    if (!Has(dn.inserted_window_dims, d) && !Has(dn.input_batching_dims, d)) window_operand.push_back(d);
  if (window_operand.size() != uwd.size()) return PartitionWithFallback(ctx, sc);
  std::vector<int64_t> wsize(static_cast<size_t>(r), 1);
  for (size_t k = 0; k < window_operand.size(); ++k) {
    const int64_t d = window_operand[k];
    wsize[static_cast<size_t>(d)] = us.dim(uwd[k]);
    if (us.dim(uwd[k]) != os.dim(d)) continue;
    const int64_t l = L.num++;
    L.operand[static_cast<size_t>(d)] = l;
    L.updates[static_cast<size_t>(uwd[k])] = l;
  }
  for (int64_t d : dn.scatter_dims_to_operand_dims) {
    if (d < 0 || d >= r || L.operand[static_cast<size_t>(d)] >= 0 || wsize[static_cast<size_t>(d)] != 1) continue;
    L.operand[static_cast<size_t>(d)] = L.num++;
    L.t_labels.push_back(L.operand[static_cast<size_t>(d)]);
  }
  L.output = L.operand;

  Opcode comb_op = Opcode::kAdd;
  double idv = 0.0;
  bool can_reduce = false;
  if (n == 1) {
    // Partial updates combine by an all-reduce with the combiner (core/collectives/reduction.h).
    const std::optional<ReductionKind> kind = MatchReduction(sc.to_apply());
    if (kind && *kind != ReductionKind::kXor) {
      if (auto id = ReductionIdentity(*kind, os.type)) {
        comb_op = ReductionOpcode(*kind);
        idv = id->values[0];
        can_reduce = true;
      }
    }
  }
  std::vector<JointSource> sources = {{&maps[0], L.operand}, {&maps[static_cast<size_t>(n)], L.indices},
                                      {&maps[static_cast<size_t>(n + 1)], L.updates}, {&*tm, L.output}};
  std::vector<std::vector<int64_t>> in_labels;
  for (int64_t i = 0; i < nops; ++i) in_labels.push_back(i < n ? L.operand : i == n ? L.indices : L.updates);
  auto plan = SearchPlans(ctx, L, sources, vals, in_labels, L.output, os, target_leaf, L.free_b, can_reduce, n);
  if (!plan) return PartitionWithFallback(ctx, sc);

  std::vector<Instruction*> ins;
  for (int64_t i = 0; i < nops; ++i) {
    auto x = ctx.resharder().Reshard(*vals[static_cast<size_t>(i)], plan->in[static_cast<size_t>(i)]);
    if (!x.ok()) return Error(sc.name() + ": " + x.error().message);
    ins.push_back(*x);
  }
  const TileMap lop = plan->joint.Projected(L.operand);
  // Indices: move the components of sharded T dims into the local shard. Clamping to [-1, D]
  // keeps out-of-bounds indices out of bounds and avoids overflow; in-bounds indices of other
  // shards fall outside [0, shard) and the local scatter skips them (only the last shard's padding,
  // which holds no data, can receive indices >= D).
  std::vector<int64_t> sharded_t;
  {
    Instruction*& ix = ins[static_cast<size_t>(n)];
    IndexParts parts;
    bool split = false;
    for (size_t k = 0; k < dn.scatter_dims_to_operand_dims.size(); ++k) {
      const int64_t d = dn.scatter_dims_to_operand_dims[k];
      const bool parallel = Has(parallel_operand, d);
      if (d < 0 || d >= r || lop.tiles(d) == 1 || (!parallel && !Has(L.t_labels, L.operand[static_cast<size_t>(d)])))
        continue;
      if (!split) {
        parts = SplitIndices(ctx, ix, ivd);
        split = true;
      }
      if (k >= parts.comps.size()) continue;
      if (!parallel) sharded_t.push_back(d);
      Instruction* c = parts.comps[k];
      const Shape& bs = c->shape();
      const double lo = IsUnsignedInteger(bs.type) ? 0.0 : -1.0;
      c = ctx.builder().Emit(Opcode::kClamp, bs, {Splat(ctx, bs.type, lo, bs), c, Splat(ctx, bs.type, static_cast<double>(os.dim(d)), bs)});
      c = ctx.builder().Emit(Opcode::kSubtract, bs, {c, Offset(ctx, lop, d, os.dim(d), bs)});
      parts.comps[k] = c;
    }
    if (split) ix = JoinIndices(ctx, parts, ix->shape(), ivd);
  }
  const bool reduce = !plan->reduce_labels.empty();
  if (reduce) {
    // The padding of the updates' sharded scatter dims must not be applied: make it the identity.
    std::vector<int64_t> upd_dims;
    for (int64_t d = 0; d < ur; ++d)
      if (Has(plan->reduce_labels, L.updates[static_cast<size_t>(d)])) upd_dims.push_back(d);
    ins[static_cast<size_t>(n + 1)] =
        MaskPadding(ctx, {ins[static_cast<size_t>(n + 1)], plan->in[static_cast<size_t>(n + 1)], us}, upd_dims, idv);
    // The operand enters once: on the first device of every reduction group; the others start
    // from the identity.
    std::vector<int64_t> first(static_cast<size_t>(ctx.num_devices()), 1);
    for (int64_t dev = 0; dev < ctx.num_devices(); ++dev)
      for (int64_t l : plan->reduce_labels)
        if (plan->joint.device(dev).index[static_cast<size_t>(l)] != 0) first[static_cast<size_t>(dev)] = 0;
    Instruction* o = ins[0];
    const Shape& ls = o->shape();
    Instruction* f = ctx.builder().Broadcast(ctx.builder().TableLookup(first), Shape(PrimitiveType::kS32, ls.dims));
    Instruction* pick = Cmp(ctx, f, Splat(ctx, PrimitiveType::kS32, 1, ls), ComparisonDirection::kEq);
    ins[0] = ctx.builder().Emit(Opcode::kSelect, ls, {pick, o, Splat(ctx, ls.type, idv, ls)});
  }
  const std::vector<int64_t> local_dims = lop.ShardShape(os.dims);
  Shape local;
  if (sc.shape().IsTuple()) {
    std::vector<Shape> leaves;
    for (int64_t i = 0; i < n; ++i) leaves.push_back(Shape(sc.shape().tuple[static_cast<size_t>(i)].type, local_dims));
    local = Shape::Tuple(leaves);
  } else {
    local = Shape(sc.shape().type, local_dims);
  }
  Instruction* x = ctx.builder().Emit(Opcode::kScatter, local, ins);
  CopyAttributes(sc, x);
  x->clear_sharding();
  std::vector<Computation*> called;
  for (Computation* c : sc.called_computations()) called.push_back(ctx.builder().CloneScalarComputation(c));
  x->mutable_called_computations() = called;
  if (reduce) {
    std::vector<int64_t> bdims;
    for (int64_t d = 0; d < ur; ++d)
      if (Has(plan->reduce_labels, L.updates[static_cast<size_t>(d)])) bdims.push_back(d);
    x = ctx.builder().AllReduce(x, ctx.builder().ScalarReducer(comb_op, local.type), plan->joint.GroupsAlong(plan->reduce_labels),
                      "scatter: updates sharded on scatter dim " + LabelDims(bdims) + ", partial " +
                          std::string(OpcodeName(comb_op)) + " + all-reduce");
  }
  HloSharding have = sc.shape().IsTuple() ? HloSharding::Tuple(std::vector<HloSharding>(static_cast<size_t>(n), plan->partial_out))
                                          : plan->partial_out;
  auto fin = ctx.resharder().ReshardAny({x, have, sc.shape()}, target);
  if (!fin.ok()) return Error(sc.name() + ": " + fin.error().message);
  ctx.Set(&sc, {*fin, target, sc.shape()});
  return Status::Ok();
}

}  // namespace

void RegisterGatherScatterHandlers(HandlerTable& table) {
  table.Add({Opcode::kGather}, HandleGather);
  table.Add({Opcode::kScatter}, HandleScatter);
}

}  // namespace shardscope::spmd
