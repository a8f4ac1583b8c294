#include "app/search/auto_sharding.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "app/search/milp_solver.h"
#include "app/search/search.h"
#include "core/base/units.h"
#include "core/ir/opcodes.h"
#include "simulator/collectives/collective.h"
#include "simulator/collectives/cost.h"
#include "simulator/compute_cost.h"

namespace shardscope::search {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Per tensor dimension: the mesh axis it is split over, or -1.
using Mapping = std::vector<int8_t>;

// How an instruction's dimensions relate, as an iteration space (an einsum): every result and
// operand dimension is one of the space's dimensions (or, for an operand, -1: it must be unsplit);
// space dimensions absent from the result are reduced (splitting one needs an all-reduce).
struct Space {
  std::vector<int64_t> sizes;
  std::vector<int> out;              // per result dim
  std::vector<std::vector<int>> in;  // per operand, per operand dim (empty for non-array operands)
  std::vector<char> reduced;
  double flops = 0;                  // the whole instruction's (dots: the matrix unit's)
  bool follow = false;               // elementwise: takes its first operand's choice
};

struct Strategy {
  Mapping out;
  std::vector<Mapping> in;  // per operand (empty: no requirement)
  double compute_s = 0;     // the shard's compute time
  double comm_s = 0;        // the collective the strategy needs
};

struct Node {
  const Instruction* inst = nullptr;
  int group = -1;
  std::vector<Strategy> strategies;  // aligned with the group's choices
};

struct Group {
  std::vector<double> compute, comm;  // per choice
  std::vector<double> memory;         // per choice: entry parameter bytes per device (empty: none)
  int K() const { return static_cast<int>(compute.size()); }
};

using Matrix = std::vector<double>;  // K_a x K_b, row-major

class Builder {
 public:
  Builder(const Pod& pod, const MeshChoice& mesh, const Topology& topology) : pod_(pod), mesh_(mesh.mesh), topology_(topology) {}

  // Every way to give each mesh axis one space dimension (or none), each dimension at most one
  // axis, the axis size dividing the dimension.
  std::vector<std::vector<int>> Assignments(const std::vector<int64_t>& sizes) const {
    std::vector<std::vector<int>> out;  // per axis: space dim or -1
    std::vector<int> cur(static_cast<size_t>(mesh_.num_axes()), -1);
    std::vector<char> used(sizes.size(), 0);
    Recurse(sizes, 0, cur, used, out);
    return out;
  }

