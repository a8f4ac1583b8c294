#include "core/eval/numeric_verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <unordered_map>

#include "core/sharding/unreduced.h"
#include "core/eval/evaluator.h"
#include "core/eval/virtual_cluster.h"

namespace shardscope {

namespace {

using Storage = Tensor::Storage;

std::string DimsStr(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

std::string Num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// Copies the box [src_off, src_off + extent) of `src` to [dst_off, ...) of `dst`.
void CopyBox(Tensor& dst, const std::vector<int64_t>& dst_off, const Tensor& src, const std::vector<int64_t>& src_off,
             const std::vector<int64_t>& extent) {
  for (int64_t e : extent)
    if (e <= 0) return;
  const auto ds = RowMajorStrides(dst.dims());
  const auto ss = RowMajorStrides(src.dims());
  std::vector<int64_t> idx(extent.size(), 0);
  if (extent.empty()) {
    CopyElem(dst, 0, src, 0);
    return;
  }
  do {
    int64_t di = 0, si = 0;
    for (size_t d = 0; d < extent.size(); ++d) {
      di += (dst_off[d] + idx[d]) * ds[d];
      si += (src_off[d] + idx[d]) * ss[d];
    }
    CopyElem(dst, di, src, si);
  } while (NextIndex(idx, extent));
}

const HloSharding& LeafSharding(const HloSharding& s, int64_t leaf, const HloSharding& fallback) {
  if (!s.IsTuple()) return s;
  const auto& el = s.tuple_elements();
  if (leaf >= 0 && leaf < static_cast<int64_t>(el.size())) return el[static_cast<size_t>(leaf)];
  return fallback;
}

Result<Tensor> ShardLeaf(const Tensor& full, const HloSharding& s, int64_t device) {
  // Unreduced: the devices' values sum to the full value; device 0 holds it all, the others zeros.
  if (s.kind() == HloSharding::Kind::kUnreduced) return device == 0 ? full : Tensor(full.shape());
  // Replicated, maximal, manual, unknown, unreduced, or only subgroup dims: the whole array.
  if (!s.IsTiled() || s.TiledDataRank() == 0) return full;
  if (s.TiledDataRank() != full.rank())
    return Error("sharding " + s.ToString() + " does not fit " + full.shape().ToString(false));
  if (s.TileIndexForDevice(device).empty())
    return Error("device " + std::to_string(device) + " is not in the tile assignment of " + s.ToString());
  const auto shard = s.ShardShape(full.dims());
  const auto offset = s.ShardOffset(full.dims(), device);
  const auto extent = s.ShardValidExtent(full.dims(), device);
  Tensor out(Shape(full.type(), shard));
  // Unreduced subgroups: the first device of each group holds the tile, the others zeros.
  if (!IsFirstUnreducedCopy(s, device)) return out;
  CopyBox(out, std::vector<int64_t>(shard.size(), 0), full, offset, extent);
  return out;
}

Result<Tensor> ShardRec(const Tensor& full, const HloSharding& s, int64_t device, int64_t& leaf) {
  if (full.IsTuple()) {
    std::vector<Tensor> el;
    for (const Tensor& e : full.elements()) {
      auto r = ShardRec(e, s, device, leaf);
      if (!r.ok()) return r.error();
      el.push_back(std::move(r.value()));
    }
    return Tensor::Tuple(std::move(el));
  }
  static const HloSharding kReplicated = HloSharding::Replicate();
  const HloSharding& ls = LeafSharding(s, leaf++, kReplicated);
  return ShardLeaf(full, ls, device);
}

Result<Tensor> AssembleLeaf(const std::vector<const Tensor*>& pieces, const HloSharding& s, const Shape& full_shape) {
  Tensor full(full_shape);
  const int64_t n = static_cast<int64_t>(pieces.size());
  auto check_full = [&](const Tensor& t) -> bool { return t.IsArray() && t.dims() == full_shape.dims && t.type() == full_shape.type; };
  if (s.IsMaximal()) {
    const int64_t d = s.maximal_device();
    if (d < 0 || d >= n) return Error("maximal sharding names device " + std::to_string(d) + " of " + std::to_string(n));
    if (!check_full(*pieces[static_cast<size_t>(d)]))
      return Error("device " + std::to_string(d) + " returned " + pieces[static_cast<size_t>(d)]->shape().ToString(false) + ", expected " +
                   full_shape.ToString(false));
    return *pieces[static_cast<size_t>(d)];
  }
  if (s.kind() == HloSharding::Kind::kUnreduced) {
    // Every device holds a partial sum.
    std::vector<double> acc(static_cast<size_t>(full.size()), 0.0);
    for (int64_t d = 0; d < n; ++d) {
      if (!check_full(*pieces[static_cast<size_t>(d)])) return Error("device " + std::to_string(d) + " returned the wrong shape");
      for (int64_t i = 0; i < full.size(); ++i) acc[static_cast<size_t>(i)] += pieces[static_cast<size_t>(d)]->GetDouble(i);
    }
    for (int64_t i = 0; i < full.size(); ++i) full.SetDouble(i, acc[static_cast<size_t>(i)]);
    return full;
  }
  if (!s.IsTiled() || s.TiledDataRank() == 0) {
    if (n == 0 || !check_full(*pieces[0]))
      return Error("device 0 returned " + (n ? pieces[0]->shape().ToString(false) : std::string("nothing")) + " for a " +
                   s.ToString() + " result of " + full_shape.ToString(false));
    return *pieces[0];
  }
  if (s.TiledDataRank() != full_shape.rank())
    return Error("sharding " + s.ToString() + " does not fit " + full_shape.ToString(false));
  const auto shard = s.ShardShape(full_shape.dims);
  if (HasUnreducedSubgroup(s)) {
    // Each tile is the sum of its unreduced group's pieces (one group per tile copy: the first).
    std::set<std::vector<int64_t>> done;
    for (const std::vector<int64_t>& group : UnreducedGroups(s)) {
      if (group.empty() || group.front() >= n) continue;
      auto ti = s.TileIndexForDevice(group.front());
      if (ti.empty() || done.count(ti)) continue;
      Tensor sum(Shape(full_shape.type, shard));
      std::vector<double> acc(static_cast<size_t>(sum.size()), 0.0);
      for (int64_t d : group) {
        if (d >= n) continue;
        const Tensor& p = *pieces[static_cast<size_t>(d)];
        if (!p.IsArray() || p.dims() != shard || p.type() != full_shape.type)
          return Error("device " + std::to_string(d) + " returned " + p.shape().ToString(false) + ", expected the shard " +
                       Shape(full_shape.type, shard).ToString(false) + " under " + s.ToString());
        for (int64_t i = 0; i < sum.size(); ++i) acc[static_cast<size_t>(i)] += p.GetDouble(i);
      }
      for (int64_t i = 0; i < sum.size(); ++i) sum.SetDouble(i, acc[static_cast<size_t>(i)]);
      CopyBox(full, s.ShardOffset(full_shape.dims, group.front()), sum, std::vector<int64_t>(shard.size(), 0),
              s.ShardValidExtent(full_shape.dims, group.front()));
      done.insert(std::move(ti));
    }
    if (static_cast<int64_t>(done.size()) != s.NumTiles())
      return Error("only " + std::to_string(done.size()) + " of " + std::to_string(s.NumTiles()) + " tiles of " + s.ToString() +
                   " were returned");
    return full;
  }
  std::set<std::vector<int64_t>> filled;
  for (int64_t d = 0; d < n; ++d) {
    auto ti = s.TileIndexForDevice(d);
    if (ti.empty() || filled.count(ti)) continue;
    const Tensor& p = *pieces[static_cast<size_t>(d)];
    const auto offset = s.ShardOffset(full_shape.dims, d);
    const auto extent = s.ShardValidExtent(full_shape.dims, d);
    if (p.IsArray() && p.dims() == shard && p.type() == full_shape.type) {
      CopyBox(full, offset, p, std::vector<int64_t>(shard.size(), 0), extent);
    } else if (check_full(p)) {
      CopyBox(full, offset, p, offset, extent);  // the device returned the whole array
    } else {
      return Error("device " + std::to_string(d) + " returned " + p.shape().ToString(false) + ", expected the shard " +
                   Shape(full_shape.type, shard).ToString(false) + " of " + full_shape.ToString(false) + " under " + s.ToString());
    }
    filled.insert(std::move(ti));
  }
  if (static_cast<int64_t>(filled.size()) != s.NumTiles())
    return Error("only " + std::to_string(filled.size()) + " of " + std::to_string(s.NumTiles()) + " tiles of " + s.ToString() +
                 " are held by the " + std::to_string(n) + " devices");
  return full;
}

Result<Tensor> AssembleRec(const std::vector<const Tensor*>& pieces, const HloSharding& s, const Shape& shape, int64_t& leaf) {
  if (shape.IsTuple()) {
    std::vector<Tensor> el;
    for (size_t i = 0; i < shape.tuple.size(); ++i) {
      std::vector<const Tensor*> sub;
      for (const Tensor* p : pieces) {
        if (!p->IsTuple() || p->element_count() != static_cast<int64_t>(shape.tuple.size()))
          return Error("a device returned " + p->shape().ToString(false) + " where a tuple " + shape.ToString(false) + " was expected");
        sub.push_back(&p->element(static_cast<int64_t>(i)));
      }
      auto r = AssembleRec(sub, s, shape.tuple[i], leaf);
      if (!r.ok()) return r.error();
      el.push_back(std::move(r.value()));
    }
    return Tensor::Tuple(std::move(el));
  }
  static const HloSharding kReplicated = HloSharding::Replicate();
  const HloSharding& ls = LeafSharding(s, leaf++, kReplicated);
  if (!shape.IsArray()) return Tensor(shape);
  return AssembleLeaf(pieces, ls, shape);
}

double RtolFor(PrimitiveType t, const NumericVerifyOptions& o) {
  switch (t) {
    case PrimitiveType::kF64: return o.f64_rtol;
    case PrimitiveType::kF32: return o.f32_rtol;
    case PrimitiveType::kF16: return o.f16_rtol;
    case PrimitiveType::kBF16: return o.bf16_rtol;
    default: return o.f8_rtol;
  }
}

// |x - y| with NaN and infinities compared by placement: 0 when both are the same non-finite
// value, infinite when only one is.
double ElementError(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return (std::isnan(x) && std::isnan(y)) ? 0 : std::numeric_limits<double>::infinity();
  if (std::isinf(x) || std::isinf(y)) return x == y ? 0 : std::numeric_limits<double>::infinity();
  return std::fabs(x - y);
}

// Per float element, whichever of `a` and `b` lies further from `e` (ElementError); other leaves
// and mismatched structures as `a` is.
Tensor FartherOf(const Tensor& e, const Tensor& a, const Tensor& b) {
  if (e.IsTuple()) {
    if (!a.IsTuple() || !b.IsTuple() || a.element_count() != e.element_count() || b.element_count() != e.element_count())
      return a;
    std::vector<Tensor> el;
    for (int64_t i = 0; i < e.element_count(); ++i) el.push_back(FartherOf(e.element(i), a.element(i), b.element(i)));
    return Tensor::Tuple(std::move(el));
  }
  if (!e.IsArray() || e.storage() == Storage::kInt || a.dims() != e.dims() || b.dims() != e.dims() || a.type() != e.type() ||
      b.type() != e.type())
    return a;
  Tensor out = a;
  for (int64_t i = 0; i < e.size(); ++i) {
    const double x = e.GetDouble(i);
    if (ElementError(x, b.GetDouble(i)) > ElementError(x, a.GetDouble(i))) out.SetDouble(i, b.GetDouble(i));
  }
  return out;
}

struct LeafCompare {
  bool match = true;
  double max_err = 0;
  double tol = 0;
  std::string line;
  int64_t over = 0;    // elements over the tolerance (judged ones)
  // Over the tolerance in more than two elements, more than 1% of the leaf and more than a tenth of
  // its ill-conditioned ones (any integer difference): the way a wrong partitioning differs, where
  // ill-conditioning leaks stray elements past the probe (one draw of the rounding).
  bool dense = false;
  int64_t floats = 0;  // float elements compared
  int64_t ill = 0;     // ... of which not judged (ill-conditioned)
};

std::string IndexOf(const std::vector<int64_t>& dims, int64_t linear) {
  std::vector<int64_t> idx(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    const int64_t n = dims[static_cast<size_t>(d)];
    idx[static_cast<size_t>(d)] = n ? linear % n : 0;
    linear = n ? linear / n : 0;
  }
  return DimsStr(idx);
}

// `p`: the reference again with its sums rounded in another order (EvalOptions::probe_sums), or
// null: a float element it moves by more than a quarter of the tolerance is ill-conditioned and
// not judged.
LeafCompare CompareLeaf(const Tensor& e, const Tensor& a, int64_t red, const NumericVerifyOptions& o, const std::string& name,
                        double rtol_floor = 0, const Tensor* p = nullptr) {
  LeafCompare r;
  const std::string what = name + " " + e.shape().ToString(false);
  if (e.type() != a.type() || e.dims() != a.dims()) {
    r.match = false;
    r.max_err = std::numeric_limits<double>::infinity();
    r.line = what + ": the SPMD result is " + a.shape().ToString(false);
    r.dense = true;
    return r;
  }
  if (e.storage() == Storage::kInt) {
    int64_t mismatches = 0, first = -1;
    for (int64_t i = 0; i < e.size(); ++i)
      if (e.ints()[static_cast<size_t>(i)] != a.ints()[static_cast<size_t>(i)]) {
        if (first < 0) first = i;
        ++mismatches;
        r.max_err = std::max(r.max_err, std::fabs(e.GetDouble(i) - a.GetDouble(i)));
      }
    r.tol = 0;
    r.over = mismatches;
    r.dense = mismatches > 0;
    if (mismatches) {
      r.match = false;
      r.line = what + ": " + std::to_string(mismatches) + " of " + std::to_string(e.size()) + " elements differ; first at " +
               IndexOf(e.dims(), first) + ": expected " + std::to_string(e.GetInt(first)) + ", got " + std::to_string(a.GetInt(first)) +
               " (integers compare exactly)";
    } else {
      r.line = what + ": exact match";
    }
    return r;
  }
  double max_ref = 0;
  for (int64_t i = 0; i < e.size(); ++i) {
    const double v = e.GetDouble(i);
    if (std::isfinite(v)) max_ref = std::max(max_ref, std::fabs(v));
  }
  const double red_scale = std::max(1.0, std::log2(static_cast<double>(std::max<int64_t>(red, 1))));
  r.tol = std::max(RtolFor(e.type(), o), rtol_floor) * std::max(1.0, max_ref) * red_scale;
  int64_t worst = -1, mismatches = 0, first_bad = -1;
  r.floats = e.size();
  if (p && (p->type() != e.type() || p->dims() != e.dims())) p = nullptr;
  // A leaf whose reference holds NaN at these inputs reaches the edge of an op's domain (the
  // square root of a random, possibly negative second moment): an element on that edge is NaN in
  // one program and not in the other whenever their roundings differ, which the probe need not
  // reproduce.
  bool domain_edge = false;
  if (p)
    for (int64_t i = 0; i < e.size() && !domain_edge; ++i) domain_edge = std::isnan(e.GetDouble(i));
  for (int64_t i = 0; i < e.size(); ++i) {
    const double x = e.GetDouble(i), y = a.GetDouble(i);
    // One probe is one draw of the rounding; the partitioned program's may be several times larger:
    // an element the probe moves by a quarter of the tolerance could be pushed over it.
    if (p && (ElementError(x, p->GetDouble(i)) > r.tol / 4 || (domain_edge && std::isnan(x) != std::isnan(y)))) {
      ++r.ill;
      continue;
    }
    const double err = ElementError(x, y);
    if (worst < 0 || err > r.max_err) {
      r.max_err = err;
      worst = i;
    }
    if (err > r.tol) {
      ++mismatches;
      if (first_bad < 0) first_bad = i;
    }
  }
  r.over = mismatches;
  r.dense = mismatches > 2 && mismatches * 100 > e.size() && mismatches * 10 > r.ill;
  if (mismatches) {
    r.match = false;
    r.line = what + ": " + std::to_string(mismatches) + " of " + std::to_string(e.size()) + " elements over tolerance " + Num(r.tol) +
             "; first at " + IndexOf(e.dims(), first_bad) + ": expected " + Num(e.GetDouble(first_bad)) + ", got " +
             Num(a.GetDouble(first_bad)) + "; max |error| " + Num(r.max_err) + " at " + IndexOf(e.dims(), worst);
  } else if (worst < 0) {
    r.line = what + ": nothing judged";
  } else {
    r.line = what + ": max |error| " + Num(r.max_err) + " <= tolerance " + Num(r.tol);
  }
  if (r.ill) r.line += "; " + std::to_string(r.ill) + " ill-conditioned element" + (r.ill == 1 ? "" : "s") + " not judged";
  return r;
}

// `floors`: per array leaf in visiting order, the relative tolerance of the least precise type the
// leaf was computed through (LeafRtolFloors); `leaf` counts the leaves visited. Empty: the leaf's
// own type.
void CompareRec(const Tensor& e, const Tensor& a, int64_t red, const NumericVerifyOptions& o, const std::string& name,
                VerifyReport& rep, double& worst_ratio, const std::vector<double>& floors = {}, size_t* leaf = nullptr,
                const Tensor* p = nullptr) {
  if (p && (p->IsTuple() != e.IsTuple() || (e.IsTuple() && p->element_count() != e.element_count()))) p = nullptr;
  if (e.IsTuple() || a.IsTuple()) {
    if (!e.IsTuple() || !a.IsTuple() || e.element_count() != a.element_count()) {
      rep.match = false;
      rep.max_abs_error = std::numeric_limits<double>::infinity();
      rep.detail += name + ": expected " + e.shape().ToString(false) + ", the SPMD result is " + a.shape().ToString(false) + "\n";
      rep.dense_difference = true;
      return;
    }
    for (int64_t i = 0; i < e.element_count(); ++i)
      CompareRec(e.element(i), a.element(i), red, o, name + "{" + std::to_string(i) + "}", rep, worst_ratio, floors, leaf,
                 p ? &p->element(i) : nullptr);
    return;
  }
  if (!e.IsArray()) return;  // tokens
  double floor = 0;
  if (leaf) {
    if (*leaf < floors.size()) floor = floors[*leaf];
    ++*leaf;
  }
  LeafCompare lc = CompareLeaf(e, a, red, o, name, floor, p);
  rep.ill_conditioned += lc.ill;
  rep.over_tolerance += lc.over;
  rep.dense_difference = rep.dense_difference || lc.dense;
  if (e.storage() != Storage::kInt) rep.float_elements += lc.floats;
  rep.match = rep.match && lc.match;
  rep.max_abs_error = std::max(rep.max_abs_error, lc.max_err);
  const double ratio = lc.tol > 0 ? lc.max_err / lc.tol : (lc.max_err > 0 ? std::numeric_limits<double>::infinity() : 0);
  if (worst_ratio < 0 || ratio > worst_ratio) {
    worst_ratio = ratio;
    rep.tolerance = lc.tol;
  }
  rep.detail += lc.line + "\n";
}

// The loosest relative tolerance among the floating-point types a value was computed through: an
// f32 result of bf16 activations (mixed precision, the papers' configurations) carries bf16's
// rounding, which a different order of partial sums (the partitioned program's) exposes; its f32
// tolerance alone reported such programs as mismatches. Per entry instruction, the loosest of its
// own types, its operands' and everything in the computations it calls.
class ComputedPrecision {
 public:
  explicit ComputedPrecision(const NumericVerifyOptions& o) : o_(o) {}

  // Per array leaf of the entry's result, in the order CompareRec visits them.
  std::vector<double> LeafFloors(const Computation& entry) {
    for (const auto& i : entry.instructions()) {
      double v = Own(i->shape());
      for (const Instruction* op : i->operands()) {
        auto it = memo_.find(op);
        if (it != memo_.end()) v = std::max(v, it->second);
      }
      for (const Computation* c : i->called_computations()) v = std::max(v, Whole(c));
      memo_[i.get()] = v;
    }
    std::vector<double> out;
    if (entry.root()) Leaves(entry.root(), entry.root()->shape(), out);
    return out;
  }

 private:
  double Own(const Shape& s) const {
    if (s.IsTuple()) {
      double v = 0;
      for (const Shape& e : s.tuple) v = std::max(v, Own(e));
      return v;
    }
    return s.IsArray() && IsFloatingPoint(s.type) ? RtolFor(s.type, o_) : 0;
  }
  // The loosest type anywhere in `c` and what it calls.
  double Whole(const Computation* c) {
    auto it = whole_.find(c);
    if (it != whole_.end()) return it->second;
    whole_[c] = 0;  // a computation calling itself (not valid HLO) ends here
    double v = 0;
    for (const auto& i : c->instructions()) {
      v = std::max(v, Own(i->shape()));
      for (const Computation* called : i->called_computations()) v = std::max(v, Whole(called));
    }
    return whole_[c] = v;
  }
  void Leaves(const Instruction* i, const Shape& shape, std::vector<double>& out) {
    if (shape.IsTuple()) {
      const bool by_operand = i->opcode() == Opcode::kTuple && i->operand_count() == static_cast<int64_t>(shape.tuple.size());
      for (size_t k = 0; k < shape.tuple.size(); ++k) Leaves(by_operand ? i->operand(static_cast<int64_t>(k)) : i, shape.tuple[k], out);
      return;
    }
    if (!shape.IsArray()) return;
    auto it = memo_.find(i);
    out.push_back(it != memo_.end() ? it->second : Own(shape));
  }

  const NumericVerifyOptions& o_;
  std::unordered_map<const Instruction*, double> memo_;
  std::unordered_map<const Computation*, double> whole_;
};

bool NeedsClusterReference(const Module& m) {
  if (ModuleHasCollectives(m)) return true;
  for (const auto& c : m.computations())
    for (const auto& inst : c->instructions())
      if (inst->opcode() == Opcode::kCustomCall &&
          (inst->custom_call_target == "SPMDFullToShardShape" || inst->custom_call_target == "SPMDShardToFullShape") &&
          inst->operand_count() == 1 && !inst->operand(0)->shape().Compatible(inst->shape()))
        return true;
  return false;
}

}  // namespace

Tensor RandomTensor(const Shape& shape, std::mt19937_64& rng, const NumericVerifyOptions& o) {
  if (shape.IsTuple()) {
    std::vector<Tensor> el;
    for (const Shape& s : shape.tuple) el.push_back(RandomTensor(s, rng, o));
    return Tensor::Tuple(std::move(el));
  }
  Tensor t(shape);
  if (!t.IsArray() || t.storage() == Storage::kNone) return t;
  // Integers: which regime this tensor is drawn from (see NumericVerifyOptions).
  enum class IntRegime { kSmall, kFullRange, kNearMax, kNearMin };
  IntRegime regime = IntRegime::kSmall;
  if (t.storage() == Storage::kInt && shape.type != PrimitiveType::kPred) {
    const double pick = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    if (pick < o.int_full_range_share) {
      const double part = pick / o.int_full_range_share;
      regime = part < 1.0 / 3 ? IntRegime::kFullRange : part < 2.0 / 3 ? IntRegime::kNearMax : IntRegime::kNearMin;
    }
  }
  const int bits = BitWidth(shape.type);
  const bool is_unsigned = IsUnsignedInteger(shape.type);
  // The type's range as int64 (u64's maximum is kept as its bit pattern, -1).
  const int64_t tmax = bits >= 64 ? (is_unsigned ? int64_t{-1} : std::numeric_limits<int64_t>::max())
                                  : (is_unsigned ? (int64_t{1} << bits) - 1 : (int64_t{1} << (bits - 1)) - 1);
  const int64_t tmin = is_unsigned ? 0 : bits >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
  for (int64_t i = 0; i < t.size(); ++i) {
    if (shape.type == PrimitiveType::kPred) {
      t.SetInt(i, static_cast<int64_t>(rng() >> 63));
    } else if (t.storage() == Storage::kInt) {
      switch (regime) {
        case IntRegime::kFullRange:
          // Every bit pattern of the type's width equally likely; the tensor wraps it to the type.
          t.SetInt(i, static_cast<int64_t>(rng()));
          continue;
        case IntRegime::kNearMax:
          t.SetInt(i, static_cast<int64_t>(static_cast<uint64_t>(tmax) - rng() % 8));
          continue;
        case IntRegime::kNearMin:
          t.SetInt(i, static_cast<int64_t>(static_cast<uint64_t>(tmin) + rng() % 8));
          continue;
        case IntRegime::kSmall: break;
      }
      int64_t lo = o.int_min, hi = o.int_max;
      if (is_unsigned) lo = std::max<int64_t>(lo, 0);
      if (bits < 64) {
        lo = std::clamp(lo, tmin, tmax);
        hi = std::clamp(hi, tmin, tmax);
      }
      if (hi < lo) hi = lo;
      const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
      t.SetInt(i, lo + static_cast<int64_t>(rng() % span));
    } else {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      const int spread = std::max(0, o.float_exponent_spread);
      const int k = spread == 0 ? 0 : static_cast<int>(rng() % static_cast<uint64_t>(2 * spread + 1)) - spread;
      t.SetDouble(i, std::ldexp((2.0 * u - 1.0) * o.float_range, k));
    }
  }
  return t;
}

std::vector<Tensor> MakeRandomArguments(const Computation& c, uint64_t seed, const NumericVerifyOptions& options) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> args;
  for (const Instruction* p : c.parameters()) args.push_back(p ? RandomTensor(p->shape(), rng, options) : Tensor());
  return args;
}

Result<Tensor> ShardForDevice(const Tensor& full, const HloSharding& sharding, int64_t device) {
  int64_t leaf = 0;
  return ShardRec(full, sharding, device, leaf);
}

Result<Tensor> AssembleFromDevices(const std::vector<Tensor>& per_device, const HloSharding& sharding, const Shape& full_shape) {
  if (per_device.empty()) return Error("no device results to assemble");
  std::vector<const Tensor*> pieces;
  for (const Tensor& t : per_device) pieces.push_back(&t);
  int64_t leaf = 0;
  return AssembleRec(pieces, sharding, full_shape, leaf);
}

VerifyReport CompareTensors(const Tensor& expected, const Tensor& actual, int64_t reduction_size, const NumericVerifyOptions& options) {
  VerifyReport rep;
  rep.match = true;
  double worst = -1;
  CompareRec(expected, actual, reduction_size, options, "result", rep, worst);
  if (!rep.detail.empty() && rep.detail.back() == '\n') rep.detail.pop_back();
  return rep;
}

int64_t MaxReductionSize(const Module& module) {
  int64_t best = 1;
  for (const auto& c : module.computations()) {
    for (const auto& inst : c->instructions()) {
      int64_t n = 1;
      switch (inst->opcode()) {
        case Opcode::kDot: {
          if (inst->operand_count() < 1) break;
          const Shape& l = inst->operand(0)->shape();
          for (int64_t d : inst->dot_dims.lhs_contracting)
            if (d >= 0 && d < l.rank()) n *= l.dim(d);
          break;
        }
        case Opcode::kConvolution: {
          if (inst->operand_count() < 2) break;
          const Shape& k = inst->operand(1)->shape();
          const auto& cd = inst->conv_dims;
          if (cd.kernel_input_feature < k.rank()) n *= k.dim(cd.kernel_input_feature);
          for (int64_t d : cd.kernel_spatial)
            if (d >= 0 && d < k.rank()) n *= k.dim(d);
          break;
        }
        case Opcode::kReduce: {
          if (inst->operand_count() < 1) break;
          const Shape& in = inst->operand(0)->shape();
          for (int64_t d : inst->dimensions)
            if (d >= 0 && d < in.rank()) n *= in.dim(d);
          break;
        }
        case Opcode::kReduceWindow:
          for (const auto& w : inst->window.dims) n *= std::max<int64_t>(1, w.size);
          break;
        default:
          break;
      }
      best = std::max(best, n);
    }
  }
  return best;
}

std::optional<std::string> WhyNotNumericallyVerifiable(const Module& module) {
  for (const auto& c : module.computations()) {
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == Opcode::kInfeed)
        return "the module reads infeed (%" + inst->name() +
               "), data its host streams in at run time; the evaluator has no host to read it from";
      if (inst->opcode() == Opcode::kOutfeed)
        return "the module sends data to its host by outfeed (%" + inst->name() +
               "); the evaluator does not compare what a partitioned program sends, so its outputs alone would not "
               "show the program correct";
    }
  }
  return std::nullopt;
}

