#include "simulator/run_result.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

namespace shardscope::sim {

std::string_view StreamName(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kCommunication: return "communication";
  }
  return "unknown";
}

std::optional<Stream> StreamFromName(std::string_view name) {
  if (name == "compute") return Stream::kCompute;
  if (name == "communication") return Stream::kCommunication;
  return std::nullopt;
}

std::string_view MemoryCategoryName(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kTemporaries: return "temporaries";
  }
  return "unknown";
}

std::optional<MemoryCategory> MemoryCategoryFromName(std::string_view name) {
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    auto c = static_cast<MemoryCategory>(i);
    if (MemoryCategoryName(c) == name) return c;
  }
  return std::nullopt;
}

int64_t MemorySample::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

const DeviceClass* RunResult::ClassOf(int64_t device) const {
  if (device < 0 || device >= num_devices()) return nullptr;
  int32_t c = device_class[static_cast<size_t>(device)];
  if (c < 0 || static_cast<size_t>(c) >= classes.size()) return nullptr;
  return &classes[static_cast<size_t>(c)];
}

std::vector<TimelineEvent> RunResult::DeviceTimeline(int64_t device) const {
  const DeviceClass* cls = ClassOf(device);
  if (!cls) return {};
  std::vector<TimelineEvent> out = cls->events;
  for (auto& e : out) e.device = device;
  return out;
}

std::vector<int64_t> RunResult::DevicesOfClass(int32_t class_index) const {
  std::vector<int64_t> out;
  for (size_t d = 0; d < device_class.size(); ++d)
    if (device_class[d] == class_index) out.push_back(static_cast<int64_t>(d));
  return out;
}

std::vector<int64_t> RunResult::RepresentativeDevices() const {
  std::vector<int64_t> out(classes.size(), -1);
  for (size_t d = 0; d < device_class.size(); ++d) {
    int32_t c = device_class[d];
    if (c >= 0 && static_cast<size_t>(c) < out.size() && out[static_cast<size_t>(c)] < 0)
      out[static_cast<size_t>(c)] = static_cast<int64_t>(d);
  }
  return out;
}

namespace {

bool FiniteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

std::string Where(size_t cls, std::string_view what, size_t index) {
  return "device class " + std::to_string(cls) + ", " + std::string(what) + " " +
         std::to_string(index);
}

}  // namespace

