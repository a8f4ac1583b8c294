#include "views/pipeline_stages.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/zoo/pipelined_transformer.h"

namespace shardscope::views {

namespace {

// Through converts and copies to what a value is made of.
const Instruction* Source(const Instruction* x) {
  while (x && (x->opcode() == Opcode::kConvert || x->opcode() == Opcode::kCopy || x->opcode() == Opcode::kBitcast))
    x = x->operand(0);
  return x;
}

// The direction a loop body shifts its buffer along dim 0: +1 towards higher indices (a pad in
// front, or the rotation concatenate(a[L-1:], a[:L-1])), -1 towards lower ones, 2 for a rotation
// by one of two stages (both directions alike), 0 when it has no such shift.
int ShiftDirection(const Computation& body, int64_t stages) {
  for (const auto& owned : body.instructions()) {
    const Instruction& i = *owned;
    if (i.opcode() == Opcode::kPad && !i.padding.empty() && i.shape().rank() > 0 && i.operand(0)->shape().dim(0) == stages) {
      if (i.padding[0].low > 0 && i.padding[0].high <= 0) return +1;
      if (i.padding[0].high > 0 && i.padding[0].low <= 0) return -1;
    }
    if (i.opcode() == Opcode::kConcatenate && i.operand_count() == 2 && i.dimensions == std::vector<int64_t>{0} &&
        i.shape().rank() > 0 && i.shape().dim(0) == stages) {
      const Instruction* a = i.operand(0);
      const Instruction* b = i.operand(1);
      if (a->opcode() != Opcode::kSlice || b->opcode() != Opcode::kSlice || a->operand(0) != b->operand(0)) continue;
      if (a->slice.starts.empty() || b->slice.starts.empty() || b->slice.starts[0] != 0) continue;
      const int64_t k = a->slice.starts[0];
      if (k == stages - 1 && k != 1) return +1;
      if (k == 1 && k != stages - 1) return -1;
      if (k == 1) return 2;
    }
  }
  return 0;
}

bool Rotates(const Computation& body, int64_t stages) {
  for (const auto& owned : body.instructions()) {
    const Instruction& i = *owned;
    if (i.opcode() != Opcode::kConcatenate || i.operand_count() != 2 || i.dimensions != std::vector<int64_t>{0}) continue;
    if (i.shape().rank() == 0 || i.shape().dim(0) != stages) continue;
    const Instruction* a = i.operand(0);
    const Instruction* b = i.operand(1);
    if (a->opcode() == Opcode::kSlice && b->opcode() == Opcode::kSlice && a->operand(0) == b->operand(0)) return true;
  }
  return false;
}

}  // namespace

std::string PipelineStageLayout::LayersText(int64_t stage) const {
  if (stage < 0 || stage >= static_cast<int64_t>(layers_of_stage.size())) return {};
  const auto& l = layers_of_stage[static_cast<size_t>(stage)];
  if (l.empty()) return {};
  if (l.size() == 1) return "layer " + std::to_string(l[0]);
  bool contiguous = true;
  for (size_t i = 1; i < l.size(); ++i) contiguous = contiguous && l[i] == l[i - 1] + 1;
  if (contiguous) return "layers " + std::to_string(l.front()) + "-" + std::to_string(l.back());
  std::string out = "layers ";
  const size_t shown = l.size() <= 5 ? l.size() : 3;
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(l[i]);
  if (shown < l.size()) out += ", ..., " + std::to_string(l.back());
  return out;
}

std::optional<PipelineStageLayout> DerivePipelineStages(const Module& module, const DeviceMesh& mesh,
                                                        const ShardingLookup& sharding) {
  if (!module.entry() || mesh.num_axes() == 0) return std::nullopt;
  auto sharding_of = [&](const Instruction& i) -> std::optional<HloSharding> {
    if (sharding) return sharding(i);
    return i.sharding();
  };
  for (const auto& owned : module.entry()->instructions()) {
    const Instruction& loop = *owned;
    if (loop.opcode() != Opcode::kWhile || !loop.while_body() || loop.operand(0)->opcode() != Opcode::kTuple) continue;
    // A carried weight stacked [L, R, ...] with L sharded over one mesh axis.
    for (const Instruction* carried : loop.operand(0)->operands()) {
      const Instruction* w = Source(carried);
      if (w->opcode() != Opcode::kParameter || !w->shape().IsArray() || w->shape().rank() < 3) continue;
      const auto s = sharding_of(*w);
      if (!s || !s->IsTiled()) continue;
      auto axes = AxesOf(*s, w->shape().rank(), mesh);
      if (!axes.ok() || axes->dim_axes.empty() || axes->dim_axes[0].size() != 1) continue;
      const int64_t axis = axes->dim_axes[0][0];
      const int64_t L = w->shape().dim(0), R = w->shape().dim(1);
      if (L < 2 || mesh.axes()[static_cast<size_t>(axis)].size != L) continue;
      PipelineStageLayout out;
      out.axis = axis;
      out.axis_name = mesh.axes()[static_cast<size_t>(axis)].name;
      out.stages = L;
      out.layers_per_stage = R;
      // The pipeline's loops: those that carry stacked weights of this shape and shift along L.
      for (const auto& other : module.entry()->instructions()) {
        if (other->opcode() != Opcode::kWhile || !other->while_body()) continue;
        const int dir = ShiftDirection(*other->while_body(), L);
        if (dir == 0) continue;
        // A rotation of two stages reads the same both ways: the first loop is the forward pass,
        // a later one (backward reads what forward saved) runs in reverse.
        out.loops.emplace_back(other->while_body()->name(), dir == 2 ? out.loops.empty() : dir > 0);
        out.loop_conditions.push_back(other->while_condition() ? other->while_condition()->name() : std::string());
        out.circular = out.circular || Rotates(*other->while_body(), L);
      }
      if (out.loops.empty()) continue;
      // Devices: their coordinate along the stage axis.
      const int64_t n = mesh.num_devices();
      out.stage_of_device.assign(static_cast<size_t>(n), 0);
      for (int64_t d = 0; d < n; ++d) {
        const auto coords = mesh.CoordsOf(d);
        if (static_cast<int64_t>(coords.size()) > axis) out.stage_of_device[static_cast<size_t>(d)] = coords[static_cast<size_t>(axis)];
      }
      PipelinedTransformerConfig c;
      c.stages = L;
      c.layers = L * R;
      c.schedule = out.circular ? PipelineSchedule::kCircular : PipelineSchedule::kGPipe;
      out.layers_of_stage.resize(static_cast<size_t>(L));
      for (int64_t st = 0; st < L; ++st) {
        for (int64_t r = 0; r < R; ++r) out.layers_of_stage[static_cast<size_t>(st)].push_back(PipelinedLayerIndex(c, st, r));
        std::sort(out.layers_of_stage[static_cast<size_t>(st)].begin(), out.layers_of_stage[static_cast<size_t>(st)].end());
      }
      return out;
    }
  }
  return std::nullopt;
}

std::vector<sim::TimelinePipelineLoop> PipelineStageLayout::LoopPositions(int64_t stage) const {
  std::vector<sim::TimelinePipelineLoop> out;
  for (size_t k = 0; k < loops.size(); ++k) {
    const auto& [body, forward] = loops[k];
    out.push_back({body, k < loop_conditions.size() ? loop_conditions[k] : std::string(), forward ? stage : stages - 1 - stage});
  }
  return out;
}

StepBubble DeviceBubble(const sim::RunResult& run, int64_t device, const PipelineStageLayout& layout) {
  StepBubble out;
  if (device < 0 || static_cast<size_t>(device) >= layout.stage_of_device.size()) return out;
  out.stage = layout.stage_of_device[static_cast<size_t>(device)];
  sim::TimelineBubble b = sim::BubbleOnTimeline(run, device, layout.stages, layout.LoopPositions(out.stage));
  out.spans = std::move(b.spans);
  out.seconds = b.seconds;
  out.share = b.share;
  return out;
}

std::vector<StepBubble> ClassBubbles(const sim::RunResult& run, const PipelineStageLayout& layout) {
  std::vector<StepBubble> out;
  if (!run.has_detail() || run.num_devices() != static_cast<int64_t>(layout.stage_of_device.size())) return out;
  const auto reps = run.RepresentativeDevices();
  for (size_t c = 0; c < reps.size(); ++c) {
    StepBubble b = DeviceBubble(run, reps[c], layout);
    for (int64_t d : run.DevicesOfClass(static_cast<int32_t>(c))) {
      const int64_t s = layout.stage_of_device[static_cast<size_t>(d)];
      b.row_first_stage = b.row_first_stage < 0 ? s : std::min(b.row_first_stage, s);
      b.row_last_stage = std::max(b.row_last_stage, s);
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::string StepBubble::Caption() const {
  char text[48];
  std::snprintf(text, sizeof text, "bubble %.1f%% (stage %lld", 100.0 * share, static_cast<long long>(stage));
  std::string out = text;
  if (row_first_stage >= 0 && row_last_stage > row_first_stage)
    out += " of " + std::to_string(row_first_stage) + "-" + std::to_string(row_last_stage);
  return out + ")";
}

}  // namespace shardscope::views
