// The shifting buffer of a pipelined module, iteration by iteration (GSPMD §3.3): which microbatch
// each stage holds before and after the shift, which devices the shift's collective-permute sends
// from and to, and which stages compute on padding (the bubble) — what the teaching panel steps
// through. Plain C++ beside the bubble rule it uses (pipeline_accounting.h), where the views can
// reach it; the widget (views/shifting_buffer_view.h) only draws it.
//
// The loop is the zoo's pipelined Transformer's (core/zoo/pipelined_transformer.h): in iteration t
// the buffer shifts one stage along L (stage s receives stage s - 1's content; GPipe's pad + slice
// leaves stage 0 empty for the next microbatch, the circular schedule's rotation hands it the last
// stage's result), then every stage computes on what it holds. Microbatch visits enter stage 0 one
// per iteration — visit v = round * N + microbatch (GPipe: one round) — so after the shift of
// iteration t stage s holds visit t - s, and padding when that is not a visit, which is
// PaddedIteration (simulator/pipeline_accounting.h), the rule the simulator's bubble uses.
// Before the shift it holds what it computed in iteration t - 1.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"

namespace shardscope::sim {

struct ShiftingBufferSettings {
  int64_t stages = 0;            // L
  int64_t microbatches = 0;      // N
  int64_t layers_per_stage = 1;  // R (the circular schedule's rounds)
  bool circular = false;
  DeviceMesh mesh;               // the stage dim's mesh; empty: one device per stage
  int64_t stage_axis = -1;       // the mesh axis L is sharded over
};

// What one stage holds at one moment.
struct BufferSlot {
  int64_t visit = -1;       // -1: padding
  int64_t microbatch = -1;  // visit mod N
  int64_t round = -1;       // visit / N (GPipe: 0)
  int64_t layer = -1;       // the layer the stage applies to it in this round (circular; GPipe: -1)
  bool padding() const { return visit < 0; }
  bool operator==(const BufferSlot&) const = default;
};

struct ShiftingBufferIteration {
  int64_t iteration = 0;
  std::vector<BufferSlot> before, after;  // by stage
  // The shift as stage pairs (source -> target; GPipe: a chain 0 -> 1 -> ... -> L-1; circular: a
  // ring with L-1 -> 0) and as the collective-permute's device pairs (every group along L).
  std::vector<std::pair<int64_t, int64_t>> stage_pairs;
  std::vector<std::pair<int64_t, int64_t>> device_pairs;
  std::vector<char> bubble;  // by stage: computes on padding in this iteration
};

struct ShiftingBufferSchedule {
  ShiftingBufferSettings settings;
  int64_t trips = 0;  // T = N*R' + L - 1 (R' = R circular, 1 GPipe)
  std::vector<std::vector<int64_t>> devices_of_stage;  // ascending
  std::vector<ShiftingBufferIteration> iterations;     // T of them

  // "microbatch 3", "microbatch 3 (round 1, layer 5)", "padding".
  std::string SlotText(const BufferSlot& slot) const;
};

// The schedule for `settings`; an error a person can act on for impossible settings (L < 2, N < 1,
// circular with N < L, a stage axis whose size is not L).
Result<ShiftingBufferSchedule> PlanShiftingBuffer(const ShiftingBufferSettings& settings);

// The microbatch count of a pipelined zoo module: dim 0 of its input "x" [N, mb, S, M].
Result<int64_t> PipelineMicrobatches(const Module& module);

}  // namespace shardscope::sim
