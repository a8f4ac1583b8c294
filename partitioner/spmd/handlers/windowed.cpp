// Windowed ops — convolution, reduce-window, and pad / slice seen as windows — partitioned with
// halo exchange (GSPMD §3.3, §4.3 and Appendix A.2). A sharded windowed (spatial) dimension stays
// sharded: every device fetches the few rows its windows need from its neighbours
// (ExchangeHalo in halo.h, the one halo primitive), then runs the op locally with the padding
// folded into the exchanged window.
//
// Convolution is labelled like a dot, plus one label per windowed dimension (a joint tiling over
// the labels; the cheapest by bytes moved wins, as in dot.cpp):
//   batch          input batch = output batch (runs locally)
//   contracting    input feature = kernel input feature (partial sums + all-reduce)
//   out-feature    kernel output feature = output feature (runs locally)
//   feature-group  input feature = kernel output feature = output feature, feature_group_count > 1
//   batch-group    input batch = kernel output feature = output feature, batch_group_count > 1
//   window s       input spatial s = output spatial s: halo exchange of the input
//   kernel s       input spatial s = kernel spatial s: halo exchange of the input, partial sums
//                  (the filter-gradient convolution, XLA's "halo on LHS"; with
//                  SpmdOptions::conv_halo_exchange_always_on_lhs false the kernel's halo instead)
//   spatial-batch  a spatial dim that is a batch dim in disguise (window = base dilation = size)
// Whatever a joint tiling cannot keep sharded becomes replication; the all-replicated tiling is
// always a candidate, so the handler is always correct.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "core/collectives/reduction.h"
#include "core/ir/shape_inference.h"
#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"
#include "partitioner/spmd/handlers/windowed.h"