  Result<Space> SpaceOf(const Instruction& inst, const std::set<const Instruction*>& nodes) const {
    Space sp;
    const Shape& shape = inst.shape();
    const int64_t rank = shape.rank();
    auto identity_result = [&] {
      sp.sizes = shape.dims;
      for (int64_t d = 0; d < rank; ++d) sp.out.push_back(static_cast<int>(d));
      sp.reduced.assign(sp.sizes.size(), 0);
    };
    auto pass_through = [&](bool same_size_only) {
      identity_result();
      for (const Instruction* op : inst.operands()) {
        std::vector<int> m;
        if (op->shape().IsArray() && op->shape().rank() == rank) {
          for (int64_t d = 0; d < rank; ++d)
            m.push_back(!same_size_only || op->shape().dim(d) == shape.dim(d) ? static_cast<int>(d) : -1);
        } else if (op->shape().IsArray()) {
          m.assign(static_cast<size_t>(op->shape().rank()), -1);
        }
        sp.in.push_back(std::move(m));
      }
    };
    switch (inst.opcode()) {
      case Opcode::kDot: {
        const Shape& lhs = inst.operand(0)->shape();
        const Shape& rhs = inst.operand(1)->shape();
        const DotDimensionNumbers& dn = inst.dot_dims;
        sp.sizes = lhs.dims;
        sp.in.resize(2);
        for (int64_t d = 0; d < lhs.rank(); ++d) sp.in[0].push_back(static_cast<int>(d));
        sp.in[1].assign(static_cast<size_t>(rhs.rank()), -1);
        for (size_t i = 0; i < dn.rhs_batch.size(); ++i) sp.in[1][static_cast<size_t>(dn.rhs_batch[i])] = static_cast<int>(dn.lhs_batch[i]);
        for (size_t i = 0; i < dn.rhs_contracting.size(); ++i)
          sp.in[1][static_cast<size_t>(dn.rhs_contracting[i])] = static_cast<int>(dn.lhs_contracting[i]);
        std::vector<int> rhs_free;
        for (int64_t d = 0; d < rhs.rank(); ++d) {
          if (sp.in[1][static_cast<size_t>(d)] >= 0) continue;
          sp.in[1][static_cast<size_t>(d)] = static_cast<int>(sp.sizes.size());
          rhs_free.push_back(static_cast<int>(sp.sizes.size()));
          sp.sizes.push_back(rhs.dim(d));
        }
        auto in_list = [](const std::vector<int64_t>& v, int64_t d) { return std::find(v.begin(), v.end(), d) != v.end(); };
        for (int64_t b : dn.lhs_batch) sp.out.push_back(static_cast<int>(b));
        for (int64_t d = 0; d < lhs.rank(); ++d)
          if (!in_list(dn.lhs_batch, d) && !in_list(dn.lhs_contracting, d)) sp.out.push_back(static_cast<int>(d));
        for (int d : rhs_free) sp.out.push_back(d);
        if (static_cast<int64_t>(sp.out.size()) != rank) return Error("dot " + inst.name() + ": unexpected result rank");
        sp.reduced.assign(sp.sizes.size(), 1);
        for (int d : sp.out) sp.reduced[static_cast<size_t>(d)] = 0;
        auto flops = CountMxuFlops(inst, pod_.chip);
        if (!flops.ok()) flops = CountFlops(inst);
        sp.flops = flops.ok() ? *flops : 0;
        return sp;
      }
      case Opcode::kReduce: {
        if (inst.operand_count() != 2 || !inst.operand(0)->shape().IsArray() || !shape.IsArray()) break;
        const Shape& op = inst.operand(0)->shape();
        sp.sizes = op.dims;
        sp.in.resize(2);
        for (int64_t d = 0; d < op.rank(); ++d) sp.in[0].push_back(static_cast<int>(d));
        sp.reduced.assign(sp.sizes.size(), 0);
        for (int64_t d : inst.dimensions) sp.reduced[static_cast<size_t>(d)] = 1;
        for (int64_t d = 0; d < op.rank(); ++d)
          if (!sp.reduced[static_cast<size_t>(d)]) sp.out.push_back(static_cast<int>(d));
        sp.flops = static_cast<double>(op.ElementCount());
        return sp;
      }
      case Opcode::kBroadcast: {
        identity_result();
        std::vector<int> m;
        for (int64_t d : inst.dimensions) m.push_back(static_cast<int>(d));
        sp.in.push_back(std::move(m));
        return sp;
      }
      case Opcode::kTranspose: {
        identity_result();
        std::vector<int> m(static_cast<size_t>(rank), -1);
        for (int64_t i = 0; i < rank; ++i) m[static_cast<size_t>(inst.dimensions[static_cast<size_t>(i)])] = static_cast<int>(i);
        sp.in.push_back(std::move(m));
        return sp;
      }
      case Opcode::kReshape: {
        identity_result();
        const Shape& op = inst.operand(0)->shape();
        std::vector<int> m(static_cast<size_t>(op.rank()), -1);
        // Groups of dimensions with equal products; in each, the major non-1 dimensions of the
        // two sides correspond (a block split of the merged dimension is a split of its major part).
        int64_t i = 0, j = 0;
        while (i < rank || j < op.rank()) {
          const int64_t i0 = i, j0 = j;
          int64_t pi = i < rank ? shape.dim(i++) : 1, pj = j < op.rank() ? op.dim(j++) : 1;
          while (pi != pj) {
            if (pi < pj && i < rank) pi *= shape.dim(i++);
            else if (pj < pi && j < op.rank()) pj *= op.dim(j++);
            else break;
          }
          if (pi != pj) break;
          int64_t ri = i0, oj = j0;
          while (ri < i && shape.dim(ri) == 1) ++ri;
          while (oj < j && op.dim(oj) == 1) ++oj;
          if (ri < i && oj < j) m[static_cast<size_t>(oj)] = static_cast<int>(ri);
        }
        sp.in.push_back(std::move(m));
        return sp;
      }
      case Opcode::kSlice: case Opcode::kPad: case Opcode::kConcatenate: case Opcode::kDynamicSlice:
      case Opcode::kDynamicUpdateSlice: case Opcode::kReverse: case Opcode::kSort: case Opcode::kReduceWindow:
        pass_through(/*same_size_only=*/true);
        if (inst.opcode() == Opcode::kReverse || inst.opcode() == Opcode::kSort || inst.opcode() == Opcode::kConcatenate) {
          // The reversed / sorted / concatenated dimensions must be whole.
          for (int64_t d : inst.dimensions)
            for (auto& m : sp.in)
              if (static_cast<size_t>(d) < m.size()) m[static_cast<size_t>(d)] = -1;
        }
        return sp;
      default:
        break;
    }
    if (IsElementwise(inst.opcode())) {
      pass_through(/*same_size_only=*/false);
      sp.flops = static_cast<double>(shape.ElementCount());
      sp.follow = inst.operand_count() > 0 && nodes.count(inst.operand(0)) && inst.operand(0)->shape().dims == shape.dims;
      return sp;
    }
    // Anything else: any result split (computed from whole operands, slicing is free).
    identity_result();
    for (const Instruction* op : inst.operands())
      sp.in.push_back(op->shape().IsArray() ? std::vector<int>(static_cast<size_t>(op->shape().rank()), -1) : std::vector<int>{});
    return sp;
  }

  // The strategy of `sp` for one assignment of mesh axes to its dimensions (nullopt when an operand
  // dimension would not divide).
  std::optional<Strategy> StrategyOf(const Instruction& inst, const Space& sp, const std::vector<int>& axis_dim) {
    std::vector<int> dim_axis(sp.sizes.size(), -1);
    for (size_t a = 0; a < axis_dim.size(); ++a)
      if (axis_dim[a] >= 0) dim_axis[static_cast<size_t>(axis_dim[a])] = static_cast<int>(a);
    Strategy s;
    for (int d : sp.out) s.out.push_back(static_cast<int8_t>(dim_axis[static_cast<size_t>(d)]));
    double bytes = ShardBytes(inst.shape(), s.out);
    double shards = 1;
    std::vector<std::string> reduce_axes;
    for (size_t a = 0; a < axis_dim.size(); ++a) {
      if (axis_dim[a] < 0) continue;
      shards *= static_cast<double>(mesh_.axis_size(static_cast<int64_t>(a)));
      if (sp.reduced[static_cast<size_t>(axis_dim[a])]) reduce_axes.push_back(mesh_.axes()[a].name);
    }
    for (size_t k = 0; k < sp.in.size(); ++k) {
      const Instruction* op = inst.operand(static_cast<int64_t>(k));
      Mapping m;
      for (size_t od = 0; od < sp.in[k].size(); ++od) {
        const int d = sp.in[k][od];
        const int a = d >= 0 ? dim_axis[static_cast<size_t>(d)] : -1;
        if (a >= 0 && op->shape().dim(static_cast<int64_t>(od)) % mesh_.axis_size(a) != 0) return std::nullopt;
        m.push_back(static_cast<int8_t>(a));
      }
      if (op->shape().IsArray()) bytes += ShardBytes(op->shape(), m);
      s.in.push_back(std::move(m));
    }
    s.compute_s = ComputeCost(sp.flops / shards, bytes, pod_.chip);
    if (!reduce_axes.empty()) s.comm_s = Collective(CollectiveKind::kAllReduce, reduce_axes, ShardBytes(inst.shape(), s.out));
    return s;
  }

