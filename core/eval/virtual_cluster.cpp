#include "core/eval/virtual_cluster.h"


#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace shardscope {

namespace {

using Storage = Tensor::Storage;

Error CollError(const Instruction& inst, const std::string& msg) {
  return Error("virtual cluster: " + DescribeInstruction(inst) + ": " + msg);
}

// Concatenates `parts` (equal shapes) along `dim` into a tensor of shape `out_shape`.
Result<Tensor> ConcatAlong(const std::vector<const Tensor*>& parts, int64_t dim, const Shape& out_shape) {
  Tensor out(out_shape);
  const Tensor& p0 = *parts[0];
  if (dim < 0 || dim >= p0.rank()) return Error("dimension " + std::to_string(dim) + " out of range");
  std::vector<int64_t> want = p0.dims();
  want[static_cast<size_t>(dim)] *= static_cast<int64_t>(parts.size());
  if (!out_shape.IsArray() || out_shape.dims != want || out_shape.type != p0.type())
    return Error("result shape " + out_shape.ToString(false) + " does not match " + std::to_string(parts.size()) + " x " +
                 p0.shape().ToString(false) + " concatenated along dimension " + std::to_string(dim));
  const auto os = RowMajorStrides(out.dims());
  const int64_t chunk = p0.dim(dim);
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& p = *parts[k];
    if (p.dims() != p0.dims() || p.type() != p0.type()) return Error("participants' buffers differ in shape");
    if (p.size() == 0) continue;
    std::vector<int64_t> idx(static_cast<size_t>(p.rank()), 0);
    int64_t i = 0;
    do {
      int64_t dst = 0;
      for (int64_t d = 0; d < p.rank(); ++d)
        dst += (idx[static_cast<size_t>(d)] + (d == dim ? static_cast<int64_t>(k) * chunk : 0)) * os[static_cast<size_t>(d)];
      CopyElem(out, dst, p, i++);
    } while (NextIndex(idx, p.dims()));
  }
  return out;
}

// Chunk `k` of `count` equal chunks of `t` along `dim`.
Result<Tensor> ChunkAlong(const Tensor& t, int64_t dim, int64_t count, int64_t k) {
  if (dim < 0 || dim >= t.rank()) return Error("dimension " + std::to_string(dim) + " out of range");
  if (count <= 0 || t.dim(dim) % count != 0)
    return Error("dimension " + std::to_string(dim) + " of " + t.shape().ToString(false) + " is not divisible by " +
                 std::to_string(count));
  std::vector<int64_t> dims = t.dims();
  const int64_t c = dims[static_cast<size_t>(dim)] / count;
  dims[static_cast<size_t>(dim)] = c;
  Tensor out(Shape(t.type(), dims));
  if (out.size() == 0) return out;
  const auto ts = RowMajorStrides(t.dims());
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t i = 0;
  do {
    int64_t src = 0;
    for (size_t d = 0; d < dims.size(); ++d)
      src += (idx[d] + (static_cast<int64_t>(d) == dim ? k * c : 0)) * ts[d];
    CopyElem(out, i++, t, src);
  } while (NextIndex(idx, dims));
  return out;
}

// A shard-to-full custom-call that changes the shape (the end of a manual region).
bool IsShardToFull(const Instruction& inst) {
  return inst.opcode() == Opcode::kCustomCall && inst.custom_call_target == "SPMDShardToFullShape" &&
         inst.operand_count() == 1 && !inst.operand(0)->shape().Compatible(inst.shape());
}

}  // namespace

bool ComputationHasCollectives(const Computation& c) {
  std::unordered_set<const Computation*> visiting;
  std::function<bool(const Computation&)> rec = [&](const Computation& comp) -> bool {
    if (!visiting.insert(&comp).second) return false;
    for (const auto& inst : comp.instructions()) {
      if (IsCollective(inst->opcode())) return true;
      for (const Computation* callee : inst->called_computations())
        if (callee && rec(*callee)) return true;
    }
    return false;
  };
  return rec(c);
}

bool ModuleHasCollectives(const Module& m) {
  for (const auto& c : m.computations())
    for (const auto& inst : c->instructions())
      if (IsCollective(inst->opcode())) return true;
  return false;
}