namespace shardscope::spmd {
namespace {

// The identity of a scalar reducer for the element type (core/collectives/reduction.h): the value
// halo masking fills in.
std::optional<double> ReducerIdentity(const Computation* c, PrimitiveType t) {
  const std::optional<ReductionKind> kind = MatchReduction(c);
  if (!kind) return std::nullopt;
  const std::optional<Literal> id = ReductionIdentity(*kind, t);
  if (!id) return std::nullopt;
  return id->values[0];
}

bool Windowed(const WindowDimension& w) {
  return w.size != 1 || w.stride != 1 || w.padding_low != 0 || w.padding_high != 0 || w.base_dilation != 1 ||
         w.window_dilation != 1 || w.window_reversal;
}

// ---- convolution -----------------------------------------------------------------------------------

enum class Kind { kBatch, kContract, kOutFeature, kFeatureGroup, kBatchGroup, kSpatialBatch, kWindow, kKernel };

struct ConvLabels {
  std::vector<Kind> kind;
  std::vector<int64_t> spatial;             // per label: spatial index (window/kernel/spatial-batch)
  std::vector<int64_t> lhs, rhs, out;       // label of each dim (-1: none, stays whole)
  std::vector<int64_t> window_label, kernel_label;  // per spatial index (-1 for spatial-batch dims)
  std::vector<WindowDimension> win;         // per spatial index
  int64_t num() const { return static_cast<int64_t>(kind.size()); }
};

// A spatial dim that is a dot batch dim written as a convolution (XLA's dot-as-convolution form):
// window = input size = base dilation, stride (or window dilation) size - 1, no padding.
bool SpatialBatchLike(int64_t lhs_size, const WindowDimension& w) {
  if (lhs_size != w.size || lhs_size != w.base_dilation || w.padding_low || w.padding_high || w.window_reversal)
    return false;
  const int64_t k = std::max<int64_t>(1, lhs_size - 1);
  return (w.stride == k && w.window_dilation == 1) || (w.window_dilation == k && w.stride == 1);
}

std::optional<ConvLabels> MakeConvLabels(const Instruction& conv) {
  const auto& cd = conv.conv_dims;
  const Shape& ls = conv.operand(0)->shape();
  const Shape& ks = conv.operand(1)->shape();
  const Shape& os = conv.shape();
  const int64_t G = std::max<int64_t>(1, conv.feature_group_count), BG = std::max<int64_t>(1, conv.batch_group_count);
  if (G > 1 && BG > 1) return std::nullopt;
  const size_t ns = cd.input_spatial.size();
  if (cd.kernel_spatial.size() != ns || cd.output_spatial.size() != ns || ls.rank() != static_cast<int64_t>(ns + 2) ||
      ks.rank() != static_cast<int64_t>(ns + 2) || os.rank() != static_cast<int64_t>(ns + 2))
    return std::nullopt;
  ConvLabels L;
  L.lhs.assign(static_cast<size_t>(ls.rank()), -1);
  L.rhs.assign(static_cast<size_t>(ks.rank()), -1);
  L.out.assign(static_cast<size_t>(os.rank()), -1);
  auto add = [&](Kind k, int64_t s = -1) {
    L.kind.push_back(k);
    L.spatial.push_back(s);
    return L.num() - 1;
  };
  auto at = [](std::vector<int64_t>& v, int64_t d) -> int64_t& { return v[static_cast<size_t>(d)]; };
  if (BG > 1) {
    const int64_t g = add(Kind::kBatchGroup);
    at(L.lhs, cd.input_batch) = g;
    at(L.rhs, cd.kernel_output_feature) = g;
    at(L.out, cd.output_feature) = g;
    const int64_t c = add(Kind::kContract);
    at(L.lhs, cd.input_feature) = c;
    at(L.rhs, cd.kernel_input_feature) = c;
  } else if (G > 1) {
    const int64_t b = add(Kind::kBatch);
    at(L.lhs, cd.input_batch) = b;
    at(L.out, cd.output_batch) = b;
    const int64_t f = add(Kind::kFeatureGroup);
    at(L.lhs, cd.input_feature) = f;
    at(L.rhs, cd.kernel_output_feature) = f;
    at(L.out, cd.output_feature) = f;
  } else {
    const int64_t b = add(Kind::kBatch);
    at(L.lhs, cd.input_batch) = b;
    at(L.out, cd.output_batch) = b;
    const int64_t c = add(Kind::kContract);
    at(L.lhs, cd.input_feature) = c;
    at(L.rhs, cd.kernel_input_feature) = c;
    const int64_t r = add(Kind::kOutFeature);
    at(L.rhs, cd.kernel_output_feature) = r;
    at(L.out, cd.output_feature) = r;
  }
  L.window_label.assign(ns, -1);
  L.kernel_label.assign(ns, -1);
  L.win.resize(ns);
  for (size_t s = 0; s < ns; ++s) {
    WindowDimension w;
    if (conv.has_window && s < conv.window.dims.size()) w = conv.window.dims[s];
    else w.size = ks.dim(cd.kernel_spatial[s]);
    L.win[s] = w;
    const int64_t si = static_cast<int64_t>(s);
    if (SpatialBatchLike(ls.dim(cd.input_spatial[s]), w) && ks.dim(cd.kernel_spatial[s]) == w.size &&
        os.dim(cd.output_spatial[s]) == w.size) {
      const int64_t l = add(Kind::kSpatialBatch, si);
      at(L.lhs, cd.input_spatial[s]) = l;
      at(L.rhs, cd.kernel_spatial[s]) = l;
      at(L.out, cd.output_spatial[s]) = l;
      continue;
    }
    L.window_label[s] = add(Kind::kWindow, si);
    L.kernel_label[s] = add(Kind::kKernel, si);
    at(L.out, cd.output_spatial[s]) = L.window_label[s];
    at(L.rhs, cd.kernel_spatial[s]) = L.kernel_label[s];
    at(L.lhs, cd.input_spatial[s]) = L.window_label[s];  // or the kernel label (a search variant)
  }
  return L;
}

// How the input's spatial dim s reaches the windows the devices need.
// kRhsHalo: the input keeps its rows and the kernel's halo is exchanged instead (filter
// gradients with SpmdOptions::conv_halo_exchange_always_on_lhs false).
enum class Reach { kNone, kHalo, kWhole, kRhsHalo };

struct SpatialPlan {
  Reach reach = Reach::kNone;
  int64_t label = -1;     // the window or kernel label tiling it
  WindowedTiling tiling;  // input windows per tile (kRhsHalo: kernel windows), local window, output slice
  // kRhsHalo: tile i's input shard sits at lhs_off[i] in a zero buffer of lhs_size rows.
  std::vector<int64_t> lhs_off;
  int64_t lhs_size = 0;
};

struct ConvPlan {
  TileMap joint;
  std::vector<int64_t> lhs_labels;  // the lhs labelling this plan uses
  HloSharding lhs, rhs, partial;    // operand shardings and the local result's sharding
  TileMap lhs_map;                  // lhs projection before whole-dim gathers (tile index per device)
  std::vector<SpatialPlan> spatial;
  std::vector<int64_t> contract_labels;  // tiled contracting labels (all-reduce groups)
  int64_t cost = 0;
  bool contracting_all = false;  // every device holds a different part of the input features
};

std::string MapKey(const TileMap& m) {
  std::string k;
  for (int64_t t : m.tiles()) k += std::to_string(t) + ",";
  k += "|";
  for (int64_t d = 0; d < m.num_devices(); ++d) {
    for (int64_t i : m.device(d).index) k += std::to_string(i) + ",";
    k += ";";
  }
  return k;
}

// The local window of the per-device convolution.
Window LocalWindow(const ConvLabels& L, const TileMap& joint, const std::vector<SpatialPlan>& sp) {
  Window w;
  w.dims = L.win;
  for (size_t s = 0; s < L.win.size(); ++s) {
    WindowDimension& d = w.dims[s];
    if (L.window_label[s] < 0) {  // spatial-batch: the window of the local (shard-sized) batch
      int64_t label = -1;
      for (int64_t l = 0; l < L.num(); ++l)
        if (L.kind[static_cast<size_t>(l)] == Kind::kSpatialBatch && L.spatial[static_cast<size_t>(l)] == static_cast<int64_t>(s)) label = l;
      const int64_t t = label >= 0 ? joint.tiles(label) : 1;
      if (t == 1) continue;
      const int64_t n = (d.size + t - 1) / t;
      const bool by_stride = d.window_dilation == 1;
      d.size = n;
      d.base_dilation = n;
      d.stride = by_stride ? std::max<int64_t>(1, n - 1) : 1;
      d.window_dilation = by_stride ? 1 : std::max<int64_t>(1, n - 1);
      continue;
    }
    if (sp[s].reach != Reach::kNone) d = sp[s].tiling.local;
  }
  return w;
}

// The kernel-side halo of a kernel-sharded spatial dim (XLA's conv_halo_exchange_always_on_lhs
// false): input tile i keeps its rows [i*ls, (i+1)*ls) and computes, for every output, the partial
// sum over those rows; it needs the kernel taps t that read them for some output o
// (o*stride + t*dilation - pad_low in its rows), a window [start[i], start[i] + size) of the
// kernel (taps outside [0, K) read 0). The local window must be the same on every device: its low
// padding is the smallest of the tiles' offsets between their first row and first tap, and each
// tile's rows sit that much further (lhs_off[i] < dilation) into a zero buffer. nullopt under
// window reversal or base dilation (the input-side halo handles those).
std::optional<SpatialPlan> RhsHaloTiling(const WindowDimension& w, int64_t tiles, int64_t L, int64_t K,
                                         int64_t out_full) {
  if (w.window_reversal || w.base_dilation != 1 || w.stride < 1 || w.window_dilation < 1 || tiles < 2 || L < 1 ||
      K < 1 || out_full < 1)
    return std::nullopt;
  const int64_t ls = (L + tiles - 1) / tiles, s = w.stride, wd = w.window_dilation, pl = w.padding_low;
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  std::vector<int64_t> start(static_cast<size_t>(tiles)), e(static_cast<size_t>(tiles));
  int64_t size = 1, plo = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t first = i * ls, last = std::min((i + 1) * ls, L) - 1;  // the tile's real rows
    const int64_t t0 = ceil_div(first + pl - (out_full - 1) * s, wd);
    start[static_cast<size_t>(i)] = t0;
    e[static_cast<size_t>(i)] = first + pl - t0 * wd;
    if (last < first) continue;  // a tile of padding only: its rows are zero, any window will do
    const int64_t t1 = std::min(floor_div(last + pl, wd) + 1, K);
    size = std::max(size, t1 - t0);
    plo = std::min(plo, e[static_cast<size_t>(i)]);
  }
  if (plo == std::numeric_limits<int64_t>::max()) return std::nullopt;
  if (plo < 0) {  // start every window earlier so the local low padding is not negative
    const int64_t k = ceil_div(-plo, wd);
    for (auto& t0 : start) t0 -= k;
    for (auto& x : e) x += k * wd;
    plo += k * wd;
    size += k;
  }
  SpatialPlan sp;
  sp.reach = Reach::kRhsHalo;
  sp.lhs_off.resize(static_cast<size_t>(tiles));
  int64_t maxoff = 0;
  for (int64_t i = 0; i < tiles; ++i) {
    // Tiles of padding only take offset 0 (their rows are zero).
    const int64_t off = i * ls < L ? e[static_cast<size_t>(i)] - plo : 0;
    if (off < 0 || off >= wd) return std::nullopt;
    sp.lhs_off[static_cast<size_t>(i)] = off;
    maxoff = std::max(maxoff, off);
  }
  sp.lhs_size = ls + maxoff;
  WindowedTiling& t = sp.tiling;
  t.start = start;
  t.size = size;
  t.local = w;
  t.local.size = size;
  t.local.padding_low = plo;
  t.local.padding_high = (out_full - 1) * s + (size - 1) * wd + 1 - sp.lhs_size - plo;
  t.local_out = out_full;
  t.out_offset.assign(static_cast<size_t>(tiles), 0);
  return sp;
}

// Keeps each tile's own outputs of a local windowed op that computed extra windows.
Instruction* SliceOwnOutputs(SpmdContext& ctx, Instruction* x, const std::vector<SpatialPlan>& sp,
                             const std::vector<int64_t>& out_dims, const TileMap& out_map, const Shape& shard) {
  for (size_t s = 0; s < sp.size(); ++s) {
    if (sp[s].reach == Reach::kNone || !sp[s].tiling.sliced()) continue;
    const int64_t d = out_dims[s];
    std::vector<Instruction*> offsets;
    std::vector<int64_t> sizes = x->shape().dims;
    sizes[static_cast<size_t>(d)] = shard.dim(d);
    std::vector<int64_t> table(static_cast<size_t>(ctx.num_devices()));
    for (int64_t dev = 0; dev < ctx.num_devices(); ++dev)
      table[static_cast<size_t>(dev)] =
          sp[s].tiling.out_offset[static_cast<size_t>(out_map.device(dev).index[static_cast<size_t>(d)])];
    for (int64_t k = 0; k < x->shape().rank(); ++k)
      offsets.push_back(k == d ? ctx.builder().TableLookup(table) : ctx.builder().ConstantScalar(PrimitiveType::kS32, 0));
    x = ctx.builder().DynamicSlice(x, offsets, sizes);
  }
  return x;
}

Status HandleConvolution(SpmdContext& ctx, const Instruction& conv) {
  if (!conv.shape().IsArray() || conv.operand_count() != 2 || conv.shape().ElementCount() == 0 ||
      conv.operand(0)->shape().ElementCount() == 0 || conv.operand(1)->shape().ElementCount() == 0)
    return PartitionWithFallback(ctx, conv);
  auto labels = MakeConvLabels(conv);
  if (!labels) return PartitionWithFallback(ctx, conv);
  const ConvLabels& L = *labels;
  const auto& cd = conv.conv_dims;
  const int64_t n = ctx.num_devices();
  const PartitionedHlo& lv = ctx.Get(conv.operand(0));
  const PartitionedHlo& rv = ctx.Get(conv.operand(1));
  const HloSharding target = SpmdContext::ShardingOf(conv);
  auto lm = ctx.maps().Get(lv.sharding, lv.base_shape.rank());
  auto rm = ctx.maps().Get(rv.sharding, rv.base_shape.rank());
  auto om = ctx.maps().Get(target, conv.shape().rank());
  if (!lm.ok() || !rm.ok() || !om.ok()) return PartitionWithFallback(ctx, conv);
  const Shape& out_shape = conv.shape();
  const int64_t G = std::max<int64_t>(1, conv.feature_group_count), BG = std::max<int64_t>(1, conv.batch_group_count);
  const size_t ns = L.win.size();
  const int64_t out_elem = PrimitiveTypeBytes(out_shape.type);
  const int64_t lhs_elem = PrimitiveTypeBytes(lv.base_shape.type);

  // Lhs labellings: each spatial dim the lhs has sharded may follow the output (window label) or
  // the kernel (kernel label).
  std::vector<size_t> ambiguous;
  for (size_t s = 0; s < ns; ++s)
    if (L.window_label[s] >= 0 && lm->tiles(cd.input_spatial[s]) > 1) ambiguous.push_back(s);

  // Makes a joint tiling executable: labels whose tiling the op cannot run locally become
  // replication.
  auto fix = [&](TileMap j) {
    std::vector<int64_t> drop;
    for (int64_t l = 0; l < L.num(); ++l) {
      const int64_t t = j.tiles(l);
      if (t == 1) continue;
      const Kind k = L.kind[static_cast<size_t>(l)];
      const int64_t s = L.spatial[static_cast<size_t>(l)];
      if (k == Kind::kFeatureGroup && G % t != 0) drop.push_back(l);
      if (k == Kind::kBatchGroup && BG % t != 0) drop.push_back(l);
      if (k == Kind::kKernel && !TileKernelDim(L.win[static_cast<size_t>(s)], t,
                                               rv.base_shape.dim(cd.kernel_spatial[static_cast<size_t>(s)]),
                                               out_shape.dim(cd.output_spatial[static_cast<size_t>(s)])))
        drop.push_back(l);
      if (k == Kind::kWindow) {
        const int64_t od = cd.output_spatial[static_cast<size_t>(s)];
        if (!TileWindowedDim(L.win[static_cast<size_t>(s)], t, (out_shape.dim(od) + t - 1) / t, out_shape.dim(od)))
          drop.push_back(l);
      }
      if (k == Kind::kKernel && j.tiles(L.window_label[static_cast<size_t>(s)]) > 1) drop.push_back(l);
    }
    std::sort(drop.begin(), drop.end());
    drop.erase(std::unique(drop.begin(), drop.end()), drop.end());
    return drop.empty() ? j : j.Gathered(drop);
  };

  auto evaluate = [&](const TileMap& joint, const std::vector<int64_t>& lhs_labels_in) -> std::optional<ConvPlan> {
    ConvPlan p;
    p.joint = joint;
    p.lhs_labels = lhs_labels_in;
    // The lhs's spatial dims follow whichever of its window/kernel labels is tiled.
    for (size_t s = 0; s < ns; ++s) {
      if (L.window_label[s] < 0) continue;
      const int64_t d = cd.input_spatial[s];
      if (joint.tiles(L.kernel_label[s]) > 1) p.lhs_labels[static_cast<size_t>(d)] = L.kernel_label[s];
      else p.lhs_labels[static_cast<size_t>(d)] = L.window_label[s];
    }
    p.lhs_map = joint.Projected(p.lhs_labels);
    const TileMap rmap = joint.Projected(L.rhs);
    const TileMap pmap = joint.Projected(L.out);
    // Spatial dims: the windows every tile needs.
    p.spatial.resize(ns);
    std::vector<size_t> tiled;  // spatial dims whose input is windowed per tile
    std::vector<HaloPlan> halos(ns);
    for (size_t s = 0; s < ns; ++s) {
      if (L.window_label[s] < 0) continue;
      const int64_t d = cd.input_spatial[s];
      const int64_t wt = joint.tiles(L.window_label[s]), kt = joint.tiles(L.kernel_label[s]);
      if (wt == 1 && kt == 1) continue;
      SpatialPlan& sp = p.spatial[s];
      const WindowDimension& w = L.win[s];
      const int64_t lhs_full = lv.base_shape.dim(d);
      if (wt > 1) {
        sp.label = L.window_label[s];
        const int64_t od = cd.output_spatial[s];
        auto tw = TileWindowedDim(w, wt, pmap.ShardSize(od, out_shape.dim(od)), out_shape.dim(od));
        if (!tw) return std::nullopt;
        sp.tiling = *tw;
      } else {
        sp.label = L.kernel_label[s];
        if (!ctx.options().conv_halo_exchange_always_on_lhs) {
          auto rt = RhsHaloTiling(w, kt, lhs_full, rv.base_shape.dim(cd.kernel_spatial[s]), out_shape.dim(cd.output_spatial[s]));
          if (rt) {
            rt->label = sp.label;
            sp = std::move(*rt);
            continue;  // the input keeps its shard: not windowed
          }
        }
        auto kt_tiling = TileKernelDim(w, kt, rv.base_shape.dim(cd.kernel_spatial[s]), out_shape.dim(cd.output_spatial[s]));
        if (!kt_tiling) return std::nullopt;
        sp.tiling = *kt_tiling;
      }
      const int64_t t = joint.tiles(sp.label);
      halos[s] = PlanHalo((lhs_full + t - 1) / t, t, lhs_full, sp.tiling.start, sp.tiling.size, true, true, sp.tiling.need);
      tiled.push_back(s);
    }
    // Each such dim either keeps the input sharded and exchanges halos, or takes the input whole
    // along it (a gather, or nothing when it is whole already) and cuts the windows locally: the
    // cheaper combination (resharding + halo bytes) wins.
    bool found = false;
    int64_t lhs_cost = 0;
    std::vector<int64_t> best_whole;
    for (int64_t combo = 0; combo < (int64_t{1} << tiled.size()); ++combo) {
      std::vector<int64_t> whole;
      for (size_t k = 0; k < tiled.size(); ++k)
        if (combo & (int64_t{1} << k)) whole.push_back(cd.input_spatial[tiled[k]]);
      auto sh = p.lhs_map.Gathered(whole).ToSharding();
      if (!sh.ok()) continue;
      auto rp = ctx.resharder().Plan(lv.sharding, *sh, lv.base_shape);
      if (!rp.ok()) continue;
      int64_t cost = rp->bytes;
      std::vector<int64_t> shard = p.lhs_map.Gathered(whole).ShardShape(lv.base_shape.dims);
      for (size_t k = 0; k < tiled.size(); ++k) {
        const int64_t d = cd.input_spatial[tiled[k]];
        if (!(combo & (int64_t{1} << k))) {
          const int64_t row = ElementsOf(shard) / std::max<int64_t>(1, shard[static_cast<size_t>(d)]) * lhs_elem;
          // The hops of one exchange are independent (all read the shard itself) and run
          // concurrently: one latency term, like one collective.
          cost += halos[tiled[k]].link_rows * row + (halos[tiled[k]].permutes > 0 ? kCollectiveOverheadBytes : 0);
        }
        shard[static_cast<size_t>(d)] = p.spatial[tiled[k]].tiling.local_input();
      }
      if (!found || cost < lhs_cost) {
        found = true;
        lhs_cost = cost;
        best_whole = whole;
        p.lhs = *sh;
      }
    }
    if (!found) return std::nullopt;
    for (size_t s : tiled)
      p.spatial[s].reach = std::find(best_whole.begin(), best_whole.end(), cd.input_spatial[s]) != best_whole.end()
                               ? Reach::kWhole : Reach::kHalo;
    auto rsh = rmap.ToSharding();
    auto psh = pmap.ToSharding();
    if (!rsh.ok() || !psh.ok()) return std::nullopt;
    p.rhs = *rsh;
    p.partial = *psh;
    auto c2 = ctx.resharder().Plan(rv.sharding, p.rhs, rv.base_shape);
    auto c3 = ctx.resharder().Plan(p.partial, target, out_shape);
    if (!c2.ok() || !c3.ok()) return std::nullopt;
    p.cost = lhs_cost + c2->bytes + c3->bytes;
    // Kernel-side halos: exchanged on the kernel's shard.
    std::vector<int64_t> rshard = rmap.ShardShape(rv.base_shape.dims);
    for (size_t s = 0; s < ns; ++s) {
      const SpatialPlan& sp = p.spatial[s];
      if (sp.reach != Reach::kRhsHalo) continue;
      const int64_t d = cd.kernel_spatial[s], K = rv.base_shape.dim(d), t = joint.tiles(sp.label);
      const HaloPlan h = PlanHalo((K + t - 1) / t, t, K, sp.tiling.start, sp.tiling.size, true, true);
      const int64_t row = ElementsOf(rshard) / std::max<int64_t>(1, rshard[static_cast<size_t>(d)]) *
                          PrimitiveTypeBytes(rv.base_shape.type);
      p.cost += h.link_rows * row + (h.permutes > 0 ? kCollectiveOverheadBytes : 0);
      rshard[static_cast<size_t>(d)] = sp.tiling.size;
    }
    int64_t ctiles = 1;
    for (int64_t l = 0; l < L.num(); ++l) {
      const Kind k = L.kind[static_cast<size_t>(l)];
      if ((k == Kind::kContract || k == Kind::kKernel) && joint.tiles(l) > 1) {
        p.contract_labels.push_back(l);
        ctiles *= joint.tiles(l);
      }
    }
    int64_t feature_tiles = 1;
    for (int64_t l = 0; l < L.num(); ++l)
      if (L.kind[static_cast<size_t>(l)] == Kind::kContract) feature_tiles *= joint.tiles(l);
    p.contracting_all = feature_tiles == n;
    if (ctiles > 1) {
      const int64_t partial_bytes = ElementsOf(pmap.ShardShape(out_shape.dims)) * out_elem;
      p.cost += 2 * partial_bytes * (ctiles - 1) / ctiles + kCollectiveOverheadBytes;
    }
    return p;
  };

  // XLA's base case (as the dot handler's): both operands split over every device along the input
  // features multiply their shards and all-reduce, before any operand is moved.
  const bool contracting_first = n > 1 && lm->tiles(cd.input_feature) == n && rm->tiles(cd.kernel_input_feature) == n;
  std::optional<ConvPlan> best;
  std::set<std::string> seen;
  for (int64_t variant = 0; variant < (int64_t{1} << ambiguous.size()); ++variant) {
    std::vector<int64_t> lhs_labels = L.lhs;
    for (size_t a = 0; a < ambiguous.size(); ++a) {
      const size_t s = ambiguous[a];
      if (variant & (int64_t{1} << a)) lhs_labels[static_cast<size_t>(cd.input_spatial[s])] = L.kernel_label[s];
    }
    const JointSource ls{&*lm, lhs_labels}, rs{&*rm, L.rhs}, os{&*om, L.out};
    for (const auto& subset : ctx.SubsetJointTilings({ls, rs, os}, L.num())) {
      TileMap j = fix(subset.joint);
      if (!seen.insert(MapKey(j)).second) continue;
      auto p = evaluate(j, lhs_labels);
      if (p && (!best || (contracting_first && p->contracting_all != best->contracting_all ? p->contracting_all
                                                                                          : p->cost < best->cost)))
        best = std::move(p);
    }
  }
  if (!best) return PartitionWithFallback(ctx, conv);

  // Local shapes, checked by shape inference before anything is emitted.
  const Window local_window = LocalWindow(L, best->joint, best->spatial);
  std::vector<int64_t> lhs_local = best->lhs_map.ShardShape(lv.base_shape.dims);
  auto rhs_local = ctx.maps().ShardShape(rv.base_shape, best->rhs);
  for (size_t s = 0; s < ns; ++s) {
    const SpatialPlan& sp = best->spatial[s];
    if (sp.reach == Reach::kRhsHalo) {
      lhs_local[static_cast<size_t>(cd.input_spatial[s])] = sp.lhs_size;
      if (rhs_local.ok()) rhs_local->dims[static_cast<size_t>(cd.kernel_spatial[s])] = sp.tiling.size;
    } else if (sp.reach != Reach::kNone) {
      lhs_local[static_cast<size_t>(cd.input_spatial[s])] = sp.tiling.local_input();
    }
  }
  auto out_shard = ctx.maps().ShardShape(out_shape, best->partial);
  if (!out_shard.ok()) return PartitionWithFallback(ctx, conv);
  // The local convolution may compute extra windows (base dilation at different phases per
  // tile); a dynamic-slice of the output keeps each tile's own.
  Shape out_local = *out_shard;
  for (size_t s = 0; s < ns; ++s)
    if (best->spatial[s].reach != Reach::kNone)
      out_local.dims[static_cast<size_t>(cd.output_spatial[s])] = best->spatial[s].tiling.local_out;
  int64_t fg_tiles = 1, bg_tiles = 1;
  for (int64_t l = 0; l < L.num(); ++l) {
    if (L.kind[static_cast<size_t>(l)] == Kind::kFeatureGroup) fg_tiles = best->joint.tiles(l);
    if (L.kind[static_cast<size_t>(l)] == Kind::kBatchGroup) bg_tiles = best->joint.tiles(l);
  }
  if (!rhs_local.ok()) return PartitionWithFallback(ctx, conv);
  {
    Module scratch("scratch");
    Computation* c = scratch.AddComputation("c", true);
    Instruction* a = c->AddInstruction(Opcode::kParameter, Shape(lv.base_shape.type, lhs_local), {});
    a->parameter_number = 0;
    Instruction* b = c->AddInstruction(Opcode::kParameter, *rhs_local, {});
    b->parameter_number = 1;
    Instruction* x = c->AddInstruction(Opcode::kConvolution, out_local, {a, b});
    CopyAttributes(conv, x);
    x->window = local_window;
    x->has_window = true;
    x->feature_group_count = G / fg_tiles;
    x->batch_group_count = BG / bg_tiles;
    auto inferred = InferShape(*x);
    if (!inferred.ok() || !inferred->Compatible(out_local)) return PartitionWithFallback(ctx, conv);
  }

  auto lhs = ctx.resharder().Reshard(lv, best->lhs);
  if (!lhs.ok()) return Error(conv.name() + ": " + lhs.error().message);
  auto rhs = ctx.resharder().Reshard(rv, best->rhs);
  if (!rhs.ok()) return Error(conv.name() + ": " + rhs.error().message);
  Instruction* lx = *lhs;
  Instruction* rx = *rhs;
  // Padding of uneven shards on summed dims must not leak into the sums: zero it (the kernel's
  // on its sharded spatial dims too; the input's windows are masked by the halo exchange).
  std::vector<int64_t> lmask, rmask;
  for (int64_t l : best->contract_labels) {
    for (size_t d = 0; d < L.rhs.size(); ++d)
      if (L.rhs[d] == l) rmask.push_back(static_cast<int64_t>(d));
    if (L.kind[static_cast<size_t>(l)] == Kind::kContract)
      for (size_t d = 0; d < L.lhs.size(); ++d)
        if (L.lhs[d] == l) lmask.push_back(static_cast<int64_t>(d));
  }
  if (!lmask.empty()) lx = MaskPadding(ctx, {lx, best->lhs, lv.base_shape}, lmask, 0.0);
  if (!rmask.empty()) rx = MaskPadding(ctx, {rx, best->rhs, rv.base_shape}, rmask, 0.0);
  for (size_t s = 0; s < ns; ++s) {
    const SpatialPlan& sp = best->spatial[s];
    if (sp.reach != Reach::kRhsHalo) continue;
    // The input's rows stay; its uneven padding must read 0 (it meets real kernel taps), and each
    // tile's rows move lhs_off[i] into the local buffer (a pad and a dynamic-slice when the
    // offsets differ).
    const int64_t d = cd.input_spatial[s];
    lx = MaskPadding(ctx, {lx, best->lhs, lv.base_shape}, {d}, 0.0);
    const int64_t maxoff = sp.lhs_size - lx->shape().dim(d);
    if (maxoff > 0) {
      std::vector<int64_t> dims = lx->shape().dims;
      dims[static_cast<size_t>(d)] += 2 * maxoff;
      Instruction* pad = ctx.builder().Emit(Opcode::kPad, Shape(lx->shape().type, dims), {lx, ctx.builder().ConstantScalar(lx->shape().type, 0.0)});
      pad->padding.resize(dims.size());
      pad->padding[static_cast<size_t>(d)].low = maxoff;
      pad->padding[static_cast<size_t>(d)].high = maxoff;
      std::vector<int64_t> table(static_cast<size_t>(n));
      for (int64_t dev = 0; dev < n; ++dev)
        table[static_cast<size_t>(dev)] =
            maxoff - sp.lhs_off[static_cast<size_t>(best->lhs_map.device(dev).index[static_cast<size_t>(d)])];
      std::vector<Instruction*> offsets;
      for (int64_t k = 0; k < lx->shape().rank(); ++k)
        offsets.push_back(k == d ? ctx.builder().TableLookup(table) : ctx.builder().ConstantScalar(PrimitiveType::kS32, 0));
      std::vector<int64_t> sizes = lx->shape().dims;
      sizes[static_cast<size_t>(d)] = sp.lhs_size;
      lx = ctx.builder().DynamicSlice(pad, offsets, sizes);
    }
    const int64_t kd = cd.kernel_spatial[s];
    auto h = ExchangeHalo(ctx.builder(), rx, best->joint.Projected(L.rhs), kd, rv.base_shape.dim(kd), sp.tiling.start,
                              sp.tiling.size, 0.0, true, "convolution kernel");
    if (!h.ok()) return Error(conv.name() + ": " + h.error().message);
    rx = *h;
  }
  for (size_t s = 0; s < ns; ++s) {
    const SpatialPlan& sp = best->spatial[s];
    if (sp.reach == Reach::kNone || sp.reach == Reach::kRhsHalo) continue;
    const int64_t d = cd.input_spatial[s];
    auto h = ExchangeHalo(ctx.builder(), lx, best->lhs_map, d, lv.base_shape.dim(d), sp.tiling.start, sp.tiling.size, 0.0,
                              sp.reach == Reach::kHalo, "convolution", sp.tiling.need);
    if (!h.ok()) return Error(conv.name() + ": " + h.error().message);
    auto dl = DilateWindows(ctx.builder(), *h, best->lhs_map, d, sp.tiling, 0.0);
    if (!dl.ok()) return Error(conv.name() + ": " + dl.error().message);
    lx = *dl;
  }
  Instruction* x = ctx.builder().Emit(Opcode::kConvolution, out_local, {lx, rx});
  CopyAttributes(conv, x);
  x->window = local_window;
  x->has_window = true;
  x->feature_group_count = G / fg_tiles;
  x->batch_group_count = BG / bg_tiles;
  x = SliceOwnOutputs(ctx, x, best->spatial, cd.output_spatial, best->joint.Projected(L.out), *out_shard);
  if (!best->contract_labels.empty()) {
    Computation* add = ctx.builder().ScalarReducer(out_shape.type == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, out_shape.type);
    x = ctx.builder().AllReduce(x, add, best->joint.GroupsAlong(best->contract_labels),
                      "convolution: contracting dimension sharded");
  }
  auto fin = ctx.resharder().Reshard({x, best->partial, out_shape}, target);
  if (!fin.ok()) return Error(conv.name() + ": " + fin.error().message);
  ctx.Set(&conv, {*fin, target, out_shape});
  return Status::Ok();
}

// ---- reduce-window, pad, slice: one operand, a window per dimension -------------------------------
// Pad is a window of size 1 with the pad's low/high padding and base dilation interior + 1; slice
// a window of size 1 with stride and negative padding (-start, limit - size). All three keep the
// output's sharding on every dimension: untouched dims run locally, windowed ones get their input
// windows by halo exchange (or cut from the whole input), the rest are computed whole.

struct WindowedOp {
  const Instruction* operand = nullptr;
  std::vector<WindowDimension> window;   // per dim
  std::optional<double> pad_value;       // what windows read outside the input (nullopt: no halo)
  Instruction* pad_scalar = nullptr;     // or a scalar of the SPMD program holding it
  std::string what;
  // Emits the local op on x; local[d] is the local window of each dim whose windows were cut.
  std::function<Instruction*(Instruction* x, const std::vector<std::optional<WindowDimension>>& local,
                             const Shape& local_shape)> emit;
  // When the shardings cannot be partitioned this way (nullptr: the replicated fallback of op).
  std::function<Status()> fallback;
};

Status PartitionWindowed(SpmdContext& ctx, const Instruction& op, const WindowedOp& w) {
  const int64_t rank = op.shape().rank();
  if (op.shape().ElementCount() == 0 || w.operand->shape().ElementCount() == 0) return w.fallback ? w.fallback() : PartitionWithFallback(ctx, op);
  const PartitionedHlo& in = ctx.Get(w.operand);
  const HloSharding target = SpmdContext::ShardingOf(op);
  auto m = ctx.maps().Get(target, rank);
  auto im = ctx.maps().Get(in.sharding, rank);
  if (!m.ok() || !im.ok()) return w.fallback ? w.fallback() : PartitionWithFallback(ctx, op);
  // Per windowed dim the output keeps sharded: halo exchange of the sharded input, or windows cut
  // from the whole input (when it is whole already, or the halo would cost more than a gather);
  // without a pad value to mask with (or a tiling no slice reconciles) the dim is computed whole
  // and sliced afterwards.
  std::vector<SpatialPlan> plans(static_cast<size_t>(rank));
  std::vector<int64_t> computed_whole, cut_from_whole, dims(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    dims[static_cast<size_t>(d)] = d;
    const WindowDimension& wd = w.window[static_cast<size_t>(d)];
    const int64_t t = m->tiles(d);
    if (t == 1 || !Windowed(wd)) continue;
    const bool maskable = w.pad_value || w.pad_scalar;
    auto tiling =
        maskable ? TileWindowedDim(wd, t, m->ShardSize(d, op.shape().dim(d)), op.shape().dim(d)) : std::nullopt;
    if (!tiling) {
      computed_whole.push_back(d);
      continue;
    }
    SpatialPlan& sp = plans[static_cast<size_t>(d)];
    sp.tiling = *tiling;
    const int64_t in_full = w.operand->shape().dim(d);
    const HaloPlan hp = PlanHalo((in_full + t - 1) / t, t, in_full, sp.tiling.start, sp.tiling.size, true,
                                 !w.pad_scalar && *w.pad_value == 0.0, sp.tiling.need);
    if (im->tiles(d) > 1 && hp.cheaper_than_gather()) {
      sp.reach = Reach::kHalo;
    } else {
      sp.reach = Reach::kWhole;
      cut_from_whole.push_back(d);
    }
  }
  const TileMap out_work = m->Gathered(computed_whole);
  const TileMap in_work = out_work.Gathered(cut_from_whole);
  auto in_sharding = in_work.ToSharding();
  auto out_sharding = out_work.ToSharding();
  if (!in_sharding.ok() || !out_sharding.ok()) return w.fallback ? w.fallback() : PartitionWithFallback(ctx, op);
  auto x = ctx.resharder().Reshard(in, *in_sharding);
  if (!x.ok()) return Error(op.name() + ": " + x.error().message);
  Instruction* cur = *x;
  std::vector<std::optional<WindowDimension>> local(static_cast<size_t>(rank));
  const Shape shard(op.shape().type, out_work.ShardShape(op.shape().dims));
  Shape local_shape = shard;
  for (int64_t d = 0; d < rank; ++d) {
    const SpatialPlan& sp = plans[static_cast<size_t>(d)];
    if (sp.reach == Reach::kNone) continue;
    auto h = ExchangeHalo(ctx.builder(), cur, out_work, d, w.operand->shape().dim(d), sp.tiling.start, sp.tiling.size,
                              w.pad_value.value_or(0.0), sp.reach == Reach::kHalo, w.what, sp.tiling.need,
                              w.pad_scalar);
    if (!h.ok()) return Error(op.name() + ": " + h.error().message);
    auto dl = DilateWindows(ctx.builder(), *h, out_work, d, sp.tiling, w.pad_value.value_or(0.0), w.pad_scalar);
    if (!dl.ok()) return Error(op.name() + ": " + dl.error().message);
    cur = *dl;
    local[static_cast<size_t>(d)] = sp.tiling.local;
    local_shape.dims[static_cast<size_t>(d)] = sp.tiling.local_out;
  }
  Instruction* r = w.emit(cur, local, local_shape);
  if (!r) return Error(op.name() + ": could not build the local " + w.what);
  r = SliceOwnOutputs(ctx, r, plans, dims, out_work, shard);
  auto fin = ctx.resharder().Reshard({r, *out_sharding, op.shape()}, target);
  if (!fin.ok()) return Error(op.name() + ": " + fin.error().message);
  ctx.Set(&op, {*fin, target, op.shape()});
  return Status::Ok();
}

Status HandleReduceWindow(SpmdContext& ctx, const Instruction& rw) {
  if (rw.operand_count() != 2 || !rw.shape().IsArray()) return PartitionWithFallback(ctx, rw);
  const int64_t rank = rw.shape().rank();
  if (rw.operand(0)->shape().rank() != rank || static_cast<int64_t>(rw.window.dims.size()) != rank)
    return PartitionWithFallback(ctx, rw);
  auto init = ctx.resharder().Reshard(ctx.Get(rw.operand(1)), HloSharding::Replicate());
  if (!init.ok()) return Error(rw.name() + ": " + init.error().message);
  WindowedOp w;
  w.operand = rw.operand(0);
  w.window = rw.window.dims;
  // Masked positions must not change a window's result: the reducer's identity (not the init
  // value, which the op applies once per window).
  w.pad_value = ReducerIdentity(rw.to_apply(), w.operand->shape().type);
  w.what = "reduce-window";
  w.emit = [&](Instruction* x, const std::vector<std::optional<WindowDimension>>& local, const Shape& shape) {
    Instruction* r = ctx.builder().Emit(Opcode::kReduceWindow, shape, {x, *init});
    CopyAttributes(rw, r);
    for (size_t d = 0; d < local.size(); ++d)
      if (local[d]) r->window.dims[d] = *local[d];
    r->has_window = true;
    r->mutable_called_computations() = {ctx.builder().CloneScalarComputation(rw.to_apply())};
    return r;
  };
  return PartitionWindowed(ctx, rw, w);
}

Status HandlePad(SpmdContext& ctx, const Instruction& pad) {
  const int64_t rank = pad.shape().rank();
  if (pad.operand_count() != 2 || !pad.shape().IsArray() || static_cast<int64_t>(pad.padding.size()) != rank)
    return PartitionWithFallback(ctx, pad);
  return PartitionPadded(ctx, pad, *pad.operand(0), pad.padding, *pad.operand(1), "pad",
                         [&]() { return PartitionWithFallback(ctx, pad); });
}

// A small window cut out of sharded dims into a replicated result, as XLA partitions it: each
// device masks its shard to the window, places it into a zero buffer of the window's extent at its
// offset, and an all-reduce over the devices of the sharded dims sums the parts (replicas of a tile
// do not take part). The all-reduce moves the window (about twice); gathering the operand first
// moves all of it along the sharded dims. Taken when that is cheaper; false when it does not apply
// (a stride on a sharded dim, a result that is not replicated).
bool SliceByMaskedAllReduce(SpmdContext& ctx, const Instruction& slice) {
  const int64_t rank = slice.shape().rank();
  if (!SpmdContext::ShardingOf(slice).IsReplicated()) return false;
  const PartitionedHlo& v = ctx.Get(slice.operand(0));
  if (!v.base_shape.IsArray() || v.base_shape.rank() != rank || !v.hlo) return false;
  auto fm = ctx.maps().Get(v.sharding, rank);
  if (!fm.ok()) return false;
  const TileMap& F = *fm;
  const SliceSpec& spec = slice.slice;
  std::vector<int64_t> sharded;
  int64_t window = 1, gathered = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const auto i = static_cast<size_t>(d);
    window *= slice.shape().dim(d);
    if (F.tiles(d) > 1) {
      if (spec.strides[i] != 1) return false;
      sharded.push_back(d);
      gathered *= v.base_shape.dim(d);
    } else {
      gathered *= slice.shape().dim(d);
    }
  }
  if (sharded.empty() || 2 * window >= gathered) return false;
  SpmdBuilder& b = ctx.builder();
  Instruction* x = v.hlo;
  const Shape local = x->shape();
  // The unsharded dims are cut locally; the sharded ones keep the whole shard.
  {
    SliceSpec cut = spec;
    bool identity = true;
    for (int64_t d = 0; d < rank; ++d) {
      const auto i = static_cast<size_t>(d);
      if (F.tiles(d) > 1) {
        cut.starts[i] = 0;
        cut.limits[i] = local.dim(d);
        cut.strides[i] = 1;
      }
      identity &= cut.starts[i] == 0 && cut.limits[i] == local.dim(d) && cut.strides[i] == 1;
    }
    if (!identity) {
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < rank; ++d) {
        const auto i = static_cast<size_t>(d);
        dims.push_back((cut.limits[i] - cut.starts[i] + cut.strides[i] - 1) / cut.strides[i]);
      }
      Instruction* c = b.Emit(Opcode::kSlice, Shape(local.type, dims), {x});
      c->slice = std::move(cut);
      x = c;
    }
  }
  const Shape part = x->shape();
  // Mask what lies outside the window (the shard's padding included) with zeros.
  Instruction* mask = nullptr;
  for (int64_t d : sharded) {
    const auto i = static_cast<size_t>(d);
    const Shape idx(PrimitiveType::kS32, part.dims);
    Instruction* iota = b.Emit(Opcode::kIota, idx, {});
    iota->iota_dimension = d;
    Instruction* pos = b.Emit(Opcode::kAdd, idx, {iota, b.Broadcast(b.TableLookup(F.OffsetTable(d, v.base_shape.dim(d))), idx)});
    Instruction* ge = b.Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, part.dims),
                             {pos, b.Broadcast(b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(spec.starts[i])), idx)});
    ge->comparison = ComparisonDirection::kGe;
    Instruction* lt = b.Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, part.dims),
                             {pos, b.Broadcast(b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(spec.limits[i])), idx)});
    lt->comparison = ComparisonDirection::kLt;
    Instruction* in = b.Emit(Opcode::kAnd, Shape(PrimitiveType::kPred, part.dims), {ge, lt});
    mask = mask ? b.Emit(Opcode::kAnd, Shape(PrimitiveType::kPred, part.dims), {mask, in}) : in;
  }
  x = b.Emit(Opcode::kSelect, part, {mask, x, b.Broadcast(b.ConstantScalar(part.type, 0.0), part)});
  // Into a zero buffer of the window's extent with a shard's margin on both sides of each sharded
  // dim, at the shard's offset from the window (clamped: a shard wholly outside is all zeros).
  std::vector<int64_t> buffer_dims = part.dims, window_limits = part.dims;
  std::vector<Instruction*> at;
  for (int64_t d = 0; d < rank; ++d) {
    const auto i = static_cast<size_t>(d);
    if (F.tiles(d) <= 1) {
      at.push_back(b.ConstantScalar(PrimitiveType::kS32, 0));
      continue;
    }
    const int64_t s = part.dim(d), len = slice.shape().dim(d);
    buffer_dims[i] = len + 2 * s;
    std::vector<int64_t> table = F.OffsetTable(d, v.base_shape.dim(d));
    for (int64_t& o : table) o = std::clamp<int64_t>(o - spec.starts[i] + s, 0, len + s);
    at.push_back(b.TableLookup(table));
  }
  const Shape buffer_shape(part.type, buffer_dims);
  std::vector<Instruction*> dus_operands = {b.Broadcast(b.ConstantScalar(part.type, 0.0), buffer_shape), x};
  dus_operands.insert(dus_operands.end(), at.begin(), at.end());
  Instruction* placed = b.Emit(Opcode::kDynamicUpdateSlice, buffer_shape, std::move(dus_operands));
  SliceSpec inner;
  for (int64_t d = 0; d < rank; ++d) {
    const bool sh = F.tiles(d) > 1;
    const int64_t s = part.dim(d);
    inner.starts.push_back(sh ? s : 0);
    inner.limits.push_back(sh ? s + slice.shape().dim(d) : part.dim(d));
    inner.strides.push_back(1);
  }
  Instruction* w = b.Emit(Opcode::kSlice, Shape(part.type, slice.shape().dims), {placed});
  w->slice = std::move(inner);
  const PrimitiveType t = part.type;
  Instruction* r = b.AllReduce(w, b.ScalarReducer(t == PrimitiveType::kPred ? Opcode::kOr : Opcode::kAdd, t),
                               F.GroupsAlong(sharded), "slice: each device's part of the window, summed");
  ctx.Set(&slice, PartitionedHlo{r, HloSharding::Replicate(), slice.shape()});
  return true;
}