  // A follower's strategy for its group's choice with result mapping `out`.
  Strategy FollowerStrategy(const Instruction& inst, const Space& sp, const Mapping& out) {
    std::vector<int> axis_dim(static_cast<size_t>(mesh_.num_axes()), -1);
    for (size_t d = 0; d < out.size(); ++d)
      if (out[d] >= 0) axis_dim[static_cast<size_t>(out[d])] = sp.out[d];
    auto s = StrategyOf(inst, sp, axis_dim);
    if (s) return *s;
    // An operand that does not divide (cannot happen for same-shape elementwise operands): whole.
    Strategy w;
    w.out = out;
    for (const auto& m : sp.in) w.in.push_back(Mapping(m.size(), -1));
    return w;
  }

  double ShardBytes(const Shape& shape, const Mapping& m) const {
    double b = static_cast<double>(shape.ByteSize());
    for (int8_t a : m)
      if (a >= 0) b /= static_cast<double>(mesh_.axis_size(a));
    return b;
  }

  // Seconds to turn a tensor split as `from` into one split as `to`: all-gather the axes `to` does
  // not use, all-to-all each axis that moves to another dimension; axes `to` adds are a local slice.
  double Reshard(const Shape& shape, const Mapping& from, const Mapping& to) {
    if (from == to || to.size() != from.size()) return 0;
    std::vector<std::string> gather;
    std::vector<std::string> moved;
    Mapping after_gather = from;
    for (size_t d = 0; d < from.size(); ++d) {
      const int8_t a = from[d];
      if (a < 0) continue;
      const auto it = std::find(to.begin(), to.end(), a);
      if (it == to.end()) {
        gather.push_back(mesh_.axes()[static_cast<size_t>(a)].name);
        after_gather[d] = -1;
      } else if (static_cast<size_t>(it - to.begin()) != d) {
        moved.push_back(mesh_.axes()[static_cast<size_t>(a)].name);
      }
    }
    double t = 0;
    if (!gather.empty()) t += Collective(CollectiveKind::kAllGather, gather, ShardBytes(shape, from));
    const double bytes = ShardBytes(shape, after_gather);
    for (const std::string& axis : moved) t += Collective(CollectiveKind::kAllToAll, {axis}, bytes);
    return t;
  }

  double Collective(CollectiveKind kind, const std::vector<std::string>& axes, double operand_bytes) {
    std::string key = std::to_string(static_cast<int>(kind)) + ":";
    for (const auto& a : axes) key += a + ",";
    key += std::to_string(operand_bytes);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    double t = 0;
    auto groups = ReplicaGroupsForAxes(mesh_, axes);
    if (groups.ok()) {
      auto c = EstimateCollective(topology_, kind, *groups, operand_bytes);
      if (c.ok()) t = c->time_s;
      else error_ = c.error().message;
    } else {
      error_ = groups.error().message;
    }
    memo_.emplace(std::move(key), t);
    return t;
  }

  const std::string& error() const { return error_; }

 private:
  void Recurse(const std::vector<int64_t>& sizes, size_t axis, std::vector<int>& cur, std::vector<char>& used,
               std::vector<std::vector<int>>& out) const {
    if (axis == cur.size()) {
      out.push_back(cur);
      return;
    }
    cur[axis] = -1;
    Recurse(sizes, axis + 1, cur, used, out);
    const int64_t n = mesh_.axis_size(static_cast<int64_t>(axis));
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (used[d] || sizes[d] % n != 0) continue;
      used[d] = 1;
      cur[axis] = static_cast<int>(d);
      Recurse(sizes, axis + 1, cur, used, out);
      used[d] = 0;
    }
    cur[axis] = -1;
  }

  const Pod& pod_;
  const DeviceMesh& mesh_;
  const Topology& topology_;
  std::map<std::string, double> memo_;
  std::string error_;
};

// Pairwise costs between groups, undirected: key (a, b) with a < b, matrix K_a x K_b.
struct EdgeSet {
  std::map<std::pair<int, int>, Matrix> edges;
  std::vector<std::set<int>> neighbours;

  // Adds cost(ka, kb) of the pair (a, b) given as a function over (choice of a, choice of b).
  void Add(int a, int b, int Ka, int Kb, const Matrix& m_ab) {
    if (a > b) {
      Matrix t(m_ab.size());
      for (int i = 0; i < Ka; ++i)
        for (int j = 0; j < Kb; ++j) t[static_cast<size_t>(j * Ka + i)] = m_ab[static_cast<size_t>(i * Kb + j)];
      Add(b, a, Kb, Ka, t);
      return;
    }
    auto [it, fresh] = edges.emplace(std::make_pair(a, b), m_ab);
    if (!fresh)
      for (size_t i = 0; i < m_ab.size(); ++i) it->second[i] += m_ab[i];
    neighbours[static_cast<size_t>(a)].insert(b);
    neighbours[static_cast<size_t>(b)].insert(a);
  }
  // The matrix oriented as (choice of a) x (choice of b).
  Matrix Oriented(int a, int b, int Ka, int Kb) const {
    if (a < b) return edges.at({a, b});
    const Matrix& m = edges.at({b, a});
    Matrix t(m.size());
    for (int i = 0; i < Ka; ++i)
      for (int j = 0; j < Kb; ++j) t[static_cast<size_t>(i * Kb + j)] = m[static_cast<size_t>(j * Ka + i)];
    return t;
  }
  void Remove(int a, int b) {
    edges.erase({std::min(a, b), std::max(a, b)});
    neighbours[static_cast<size_t>(a)].erase(b);
    neighbours[static_cast<size_t>(b)].erase(a);
  }
};

