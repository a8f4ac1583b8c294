#include "app/pipeline/step_figures.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

namespace shardscope::pipeline {

namespace {

// "body/add.3[2]" -> "body/add.3": the simulator names an event by its group's main instruction,
// qualified by the computation outside the entry, with the loop iteration appended.
std::string WithoutIteration(const std::string& name) {
  const size_t bracket = name.find('[');
  return bracket == std::string::npos ? name : name.substr(0, bracket);
}

}  // namespace

double WeightUpdateSeconds(const Module& program, const sim::RunResult& run) {
  std::unordered_set<std::string> update;  // qualified as the simulator names events
  for (const auto& comp : program.computations()) {
    const std::string prefix = comp.get() == program.entry() ? std::string() : comp->name() + "/";
    std::unordered_set<const Instruction*> marked;
    std::vector<const Instruction*> work;
    for (const auto& inst : comp->instructions()) {
      const auto kind = CollectiveOpcodeOf(*inst);
      if (kind == Opcode::kAllReduce || kind == Opcode::kReduceScatter) work.push_back(inst.get());
    }
    while (!work.empty()) {
      const Instruction* i = work.back();
      work.pop_back();
      for (const Instruction* user : i->users()) {
        if (CollectiveOpcodeOf(*user)) continue;  // an all-gather ends the update; another reduction starts its own
        if (!marked.insert(user).second) continue;
        update.insert(prefix + user->name());
        work.push_back(user);
      }
    }
  }
  double slowest = 0;
  for (const sim::DeviceClass& c : run.classes) {
    double total = 0;
    for (const sim::TimelineEvent& e : c.events)
      if (e.stream == sim::Stream::kCompute && update.count(WithoutIteration(e.instruction))) total += e.duration_s;
    slowest = std::max(slowest, total);
  }
  return slowest;
}

std::array<int64_t, sim::kNumMemoryCategories> PeakMemoryByCategory(const sim::RunResult& run) {
  std::array<int64_t, sim::kNumMemoryCategories> by{};
  const sim::DeviceClass* top = nullptr;
  for (const sim::DeviceClass& c : run.classes)
    if (!top || c.peak_memory_bytes > top->peak_memory_bytes) top = &c;
  if (!top) return by;
  // The sample at the peak (the memory profile keeps it whatever the downsampling), else the
  // buffers live there.
  const sim::MemorySample* peak = nullptr;
  for (const sim::MemorySample& s : top->memory)
    if (!peak || s.total() > peak->total()) peak = &s;
  if (peak && peak->total() > 0) return peak->bytes;
  for (const sim::PeakBuffer& b : top->peak_buffers) by[static_cast<size_t>(b.category)] += b.bytes;
  return by;
}

}  // namespace shardscope::pipeline
