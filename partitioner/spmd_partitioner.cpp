#include "partitioner/spmd_partitioner.h"

#include <functional>

#include "partitioner/spmd/context.h"

namespace shardscope {
namespace spmd {

int DotHandlerAnchor();
int FormattingHandlersAnchor();
int WindowedHandlersAnchor();
int GatherScatterHandlersAnchor();

Status SpmdContext::PartitionComputation(const Computation* orig, Computation* out) {
  Computation* saved = comp_;
  Instruction* saved_pid = partition_id_;
  set_comp(out);
  const auto& registry = HandlerRegistry();
  for (Instruction* inst : orig->MakePostOrder()) {
    set_origin(inst);
    for (Instruction* op : inst->operands())
      if (!Get(op).hlo) return Error(orig->name() + "/" + inst->name() + ": operand " + op->name() + " was not partitioned");
    auto it = registry.find(inst->opcode());
    Status s = it != registry.end() ? it->second(*this, *inst) : PartitionWithFallback(*this, *inst);
    if (!s.ok()) return s;
  }
  set_origin(nullptr);
  if (orig->root()) {
    const PValue& r = Get(orig->root());
    out->set_root(r.hlo);
  }
  comp_ = saved;
  partition_id_ = saved_pid;
  return Status::Ok();
}

Result<Computation*> SpmdContext::PartitionCalled(const Computation* callee,
                                                  const std::vector<HloSharding>& param_shardings,
                                                  const HloSharding& root_sharding) {
  if (!callee) return Error("missing called computation");
  auto it = partitioned_.find(callee);
  if (it != partitioned_.end()) return it->second;
  Computation* out = out_->AddComputation(callee->name() + ".spmd");
  partitioned_[callee] = out;
  Computation* saved = comp_;
  Instruction* saved_pid = partition_id_;
  const Instruction* saved_origin = origin_;
  set_comp(out);
  for (size_t i = 0; i < callee->parameters().size(); ++i) {
    const Instruction* p = callee->parameters()[i];
    if (!p) continue;
    HloSharding s = i < param_shardings.size() ? param_shardings[i] : ShardingOf(*p);
    set_origin(p);
    auto shape = ShardShapeOf(p->shape(), s);
    if (!shape.ok()) return Error(callee->name() + "/" + p->name() + ": " + shape.error().message);
    Instruction* np = Emit(Opcode::kParameter, *shape, {});
    np->parameter_number = p->parameter_number;
    np->set_sharding(s);
    Set(p, {np, s, p->shape()});
  }
  Status st = PartitionComputation(callee, out);
  if (!st.ok()) return st.error();
  // The root must come out with the sharding the caller expects (loop-carried consistency).
  if (callee->root()) {
    set_origin(callee->root());
    auto r = ReshardAny(Get(callee->root()), root_sharding);
    if (!r.ok()) return Error(callee->name() + ": " + r.error().message);
    out->set_root(*r);
  }
  set_origin(saved_origin);
  comp_ = saved;
  partition_id_ = saved_pid;
  return out;
}

}  // namespace spmd

Result<PartitionResult> PartitionModule(const Module& module, const SpmdOptions& options) {
  (void)spmd::DotHandlerAnchor();
  (void)spmd::FormattingHandlersAnchor();
  (void)spmd::WindowedHandlersAnchor();
  (void)spmd::GatherScatterHandlersAnchor();
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
  spmd::SpmdContext ctx(module, result.module.get(), n, options, &result);
  Computation* entry = result.module->AddComputation(module.entry()->name(), /*is_entry=*/false);
  Status s = ctx.PartitionComputation(module.entry(), entry);
  if (!s.ok()) return s.error();
  // The program's output has the original root's sharding (replicated when it has none, as XLA
  // treats an unsharded entry output).
  const Instruction* root = module.entry()->root();
  if (root) {
    ctx.set_comp(entry);
    ctx.set_origin(root);
    const HloSharding want = spmd::SpmdContext::ShardingOf(*root);
    auto r = ctx.ReshardAny(ctx.Get(root), want);
    if (!r.ok()) return Error(root->name() + ": " + r.error().message);
    entry->set_root(*r);
    (*r)->set_sharding(want);
    ctx.set_origin(nullptr);
  }
  // Make the entry the last computation (callees first when printed).
  result.module->set_entry(entry);
  return result;
}

}  // namespace shardscope