// A group eliminated exactly before the program is built (it has at most two neighbours and no
// memory term): its best choice given its neighbours' choices.
struct Eliminated {
  int group = -1;
  std::vector<int> neighbours;  // 0, 1 or 2
  std::vector<int> best;        // indexed by the neighbours' choices (row-major); one entry for 0
};

// The per-dimension axes of a sharding over `mesh` when each dimension has at most one axis and
// nothing is unreduced or manual.
std::optional<Mapping> MappingOf(const HloSharding& sharding, int64_t rank, const DeviceMesh& mesh) {
  if (sharding.IsReplicated()) return Mapping(static_cast<size_t>(rank), -1);
  auto axes = AxesOf(sharding, rank, mesh);
  if (!axes.ok() || !axes->unreduced_axes.empty() || !axes->manual_axes.empty()) return std::nullopt;
  Mapping m;
  for (const auto& d : axes->dim_axes) {
    if (d.size() > 1) return std::nullopt;
    m.push_back(d.empty() ? int8_t{-1} : static_cast<int8_t>(d[0]));
  }
  if (static_cast<int64_t>(m.size()) != rank) return std::nullopt;
  return m;
}

}  // namespace

Result<AutoShardingPlan> SolveAutoSharding(const Module& module, const Pod& pod, const MeshChoice& mesh,
                                           const AutoShardingOptions& options, const CancellationToken& cancel) {
  const auto t0 = Clock::now();
  if (!module.entry()) return Error("the module has no entry computation");
  for (int64_t a = 0; a < mesh.mesh.num_axes(); ++a)
    if (mesh.mesh.axis_size(a) < 2) return Error("mesh " + mesh.mesh.ToString() + ": every axis needs at least 2 devices");
  if (mesh.mesh.num_devices() != pod.devices)
    return Error("mesh " + mesh.mesh.ToString() + " has " + std::to_string(mesh.mesh.num_devices()) + " devices, the pod " +
                 std::to_string(pod.devices));
  auto topology = TopologyFor(pod, mesh);
  if (!topology.ok()) return Error("placing mesh " + mesh.mesh.ToString() + ": " + topology.error().message);

  AutoShardingPlan plan;
  plan.mesh = mesh;
  plan.hbm_bytes = options.hbm_bytes > 0 ? options.hbm_bytes : pod.chip.device_hbm_bytes();
  std::unique_ptr<Module> copy = module.Clone();
  copy->num_partitions = pod.devices;
  Computation& entry = *copy->entry();
  for (const auto& inst : entry.instructions()) inst->clear_sharding();
  // Called computations keep their annotations, except those written for another device count
  // (the partitioner would refuse them): propagation chooses there instead.
  std::function<bool(const HloSharding&)> other_devices = [&](const HloSharding& s) {
    if (s.IsTuple()) return std::any_of(s.tuple_elements().begin(), s.tuple_elements().end(), other_devices);
    return s.IsTiled() && s.NumDevices() != pod.devices;
  };
  for (const auto& comp : copy->computations())
    if (comp.get() != &entry)
      for (const auto& inst : comp->instructions())
        if (inst->has_sharding() && other_devices(*inst->sharding())) inst->clear_sharding();

  // ---- nodes, their strategies, groups --------------------------------------------------------
  Builder b(pod, mesh, *topology);
  std::vector<Instruction*> order = entry.MakePostOrder();
  std::set<const Instruction*> node_set;
  for (Instruction* inst : order)
    if (inst->shape().IsArray()) node_set.insert(inst);
  std::map<const Instruction*, int> node_of;
  std::vector<Node> nodes;
  std::vector<Group> groups;
  bool divides_any = false;
  for (Instruction* inst : order) {
    if (!node_set.count(inst)) continue;
    if (cancel.cancelled()) return Error("cancelled");
    auto sp = b.SpaceOf(*inst, node_set);
    if (!sp.ok()) return sp.error();
    Node n;
    n.inst = inst;
    if (sp->follow) {
      const Node& leader = nodes[static_cast<size_t>(node_of.at(inst->operand(0)))];
      n.group = leader.group;
      for (const Strategy& ls : leader.strategies) n.strategies.push_back(b.FollowerStrategy(*inst, *sp, ls.out));
    } else {
      for (const auto& assignment : b.Assignments(sp->sizes))
        if (auto s = b.StrategyOf(*inst, *sp, assignment)) n.strategies.push_back(std::move(*s));
      if (options.keep_annotations) {
        const Instruction* given = module.entry()->Find(inst->name());
        if (given && given->has_sharding()) {
          if (auto kept = MappingOf(*given->sharding(), inst->shape().rank(), mesh.mesh)) {
            std::vector<Strategy> only;
            for (Strategy& st : n.strategies)
              if (st.out == *kept) only.push_back(std::move(st));
            if (!only.empty()) n.strategies = std::move(only);
          }
        }
      }
      n.group = static_cast<int>(groups.size());
      Group g;
      g.compute.assign(n.strategies.size(), 0);
      g.comm.assign(n.strategies.size(), 0);
      groups.push_back(std::move(g));
    }
    Group& g = groups[static_cast<size_t>(n.group)];
    for (size_t k = 0; k < n.strategies.size(); ++k) {
      g.compute[k] += n.strategies[k].compute_s;
      g.comm[k] += n.strategies[k].comm_s;
      for (int8_t a : n.strategies[k].out) divides_any = divides_any || a >= 0;
    }
    if (inst->opcode() == Opcode::kParameter) {
      if (g.memory.empty()) g.memory.assign(n.strategies.size(), 0);
      for (size_t k = 0; k < n.strategies.size(); ++k) g.memory[k] += b.ShardBytes(inst->shape(), n.strategies[k].out);
    }
    node_of[inst] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return Error("the entry computation has no array instructions to shard");
  if (!divides_any) return Error("mesh " + mesh.mesh.ToString() + " divides no dimension of any instruction of the module");
  plan.instructions = static_cast<int64_t>(nodes.size());
  plan.groups = static_cast<int64_t>(groups.size());

  // ---- edges: resharding an operand to what its user needs --------------------------------------
  EdgeSet es;
  es.neighbours.resize(groups.size());
  for (const Node& v : nodes) {
    for (int64_t i = 0; i < v.inst->operand_count(); ++i) {
      const Instruction* op = v.inst->operand(i);
      auto it = node_of.find(op);
      if (it == node_of.end()) continue;
      const Node& u = nodes[static_cast<size_t>(it->second)];
      const int gu = u.group, gv = v.group;
      const int Ku = static_cast<int>(u.strategies.size()), Kv = static_cast<int>(v.strategies.size());
      if (gu == gv) {
        for (int k = 0; k < Kv; ++k)
          groups[static_cast<size_t>(gv)].comm[static_cast<size_t>(k)] +=
              b.Reshard(op->shape(), u.strategies[static_cast<size_t>(k)].out, v.strategies[static_cast<size_t>(k)].in[static_cast<size_t>(i)]);
        continue;
      }
      Matrix m(static_cast<size_t>(Ku) * static_cast<size_t>(Kv), 0);
      bool any = false;
      for (int ku = 0; ku < Ku; ++ku)
        for (int kv = 0; kv < Kv; ++kv) {
          const double c = b.Reshard(op->shape(), u.strategies[static_cast<size_t>(ku)].out,
                                     v.strategies[static_cast<size_t>(kv)].in[static_cast<size_t>(i)]);
          m[static_cast<size_t>(ku * Kv + kv)] = c;
          any = any || c > 0;
        }
      if (any) es.Add(gu, gv, Ku, Kv, m);
    }
  }
  if (!b.error().empty()) return Error("pricing a collective on " + mesh.mesh.ToString() + ": " + b.error());
  plan.edges = static_cast<int64_t>(es.edges.size());
  const EdgeSet original_edges = es;
  std::vector<std::vector<double>> gcost(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    gcost[g].resize(groups[g].compute.size());
    for (size_t k = 0; k < gcost[g].size(); ++k) gcost[g][k] = groups[g].compute[k] + groups[g].comm[k];
  }
  auto K = [&](int g) { return static_cast<int>(gcost[static_cast<size_t>(g)].size()); };

  // ---- exact simplification: separable edges fold into node costs; groups with at most two
  // neighbours and no memory term are eliminated (min over their choice) ---------------------------
  for (auto it = es.edges.begin(); it != es.edges.end();) {
    const auto [a, c] = it->first;
    const int Ka = K(a), Kc = K(c);
    const Matrix& m = it->second;
    bool separable = true;
    for (int i = 0; i < Ka && separable; ++i)
      for (int j = 0; j < Kc && separable; ++j)
        separable = std::abs(m[static_cast<size_t>(i * Kc + j)] - m[static_cast<size_t>(i * Kc)] - m[static_cast<size_t>(j)] + m[0]) <= 1e-15;
    if (!separable) {
      ++it;
      continue;
    }
    for (int i = 0; i < Ka; ++i) gcost[static_cast<size_t>(a)][static_cast<size_t>(i)] += m[static_cast<size_t>(i * Kc)] - m[0];
    for (int j = 0; j < Kc; ++j) gcost[static_cast<size_t>(c)][static_cast<size_t>(j)] += m[static_cast<size_t>(j)];
    es.neighbours[static_cast<size_t>(a)].erase(c);
    es.neighbours[static_cast<size_t>(c)].erase(a);
    it = es.edges.erase(it);
  }
  std::vector<char> alive(groups.size(), 1);
  std::vector<Eliminated> eliminated;
  std::vector<int> queue;
  for (size_t g = 0; g < groups.size(); ++g) queue.push_back(static_cast<int>(g));
  while (!queue.empty()) {
    const int g = queue.back();
    queue.pop_back();
    const auto gi = static_cast<size_t>(g);
    if (!alive[gi] || !groups[gi].memory.empty() || es.neighbours[gi].size() > 2) continue;
    Eliminated e;
    e.group = g;
    e.neighbours.assign(es.neighbours[gi].begin(), es.neighbours[gi].end());
    const int Kg = K(g);
    auto argmin = [&](auto&& value) {
      int best = 0;
      double bv = std::numeric_limits<double>::infinity();
      for (int k = 0; k < Kg; ++k) {
        const double v = gcost[gi][static_cast<size_t>(k)] + value(k);
        if (v < bv) {
          bv = v;
          best = k;
        }
      }
      return std::make_pair(best, bv);
    };
    if (e.neighbours.empty()) {
      e.best.push_back(argmin([](int) { return 0.0; }).first);
    } else if (e.neighbours.size() == 1) {
      const int n = e.neighbours[0];
      const int Kn = K(n);
      const Matrix m = es.Oriented(g, n, Kg, Kn);
      for (int l = 0; l < Kn; ++l) {
        auto [k, v] = argmin([&](int k) { return m[static_cast<size_t>(k * Kn + l)]; });
        e.best.push_back(k);
        gcost[static_cast<size_t>(n)][static_cast<size_t>(l)] += v;
      }
      es.Remove(g, n);
      queue.push_back(n);
    } else {
      const int a = e.neighbours[0], c = e.neighbours[1];
      const int Ka = K(a), Kc = K(c);
      const Matrix ma = es.Oriented(g, a, Kg, Ka), mc = es.Oriented(g, c, Kg, Kc);
      Matrix m(static_cast<size_t>(Ka) * static_cast<size_t>(Kc));
      for (int i = 0; i < Ka; ++i)
        for (int j = 0; j < Kc; ++j) {
          auto [k, v] = argmin([&](int k) { return ma[static_cast<size_t>(k * Ka + i)] + mc[static_cast<size_t>(k * Kc + j)]; });
          e.best.push_back(k);
          m[static_cast<size_t>(i * Kc + j)] = v;
        }
      es.Remove(g, a);
      es.Remove(g, c);
      es.Add(a, c, Ka, Kc, m);
      queue.push_back(a);
      queue.push_back(c);
    }
    alive[gi] = 0;
    eliminated.push_back(std::move(e));
  }

  // ---- the integer program over what is left -----------------------------------------------------
  // Each edge's matrix is compressed first: choices of one side whose rows (columns) are equal
  // interact identically with every choice of the other side (a dot's strategies that need the
  // same sharding of this operand), so they share one class; the edge's variables are per pair of
  // classes, tied to the sums of their choices' binaries. Exact, and several times smaller.
  struct Compressed {
    int a = -1, c = -1;
    std::vector<int> row_class, col_class;  // per choice of a / of c
    int rows = 0, cols = 0;
    Matrix m;  // rows x cols
  };
  auto classes = [](int n, auto&& same) {
    std::vector<int> cls(static_cast<size_t>(n), -1);
    std::vector<int> reps;
    for (int i = 0; i < n; ++i) {
      for (size_t r = 0; r < reps.size() && cls[static_cast<size_t>(i)] < 0; ++r)
        if (same(reps[r], i)) cls[static_cast<size_t>(i)] = static_cast<int>(r);
      if (cls[static_cast<size_t>(i)] < 0) {
        cls[static_cast<size_t>(i)] = static_cast<int>(reps.size());
        reps.push_back(i);
      }
    }
    return std::make_pair(cls, reps);
  };
  std::vector<Compressed> compressed;
  int64_t planned = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    if (alive[g]) planned += K(static_cast<int>(g));
  for (const auto& edge : es.edges) {
    const auto& m = edge.second;  // a plain reference: clang 14 cannot capture a structured binding
    Compressed e;
    e.a = edge.first.first;
    e.c = edge.first.second;
    const int Ka = K(e.a), Kc = K(e.c);
    auto [rc, rrep] = classes(Ka, [&](int i, int k) {
      for (int j = 0; j < Kc; ++j)
        if (m[static_cast<size_t>(i * Kc + j)] != m[static_cast<size_t>(k * Kc + j)]) return false;
      return true;
    });
    auto [cc, crep] = classes(Kc, [&](int j, int l) {
      for (int i = 0; i < Ka; ++i)
        if (m[static_cast<size_t>(i * Kc + j)] != m[static_cast<size_t>(i * Kc + l)]) return false;
      return true;
    });
    e.row_class = std::move(rc);
    e.col_class = std::move(cc);
    e.rows = static_cast<int>(rrep.size());
    e.cols = static_cast<int>(crep.size());
    for (int r : rrep)
      for (int c2 : crep) e.m.push_back(m[static_cast<size_t>(r * Kc + c2)]);
    planned += static_cast<int64_t>(e.m.size());
    compressed.push_back(std::move(e));
  }
  if (planned > options.max_variables)
    return Error("the integer program on " + mesh.mesh.ToString() + " would have " + std::to_string(planned) +
                 " variables, over the limit of " + std::to_string(options.max_variables) + " (" + std::to_string(plan.groups) +
                 " instruction groups)");
  MilpProblem p;
  std::vector<int> first_column(groups.size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!alive[g]) continue;
    std::vector<std::pair<int, double>> one;
    for (int k = 0; k < K(static_cast<int>(g)); ++k) {
      const int col = p.AddBinary(gcost[g][static_cast<size_t>(k)]);
      if (k == 0) first_column[g] = col;
      one.emplace_back(col, 1.0);
    }
    p.AddRow(one, MilpProblem::Sense::kEqual, 1);
  }
  for (const Compressed& e : compressed) {
    std::vector<int> col(e.m.size());
    for (size_t i = 0; i < e.m.size(); ++i) col[i] = p.AddContinuous(0, 1, e.m[i]);
    for (int r = 0; r < e.rows; ++r) {
      std::vector<std::pair<int, double>> row;
      for (int i = 0; i < K(e.a); ++i)
        if (e.row_class[static_cast<size_t>(i)] == r) row.emplace_back(first_column[static_cast<size_t>(e.a)] + i, -1.0);
      for (int j = 0; j < e.cols; ++j) row.emplace_back(col[static_cast<size_t>(r * e.cols + j)], 1.0);
      p.AddRow(row, MilpProblem::Sense::kEqual, 0);
    }
    for (int j = 0; j < e.cols; ++j) {
      std::vector<std::pair<int, double>> row;
      for (int l = 0; l < K(e.c); ++l)
        if (e.col_class[static_cast<size_t>(l)] == j) row.emplace_back(first_column[static_cast<size_t>(e.c)] + l, -1.0);
      for (int r = 0; r < e.rows; ++r) row.emplace_back(col[static_cast<size_t>(r * e.cols + j)], 1.0);
      p.AddRow(row, MilpProblem::Sense::kEqual, 0);
    }
  }
  double min_memory = 0;
  {
    std::vector<std::pair<int, double>> row;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].memory.empty()) continue;
      min_memory += *std::min_element(groups[g].memory.begin(), groups[g].memory.end());
      for (int k = 0; k < K(static_cast<int>(g)); ++k)
        row.emplace_back(first_column[g] + k, groups[g].memory[static_cast<size_t>(k)]);
    }
    if (!row.empty()) p.AddRow(row, MilpProblem::Sense::kLessEqual, plan.hbm_bytes);
  }
  plan.variables = p.num_columns();
  plan.binaries = p.num_integers();
  plan.constraints = p.num_rows();
  plan.build_s = Since(t0);
  if (cancel.cancelled()) return Error("cancelled");

  if (min_memory > plan.hbm_bytes) {
    plan.status = "infeasible: the entry parameters need at least " + FormatBytes(min_memory) + " per device on " +
                  mesh.mesh.ToString() + " (each split as far as the mesh allows), HBM holds " + FormatBytes(plan.hbm_bytes);
    return plan;
  }
  MilpOptions mo;
  mo.time_limit_s = options.time_limit_s;
  // Every group eliminated exactly (no parameter has variables, e.g. a module of constants): the
  // program is empty and its solution is the eliminations' own.
  Result<MilpSolution> sol = MilpSolution{MilpSolution::Status::kOptimal, 0, 0, {}, 0};
  if (p.num_columns() > 0) sol = SolveMilp(p, mo);
  if (!sol.ok()) return sol.error();
  plan.solve_s = sol->seconds;
  plan.status = MilpStatusName(sol->status);
  if (!sol->has_solution()) {
    if (sol->status == MilpSolution::Status::kInfeasible)
      plan.status = "infeasible: no choice of shardings on " + mesh.mesh.ToString() + " keeps the entry parameters within " +
                    FormatBytes(plan.hbm_bytes) + " per device";
    return plan;
  }

  // ---- the choices: read the program's, then the eliminated groups' in reverse ------------------
  std::vector<int> choice(groups.size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!alive[g]) continue;
    int best = 0;
    for (int k = 0; k < K(static_cast<int>(g)); ++k)
      if (sol->values[static_cast<size_t>(first_column[g] + k)] > sol->values[static_cast<size_t>(first_column[g] + best)]) best = k;
    choice[g] = best;
  }
  for (auto it = eliminated.rbegin(); it != eliminated.rend(); ++it) {
    size_t idx = 0;
    if (it->neighbours.size() == 1) idx = static_cast<size_t>(choice[static_cast<size_t>(it->neighbours[0])]);
    if (it->neighbours.size() == 2)
      idx = static_cast<size_t>(choice[static_cast<size_t>(it->neighbours[0])] * K(it->neighbours[1]) +
                                choice[static_cast<size_t>(it->neighbours[1])]);
    choice[static_cast<size_t>(it->group)] = it->best[idx];
  }
  // The objective recomputed from the original costs (equal to the program's: the simplification
  // is exact), split into compute and communication.
  for (size_t g = 0; g < groups.size(); ++g) {
    plan.compute_s += groups[g].compute[static_cast<size_t>(choice[g])];
    plan.communication_s += groups[g].comm[static_cast<size_t>(choice[g])];
    if (!groups[g].memory.empty()) plan.parameter_bytes += static_cast<int64_t>(groups[g].memory[static_cast<size_t>(choice[g])]);
  }
  for (const auto& [ab, m] : original_edges.edges)
    plan.communication_s += m[static_cast<size_t>(choice[static_cast<size_t>(ab.first)] * K(ab.second) + choice[static_cast<size_t>(ab.second)])];
  plan.objective_s = plan.compute_s + plan.communication_s;
  plan.solved = true;

  // ---- the annotations ------------------------------------------------------------------------
  for (const Node& n : nodes) {
    const bool param = n.inst->opcode() == Opcode::kParameter;
    if (!param && !options.annotate_all && !(options.annotate_dots && n.inst->opcode() == Opcode::kDot)) continue;
    const Mapping& out = n.strategies[static_cast<size_t>(choice[static_cast<size_t>(n.group)])].out;
    std::vector<int64_t> dims_mapping(out.begin(), out.end());
    auto s = MeshSplit(n.inst->shape().rank(), mesh.mesh, dims_mapping);
    if (!s.ok()) return Error("annotating " + n.inst->name() + ": " + s.error().message);
    Instruction* inst = copy->FindInstruction(n.inst->name());
    if (inst != n.inst) return Error("internal: instruction " + n.inst->name() + " not found in the copy");
    inst->set_sharding(s.value());
    if (!param) continue;
    ChosenSharding c;
    c.instruction = inst->name();
    c.sharding = s->ToString();
    auto named = ToNamedAxes(*s, inst->shape().rank(), mesh.mesh);
    c.named = named.ok() ? *named : c.sharding;
    c.bytes_per_device = static_cast<int64_t>(b.ShardBytes(inst->shape(), out));
    plan.parameters.push_back(std::move(c));
  }
  plan.module = std::move(copy);
  return plan;
}