// A slice along a sharded dim d that keeps the operand's sharding (q = qkv[:, 0:H] with both split
// over the same devices; XLA's SliceToHalfSize): output tile i needs input rows [s + i*os,
// s + (i+1)*os), which lie in the input tiles of a few other devices, often further away than a
// halo reaches and from one source to several targets. Each (source tile, target tile) piece is
// sent in a round of collective-permutes in which every device sends once and receives once (a
// source serving k targets takes k rounds), and each device places what it receives at its
// offset in its output shard (masked by the rows each piece really holds). Used when no halo
// exchange is cheaper than gathering the dim and the pieces move fewer bytes than the gather.
bool SliceByPermutes(SpmdContext& ctx, const Instruction& slice) {
  const int64_t rank = slice.shape().rank();
  const HloSharding target = SpmdContext::ShardingOf(slice);
  const PartitionedHlo& v = ctx.Get(slice.operand(0));
  if (!v.hlo || !v.base_shape.IsArray() || v.base_shape.rank() != rank || v.sharding != target) return false;
  auto mm = ctx.maps().Get(target, rank);
  if (!mm.ok()) return false;
  const TileMap& m = *mm;
  const SliceSpec& spec = slice.slice;
  int64_t d = -1;
  for (int64_t k = 0; k < rank; ++k) {
    const auto i = static_cast<size_t>(k);
    if (spec.strides[i] != 1) return false;
    const bool cut = spec.starts[i] != 0 || spec.limits[i] != v.base_shape.dim(k);
    if (!cut || m.tiles(k) == 1) continue;
    if (d >= 0) return false;  // one sharded dim cut, the others whole or unsharded
    d = k;
  }
  if (d < 0) return false;
  const int64_t t = m.tiles(d), N = v.base_shape.dim(d), s0 = spec.starts[static_cast<size_t>(d)];
  const int64_t M = slice.shape().dim(d), is = (N + t - 1) / t, os = (M + t - 1) / t;
  // Rows each output tile needs; a halo exchange that is cheaper than gathering stays the way.
  std::vector<int64_t> starts(static_cast<size_t>(t)), need(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    starts[static_cast<size_t>(i)] = s0 + i * os;
    need[static_cast<size_t>(i)] = std::clamp<int64_t>(M - i * os, 0, os);
  }
  if (PlanHalo(is, t, N, starts, os, true, true, need).cheaper_than_gather()) return false;
  struct Piece {
    int64_t from_tile, to_tile, lo, hi;  // input rows [lo, hi)
  };
  std::vector<Piece> local, remote;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t lo = s0 + i * os, hi = s0 + std::min((i + 1) * os, M);
    for (int64_t j = lo / is; lo < hi && j * is < hi; ++j) {
      Piece p{j, i, std::max(lo, j * is), std::min(hi, (j + 1) * is)};
      (j == i ? local : remote).push_back(p);
    }
  }
  // Rounds: every tile sends at most once and receives at most once in each.
  std::vector<std::vector<Piece>> rounds;
  std::vector<std::vector<bool>> sends, receives;
  for (const Piece& p : remote) {
    size_t r = 0;
    while (r < rounds.size() && (sends[r][static_cast<size_t>(p.from_tile)] || receives[r][static_cast<size_t>(p.to_tile)])) ++r;
    if (r == rounds.size()) {
      rounds.emplace_back();
      sends.emplace_back(static_cast<size_t>(t), false);
      receives.emplace_back(static_cast<size_t>(t), false);
    }
    rounds[r].push_back(p);
    sends[r][static_cast<size_t>(p.from_tile)] = receives[r][static_cast<size_t>(p.to_tile)] = true;
  }
  auto longest = [](const std::vector<Piece>& ps) {
    int64_t r = 0;
    for (const Piece& p : ps) r = std::max(r, p.hi - p.lo);
    return r;
  };
  int64_t moved = 0;
  for (const auto& r : rounds) moved += longest(r);
  const Shape& shard = v.hlo->shape();
  const int64_t row_bytes = (shard.dim(d) > 0 ? ElementsOf(shard.dims) / shard.dim(d) : 0) * PrimitiveTypeBytes(shard.type);
  if (row_bytes <= 0) return false;
  const int64_t cost = moved * row_bytes + static_cast<int64_t>(rounds.size()) * kCollectiveOverheadBytes;
  if (cost >= (t - 1) * is * row_bytes + kCollectiveOverheadBytes) return false;

  SpmdBuilder& b = ctx.builder();
  Instruction* x = v.hlo;
  {  // The dims that are cut but not sharded are cut locally first.
    SliceSpec cut = spec;
    bool identity = true;
    for (int64_t k = 0; k < rank; ++k) {
      const auto i = static_cast<size_t>(k);
      if (k == d || m.tiles(k) > 1) {
        cut.starts[i] = 0;
        cut.limits[i] = x->shape().dim(k);
      }
      identity &= cut.starts[i] == 0 && cut.limits[i] == x->shape().dim(k);
    }
    if (!identity) {
      std::vector<int64_t> dims;
      for (int64_t k = 0; k < rank; ++k) dims.push_back(cut.limits[static_cast<size_t>(k)] - cut.starts[static_cast<size_t>(k)]);
      Instruction* c = b.Emit(Opcode::kSlice, Shape(x->shape().type, dims), {x});
      c->slice = std::move(cut);
      x = c;
    }
  }
  const std::vector<std::vector<int64_t>> groups = m.GroupsAlong({d});  // group[j]: the device of tile j
  std::vector<int64_t> out_dims = x->shape().dims;
  out_dims[static_cast<size_t>(d)] = os;
  const Shape out(x->shape().type, out_dims), idx(PrimitiveType::kS32, out_dims);
  Instruction* result = b.Broadcast(b.ConstantScalar(out.type, 0.0), out);
  Instruction* iota = b.Emit(Opcode::kIota, idx, {});
  iota->iota_dimension = d;
  Instruction* zero = b.ConstantScalar(PrimitiveType::kS32, 0.0);
  // The rows of `part` (R along d; its first len[dev] are real) at offset off[dev] of the shard.
  auto place = [&](Instruction* part, int64_t R, const std::vector<int64_t>& off, const std::vector<int64_t>& len) {
    std::vector<int64_t> big = out_dims;
    big[static_cast<size_t>(d)] = os + R;
    std::vector<Instruction*> ops = {b.Broadcast(b.ConstantScalar(out.type, 0.0), Shape(out.type, big)), part};
    Instruction* at = b.TableLookup(off);
    for (int64_t k = 0; k < rank; ++k) ops.push_back(k == d ? at : zero);
    Instruction* dus = b.Emit(Opcode::kDynamicUpdateSlice, Shape(out.type, big), std::move(ops));
    Instruction* placed = b.SliceDim(dus, d, 0, os);
    Instruction* from = b.Broadcast(at, idx);
    std::vector<int64_t> end(off.size());
    for (size_t i = 0; i < off.size(); ++i) end[i] = off[i] + len[i];
    Instruction* to = b.Broadcast(b.TableLookup(end), idx);
    Instruction* ge = b.Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, out_dims), {iota, from});
    ge->comparison = ComparisonDirection::kGe;
    Instruction* lt = b.Emit(Opcode::kCompare, Shape(PrimitiveType::kPred, out_dims), {iota, to});
    lt->comparison = ComparisonDirection::kLt;
    Instruction* in = b.Emit(Opcode::kAnd, Shape(PrimitiveType::kPred, out_dims), {ge, lt});
    result = b.Emit(Opcode::kSelect, out, {in, placed, result});
  };
  // Rows [lo, hi) of tile j's shard, R long, on each device that sends (tables by device).
  auto cut_rows = [&](const std::vector<Piece>& ps, int64_t R) {
    std::vector<int64_t> send(static_cast<size_t>(m.num_devices()), 0);
    for (const Piece& p : ps)
      for (const auto& g : groups) send[static_cast<size_t>(g[static_cast<size_t>(p.from_tile)])] = p.lo - p.from_tile * is;
    std::vector<int64_t> high(static_cast<size_t>(rank), 0);
    high[static_cast<size_t>(d)] = R;
    std::vector<Instruction*> at;
    for (int64_t k = 0; k < rank; ++k) at.push_back(k == d ? b.TableLookup(send) : zero);
    std::vector<int64_t> sizes = x->shape().dims;
    sizes[static_cast<size_t>(d)] = R;
    return b.DynamicSlice(b.PadHigh(x, high, 0.0), at, sizes);
  };
  auto where = [&](const std::vector<Piece>& ps) {
    std::vector<int64_t> off(static_cast<size_t>(m.num_devices()), 0), len(off.size(), 0);
    for (const Piece& p : ps)
      for (const auto& g : groups) {
        const auto dev = static_cast<size_t>(g[static_cast<size_t>(p.to_tile)]);
        off[dev] = p.lo - (s0 + p.to_tile * os);
        len[dev] = p.hi - p.lo;
      }
    return std::make_pair(off, len);
  };
  if (!local.empty()) {
    const int64_t R = longest(local);
    auto [off, len] = where(local);
    place(cut_rows(local, R), R, off, len);
  }
  for (const auto& r : rounds) {
    const int64_t R = longest(r);
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const auto& g : groups)
      for (const Piece& p : r) pairs.emplace_back(g[static_cast<size_t>(p.from_tile)], g[static_cast<size_t>(p.to_tile)]);
    Instruction* sent = b.CollectivePermute(cut_rows(r, R), pairs, "slice " + slice.name() + ": rows of other shards");
    auto [off, len] = where(r);
    place(sent, R, off, len);
  }
  ctx.Set(&slice, {result, target, slice.shape()});
  return true;
}

