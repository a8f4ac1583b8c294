// ShardingPropagation: the public face of sharding propagation (sharding_propagation.h). The work
// is done by the engine (engine.h); this file checks the input, keeps the engine between runs for
// Update and Explain, and writes the reports.
#include "partitioner/propagation/sharding_propagation.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "core/ir/verifier.h"
#include "partitioner/propagation/engine.h"

namespace shardscope {

using prop::Direction;

ShardingPropagation::ShardingPropagation(PropagationOptions options) : options_(std::move(options)) {
  if (options_.propagate_to_output.empty()) options_.propagate_to_output = {false};
  if (options_.propagate_to_parameters.empty()) options_.propagate_to_parameters = {false};
}

ShardingPropagation::~ShardingPropagation() = default;

Result<PropagationReport> ShardingPropagation::Run(Module& module) {
  const auto start = std::chrono::steady_clock::now();
  if (options_.verify) {
    Status verified = VerifyModule(module);
    if (!verified.ok()) return Error("cannot propagate shardings: " + verified.error().message);
  }
  auto engine = std::make_unique<prop::PropagationEngine>(options_);
  bool changed = false;
  Status st = engine->Run(module, &changed);
  if (!st.ok()) return st.error();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  engine_ = std::move(engine);
  return engine_->Report(ms, false, changed);
}

Result<PropagationReport> ShardingPropagation::Update(Module& module, const std::vector<Instruction*>& changed) {
  if (!engine_ || !engine_->SameStructure(module)) {
    // Structure changed (or no prior run): annotations of instructions we knew stay, the changed
    // ones take their current sharding, everything else counts as unannotated.
    if (engine_) {
      const auto known = engine_->Annotations();
      std::unordered_set<const Instruction*> changed_set(changed.begin(), changed.end());
      for (const auto& c : module.computations()) {
        for (const auto& i : c->instructions()) {
          if (changed_set.count(i.get())) continue;
          auto it = known.find(i.get());
          if (it != known.end() && it->second) {
            i->set_sharding(*it->second);
          } else {
            i->clear_sharding();
          }
        }
      }
    }
    auto r = Run(module);
    if (r.ok()) r->incremental = false;
    return r;
  }
  const auto start = std::chrono::steady_clock::now();
  bool changed_any = false;
  std::vector<const Instruction*> repaint;
  Status st = engine_->Update(changed, &changed_any, &repaint);
  if (!st.ok()) return st.error();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  PropagationReport report = engine_->Report(ms, true, changed_any);
  report.changed_instructions = std::move(repaint);
  return report;
}

const ShardingOrigin* ShardingPropagation::OriginOf(const Instruction& inst) const {
  return engine_ ? engine_->OriginOf(inst) : nullptr;
}

bool ShardingPropagation::IsUserAnnotation(const Instruction& inst) const {
  return engine_ && engine_->IsUserAnnotation(inst);
}

namespace {
std::string OriginLine(const Instruction& inst, const ShardingOrigin& o) {
  std::string s = inst.name() + " " + (inst.has_sharding() ? inst.sharding()->ToString() : std::string("(no sharding)"));
  switch (o.direction) {
    case Direction::kAnnotation:
      s += o.rule.empty() ? std::string(" (not set by propagation)") : std::string(" (user annotation)");
      return s;
    default:
      break;
  }
  s += " <- ";
  s += std::string(prop::DirectionName(o.direction));
  if (o.source) s += " from " + o.source->name();
  if (o.second_source) s += " (merged with " + o.second_source->name() + ")";
  if (!o.rule.empty()) s += " via " + std::string(o.rule);
  if (o.aggressiveness >= 0) s += ", priority level " + std::to_string(o.aggressiveness);
  if (o.iteration >= 0) s += ", sweep " + std::to_string(o.iteration);
  return s;
}
}  // namespace

std::optional<ExplainStep> ShardingPropagation::ExplainOne(const Instruction& inst) const {
  const ShardingOrigin* o = engine_ ? engine_->OriginOf(inst) : nullptr;
  if (o == nullptr) return std::nullopt;
  ExplainStep step;
  step.instruction = &inst;
  step.sharding = inst.has_sharding() ? inst.sharding()->ToString() : "none";
  step.origin = *o;
  step.text = OriginLine(inst, *o);
  return step;
}

std::vector<ExplainStep> ShardingPropagation::Explain(const Instruction& inst) const {
  std::vector<ExplainStep> steps;
  std::unordered_set<const Instruction*> seen;
  const Instruction* cur = &inst;
  while (cur != nullptr && seen.insert(cur).second) {
    std::optional<ExplainStep> step = ExplainOne(*cur);
    if (!step) break;
    const bool annotation = step->origin.direction == Direction::kAnnotation;
    cur = step->origin.source;
    steps.push_back(std::move(*step));
    if (annotation) break;
  }
  return steps;
}

std::vector<ExplainStep> ExplainChain(const ExplainSteps& steps, int64_t id) {
  std::vector<ExplainStep> chain;
  std::unordered_set<int64_t> seen;
  while (seen.insert(id).second) {
    auto it = steps.find(id);
    if (it == steps.end()) break;
    chain.push_back(it->second);
    const ShardingOrigin& o = it->second.origin;
    if (o.direction == Direction::kAnnotation || o.source == nullptr) break;
    id = o.source->id();
  }
  return chain;
}

std::string ShardingPropagation::ExplainText(const Instruction& inst) const {
  std::string out;
  const auto steps = Explain(inst);
  for (size_t i = 0; i < steps.size(); ++i) {
    out += std::string(2 * i, ' ') + steps[i].text + "\n";
  }
  if (steps.empty()) out = inst.name() + ": no propagation has run\n";
  return out;
}

Result<PropagationReport> PropagateShardings(Module& module, const PropagationOptions& options) {
  ShardingPropagation p(options);
  return p.Run(module);
}

}  // namespace shardscope
