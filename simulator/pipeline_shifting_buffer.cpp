#include "simulator/pipeline_shifting_buffer.h"

#include <algorithm>

#include "core/zoo/pipelined_transformer.h"
#include "simulator/pipeline_accounting.h"

namespace shardscope::sim {

std::string ShiftingBufferSchedule::SlotText(const BufferSlot& slot) const {
  if (slot.padding()) return "padding";
  std::string out = "microbatch " + std::to_string(slot.microbatch);
  if (settings.circular) out += " (round " + std::to_string(slot.round) + ", layer " + std::to_string(slot.layer) + ")";
  return out;
}

Result<ShiftingBufferSchedule> PlanShiftingBuffer(const ShiftingBufferSettings& s) {
  const int64_t L = s.stages, N = s.microbatches;
  if (L < 2) return Error("a pipeline needs at least 2 stages (got " + std::to_string(L) + ")");
  if (N < 1) return Error("a pipeline needs at least 1 microbatch (got " + std::to_string(N) + ")");
  if (s.circular && s.layers_per_stage < 1) return Error("the circular schedule needs at least 1 layer per stage");
  if (s.circular && N < L)
    return Error("the circular schedule needs at least as many microbatches as stages (" + std::to_string(N) + " < " +
                 std::to_string(L) + ")");
  ShiftingBufferSchedule out;
  out.settings = s;
  const int64_t rounds = s.circular ? s.layers_per_stage : 1;
  const int64_t visits = N * rounds;
  out.trips = visits + L - 1;
  if (out.trips > 1000000) return Error("too many pipeline iterations to show (" + std::to_string(out.trips) + ")");

  // Devices of each stage, and the device one stage further along L.
  out.devices_of_stage.resize(static_cast<size_t>(L));
  std::vector<std::pair<int64_t, int64_t>> device_pairs;
  const bool meshed = s.mesh.num_axes() > 0;
  if (meshed) {
    if (s.stage_axis < 0 || s.stage_axis >= s.mesh.num_axes())
      return Error("the stage axis " + std::to_string(s.stage_axis) + " is not an axis of the mesh");
    if (s.mesh.axes()[static_cast<size_t>(s.stage_axis)].size != L)
      return Error("the stage axis " + s.mesh.axes()[static_cast<size_t>(s.stage_axis)].name + " has " +
                   std::to_string(s.mesh.axes()[static_cast<size_t>(s.stage_axis)].size) + " devices, not " + std::to_string(L) +
                   " stages");
    for (int64_t d = 0; d < s.mesh.num_devices(); ++d) {
      auto c = s.mesh.CoordsOf(d);
      const int64_t st = c[static_cast<size_t>(s.stage_axis)];
      out.devices_of_stage[static_cast<size_t>(st)].push_back(d);
      if (st + 1 < L || s.circular) {
        c[static_cast<size_t>(s.stage_axis)] = (st + 1) % L;
        device_pairs.emplace_back(d, s.mesh.DeviceAt(c));
      }
    }
  } else {
    for (int64_t st = 0; st < L; ++st) {
      out.devices_of_stage[static_cast<size_t>(st)].push_back(st);
      if (st + 1 < L || s.circular) device_pairs.emplace_back(st, (st + 1) % L);
    }
  }
  std::sort(device_pairs.begin(), device_pairs.end());
  std::vector<std::pair<int64_t, int64_t>> stage_pairs;
  for (int64_t st = 0; st < L; ++st)
    if (st + 1 < L || s.circular) stage_pairs.emplace_back(st, (st + 1) % L);

  PipelinedTransformerConfig c;
  c.stages = L;
  c.layers = L * std::max<int64_t>(1, s.layers_per_stage);
  c.schedule = s.circular ? PipelineSchedule::kCircular : PipelineSchedule::kGPipe;
  // The slot stage `st` holds after the shift of iteration t: visit t - st, padding outside.
  auto slot = [&](int64_t st, int64_t t) {
    BufferSlot b;
    if (t < 0 || PaddedIteration(st, L, out.trips, t)) return b;
    b.visit = t - st;
    b.microbatch = b.visit % N;
    b.round = b.visit / N;
    if (s.circular) b.layer = PipelinedLayerIndex(c, st, b.round);
    return b;
  };
  out.iterations.reserve(static_cast<size_t>(out.trips));
  for (int64_t t = 0; t < out.trips; ++t) {
    ShiftingBufferIteration it;
    it.iteration = t;
    it.stage_pairs = stage_pairs;
    it.device_pairs = device_pairs;
    for (int64_t st = 0; st < L; ++st) {
      it.before.push_back(slot(st, t - 1));
      it.after.push_back(slot(st, t));
      it.bubble.push_back(it.after.back().padding() ? 1 : 0);
    }
    out.iterations.push_back(std::move(it));
  }
  return out;
}

Result<int64_t> PipelineMicrobatches(const Module& module) {
  if (!module.entry()) return Error("the module has no entry computation");
  bool loop = false;
  for (const auto& owned : module.entry()->instructions()) loop = loop || owned->opcode() == Opcode::kWhile;
  for (const auto& owned : module.entry()->instructions()) {
    const Instruction& i = *owned;
    if (loop && i.opcode() == Opcode::kParameter && i.name() == "x" && i.shape().IsArray() && i.shape().rank() == 4)
      return i.shape().dim(0);
  }
  return Error("no input \"x\" [N, mb, S, M] to count the microbatches of (the zoo's pipelined-transformer has one)");
}

}  // namespace shardscope::sim