Status RunResult::Validate() const {
  if (summary.num_devices < 0) return Error("run summary: negative device count");
  if (!device_class.empty() && summary.num_devices != num_devices())
    return Error("run summary says " + std::to_string(summary.num_devices) +
                 " devices but the device->class map has " + std::to_string(num_devices()) +
                 " entries");
  if (device_class.empty() && !classes.empty())
    return Error("run has " + std::to_string(classes.size()) +
                 " device classes but no device->class map");
  for (size_t d = 0; d < device_class.size(); ++d) {
    int32_t c = device_class[d];
    if (c < 0 || static_cast<size_t>(c) >= classes.size())
      return Error("device " + std::to_string(d) + " maps to class " + std::to_string(c) +
                   ", but the run has " + std::to_string(classes.size()) + " classes");
  }
  const RunSummary& s = summary;
  for (auto [name, v] : {std::pair<const char*, double>{"step time", s.step_time_s},
                         {"compute time", s.compute_time_s},
                         {"communication time", s.communication_time_s},
                         {"idle time", s.idle_time_s},
                         {"exposed communication", s.exposed_communication_s},
                         {"MFU", s.mfu},
                         {"total FLOPs", s.total_flops},
                         {"bubble time", s.bubble_time_s},
                         {"recompute time", s.recompute_time_s},
                         {"bubble FLOPs", s.bubble_flops},
                         {"recompute FLOPs", s.recompute_flops},
                         {"raw FLOPS utilisation", s.raw_flops_utilization}}) {
    if (!FiniteNonNegative(v))
      return Error(std::string("run summary: ") + name + " must be finite and >= 0, got " +
                   std::to_string(v));
  }
  if (s.peak_memory_bytes < 0 || s.bytes_communicated < 0)
    return Error("run summary: byte counts must be >= 0");
  if (s.pipeline_stages < 0) return Error("run summary: negative pipeline stage count");

  for (size_t ci = 0; ci < classes.size(); ++ci) {
    const DeviceClass& c = classes[ci];
    if (c.peak_memory_bytes < 0) return Error(Where(ci, "peak memory", 0) + ": negative bytes");
    if (!FiniteNonNegative(c.peak_memory_time_s))
      return Error("device class " + std::to_string(ci) + ": peak memory time must be finite and >= 0");
    for (size_t i = 0; i < c.events.size(); ++i) {
      const TimelineEvent& e = c.events[i];
      if (!FiniteNonNegative(e.start_s) || !FiniteNonNegative(e.duration_s) ||
          !std::isfinite(e.start_s + e.duration_s))
        return Error(Where(ci, "event", i) + " (" + e.instruction +
                     "): start and duration must be finite and >= 0");
      if (static_cast<int>(e.stream) >= kNumStreams)
        return Error(Where(ci, "event", i) + ": unknown stream " +
                     std::to_string(static_cast<int>(e.stream)));
      if (e.bytes < 0 || !FiniteNonNegative(e.flops))
        return Error(Where(ci, "event", i) + " (" + e.instruction + "): bytes and FLOPs must be >= 0");
    }
    for (size_t i = 0; i < c.memory.size(); ++i) {
      const MemorySample& m = c.memory[i];
      if (!FiniteNonNegative(m.time_s))
        return Error(Where(ci, "memory sample", i) + ": time must be finite and >= 0");
      for (int64_t b : m.bytes)
        if (b < 0) return Error(Where(ci, "memory sample", i) + ": negative bytes");
    }
    for (size_t i = 0; i < c.peak_buffers.size(); ++i) {
      const PeakBuffer& b = c.peak_buffers[i];
      if (b.bytes < 0) return Error(Where(ci, "peak buffer", i) + " (" + b.name + "): negative bytes");
      if (static_cast<int>(b.category) >= kNumMemoryCategories)
        return Error(Where(ci, "peak buffer", i) + ": unknown memory category");
    }
  }
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveRecord& r = collectives[i];
    if (r.bytes < 0 || !FiniteNonNegative(r.time_s))
      return Error("collective " + std::to_string(i) + " (" + r.instruction +
                   "): bytes and time must be finite and >= 0");
  }
  return Status::Ok();
}

RunOverview OverviewOf(const RunResult& run) {
  RunOverview o;
  o.id = run.id;
  o.created_unix_ms = run.created_unix_ms;
  o.label = run.label;
  o.key = run.key;
  o.inputs = run.inputs;
  o.summary = run.summary;
  o.num_classes = static_cast<int64_t>(run.classes.size());
  return o;
}

std::string RunContentKey(const RunResult& run) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view text) {
    for (unsigned char c : text) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0x1e;
    h *= 1099511628211ull;
  };
  auto num = [&mix](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    mix(buf);
  };
  num(static_cast<double>(run.created_unix_ms));
  mix(run.label);
  const RunInputs& in = run.inputs;
  for (const std::string* t : {&in.module_name, &in.module_hash, &in.chip_preset, &in.mesh_text, &in.topology_options}) mix(*t);
  if (!in.placement.empty()) mix(in.placement);  // runs stored before placements were keep their key
  for (const auto& [k, v] : in.settings) {
    mix(k);
    mix(v);
  }
  const RunSummary& s = run.summary;
  for (double v : {static_cast<double>(s.num_devices), s.step_time_s, s.compute_time_s, s.communication_time_s, s.idle_time_s,
                   s.exposed_communication_s, s.mfu, static_cast<double>(s.peak_memory_bytes),
                   static_cast<double>(s.bytes_communicated), s.total_flops,
                   static_cast<double>(run.classes.size()), static_cast<double>(run.collectives.size())})
    num(v);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("content:") + hex;
}

// ---- DeviceClassBuilder ----------------------------------------------------------------------