Status HandleSlice(SpmdContext& ctx, const Instruction& slice) {
  const int64_t rank = slice.shape().rank();
  const Shape& in = slice.operand(0)->shape();
  if (slice.operand_count() != 1 || !slice.shape().IsArray() || static_cast<int64_t>(slice.slice.starts.size()) != rank)
    return PartitionWithFallback(ctx, slice);
  if (SliceByMaskedAllReduce(ctx, slice)) return Status::Ok();
  if (SliceByPermutes(ctx, slice)) return Status::Ok();
  WindowedOp w;
  w.operand = slice.operand(0);
  w.window.resize(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    WindowDimension& wd = w.window[static_cast<size_t>(d)];
    wd.stride = slice.slice.strides[static_cast<size_t>(d)];
    wd.padding_low = -slice.slice.starts[static_cast<size_t>(d)];
    wd.padding_high = slice.slice.limits[static_cast<size_t>(d)] - in.dim(d);
  }
  w.pad_value = 0.0;  // positions outside the operand only feed the padding of uneven shards
  w.what = "slice";
  w.emit = [&](Instruction* x, const std::vector<std::optional<WindowDimension>>& local, const Shape& shape) {
    SliceSpec spec = slice.slice;
    for (int64_t d = 0; d < rank; ++d) {
      const auto i = static_cast<size_t>(d);
      // Cut windows start at the first element the tile needs; untouched sharded dims take the
      // whole shard.
      if (local[i] || !Windowed(w.window[i])) {
        spec.starts[i] = 0;
        spec.limits[i] = x->shape().dim(d);
        if (!local[i]) spec.strides[i] = 1;
      }
    }
    bool identity = x->shape().dims == shape.dims;
    for (int64_t d = 0; d < rank; ++d) identity &= spec.starts[static_cast<size_t>(d)] == 0 && spec.strides[static_cast<size_t>(d)] == 1;
    if (identity) return x;  // the exchanged windows are the result already
    Instruction* r = ctx.builder().Emit(Opcode::kSlice, shape, {x});
    r->slice = std::move(spec);
    return r;
  };
  return PartitionWindowed(ctx, slice, w);
}

