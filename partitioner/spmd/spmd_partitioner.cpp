// The driver of the SPMD partitioner: PartitionModule sets up one run (an SpmdContext), then walks
// the entry computation in post order, handing every instruction to its op family's handler
// (handler_table.h); while bodies, conditions, branches and call targets are partitioned as their
// callers reach them.
#include "partitioner/spmd/spmd_partitioner.h"

#include <algorithm>
#include <functional>

#include "partitioner/spmd/context.h"
#include "partitioner/spmd/handler_table.h"

namespace shardscope {
namespace spmd {

Status SpmdContext::PartitionComputation(const Computation* orig, Computation* out) {
  const SpmdBuilder::Position saved = builder_.Save();
  builder_.set_comp(out);
  for (Instruction* inst : orig->MakePostOrder()) {
    if (handlers_.Absorbed(*inst)) {
      absorbed_.insert(inst);
      continue;
    }
    builder_.set_origin(inst);
    for (Instruction* op : inst->operands())
      if (!Get(op).hlo && !absorbed_.count(op))
        return Error(orig->name() + "/" + inst->name() + ": operand " + op->name() + " was not partitioned");
    Status s = Partition(*inst);
    if (!s.ok()) return s;
  }
  builder_.set_origin(nullptr);
  if (orig->root()) out->set_root(Get(orig->root()).hlo);
  builder_.Restore(saved);
  builder_.set_origin(nullptr);
  return Status::Ok();
}

Status SpmdContext::Partition(const Instruction& inst) {
  for (const PatternHandler& p : handlers_.patterns())
    if (std::optional<Status> s = p.partition(*this, inst)) return *s;
  return RunHandler(inst);
}

Status SpmdContext::RunHandler(const Instruction& inst) {
  const Handler handler = handlers_.Find(inst);
  return handler ? handler(*this, inst) : PartitionWithFallback(*this, inst);
}

Status SpmdContext::PartitionNow(const Instruction& inst) {
  absorbed_.erase(&inst);
  const SpmdBuilder::Position saved = builder_.Save();
  builder_.set_origin(&inst);
  Status s = RunHandler(inst);
  builder_.set_origin(saved.origin);
  return s;
}

Result<Computation*> SpmdContext::PartitionCalled(const Computation* callee,
                                                  const std::vector<HloSharding>& param_shardings,
                                                  const HloSharding& root_sharding) {
  if (!callee) return Error("missing called computation");
  auto it = partitioned_.find(callee);
  if (it != partitioned_.end()) return it->second;
  Computation* out = builder_.out_module()->AddComputation(callee->name() + ".spmd");
  partitioned_[callee] = out;
  const SpmdBuilder::Position saved = builder_.Save();
  builder_.set_comp(out);
  for (size_t i = 0; i < callee->parameters().size(); ++i) {
    const Instruction* p = callee->parameters()[i];
    if (!p) continue;
    HloSharding s = i < param_shardings.size() ? param_shardings[i] : ShardingOf(*p);
    builder_.set_origin(p);
    auto shape = maps_.ShardShape(p->shape(), s);
    if (!shape.ok()) return Error(callee->name() + "/" + p->name() + ": " + shape.error().message);
    Instruction* np = builder_.Emit(Opcode::kParameter, *shape, {});
    np->parameter_number = p->parameter_number;
    np->set_sharding(s);
    Set(p, {np, s, p->shape()});
  }
  Status st = PartitionComputation(callee, out);
  if (!st.ok()) return st.error();
  // The root must come out with the sharding the caller expects (loop-carried consistency).
  if (callee->root()) {
    builder_.set_origin(callee->root());
    auto r = resharder_.ReshardAny(Get(callee->root()), root_sharding);
    if (!r.ok()) return Error(callee->name() + ": " + r.error().message);
    out->set_root(*r);
  }
  builder_.Restore(saved);
  return out;
}

}  // namespace spmd

bool HasSpmdHandler(const Instruction& inst) { return spmd::SpmdHandlers().Find(inst) != nullptr; }

Result<PartitionResult> PartitionModule(const Module& module, const SpmdOptions& options) {
  if (!module.entry()) return Error("module has no entry computation");
  int64_t n = options.num_partitions > 0 ? options.num_partitions : module.num_partitions;
  if (options.num_partitions <= 0 && n <= 1) {
    // No num_partitions in the header: the devices the shardings span decide.
    std::function<void(const HloSharding&)> scan = [&](const HloSharding& s) {
      if (s.IsTuple()) {
        for (const auto& e : s.tuple_elements()) scan(e);
      } else if (s.IsTiled()) {
        n = std::max(n, s.tile_assignment().num_elements());
      } else if (s.IsMaximal()) {
        n = std::max(n, s.maximal_device() + 1);
      }
    };
    for (const auto& c : module.computations())
      for (const auto& i : c->instructions())
        if (i->has_sharding()) scan(*i->sharding());
  }
  if (n < 1) return Error("num_partitions must be at least 1");
  PartitionResult result;
  result.module = std::make_unique<Module>(module.name() + ".spmd");
  result.module->num_partitions = n;
  result.module->num_replicas = module.num_replicas;
  spmd::SpmdContext ctx(result.module.get(), n, options, &result, spmd::SpmdHandlers());
  Computation* entry = result.module->AddComputation(module.entry()->name(), /*is_entry=*/false);
  Status s = ctx.PartitionComputation(module.entry(), entry);
  if (!s.ok()) return s.error();
  // The program's output has the original root's sharding (replicated when it has none, as XLA
  // treats an unsharded entry output).
  const Instruction* root = module.entry()->root();
  if (root) {
    spmd::SpmdBuilder& b = ctx.builder();
    b.set_comp(entry);
    b.set_origin(root);
    const HloSharding want = spmd::SpmdContext::ShardingOf(*root);
    auto r = ctx.resharder().ReshardAny(ctx.Get(root), want);
    if (!r.ok()) return Error(root->name() + ": " + r.error().message);
    entry->set_root(*r);
    (*r)->set_sharding(want);
    b.set_origin(nullptr);
  }
  // Make the entry the last computation (callees first when printed).
  result.module->set_entry(entry);
  return result;
}

}  // namespace shardscope