namespace {

Result<std::vector<MeshChoice>> MeshesOf(const Pod& pod, const AutoShardingOptions& options) {
  std::vector<MeshChoice> out;
  if (!options.meshes.empty()) {
    for (const std::string& text : options.meshes) {
      auto m = DeviceMesh::Parse(text);
      if (!m.ok()) return Error("mesh '" + text + "': " + m.error().message);
      if (m->num_devices() != pod.devices)
        return Error("mesh '" + text + "' has " + std::to_string(m->num_devices()) + " devices, the pod " + std::to_string(pod.devices));
      auto placed = PlaceMesh(pod, m.value(), "", /*require_boxes=*/false);
      if (!placed.ok()) return Error("mesh '" + text + "': " + placed.error().message);
      out.push_back(std::move(placed).value());
    }
    return out;
  }
  if (pod.devices < 2) return Error("auto-sharding needs at least 2 devices, the pod has " + std::to_string(pod.devices));
  for (MeshChoice& m : EnumerateMeshes(pod, {"X"})) out.push_back(std::move(m));
  for (MeshChoice& m : EnumerateMeshes(pod, {"X", "Y"}))
    if (m.mesh.axis_size(0) >= 2 && m.mesh.axis_size(1) >= 2) out.push_back(std::move(m));
  return out;
}

}  // namespace

