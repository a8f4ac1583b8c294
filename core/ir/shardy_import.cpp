// Shardy round-trip attributes -> IR shardings, meshes and GSPMD manual regions (shardy_import.h).
#include "core/ir/shardy_import.h"

#include <algorithm>

namespace shardscope {

namespace {

constexpr std::string_view kGlobalToLocal = "xla.sdy.GlobalToLocalShape";
constexpr std::string_view kLocalToGlobal = "xla.sdy.LocalToGlobalShape";
constexpr std::string_view kFuncResultSharding = "xla.sdy.FuncResultSharding";

bool IsCustomCall(const Instruction& i, std::string_view target) {
  return i.opcode() == Opcode::kCustomCall && i.custom_call_target == target;
}

class Importer {
 public:
  explicit Importer(Module& m) : m_(m) {}

  std::vector<ShardyDiagnostic> Run() {
    if (auto meshes = ModuleFrontendAttribute(m_, "xla.sdy.meshes")) {
      auto parsed = ParseSdyMeshes(*meshes);
      if (parsed.ok()) m_.sdy_meshes = std::move(parsed).value();
      else Report(-1, "module attribute xla.sdy.meshes: " + parsed.error().message);
    }
    for (const auto& c : m_.computations()) {
      // The rewrite adds and removes instructions: walk a snapshot.
      std::vector<Instruction*> insts;
      for (const auto& i : c->instructions()) insts.push_back(i.get());
      for (Instruction* i : insts) ReadSharding(i);
      for (Instruction* i : insts) {
        if (IsCustomCall(*i, kGlobalToLocal)) LowerBoundary(c.get(), i, /*entering=*/true);
        else if (IsCustomCall(*i, kLocalToGlobal)) LowerBoundary(c.get(), i, /*entering=*/false);
        else if (IsCustomCall(*i, kFuncResultSharding) && i->operand_count() == 1) i->custom_call_target = "Sharding";
      }
    }
    return std::move(diags_);
  }

 private:
  void Report(int64_t id, std::string msg) { diags_.push_back({id, std::move(msg)}); }
  void Report(const Instruction* i, const std::string& msg) { Report(i->id(), "instruction '" + i->name() + "': " + msg); }

  // The shardings named by frontend attribute `key` of `inst`, one per value; empty (reported)
  // when absent or malformed. With `local_manual` set: the sharding of the manual region's local
  // value instead, the manual axes as a manual subgroup and the data dimensions left to
  // propagation (what JAX's own GSPMD lowering of shard_map writes).
  std::vector<HloSharding> ShardingsOf(const Instruction* inst, std::string_view key,
                                       const std::vector<std::string>* local_manual = nullptr) {
    auto text = FrontendAttribute(inst->frontend_attributes, key);
    if (!text) return {};
    auto parsed = ParseSdyShardings(*text);
    if (!parsed.ok()) {
      Report(inst, std::string(key) + ": " + parsed.error().message);
      return {};
    }
    std::vector<HloSharding> out;
    for (SdyTensorSharding s : *parsed) {
      if (local_manual && local_manual->empty()) {
        out.push_back(HloSharding::Manual());  // no axes named: the whole mesh is manual
        continue;
      }
      if (local_manual) {
        for (auto& d : s.dims) d.clear();
        s.unreduced.clear();
      }
      auto h = SdyToHloSharding(s, m_.sdy_meshes, local_manual ? *local_manual : std::vector<std::string>{});
      if (!h.ok()) {
        Report(inst, std::string(key) + ": " + h.error().message);
        return {};
      }
      out.push_back(std::move(h).value());
    }
    return out;
  }

  std::vector<std::string> ManualAxesOf(const Instruction* inst) {
    auto text = FrontendAttribute(inst->frontend_attributes, "xla.sdy.manual_axes");
    if (!text) return {};
    auto axes = ParseSdyManualAxes(*text);
    if (!axes.ok()) {
      Report(inst, "xla.sdy.manual_axes: " + axes.error().message);
      return {};
    }
    return std::move(axes).value();
  }

  // The sharding of a value from its per-value list: one value, or a tuple of them.
  static std::optional<HloSharding> Combine(const Shape& shape, std::vector<HloSharding> per_value) {
    if (per_value.empty()) return std::nullopt;
    if (!shape.IsTuple()) {
      if (per_value.size() != 1) return std::nullopt;
      return per_value[0];
    }
    if (static_cast<int64_t>(per_value.size()) == shape.LeafCount()) return HloSharding::Tuple(std::move(per_value));
    if (per_value.size() == shape.tuple.size()) {
      std::vector<HloSharding> leaves;
      for (size_t i = 0; i < per_value.size(); ++i) {
        const HloSharding expanded = per_value[i].ExpandToTuple(shape.tuple[i]);
        if (expanded.IsTuple()) leaves.insert(leaves.end(), expanded.tuple_elements().begin(), expanded.tuple_elements().end());
        else leaves.push_back(expanded);
      }
      return HloSharding::Tuple(std::move(leaves));
    }
    if (per_value.size() == 1) return per_value[0];
    return std::nullopt;
  }