namespace {

class Cluster {
 public:
  Cluster(int64_t n, const ClusterOptions& options) : n_(n), R_(options.num_replicas), P_(n / options.num_replicas), options_(options) {
    devs_.reserve(static_cast<size_t>(n));
    for (int64_t d = 0; d < n; ++d) {
      EvalOptions eo;
      eo.rng_seed = options.rng_seed;
      eo.partition_id = d % P_;
      eo.replica_id = d / P_;
      eo.max_while_iterations = options.max_while_iterations;
      eo.probe_sums = options.probe_sums;
      eo.probe_seed = options.probe_seed + static_cast<uint64_t>(d);
      devs_.emplace_back(eo);
    }
  }

  // args[d][i]: device d's argument i.
  Result<std::vector<Tensor>> Run(const Computation& c, const std::vector<std::vector<Tensor>>& args);

 private:
  using PerDevice = std::vector<Tensor>;
  bool NeedsLockstep(const Instruction& inst) {
    if (IsCollective(inst.opcode())) return true;
    if (IsShardToFull(inst)) return true;
    for (const Computation* callee : inst.called_computations())
      if (callee && HasCollectives(*callee)) return true;
    return false;
  }
  // Whether `c` (transitively) needs all devices at once: collectives or manual-region ends.
  bool HasCollectives(const Computation& c) {
    auto it = has_coll_.find(&c);
    if (it != has_coll_.end()) return it->second;
    has_coll_[&c] = false;  // recursion guard
    bool v = false;
    for (const auto& inst : c.instructions()) {
      if (IsCollective(inst->opcode()) || IsShardToFull(*inst)) v = true;
      for (const Computation* callee : inst->called_computations())
        if (callee && HasCollectives(*callee)) v = true;
      if (v) break;
    }
    has_coll_[&c] = v;
    return v;
  }
  Result<PerDevice> Lockstep(const Instruction& inst, const std::vector<std::vector<const Tensor*>>& ops);
  Result<PerDevice> Collective(const Instruction& inst, const std::vector<std::vector<const Tensor*>>& ops);
  Result<PerDevice> ShardToFull(const Instruction& inst, const std::vector<std::vector<const Tensor*>>& ops);