Result<AutoShardingResult> AutoShard(const Module& module, const Pod& pod, const AutoShardingOptions& options,
                                     const CancellationToken& cancel) {
  const auto t0 = Clock::now();
  AutoShardingResult r;
  r.pod = pod;
  auto meshes = MeshesOf(pod, options);
  if (!meshes.ok()) return meshes.error();
  std::vector<std::string> failures;
  for (const MeshChoice& mesh : *meshes) {
    if (cancel.cancelled()) break;
    auto plan = SolveAutoSharding(module, pod, mesh, options, cancel);
    if (!plan.ok()) {
      failures.push_back(mesh.mesh.ToString() + ": " + plan.error().message);
      continue;
    }
    if (!plan->solved) {
      failures.push_back(mesh.mesh.ToString() + ": " + plan->status);
      r.plans.push_back(std::move(plan).value());
      continue;
    }
    Candidate c = options.source;
    c.family = "auto-sharding";
    c.strategy = "ILP";
    c.chip = pod.chip_name;
    c.cores_per_chip = pod.chip.cores_per_chip;
    c.slice = pod.SliceText();
    c.mesh = mesh.mesh.ToString();
    c.placement = mesh.order;
    if (options.keep_modules) plan->annotated = plan->module->Clone();
    auto prepared = PrepareGivenModule(c, pod, mesh, std::move(plan->module));
    r.plans.push_back(std::move(plan).value());
    const AutoShardingPlan& pl = r.plans.back();
    CandidateResult result;
    if (!prepared.ok()) {
      result.candidate = c;
      result.outcome = Outcome::kInvalid;
      result.message = prepared.error().message;
    } else {
      Evaluation ev = EvaluateCandidate(*prepared, options.evaluation, cancel);
      if (ev.run) {
        auto& s = ev.run->inputs.settings;
        auto num = [](double v) {
          std::ostringstream os;
          os.precision(17);
          os << v;
          return os.str();
        };
        s.emplace_back("ilp.objective_s", num(pl.objective_s));
        s.emplace_back("ilp.variables", std::to_string(pl.variables));
        s.emplace_back("ilp.constraints", std::to_string(pl.constraints));
        s.emplace_back("ilp.solve_s", num(pl.solve_s));
        s.emplace_back("ilp.status", pl.status);
        s.emplace_back("ilp.solver", MilpSolverName());
      }
      StoreEvaluation(ev, options.store.get(), cancel);
      result = std::move(ev.result);
    }
    r.ranked.push_back(std::move(result));
    r.plan_of_ranked.emplace_back(r.ranked.size() - 1, r.plans.size() - 1);
  }
  if (r.ranked.empty()) {
    std::string why;
    for (const auto& f : failures) why += "\n  " + f;
    if (cancel.cancelled()) return Error("cancelled");
    return Error("auto-sharding found no solution on any mesh of " + std::to_string(pod.devices) + " devices:" + why);
  }
  for (const auto& f : failures) r.notes.push_back(f);
  // Rank, keeping each result's plan index.
  std::vector<std::pair<std::string, size_t>> key_plan;
  for (const auto& [ri, pi] : r.plan_of_ranked) key_plan.emplace_back(r.ranked[ri].candidate.Key(), pi);
  r.pareto = RankResults(r.ranked);
  r.plan_of_ranked.clear();
  for (size_t i = 0; i < r.ranked.size(); ++i)
    for (const auto& [key, pi] : key_plan)
      if (key == r.ranked[i].candidate.Key()) r.plan_of_ranked.emplace_back(i, pi);
  r.wall_s = Since(t0);
  return r;
}

std::string DescribePlan(const AutoShardingPlan& plan) {
  std::ostringstream os;
  os << "mesh " << plan.mesh.mesh.ToString() << ": " << plan.instructions << " instructions in " << plan.groups << " groups, "
     << plan.edges << " resharding edges; program: " << plan.variables << " variables (" << plan.binaries << " binary), "
     << plan.constraints << " constraints; built in " << FormatSeconds(plan.build_s) << ", solved in " << FormatSeconds(plan.solve_s)
     << " (" << MilpSolverName() << "): " << plan.status;
  if (plan.solved) {
    os << "\n  objective " << FormatSeconds(plan.objective_s) << " (compute " << FormatSeconds(plan.compute_s) << ", communication "
       << FormatSeconds(plan.communication_s) << "); parameters " << FormatBytes(static_cast<double>(plan.parameter_bytes))
       << " per device of " << FormatBytes(plan.hbm_bytes) << " HBM";
    for (const ChosenSharding& c : plan.parameters)
      os << "\n  " << c.instruction << " " << c.named << "  " << c.sharding << "  (" << FormatBytes(static_cast<double>(c.bytes_per_device))
         << " per device)";
  }
  return os.str();
}

}  // namespace shardscope::search