// select-and-scatter's operand and source in the result's sharding `s`, its init value replicated.
struct SelectAndScatterInputs {
  Instruction *operand = nullptr, *source = nullptr, *init = nullptr;
};
Result<SelectAndScatterInputs> ReshardSelectAndScatterInputs(SpmdContext& ctx, const Instruction& op, const HloSharding& s) {
  SelectAndScatterInputs in;
  Instruction** slots[3] = {&in.operand, &in.source, &in.init};
  for (int64_t i = 0; i < 3; ++i) {
    auto r = ctx.resharder().Reshard(ctx.Get(op.operand(i)), i < 2 ? s : HloSharding::Replicate());
    if (!r.ok()) return Error(op.name() + ": " + r.error().message);
    *slots[i] = *r;
  }
  return in;
}

// The per-device select-and-scatter over `operand` and `source` with window `local`.
Instruction* EmitLocalSelectAndScatter(SpmdContext& ctx, const Instruction& op, Instruction* operand, Instruction* source,
                                       Instruction* init, const Window& local) {
  Instruction* out = ctx.builder().Emit(Opcode::kSelectAndScatter, operand->shape(), {operand, source, init});
  CopyAttributes(op, out);
  out->window = local;
  out->has_window = true;
  std::vector<Computation*> called;
  for (Computation* c : op.called_computations()) called.push_back(ctx.builder().CloneScalarComputation(c));
  out->mutable_called_computations() = called;
  return out;
}

