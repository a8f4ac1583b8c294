#include "core/ir/verifier.h"

#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/ir/shape_inference.h"

namespace shardscope {
namespace {

std::string S(const Shape& s) { return s.ToString(/*print_layout=*/false); }

std::string Where(const Computation& c, const Instruction& inst) { return c.name() + "/" + inst.name(); }

// Operand-count rules that hold before any shape is looked at. -1 = no upper bound.
struct Arity {
  int64_t min, max;
};

std::optional<Arity> OperandArity(Opcode op) {
  if (IsElementwiseUnary(op)) return Arity{1, 1};
  if (IsElementwiseBinary(op)) return Arity{2, 2};
  switch (op) {
    case Opcode::kParameter: case Opcode::kConstant: case Opcode::kIota:
    case Opcode::kPartitionId: case Opcode::kReplicaId:
      return Arity{0, 0};
    case Opcode::kSelect: case Opcode::kClamp: case Opcode::kSelectAndScatter:
      return Arity{3, 3};
    case Opcode::kBroadcast: case Opcode::kReshape: case Opcode::kTranspose: case Opcode::kSlice:
    case Opcode::kReverse: case Opcode::kBitcast: case Opcode::kGetTupleElement: case Opcode::kWhile:
    case Opcode::kOptimizationBarrier: case Opcode::kCopyStart: case Opcode::kCopyDone:
    case Opcode::kAllGatherDone: case Opcode::kAllReduceDone: case Opcode::kCollectivePermuteDone:
    case Opcode::kSendDone: case Opcode::kRecvDone: case Opcode::kGetDimensionSize: case Opcode::kDomain:
      return Arity{1, 1};
    case Opcode::kPad: case Opcode::kDot: case Opcode::kConvolution: case Opcode::kGather:
    case Opcode::kOutfeed: case Opcode::kSend: case Opcode::kSetDimensionSize:
      return Arity{2, 2};
    case Opcode::kRng:
      return Arity{0, 2};
    case Opcode::kInfeed: case Opcode::kRecv:
      return Arity{0, 1};
    case Opcode::kDynamicSlice:
      return Arity{2, -1};
    case Opcode::kDynamicUpdateSlice: case Opcode::kScatter:
      return Arity{3, -1};
    case Opcode::kReduce: case Opcode::kReduceWindow: case Opcode::kConditional:
      return Arity{2, -1};
    case Opcode::kConcatenate: case Opcode::kSort: case Opcode::kMap: case Opcode::kAllReduce:
    case Opcode::kAllReduceStart: case Opcode::kAllGather: case Opcode::kAllGatherStart:
    case Opcode::kReduceScatter: case Opcode::kAllToAll:
      return Arity{1, -1};
    case Opcode::kCollectivePermute: case Opcode::kCollectivePermuteStart:
      return Arity{1, 4};
    default:
      return std::nullopt;  // tuple, call, custom-call, after-all, generic: any
  }
}

// How many called computations an opcode takes; nullopt = any.
std::optional<Arity> CalledArity(Opcode op) {
  switch (op) {
    case Opcode::kReduce: case Opcode::kReduceWindow: case Opcode::kAllReduce: case Opcode::kAllReduceStart:
    case Opcode::kReduceScatter: case Opcode::kScatter: case Opcode::kSort: case Opcode::kMap: case Opcode::kCall:
      return Arity{1, 1};
    case Opcode::kSelectAndScatter: case Opcode::kWhile:
      return Arity{2, 2};
    case Opcode::kConditional:
      return Arity{1, -1};
    case Opcode::kCustomCall: case Opcode::kGeneric: case Opcode::kAllGather: case Opcode::kAllGatherStart:
    case Opcode::kAllToAll:
      return std::nullopt;
    default:
      return Arity{0, 0};
  }
}

std::string Plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

void FlattenLeaves(const Shape& s, const std::string& path, std::vector<std::pair<const Shape*, std::string>>* out) {
  if (!s.IsTuple()) {
    out->emplace_back(&s, path);
    return;
  }
  for (size_t i = 0; i < s.tuple.size(); ++i)
    FlattenLeaves(s.tuple[i], path.empty() ? std::to_string(i) : path + "." + std::to_string(i), out);
}

// Device ids named anywhere in a sharding must be within the module's partitions.
Status CheckShardingDevices(const HloSharding& sh, int64_t num_partitions, const std::string& where) {
  if (sh.IsTuple()) {
    for (const HloSharding& e : sh.tuple_elements())
      if (Status s = CheckShardingDevices(e, num_partitions, where); !s.ok()) return s;
    return Status::Ok();
  }
  std::vector<int64_t> ids;
  if (sh.IsMaximal()) ids.push_back(sh.maximal_device());
  if (sh.IsTiled()) ids = sh.tile_assignment().devices();
  for (int64_t d : ids)
    if (d < 0 || (num_partitions > 1 && d >= num_partitions))
      return Error(where + ": sharding " + sh.ToString() + " names device " + std::to_string(d) + ", outside the module's " +
                   std::to_string(num_partitions) + " partitions");
  return Status::Ok();
}

Status CheckSharding(const HloSharding& sh, const Shape& shape, int64_t num_partitions, const std::string& where,
                     const std::string& path) {
  // Token-valued side-effecting ops (outfeed, send-done, ...) carry the sharding of the data they
  // move, not of their token result: only the device ids can be checked here.
  if (shape.IsToken()) return CheckShardingDevices(sh, num_partitions, where);
  const std::string at = path.empty() ? "" : " (tuple element " + path + ")";
  if (sh.IsTuple() || shape.IsTuple()) {
    if (!path.empty() && sh.IsTuple())
      return Error(where + ": nested tuple sharding at tuple element " + path);
    std::vector<std::pair<const Shape*, std::string>> leaves;
    FlattenLeaves(shape, path, &leaves);
    if (sh.IsTuple()) {
      if (!shape.IsTuple())
        return Error(where + ": tuple sharding " + sh.ToString() + " on non-tuple shape " + S(shape));
      // Tuple shardings list one sharding per leaf of the (flattened) tuple shape, as in XLA.
      if (sh.tuple_elements().size() != leaves.size())
        return Error(where + ": tuple sharding has " + Plural(static_cast<int64_t>(sh.tuple_elements().size()), "element") +
                     " but the shape " + S(shape) + " has " + Plural(static_cast<int64_t>(leaves.size()), "leaf array"));
      for (size_t i = 0; i < leaves.size(); ++i) {
        Status s = CheckSharding(sh.tuple_elements()[i], *leaves[i].first, num_partitions, where, leaves[i].second);
        if (!s.ok()) return s;
      }
      return Status::Ok();
    }
    // A non-tuple sharding on a tuple applies to every leaf.
    for (const auto& [leaf, p] : leaves) {
      Status s = CheckSharding(sh, *leaf, num_partitions, where, p);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  if (sh.IsMaximal()) {
    if (sh.maximal_device() < 0 || (num_partitions > 1 && sh.maximal_device() >= num_partitions))
      return Error(where + ": sharding " + sh.ToString() + " names device " + std::to_string(sh.maximal_device()) +
                   ", outside the module's " + std::to_string(num_partitions) + " partitions" + at);
    return Status::Ok();
  }
  if (!sh.IsTiled()) return Status::Ok();
  if (!shape.IsArray())
    return Error(where + ": tiled sharding " + sh.ToString() + " on non-array shape " + S(shape) + at);
  if (sh.TiledDataRank() != shape.rank())
    return Error(where + ": sharding " + sh.ToString() + " tiles " + Plural(sh.TiledDataRank(), "dimension") +
                 " but the shape " + S(shape) + " has rank " + std::to_string(shape.rank()) + at);
  for (int64_t d : sh.tile_assignment().devices()) {
    if (d < 0 || (num_partitions > 1 && d >= num_partitions))
      return Error(where + ": sharding " + sh.ToString() + " names device " + std::to_string(d) + ", outside the module's " +
                   std::to_string(num_partitions) + " partitions" + at);
  }
  if (num_partitions > 1 && sh.NumDevices() > num_partitions)
    return Error(where + ": sharding " + sh.ToString() + " spans " + std::to_string(sh.NumDevices()) +
                 " devices but the module has " + std::to_string(num_partitions) + " partitions" + at);
  return Status::Ok();
}

Status VerifyComputation(const Module& module, const Computation& comp, const VerifyOptions& options) {
  if (!comp.root()) return Error(comp.name() + ": computation has no root instruction");
  if (comp.root()->parent() != &comp)
    return Error(comp.name() + ": root " + comp.root()->name() + " belongs to another computation");

  // Parameters: numbers dense 0..n-1, each exactly once.
  std::set<int64_t> numbers;
  for (const auto& up : comp.instructions()) {
    const Instruction& inst = *up;
    if (inst.opcode() != Opcode::kParameter) continue;
    if (inst.parameter_number < 0)
      return Error(Where(comp, inst) + ": parameter number must be >= 0, found " + std::to_string(inst.parameter_number));
    if (!numbers.insert(inst.parameter_number).second)
      return Error(Where(comp, inst) + ": parameter number " + std::to_string(inst.parameter_number) +
                   " is used by more than one parameter");
  }
  int64_t expect = 0;
  for (int64_t n : numbers) {
    if (n != expect)
      return Error(comp.name() + ": parameter numbers must be dense: parameter " + std::to_string(expect) +
                   " is missing (found parameter " + std::to_string(n) + ")");
    ++expect;
  }

  std::unordered_set<const Instruction*> defined;
  defined.reserve(comp.instructions().size() * 2);
  for (const auto& up : comp.instructions()) {
    const Instruction& inst = *up;
    // The place in messages, built only for one (every instruction of every module is checked).
    auto where = [&] { return Where(comp, inst); };
    const std::string opname = inst.opcode_text().empty() ? std::string(OpcodeName(inst.opcode())) : inst.opcode_text();
    if (inst.parent() != &comp) return Error(where() + ": instruction's parent is not " + comp.name());

    // Operands exist, live in this computation and are defined earlier.
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      const Instruction* o = inst.operand(i);
      if (!o) return Error(where() + ": operand " + std::to_string(i) + " is missing");
      if (o->parent() != &comp)
        return Error(where() + ": operand " + std::to_string(i) + " (" + o->name() + ") is not in computation " + comp.name());
      if (!defined.count(o))
        return Error(where() + ": operand " + std::to_string(i) + " (" + o->name() +
                     ") is used before it is defined (or the graph has a cycle)");
    }
    for (const Instruction* cp : inst.control_predecessors) {
      if (!cp || cp->parent() != &comp)
        return Error(where() + ": control predecessor " + (cp ? cp->name() : std::string("<null>")) + " is not in computation " +
                     comp.name());
    }

    if (auto ar = OperandArity(inst.opcode())) {
      const int64_t n = inst.operand_count();
      if (n < ar->min || (ar->max >= 0 && n > ar->max)) {
        std::string want = ar->max == ar->min ? Plural(ar->min, "operand")
                         : ar->max < 0       ? "at least " + Plural(ar->min, "operand")
                                             : std::to_string(ar->min) + " to " + Plural(ar->max, "operand");
        return Error(where() + ": " + opname + " takes " + want + ", found " + std::to_string(n));
      }
    }
    if (auto ca = CalledArity(inst.opcode())) {
      const int64_t n = static_cast<int64_t>(inst.called_computations().size());
      if (n < ca->min || (ca->max >= 0 && n > ca->max)) {
        std::string want = ca->max == ca->min ? Plural(ca->min, "called computation")
                                              : "at least " + Plural(ca->min, "called computation");
        return Error(where() + ": " + opname + " takes " + want + ", found " + std::to_string(n));
      }
    }
    for (size_t i = 0; i < inst.called_computations().size(); ++i) {
      const Computation* c = inst.called_computations()[i];
      if (!c) return Error(where() + ": called computation " + std::to_string(i) + " is missing");
      if (c->parent() != &module)
        return Error(where() + ": called computation " + c->name() + " does not belong to this module");
      if (c == &comp) return Error(where() + ": " + opname + " calls its own computation " + comp.name());
    }

    if (inst.opcode() == Opcode::kConstant && !inst.literal.values.empty() && inst.shape().IsArray() &&
        static_cast<int64_t>(inst.literal.values.size()) != inst.shape().ElementCount())
      return Error(where() + ": constant has " + Plural(static_cast<int64_t>(inst.literal.values.size()), "value") +
                   " but its shape " + S(inst.shape()) + " holds " + Plural(inst.shape().ElementCount(), "element"));
    if (inst.opcode() == Opcode::kParameter && inst.operand_count() == 0) {
      const auto& params = comp.parameters();
      const auto n = static_cast<size_t>(inst.parameter_number);
      if (n >= params.size() || params[n] != &inst)
        return Error(where() + ": parameter " + std::to_string(inst.parameter_number) +
                     " is not registered as the computation's parameter " + std::to_string(inst.parameter_number));
    }

    Result<Shape> inferred = InferShape(inst);
    if (!inferred.ok()) return Error(where() + ": " + inferred.error().message);
    if (!inferred->Compatible(inst.shape()))
      return Error(where() + ": expected shape " + S(*inferred) + " for " + opname + ", found " + S(inst.shape()));

    if (options.check_shardings && inst.has_sharding()) {
      Status s = CheckSharding(*inst.sharding(), inst.shape(), module.num_partitions, where(), "");
      if (!s.ok()) return s;
    }
    defined.insert(&inst);
  }
  if (!defined.count(comp.root()))
    return Error(comp.name() + ": root " + comp.root()->name() + " is not an instruction of the computation");
  return Status::Ok();
}

// Detects computations that (transitively) call themselves.
Status CheckNoRecursion(const Module& module) {
  std::unordered_map<const Computation*, int> state;  // 1 = on stack, 2 = done
  // Flattened callee lists per computation, computed on demand.
  std::unordered_map<const Computation*, std::vector<const Computation*>> callees;
  for (const auto& start : module.computations()) {
    if (state[start.get()] == 2) continue;
    std::vector<std::pair<const Computation*, size_t>> stack{{start.get(), 0}};
    auto callees_of = [&](const Computation* c) -> const std::vector<const Computation*>& {
      auto it = callees.find(c);
      if (it != callees.end()) return it->second;
      std::vector<const Computation*> v;
      for (const auto& inst : c->instructions())
        for (const Computation* k : inst->called_computations())
          if (k) v.push_back(k);
      return callees.emplace(c, std::move(v)).first->second;
    };
    state[start.get()] = 1;
    while (!stack.empty()) {
      auto& [c, next] = stack.back();
      const auto& ks = callees_of(c);
      if (next < ks.size()) {
        const Computation* k = ks[next++];
        int& st = state[k];
        if (st == 1) return Error(k->name() + ": computation calls itself, directly or through other computations (recursion is not allowed)");
        if (st == 0) {
          st = 1;
          stack.emplace_back(k, 0);
        }
      } else {
        state[c] = 2;
        stack.pop_back();
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status VerifyModule(const Module& module, const VerifyOptions& options) {
  if (!module.entry()) return Error(module.name() + ": module has no entry computation");
  bool entry_found = false;
  std::set<std::string> comp_names;
  for (const auto& c : module.computations()) {
    if (!c) return Error(module.name() + ": null computation");
    if (c.get() == module.entry()) entry_found = true;
    if (!comp_names.insert(c->name()).second)
      return Error(c->name() + ": computation name used twice in module " + module.name());
  }
  if (!entry_found) return Error(module.name() + ": entry computation " + module.entry()->name() + " is not in the module");
  if (Status s = CheckNoRecursion(module); !s.ok()) return s;
  for (const auto& c : module.computations()) {
    if (Status s = VerifyComputation(module, *c, options); !s.ok()) return s;
  }
  return Status::Ok();
}

Status VerifySharding(const HloSharding& sharding, const Shape& shape, int64_t num_partitions, const std::string& where) {
  return CheckSharding(sharding, shape, num_partitions, where, "");
}

}  // namespace shardscope