Result<VerifyReport> VerifyPartitioned(const Module& original, const Module& spmd, int64_t num_devices, uint64_t seed,
                                       const NumericVerifyOptions& options) {
  const Computation* oe = original.entry();
  const Computation* se = spmd.entry();
  if (!oe || !se) return Error("verify: both modules need an entry computation");
  if (auto why = WhyNotNumericallyVerifiable(original)) return Error("verify: not checkable numerically: " + *why);
  if (num_devices < 1) return Error("verify: need at least one device");
  if (oe->parameters().size() != se->parameters().size())
    return Error("verify: the original takes " + std::to_string(oe->parameters().size()) + " parameter(s), the SPMD program " +
                 std::to_string(se->parameters().size()));
  std::vector<Tensor> args = MakeRandomArguments(*oe, seed, options);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!oe->parameters()[i]) return Error("verify: the original has no parameter " + std::to_string(i));
    if (oe->parameters()[i]->shape().IsArray() && !Tensor::SupportsType(oe->parameters()[i]->shape().type))
      return Error("verify: parameter " + std::to_string(i) + " has type " +
                   std::string(PrimitiveTypeName(oe->parameters()[i]->shape().type)) + ", which the evaluator does not support");
  }
  // The reference: the original on one device. An original that is already partly manual
  // (collectives, SPMDFullToShardShape / SPMDShardToFullShape regions) runs on the virtual cluster
  // with every device holding the full inputs; device 0's output is the reference.
  // `draw` 0: the reference itself; 1, 2, ...: with its sums probed, each draw a stream of its own.
  auto run_reference = [&](const std::vector<Tensor>& inputs, int draw) -> Result<Tensor> {
    const bool probe = draw > 0;
    const uint64_t probe_seed = (seed ^ 0x9e3779b97f4a7c15ULL) + static_cast<uint64_t>(draw) * 0x632be59bd9b4e019ULL;
    if (NeedsClusterReference(original)) {
      ClusterOptions co;
      co.rng_seed = options.rng_seed;
      co.probe_sums = probe;
      co.probe_seed = probe_seed;
      auto outs = RunSpmd(original, num_devices, std::vector<std::vector<Tensor>>(static_cast<size_t>(num_devices), inputs), co);
      if (!outs.ok()) return Error("verify: running the original (it contains manual regions or collectives, so on " +
                                   std::to_string(num_devices) + " devices with replicated inputs): " + outs.error().message);
      return std::move(outs.value()[0]);
    }
    EvalOptions eo;
    eo.rng_seed = options.rng_seed;
    eo.probe_sums = probe;
    eo.probe_seed = probe_seed;
    auto out = Evaluate(original, inputs, eo);
    if (!out.ok()) return Error("verify: running the original: " + out.error().message);
    return out;
  };
  Result<Tensor> ref = run_reference(args, 0);
  if (!ref.ok()) return ref.error();

  std::vector<std::vector<Tensor>> dev_args(static_cast<size_t>(num_devices));
  static const HloSharding kReplicated = HloSharding::Replicate();
  for (size_t i = 0; i < args.size(); ++i) {
    const Instruction* p = oe->parameters()[i];
    const Instruction* sp = se->parameters()[i];
    const HloSharding& sh = p->has_sharding() ? *p->sharding() : kReplicated;
    for (int64_t d = 0; d < num_devices; ++d) {
      auto piece = ShardForDevice(args[i], sh, d);
      if (!piece.ok())
        return Error("verify: parameter " + std::to_string(i) + " (%" + p->name() + "): " + piece.error().message);
      if (!sp || !sp->shape().Compatible(piece->shape()))
        return Error("verify: parameter " + std::to_string(i) + " (%" + p->name() + "): its sharding " + sh.ToString() + " gives " +
                     piece->shape().ToString(false) + " per device, but the SPMD program expects " +
                     (sp ? sp->shape().ToString(false) : std::string("no parameter")));
      dev_args[static_cast<size_t>(d)].push_back(std::move(piece.value()));
    }
  }
  ClusterOptions co;
  co.rng_seed = options.rng_seed;
  auto outs = RunSpmd(spmd, num_devices, dev_args, co);
  if (!outs.ok()) return Error("verify: running the SPMD program: " + outs.error().message);
  const Instruction* root = oe->root();
  const HloSharding& out_sh = root && root->has_sharding() ? *root->sharding() : kReplicated;
  auto assembled = AssembleFromDevices(outs.value(), out_sh, root->shape());
  if (!assembled.ok()) return Error("verify: reassembling the output: " + assembled.error().message);
  // Each float leaf within the tolerance of the least precise type it was computed through.
  const std::vector<double> floors = ComputedPrecision(options).LeafFloors(*oe);
  const int64_t reduction = MaxReductionSize(original);
  auto compare = [&](const Tensor* perturbed) {
    VerifyReport r;
    r.match = true;
    double worst = -1;
    size_t leaf = 0;
    CompareRec(ref.value(), assembled.value(), reduction, options, "result", r, worst, floors, &leaf, perturbed);
    if (!r.detail.empty() && r.detail.back() == '\n') r.detail.pop_back();
    return r;
  };
  VerifyReport rep = compare(nullptr);
  std::string note;
  if (!rep.match && options.judge_conditioning) {
    // Differences: which of them the reference itself cannot pin down (ill-conditioned elements).
    // It runs again with every sum's result moved by up to an ulp, as another order of partial
    // sums moves it (EvalOptions::probe_sums), twice: each element judged by the draw that moves
    // it further (one draw missed elements another order of sums moved over the tolerance).
    Result<Tensor> again = run_reference(args, 1);
    if (again.ok()) {
      if (Result<Tensor> second = run_reference(args, 2); second.ok())
        again = FartherOf(ref.value(), again.value(), second.value());
      VerifyReport judged = compare(&again.value());
      if (judged.ill_conditioned > 0) {
        // Inconclusive: many ill-conditioned elements and no dense difference, or so many (a tenth
        // of the outputs: chaotic growth) that no difference is evidence either.
        judged.inconclusive = judged.ill_conditioned > 2 && judged.ill_conditioned * 100 > judged.float_elements &&
                              (!judged.dense_difference || judged.ill_conditioned * 10 > judged.float_elements);
        if (judged.inconclusive) judged.match = false;
        note = "; " + std::to_string(judged.ill_conditioned) + " of " + std::to_string(judged.float_elements) +
               " float output elements not judged: ill-conditioned at these inputs (the unpartitioned program moves by "
               "more than a quarter of the tolerance there when its sums are rounded in another order)";
        if (judged.inconclusive) note += ", too many for the rest to decide";
        rep = std::move(judged);
      }
    }
  }
  const char* verdict = rep.inconclusive ? "INCONCLUSIVE" : rep.match ? "match" : "MISMATCH";
  rep.detail = std::string(verdict) + " on " + std::to_string(num_devices) + " devices (seed " + std::to_string(seed) + ")" +
               note + "\n" + rep.detail;
  return rep;
}

}  // namespace shardscope