namespace {

// Word-at-a-time hash to bucket candidate classes (equality is then checked exactly).
struct Hasher {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  void Word(uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  void Int(int64_t v) { Word(static_cast<uint64_t>(v)); }
  void Double(double v) {
    if (v == 0) v = 0;  // +0 and -0 compare equal, so they must hash equal
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    Word(bits);
  }
  void Str(const std::string& s) { Word(std::hash<std::string_view>{}(s)); }
};

bool SameDetail(const DeviceClass& a, const DeviceClass& b) {
  // Event device fields are normalised to -1 before classes are compared.
  return a == b;
}

}  // namespace

uint64_t HashDeviceDetail(const DeviceClass& d) {
  Hasher f;
  f.Str(d.label);
  f.Int(d.peak_memory_bytes);
  f.Double(d.peak_memory_time_s);
  f.Int(d.events.size());
  for (const auto& e : d.events) {
    f.Int(static_cast<int64_t>(e.stream));
    f.Double(e.start_s);
    f.Double(e.duration_s);
    f.Str(e.instruction);
    f.Str(e.kind);
    f.Int(e.bytes);
    f.Double(e.flops);
  }
  f.Int(d.memory.size());
  for (const auto& m : d.memory) {
    f.Double(m.time_s);
    for (int64_t b : m.bytes) f.Int(b);
  }
  f.Int(d.peak_buffers.size());
  for (const auto& b : d.peak_buffers) {
    f.Str(b.name);
    f.Int(b.bytes);
    f.Int(static_cast<int64_t>(b.category));
  }
  return f.h;
}

namespace {
Status CheckNewDevice(int64_t device, const std::vector<int32_t>& map) {
  if (device < 0) return Error("device id must be >= 0, got " + std::to_string(device));
  if (device >= (int64_t{1} << 31)) return Error("device id " + std::to_string(device) + " is too large");
  if (static_cast<size_t>(device) < map.size() && map[static_cast<size_t>(device)] >= 0)
    return Error("device " + std::to_string(device) + " was added twice");
  return Status::Ok();
}
}  // namespace

Status DeviceClassBuilder::AddToClass(int64_t device, int32_t class_index) {
  if (Status s = CheckNewDevice(device, map_); !s.ok()) return s;
  if (class_index < 0 || class_index >= static_cast<int32_t>(classes_.size()))
    return Error("device " + std::to_string(device) + ": no device class " + std::to_string(class_index) +
                 " (there are " + std::to_string(classes_.size()) + ")");
  if (static_cast<size_t>(device) >= map_.size()) map_.resize(static_cast<size_t>(device) + 1, -1);
  map_[static_cast<size_t>(device)] = class_index;
  return Status::Ok();
}

Result<int32_t> DeviceClassBuilder::Add(int64_t device, DeviceClass detail) {
  if (Status s = CheckNewDevice(device, map_); !s.ok()) return s.error();
  for (auto& e : detail.events) e.device = -1;
  uint64_t h = HashDeviceDetail(detail);
  int32_t cls = -1;
  auto [lo, hi] = by_hash_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    if (SameDetail(classes_[static_cast<size_t>(it->second)], detail)) {
      cls = it->second;
      break;
    }
  }
  if (cls < 0) {
    cls = static_cast<int32_t>(classes_.size());
    classes_.push_back(std::move(detail));
    by_hash_.emplace(h, cls);
  }
  if (static_cast<size_t>(device) >= map_.size()) map_.resize(static_cast<size_t>(device) + 1, -1);
  map_[static_cast<size_t>(device)] = cls;
  return cls;
}

Status DeviceClassBuilder::Finish(RunResult& run) {
  for (size_t d = 0; d < map_.size(); ++d)
    if (map_[d] < 0)
      return Error("device " + std::to_string(d) + " was never added (devices must be 0.." +
                   std::to_string(map_.size() - 1) + ")");
  run.classes = std::move(classes_);
  run.device_class = std::move(map_);
  run.summary.num_devices = run.num_devices();
  classes_.clear();
  map_.clear();
  by_hash_.clear();
  return Status::Ok();
}

}  // namespace shardscope::sim