  int64_t n_, R_, P_;
  ClusterOptions options_;
  std::vector<Evaluator> devs_;
  std::unordered_map<const Computation*, bool> has_coll_;
};

Result<std::vector<Tensor>> Cluster::Run(const Computation& c, const std::vector<std::vector<Tensor>>& args) {
  for (int64_t d = 0; d < n_; ++d) {
    Status st = CheckArguments(c, args[static_cast<size_t>(d)]);
    if (!st.ok()) return Error("device " + std::to_string(d) + ": " + st.error().message);
  }
  if (!c.root()) return Error("virtual cluster: computation " + c.name() + " has no root");
  const auto& order = devs_[0].Order(c);
  std::unordered_map<const Instruction*, PerDevice> values;
  std::unordered_map<const Instruction*, int64_t> remaining;
  for (const Instruction* inst : order) remaining[inst] = static_cast<int64_t>(inst->users().size());
  std::vector<std::vector<const Tensor*>> ops(static_cast<size_t>(n_));
  for (const Instruction* inst : order) {
    PerDevice result(static_cast<size_t>(n_));
    if (inst->opcode() == Opcode::kParameter) {
      const int64_t pn = inst->parameter_number;
      for (int64_t d = 0; d < n_; ++d) {
        const auto& a = args[static_cast<size_t>(d)];
        if (pn < 0 || pn >= static_cast<int64_t>(a.size())) return CollError(*inst, "parameter number out of range");
        result[static_cast<size_t>(d)] = a[static_cast<size_t>(pn)];
      }
      values[inst] = std::move(result);
      continue;
    }
    for (int64_t d = 0; d < n_; ++d) {
      auto& o = ops[static_cast<size_t>(d)];
      o.clear();
      for (const Instruction* op : inst->operands()) {
        auto it = values.find(op);
        if (it == values.end()) return CollError(*inst, "operand %" + op->name() + " has no value");
        o.push_back(&it->second[static_cast<size_t>(d)]);
      }
    }
    if (NeedsLockstep(*inst)) {
      auto r = Lockstep(*inst, ops);
      if (!r.ok()) return r.error();
      result = std::move(r.value());
    } else {
      for (int64_t d = 0; d < n_; ++d) {
        auto r = devs_[static_cast<size_t>(d)].EvaluateInstruction(*inst, ops[static_cast<size_t>(d)]);
        if (!r.ok()) return Error(r.error().message + (n_ > 1 ? " (on device " + std::to_string(d) + ")" : ""));
        result[static_cast<size_t>(d)] = std::move(r.value());
      }
    }
    values[inst] = std::move(result);
    std::vector<const Instruction*> distinct(inst->operands().begin(), inst->operands().end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const Instruction* op : distinct) {
      auto rit = remaining.find(op);
      if (rit != remaining.end() && --rit->second <= 0 && op != c.root()) values.erase(op);
    }
  }
  auto it = values.find(c.root());
  if (it == values.end()) return Error("virtual cluster: root of " + c.name() + " was not evaluated");
  return std::move(it->second);
}

Result<Cluster::PerDevice> Cluster::Lockstep(const Instruction& inst, const std::vector<std::vector<const Tensor*>>& ops) {
  if (IsCollective(inst.opcode())) return Collective(inst, ops);
  if (IsShardToFull(inst)) return ShardToFull(inst, ops);
  auto args_of = [&](size_t first, size_t count) {
    std::vector<std::vector<Tensor>> a(static_cast<size_t>(n_));
    for (int64_t d = 0; d < n_; ++d)
      for (size_t i = first; i < first + count && i < ops[static_cast<size_t>(d)].size(); ++i)
        a[static_cast<size_t>(d)].push_back(*ops[static_cast<size_t>(d)][i]);
    return a;
  };
  switch (inst.opcode()) {
    case Opcode::kCall: {
      if (!inst.to_apply()) return CollError(inst, "call has no to_apply computation");
      return Run(*inst.to_apply(), args_of(0, ops[0].size()));
    }
    case Opcode::kWhile: {
      const Computation* cond = inst.while_condition();
      const Computation* body = inst.while_body();
      if (!cond || !body || ops[0].size() != 1) return CollError(inst, "while needs one operand, a condition and a body");
      std::vector<std::vector<Tensor>> state = args_of(0, 1);
      for (int64_t it = 0;; ++it) {
        if (it >= options_.max_while_iterations)
          return CollError(inst, "while loop ran more than " + std::to_string(options_.max_while_iterations) + " iterations");
        auto c = Run(*cond, state);
        if (!c.ok()) return c.error();
        int64_t n_true = 0;
        for (int64_t d = 0; d < n_; ++d) {
          const Tensor& p = c.value()[static_cast<size_t>(d)];
          if (!p.IsArray() || p.size() != 1) return CollError(inst, "while condition must return a pred scalar");
          n_true += p.GetInt(0) != 0;
        }
        if (n_true == 0) break;
        if (n_true != n_)
          return CollError(inst, "devices disagree on the while condition (" + std::to_string(n_true) + " of " + std::to_string(n_) +
                                     " continue); a loop containing collectives must run the same trip count everywhere");
        auto b = Run(*body, state);
        if (!b.ok()) return b.error();
        for (int64_t d = 0; d < n_; ++d) state[static_cast<size_t>(d)] = {std::move(b.value()[static_cast<size_t>(d)])};
      }
      PerDevice out(static_cast<size_t>(n_));
      for (int64_t d = 0; d < n_; ++d) out[static_cast<size_t>(d)] = std::move(state[static_cast<size_t>(d)][0]);
      return out;
    }
    case Opcode::kConditional: {
      const auto& branches = inst.called_computations();
      if (branches.empty()) return CollError(inst, "conditional has no branches");
      int64_t chosen = -1;
      for (int64_t d = 0; d < n_; ++d) {
        const Tensor* p = ops[static_cast<size_t>(d)].empty() ? nullptr : ops[static_cast<size_t>(d)][0];
        if (!p || !p->IsArray() || p->size() != 1) return CollError(inst, "conditional needs a scalar predicate / index");
        int64_t b;
        if (p->type() == PrimitiveType::kPred) {
          b = p->GetInt(0) ? 0 : 1;
        } else {
          b = p->GetInt(0);
          if (b < 0 || b >= static_cast<int64_t>(branches.size())) b = static_cast<int64_t>(branches.size()) - 1;
        }
        if (chosen >= 0 && b != chosen)
          return CollError(inst, "devices take different branches of a conditional whose branches contain collectives");
        chosen = b;
      }
      if (chosen >= static_cast<int64_t>(branches.size()) || !branches[static_cast<size_t>(chosen)])
        return CollError(inst, "missing branch computation");
      return Run(*branches[static_cast<size_t>(chosen)], args_of(static_cast<size_t>(chosen) + 1, 1));
    }
    default:
      return CollError(inst, "op calls a computation that contains collectives; only while, call and conditional may");
  }
}

// The end of a manual region: each device's piece is one block of the full array (block index
// from the result sharding's data tiling); the devices of one manual group (equal index along the
// sharding's manual subgroup dims; all devices when it has none) assemble their blocks.
Result<Cluster::PerDevice> Cluster::ShardToFull(const Instruction& inst, const std::vector<std::vector<const Tensor*>>& ops) {
  if (!inst.has_sharding() || !inst.sharding()->IsTiled())
    return CollError(inst, "SPMDShardToFullShape needs a tiled sharding to assemble the full array from the shards");
  const HloSharding& sh = *inst.sharding();
  const Shape& full_shape = inst.shape();
  if (!full_shape.IsArray()) return CollError(inst, "SPMDShardToFullShape of a tuple is not supported");
  std::map<std::vector<int64_t>, Tensor> groups;  // manual key -> assembled array
  std::map<std::vector<int64_t>, std::set<std::vector<int64_t>>> filled;
  for (int64_t d = 0; d < n_; ++d) {
    if (ops[static_cast<size_t>(d)].size() != 1) return CollError(inst, "SPMDShardToFullShape takes one operand");
    const Tensor& p = *ops[static_cast<size_t>(d)][0];
    if (!p.IsArray() || p.type() != full_shape.type || p.rank() != full_shape.rank())
      return CollError(inst, "device " + std::to_string(d) + " holds " + p.shape().ToString(false) + ", which is no block of " +
                                 full_shape.ToString(false));
    auto block = ManualBlockIndex(sh, full_shape.dims, p.dims(), d);
    if (!block.ok()) return CollError(inst, block.error().message);
    const auto key = ManualGroupKey(sh, d);
    auto it = groups.find(key);
    if (it == groups.end()) it = groups.emplace(key, Tensor(full_shape)).first;
    if (!filled[key].insert(block.value()).second) continue;
    Tensor& full = it->second;
    const auto fs = RowMajorStrides(full.dims());
    if (p.size() == 0) continue;
    std::vector<int64_t> idx(static_cast<size_t>(p.rank()), 0);
    int64_t i = 0;
    do {
      int64_t dst = 0;
      bool inside = true;
      for (int64_t k = 0; k < p.rank(); ++k) {
        const int64_t pos = block.value()[static_cast<size_t>(k)] * p.dim(k) + idx[static_cast<size_t>(k)];
        if (pos >= full.dim(k)) { inside = false; break; }
        dst += pos * fs[static_cast<size_t>(k)];
      }
      if (inside) CopyElem(full, dst, p, i);
      ++i;
    } while (NextIndex(idx, p.dims()));
  }
  PerDevice out(static_cast<size_t>(n_));
  for (int64_t d = 0; d < n_; ++d) {
    const auto key = ManualGroupKey(sh, d);
    const auto& blocks = filled[key];
    int64_t need = 1;
    const auto& p0 = *ops[static_cast<size_t>(d)][0];
    for (int64_t k = 0; k < full_shape.rank(); ++k) need *= (full_shape.dims[static_cast<size_t>(k)] + p0.dim(k) - 1) / p0.dim(k);
    if (static_cast<int64_t>(blocks.size()) != need)
      return CollError(inst, "the manual group of device " + std::to_string(d) + " holds " + std::to_string(blocks.size()) + " of the " +
                                 std::to_string(need) + " blocks of " + full_shape.ToString(false));
    out[static_cast<size_t>(d)] = groups[key];
  }
  return out;
}

Result<Cluster::PerDevice> Cluster::Collective(const Instruction& inst, const std::vector<std::vector<const Tensor*>>& ops) {
  const Opcode op = inst.opcode();
  PerDevice out(static_cast<size_t>(n_));
  // Done ops: unwrap what the start op produced.
  if (op == Opcode::kAllReduceDone || op == Opcode::kAllGatherDone || op == Opcode::kCollectivePermuteDone) {
    for (int64_t d = 0; d < n_; ++d) {
      if (ops[static_cast<size_t>(d)].empty()) return CollError(inst, "no operand");
      const Tensor& t = *ops[static_cast<size_t>(d)][0];
      if (op != Opcode::kAllReduceDone && t.IsTuple() && t.element_count() >= 2 && !inst.shape().IsTuple())
        out[static_cast<size_t>(d)] = t.element(1);
      else
        out[static_cast<size_t>(d)] = t;
    }
    return out;
  }
  const size_t nops = ops[0].size();
  if (nops == 0) return CollError(inst, "collective without operands");
  for (int64_t d = 0; d < n_; ++d)
    for (const Tensor* t : ops[static_cast<size_t>(d)])
      if (!t->IsArray()) return CollError(inst, "collective operands must be arrays");

  // Result leaf shapes (one per operand).
  std::vector<Shape> leaf_shapes;
  bool wrap_with_operand = false;  // all-gather-start / collective-permute-start tuple (operand, result, ...)
  const Shape& s = inst.shape();
  if ((op == Opcode::kAllGatherStart || op == Opcode::kCollectivePermuteStart) && s.IsTuple() && s.tuple.size() >= 2 &&
      nops == 1 && s.tuple[0].Compatible(ops[0][0]->shape())) {
    wrap_with_operand = true;
    leaf_shapes.push_back(s.tuple[1]);
  } else if (s.IsTuple()) {
    leaf_shapes = s.tuple;
  } else {
    leaf_shapes.push_back(s);
  }
  const bool tuple_a2a = op == Opcode::kAllToAll && inst.dimensions.empty();
  if (!tuple_a2a && leaf_shapes.size() != nops)
    return CollError(inst, "result has " + std::to_string(leaf_shapes.size()) + " element(s) for " + std::to_string(nops) + " operand(s)");

  std::vector<PerDevice> leaves(nops, PerDevice(static_cast<size_t>(n_)));

  if (op == Opcode::kCollectivePermute || op == Opcode::kCollectivePermuteStart) {
    auto pairs = CollectivePermutePairs(inst, R_, P_);
    if (!pairs.ok()) return CollError(inst, pairs.error().message);
    for (size_t k = 0; k < nops; ++k) {
      for (int64_t d = 0; d < n_; ++d) {
        Tensor z(leaf_shapes[k]);
        leaves[k][static_cast<size_t>(d)] = std::move(z);
      }
      for (const auto& [src, dst] : pairs.value()) {
        const Tensor& from = *ops[static_cast<size_t>(src)][k];
        if (!from.shape().Compatible(leaf_shapes[k]))
          return CollError(inst, "operand " + from.shape().ToString(false) + " differs from the result " + leaf_shapes[k].ToString(false));
        leaves[k][static_cast<size_t>(dst)] = from;
      }
    }
  } else {
    auto groups_r = CollectiveParticipantGroups(inst, R_, P_);
    if (!groups_r.ok()) return CollError(inst, groups_r.error().message);
    const auto& groups = groups_r.value();
    std::vector<bool> covered(static_cast<size_t>(n_), false);
    for (const auto& g : groups)
      for (int64_t d : g) covered[static_cast<size_t>(d)] = true;
    for (int64_t d = 0; d < n_; ++d)
      if (!covered[static_cast<size_t>(d)])
        return CollError(inst, "device " + std::to_string(d) + " is in none of the replica groups");
    const int64_t dim = inst.dimensions.empty() ? -1 : inst.dimensions[0];
    for (const auto& g : groups) {
      const int64_t G = static_cast<int64_t>(g.size());
      if (tuple_a2a) {
        if (static_cast<int64_t>(nops) != G)
          return CollError(inst, "tuple all-to-all needs one operand per participant (" + std::to_string(G) + "), has " + std::to_string(nops));
        if (static_cast<int64_t>(leaf_shapes.size()) != G) return CollError(inst, "result tuple size differs from the group size");
        // Participant j's output i = participant i's operand j.
        for (int64_t j = 0; j < G; ++j)
          for (int64_t i = 0; i < G; ++i) {
            const Tensor& from = *ops[static_cast<size_t>(g[static_cast<size_t>(i)])][static_cast<size_t>(j)];
            if (!from.shape().Compatible(leaf_shapes[static_cast<size_t>(i)]))
              return CollError(inst, "operand " + from.shape().ToString(false) + " differs from the result element " +
                                         leaf_shapes[static_cast<size_t>(i)].ToString(false));
            leaves[static_cast<size_t>(i)][static_cast<size_t>(g[static_cast<size_t>(j)])] = from;
          }
        continue;
      }
      for (size_t k = 0; k < nops; ++k) {
        std::vector<const Tensor*> members;
        for (int64_t d : g) members.push_back(ops[static_cast<size_t>(d)][k]);
        const Shape& ls = leaf_shapes[k];
        switch (op) {
          case Opcode::kAllReduce:
          case Opcode::kAllReduceStart: {
            if (!inst.to_apply()) return CollError(inst, "all-reduce has no to_apply computation");
            auto r = CombineElementwise(devs_[0], *inst.to_apply(), members);
            if (!r.ok()) return CollError(inst, r.error().message);
            if (!r->shape().Compatible(ls)) return CollError(inst, "result shape " + ls.ToString(false) + " differs from the operand's");
            for (int64_t d : g) leaves[k][static_cast<size_t>(d)] = r.value();
            break;
          }
          case Opcode::kAllGather:
          case Opcode::kAllGatherStart: {
            if (dim < 0) return CollError(inst, "all-gather needs dimensions={d}");
            auto r = ConcatAlong(members, dim, ls);
            if (!r.ok()) return CollError(inst, r.error().message);
            for (int64_t d : g) leaves[k][static_cast<size_t>(d)] = r.value();
            break;
          }
          case Opcode::kReduceScatter: {
            if (dim < 0) return CollError(inst, "reduce-scatter needs dimensions={d}");
            if (!inst.to_apply()) return CollError(inst, "reduce-scatter has no to_apply computation");
            auto r = CombineElementwise(devs_[0], *inst.to_apply(), members);
            if (!r.ok()) return CollError(inst, r.error().message);
            for (int64_t i = 0; i < G; ++i) {
              auto c = ChunkAlong(r.value(), dim, G, i);
              if (!c.ok()) return CollError(inst, c.error().message);
              if (!c->shape().Compatible(ls))
                return CollError(inst, "result shape " + ls.ToString(false) + " differs from the scattered " + c->shape().ToString(false));
              leaves[k][static_cast<size_t>(g[static_cast<size_t>(i)])] = std::move(c.value());
            }
            break;
          }
          case Opcode::kAllToAll: {
            // Participant j receives chunk j of every participant, concatenated in group order.
            std::vector<std::vector<Tensor>> chunks(static_cast<size_t>(G));
            for (int64_t i = 0; i < G; ++i)
              for (int64_t j = 0; j < G; ++j) {
                auto c = ChunkAlong(*members[static_cast<size_t>(i)], dim, G, j);
                if (!c.ok()) return CollError(inst, c.error().message);
                chunks[static_cast<size_t>(j)].push_back(std::move(c.value()));
              }
            for (int64_t j = 0; j < G; ++j) {
              std::vector<const Tensor*> parts;
              for (const Tensor& t : chunks[static_cast<size_t>(j)]) parts.push_back(&t);
              auto r = ConcatAlong(parts, dim, ls);
              if (!r.ok()) return CollError(inst, r.error().message);
              leaves[k][static_cast<size_t>(g[static_cast<size_t>(j)])] = std::move(r.value());
            }
            break;
          }
          default:
            return CollError(inst, "collective op is not supported by the virtual cluster");
        }
      }
    }
  }
  for (int64_t d = 0; d < n_; ++d) {
    if (wrap_with_operand) {
      Tensor t(s);
      auto& el = t.mutable_elements();
      el[0] = *ops[static_cast<size_t>(d)][0];
      el[1] = std::move(leaves[0][static_cast<size_t>(d)]);
      out[static_cast<size_t>(d)] = std::move(t);
    } else if (s.IsTuple()) {
      std::vector<Tensor> el;
      for (auto& l : leaves) el.push_back(std::move(l[static_cast<size_t>(d)]));
      out[static_cast<size_t>(d)] = Tensor::Tuple(std::move(el));
    } else {
      out[static_cast<size_t>(d)] = std::move(leaves[0][static_cast<size_t>(d)]);
    }
  }
  return out;
}

}  // namespace

Result<std::vector<Tensor>> RunSpmd(const Module& spmd, int64_t num_devices, const std::vector<std::vector<Tensor>>& args,
                                    const ClusterOptions& options) {
  if (!spmd.entry()) return Error("virtual cluster: module " + spmd.name() + " has no entry computation");
  if (num_devices < 1) return Error("virtual cluster: need at least one device, got " + std::to_string(num_devices));
  if (num_devices > 1 << 16) return Error("virtual cluster: " + std::to_string(num_devices) + " devices is more than the cluster runs");
  if (options.num_replicas < 1 || num_devices % options.num_replicas != 0)
    return Error("virtual cluster: " + std::to_string(num_devices) + " devices cannot be split into " +
                 std::to_string(options.num_replicas) + " replicas");
  if (static_cast<int64_t>(args.size()) != num_devices)
    return Error("virtual cluster: " + std::to_string(args.size()) + " argument lists for " + std::to_string(num_devices) + " devices");
  Cluster cluster(num_devices, options);
  return cluster.Run(*spmd.entry(), args);
}

}  // namespace shardscope