// select-and-scatter whose windows overlap along sharded dims (a 3x3 stride-2 max-pool's backward):
// every device computes all the windows that touch its own shard. Along dim d (shards of S, a
// multiple of the stride st; window w, low padding pl) those are windows j*S/st + a ... + b of
// shard k, a = ceil((pl - w + 1) / st), b = floor((S - 1 + pl) / st): a halo exchange brings the
// operand rows they read, [k*S + a*st - pl, + (J - 1)*st + w) with J = b - a + 1 (rows outside the
// array read the value the select never prefers), and their source values (windows outside it read
// the scatter's identity). The local select-and-scatter (no padding) covers rows a*st - pl ...
// relative to the shard: padded with the init value and sliced to the shard's own S rows. The other
// devices' contributions to those rows are computed here too, so no partial sums are exchanged.
Status SelectAndScatterWithHalos(SpmdContext& ctx, const Instruction& op, const TileMap& m,
                                 const std::vector<int64_t>& sharded, double never, double identity) {
  const HloSharding s = SpmdContext::ShardingOf(op);
  const Shape& in = op.operand(0)->shape();
  const Shape& src = op.operand(1)->shape();
  auto ins = ReshardSelectAndScatterInputs(ctx, op, s);
  if (!ins.ok()) return ins.error();
  Instruction* a_x = ins->operand;
  Instruction* a_y = ins->source;
  Instruction* init = ins->init;
  Window local = op.window;
  struct Cut {
    int64_t d, lo, extent;  // the local result's rows relative to the shard start, and how many
  };
  std::vector<Cut> cuts;
  for (int64_t d : sharded) {
    const WindowDimension& w = op.window.dims[static_cast<size_t>(d)];
    const int64_t t = m.tiles(d), S = m.ShardSize(d, in.dim(d)), st = w.stride, pl = w.padding_low;
    auto floor_div = [](int64_t p, int64_t q) { return p >= 0 ? p / q : -((-p + q - 1) / q); };
    const int64_t a = -floor_div(-(pl - w.size + 1), st), b = floor_div(S - 1 + pl, st), J = b - a + 1;
    if (J < 1) return PartitionWithFallback(ctx, op);
    const int64_t E = (J - 1) * st + w.size, Ssrc = S / st;
    std::vector<int64_t> xs(static_cast<size_t>(t)), ys(static_cast<size_t>(t));
    for (int64_t k = 0; k < t; ++k) {
      xs[static_cast<size_t>(k)] = k * S + a * st - pl;
      ys[static_cast<size_t>(k)] = k * Ssrc + a;
    }
    const std::string what = "select-and-scatter";
    auto hx = ExchangeHalo(ctx.builder(), a_x, m, d, in.dim(d), xs, E, never, /*x_sharded=*/true, what);
    if (!hx.ok()) return Error(op.name() + ": " + hx.error().message);
    auto hy = ExchangeHalo(ctx.builder(), a_y, m, d, src.dim(d), ys, J, identity, /*x_sharded=*/true, what);
    if (!hy.ok()) return Error(op.name() + ": " + hy.error().message);
    a_x = *hx;
    a_y = *hy;
    WindowDimension& lw = local.dims[static_cast<size_t>(d)];
    lw.padding_low = 0;
    lw.padding_high = 0;
    cuts.push_back({d, a * st - pl, E});
  }
  Instruction* out = EmitLocalSelectAndScatter(ctx, op, a_x, a_y, init, local);
  // Each device's own rows: pad with the init value where the local result does not reach, cut.
  for (const Cut& c : cuts) {
    const int64_t S = m.ShardSize(c.d, in.dim(c.d));
    const int64_t low = std::max<int64_t>(c.lo, 0), high = std::max<int64_t>(S - (c.lo + c.extent), 0);
    if (low > 0 || high > 0) {
      std::vector<int64_t> dims = out->shape().dims;
      dims[static_cast<size_t>(c.d)] += low + high;
      Instruction* p = ctx.builder().Emit(Opcode::kPad, Shape(out->shape().type, dims), {out, init});
      p->padding.assign(dims.size(), PaddingDim{});
      p->padding[static_cast<size_t>(c.d)].low = low;
      p->padding[static_cast<size_t>(c.d)].high = high;
      out = p;
    }
    const int64_t from = std::max<int64_t>(-c.lo, 0);
    out = ctx.builder().SliceDim(out, c.d, from, from + S);
  }
  ctx.Set(&op, {out, s, op.shape()});
  return Status::Ok();
}

