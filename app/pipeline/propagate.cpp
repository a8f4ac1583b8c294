#include "app/pipeline/propagate.h"

#include <chrono>

namespace shardscope::pipeline {

namespace {

double MillisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::unordered_map<int64_t, Instruction*> IndexById(const Module& module) {
  std::unordered_map<int64_t, Instruction*> by_id;
  for (const auto& comp : module.computations()) {
    for (const auto& inst : comp->instructions()) by_id.emplace(inst->id(), inst.get());
  }
  return by_id;
}

}  // namespace

PropagationOptions StandardPropagationOptions(EntryIo io) {
  PropagationOptions options;
  if (io == EntryIo::kShard) {
    options.propagate_to_output = {true};
    options.propagate_to_parameters = {true};
  }
  return options;
}

Result<PropagationRun> Propagate(Module& module, const PropagationOptions& options, const CancellationToken& cancel) {
  if (cancel.cancelled()) return CancelledError("sharding propagation");
  PropagationRun run;
  run.engine = std::make_unique<ShardingPropagation>(options);
  auto report = run.engine->Run(module);
  if (!report.ok()) return report.error();
  run.report = std::move(report).value();
  return run;
}

std::map<int64_t, HloSharding> AnnotationsOf(const Module& module) {
  std::map<int64_t, HloSharding> out;
  for (const auto& comp : module.computations()) {
    for (const auto& inst : comp->instructions()) {
      if (inst->has_sharding()) out.emplace(inst->id(), *inst->sharding());
    }
  }
  return out;
}

std::map<int64_t, HloSharding> TakeAnnotations(Module& module) {
  std::map<int64_t, HloSharding> out;
  for (const auto& comp : module.computations()) {
    for (const auto& inst : comp->instructions()) {
      if (!inst->has_sharding()) continue;
      out.emplace(inst->id(), *inst->sharding());
      inst->clear_sharding();
    }
  }
  return out;
}

// ---- PropagationSession -----------------------------------------------------------------------

PropagationSession::PropagationSession(std::unique_ptr<Module> module, PropagationOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  if (module_) by_id_ = IndexById(*module_);
}

PropagationSession::~PropagationSession() = default;

Result<PropagationReport> PropagationSession::Run(const std::map<int64_t, HloSharding>& annotations,
                                                  const CancellationToken& cancel) {
  if (!module_) return Error("sharding propagation: no module");
  if (cancel.cancelled()) return CancelledError("sharding propagation");
  const auto t0 = std::chrono::steady_clock::now();
  Result<PropagationReport> report = Error("not run");
  if (ran_) {
    // What changed since the last run: added, removed or different annotations (kept up to date
    // entry by entry; the set is not copied).
    std::vector<Instruction*> changed;
    for (const auto& [id, s] : annotations) {
      auto it = annotations_.find(id);
      if (it != annotations_.end() && it->second == s) continue;
      auto inst = by_id_.find(id);
      if (inst == by_id_.end()) continue;
      changed.push_back(inst->second);
      inst->second->set_sharding(s);
      if (it == annotations_.end()) annotations_.emplace(id, s);
      else it->second = s;
    }
    for (auto it = annotations_.begin(); it != annotations_.end();) {
      if (annotations.count(it->first)) {
        ++it;
        continue;
      }
      if (auto inst = by_id_.find(it->first); inst != by_id_.end()) {
        changed.push_back(inst->second);
        inst->second->clear_sharding();
      }
      it = annotations_.erase(it);
    }
    if (changed.empty()) {
      PropagationReport same;
      same.incremental = true;
      report = same;
    } else {
      report = engine_->Update(*module_, changed);
    }
  } else {
    for (const auto& [id, inst] : by_id_) {
      auto a = annotations.find(id);
      if (a != annotations.end()) inst->set_sharding(a->second);
      else inst->clear_sharding();
    }
    annotations_ = annotations;
    engine_ = std::make_unique<ShardingPropagation>(options_);
    report = engine_->Run(*module_);
  }
  last_millis_ = MillisSince(t0);
  if (!report.ok()) {
    ran_ = false;  // start from scratch next time
    last_report_.reset();
    return report.error();
  }
  ran_ = true;
  last_report_ = *report;
  return report;
}

PropagatedShardings PropagationSession::Snapshot(const Module& display) const {
  PropagatedShardings out;
  out.millis = last_millis_;
  if (!ran_ || !engine_) return out;
  if (last_report_) out.report = *last_report_;
  const auto shown = IndexById(display);
  auto bind = [&shown](const Instruction* inst) -> const Instruction* {
    if (inst == nullptr) return nullptr;
    auto it = shown.find(inst->id());
    return it == shown.end() ? nullptr : it->second;
  };
  for (const auto& [id, inst] : by_id_) {
    if (!inst->has_sharding()) {
      ++out.unsharded;
      continue;
    }
    out.shardings.emplace(id, *inst->sharding());
    ++(annotations_.count(id) ? out.annotated : out.inferred);
    std::optional<ExplainStep> step = engine_->ExplainOne(*inst);
    if (!step) continue;
    step->instruction = bind(step->instruction);
    step->origin.source = bind(step->origin.source);
    step->origin.second_source = bind(step->origin.second_source);
    out.why.emplace(id, std::move(*step));
  }
  return out;
}

}  // namespace shardscope::pipeline