  void ReadSharding(Instruction* inst) {
    if (inst->frontend_attributes.empty()) return;
    auto list = ShardingsOf(inst, "xla.sdy.sharding");
    if (list.empty()) return;
    const size_t n = list.size();
    auto derived = Combine(inst->shape(), std::move(list));
    if (!derived) {
      Report(inst, "xla.sdy.sharding gives " + std::to_string(n) + " shardings for a value of shape " +
                       inst->shape().ToString(false) + "; ignored");
      return;
    }
    if (!inst->has_sharding()) {
      inst->set_sharding(*derived);
      return;
    }
    const HloSharding& given = *inst->sharding();
    const bool agree = given == *derived || (given.IsTuple() && !derived->IsTuple() &&
                                             given == derived->ExpandToTuple(inst->shape())) ||
                       (!given.IsTuple() && derived->IsTuple() && given.ExpandToTuple(inst->shape()) == *derived);
    if (!agree)
      Report(inst, "sharding=" + given.ToString() + " disagrees with xla.sdy.sharding, which means " +
                       derived->ToString() + "; keeping sharding=");
  }

  // A Sharding custom-call then a shard-shape change, placed before `before`.
  Instruction* Annotate(Computation* c, Instruction* value, const HloSharding& s, const Instruction* before,
                        const std::string& name) {
    Instruction* a = c->AddInstruction(Opcode::kCustomCall, value->shape(), {value}, name);
    a->custom_call_target = "Sharding";
    a->set_sharding(s);
    c->MoveBefore(a, before);
    return a;
  }
  Instruction* Reshape(Computation* c, Instruction* value, std::string_view target, const Shape& shape,
                       const HloSharding& s, const Instruction* before, const std::string& name) {
    Instruction* x = c->AddInstruction(Opcode::kCustomCall, shape, {value}, name);
    x->custom_call_target = std::string(target);
    x->set_sharding(s);
    c->MoveBefore(x, before);
    return x;
  }

  void Replace(Computation* c, Instruction* old_inst, Instruction* replacement) {
    if (old_inst->has_sharding() && !replacement->has_sharding()) replacement->set_sharding(*old_inst->sharding());
    replacement->metadata = old_inst->metadata;
    old_inst->ReplaceAllUsesWith(replacement);
    old_inst->control_predecessors.clear();
    Status s = c->RemoveInstruction(old_inst);
    (void)s;  // no users remain and it is no longer the root
  }

  static std::vector<Shape> Values(const Instruction* inst, size_t n) {
    if (n == 1 && !inst->shape().IsTuple()) return {inst->shape()};
    if (inst->shape().IsTuple() && inst->shape().tuple.size() == n) return inst->shape().tuple;
    return {};
  }

  // A manual computation's boundary: entering (GlobalToLocalShape, per operand: Sharding with the
  // in-sharding, then SPMDFullToShardShape to the local value) or leaving (LocalToGlobalShape, per
  // operand: Sharding with the local sharding, then SPMDShardToFullShape with the out-sharding).
  void LowerBoundary(Computation* c, Instruction* at, bool entering) {
    const auto manual = ManualAxesOf(at);
    const size_t n = static_cast<size_t>(at->operand_count());
    const char* key = entering ? "xla.sdy.in_shardings" : "xla.sdy.out_shardings";
    auto global = ShardingsOf(at, key);
    auto local = ShardingsOf(at, key, &manual);
    const std::vector<Shape> shapes = Values(at, n);
    if (global.size() != n || local.size() != n || shapes.size() != n || n == 0) {
      Report(at, std::string("a manual computation needs one ") + (entering ? "in" : "out") +
                     "-sharding and one shape per value; left as it is");
      return;
    }
    std::vector<Instruction*> parts;
    for (size_t i = 0; i < n; ++i) {
      const std::string base = at->name() + "." + std::to_string(i);
      Instruction* a = Annotate(c, at->operand(static_cast<int64_t>(i)), entering ? global[i] : local[i], at,
                                base + ".sharding");
      parts.push_back(Reshape(c, a, entering ? "SPMDFullToShardShape" : "SPMDShardToFullShape", shapes[i],
                              entering ? local[i] : global[i], at, base + (entering ? ".full_to_shard" : ".shard_to_full")));
    }
    Instruction* result = parts[0];
    if (at->shape().IsTuple()) {
      result = c->AddInstruction(Opcode::kTuple, at->shape(), parts, at->name() + (entering ? ".local" : ".global"));
      c->MoveBefore(result, at);
    }
    Replace(c, at, result);
  }

  Module& m_;
  std::vector<ShardyDiagnostic> diags_;
};

}  // namespace

std::vector<ShardyDiagnostic> ImportShardy(Module& module) { return Importer(module).Run(); }

}  // namespace shardscope