// select-and-scatter (max-pool's backward) kept sharded like its result. Along each sharded dim
// the shards must be a multiple of the stride and the source's shards hold exactly the windows of
// the operand's shards. When the windows do not overlap (size <= stride) and start at the shard
// boundaries (no low padding), each device selects and scatters within its own shard (XLA's
// no-overlap case); otherwise by halo exchange (SelectAndScatterWithHalos). The
// last shard's padding is never selected (masked with the lowest value for a GE/GT select, the
// highest for LE/LT), and source windows past the end scatter the scatter's identity. Otherwise the
// op runs replicated.
Status HandleSelectAndScatter(SpmdContext& ctx, const Instruction& op) {
  const HloSharding s = SpmdContext::ShardingOf(op);
  if (op.operand_count() != 3 || !op.shape().IsArray() || op.called_computations().size() < 2 || !s.IsTiled())
    return PartitionWithFallback(ctx, op);
  const Shape& in = op.operand(0)->shape();
  const Shape& src = op.operand(1)->shape();
  const int64_t r = in.rank();
  auto m = ctx.maps().Get(s, r);
  if (!m.ok() || src.rank() != r || static_cast<int64_t>(op.window.dims.size()) != r) return PartitionWithFallback(ctx, op);
  Window local = op.window;
  std::vector<int64_t> sharded;
  bool operand_padded = false, source_padded = false, overlapping = false;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t t = m->tiles(d);
    if (t == 1) continue;
    const WindowDimension& w = op.window.dims[static_cast<size_t>(d)];
    const int64_t S = m->ShardSize(d, in.dim(d));
    // Both ways need the windows of every shard on the same grid: shards a multiple of the stride
    // and the source's shards holding that many windows.
    if (w.base_dilation != 1 || w.window_dilation != 1 || w.size < 1 || S % w.stride != 0 ||
        m->ShardSize(d, src.dim(d)) != S / w.stride)
      return PartitionWithFallback(ctx, op);
    if (w.size > w.stride || w.padding_low != 0) overlapping = true;
    local.dims[static_cast<size_t>(d)].padding_high = 0;  // each shard's windows end inside it
    sharded.push_back(d);
    operand_padded |= m->HasPadding(d, in.dim(d));
    source_padded |= m->HasPadding(d, src.dim(d));
  }
  const Computation* select = op.called_computations()[0];
  const Computation* scatter = op.called_computations()[1];
  std::optional<double> never;  // the value the select never prefers
  if (const Instruction* root = select ? select->root() : nullptr;
      root && root->opcode() == Opcode::kCompare && root->operand_count() == 2 &&
      root->operand(0)->opcode() == Opcode::kParameter && root->operand(1)->opcode() == Opcode::kParameter &&
      root->operand(0)->parameter_number == 0 && root->operand(1)->parameter_number == 1 && IsFloatingPoint(in.type)) {
    if (root->comparison == ComparisonDirection::kGe || root->comparison == ComparisonDirection::kGt)
      never = -std::numeric_limits<double>::infinity();
    if (root->comparison == ComparisonDirection::kLe || root->comparison == ComparisonDirection::kLt)
      never = std::numeric_limits<double>::infinity();
  }
  std::optional<double> identity;
  if (const std::optional<ReductionKind> kind = MatchReduction(scatter))
    if (auto id = ReductionIdentity(*kind, src.type)) identity = id->values[0];
  if (overlapping) {
    if (!never || !identity) return PartitionWithFallback(ctx, op);
    return SelectAndScatterWithHalos(ctx, op, *m, sharded, *never, *identity);
  }
  if ((operand_padded && !never) || (source_padded && !identity)) return PartitionWithFallback(ctx, op);
  auto ins = ReshardSelectAndScatterInputs(ctx, op, s);
  if (!ins.ok()) return ins.error();
  Instruction* a = ins->operand;
  Instruction* b = ins->source;
  if (operand_padded) a = MaskPadding(ctx, {a, s, in}, sharded, *never);
  if (source_padded) b = MaskPadding(ctx, {b, s, src}, sharded, *identity);
  ctx.Set(&op, {EmitLocalSelectAndScatter(ctx, op, a, b, ins->init, local), s, op.shape()});
  return Status::Ok();
}

}  // namespace

Status PartitionPadded(SpmdContext& ctx, const Instruction& op, const Instruction& operand,
                       const std::vector<PaddingDim>& padding, const Instruction& pad_value, const std::string& what,
                       const std::function<Status()>& fallback) {
  const int64_t rank = op.shape().rank();
  if (!op.shape().IsArray() || static_cast<int64_t>(padding.size()) != rank || operand.shape().rank() != rank)
    return fallback();
  auto value = ctx.resharder().Reshard(ctx.Get(&pad_value), HloSharding::Replicate());
  if (!value.ok()) return Error(op.name() + ": " + value.error().message);
  WindowedOp w;
  w.operand = &operand;
  w.window.resize(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    const PaddingDim& p = padding[static_cast<size_t>(d)];
    WindowDimension& wd = w.window[static_cast<size_t>(d)];
    wd.padding_low = p.low;
    wd.padding_high = p.high;
    wd.base_dilation = p.interior + 1;
  }
  // Windows reaching outside the operand read the pad value.
  if (pad_value.opcode() == Opcode::kConstant && pad_value.literal.values.size() == 1)
    w.pad_value = pad_value.literal.values[0];
  else
    w.pad_scalar = *value;
  w.what = what;
  w.emit = [&](Instruction* x, const std::vector<std::optional<WindowDimension>>& local, const Shape& shape) {
    std::vector<PaddingDim> local_padding = padding;
    for (size_t d = 0; d < local.size(); ++d)
      if (local[d]) local_padding[d] = {local[d]->padding_low, local[d]->padding_high, local[d]->base_dilation - 1};
    if (std::all_of(local_padding.begin(), local_padding.end(), [](const PaddingDim& p) { return p == PaddingDim{}; }) &&
        x->shape().dims == shape.dims)
      return x;  // the exchanged windows are the result already
    Instruction* r = ctx.builder().Emit(Opcode::kPad, shape, {x, *value});
    r->padding = std::move(local_padding);
    return r;
  };
  w.fallback = fallback;
  return PartitionWindowed(ctx, op, w);
}

void RegisterWindowedHandlers(HandlerTable& table) {
  table.Add({Opcode::kConvolution}, HandleConvolution);
  table.Add({Opcode::kReduceWindow}, HandleReduceWindow);
  table.Add({Opcode::kPad}, HandlePad);
  table.Add({Opcode::kSlice}, HandleSlice);
  table.Add({Opcode::kSelectAndScatter}, HandleSelectAndScatter);
}

}  // namespace shardscope::spmd
