// The result of one simulated step: what went in, the summary figures, and the per-device detail
// (timeline events, memory over time, buffers live at the peak, collectives).
//
// Large SPMD runs: every device executes the same program, so most devices have identical
// timelines. Detail is therefore stored once per *device class* (a group of devices whose detail is
// identical) plus a device -> class map. Asking for any device's timeline returns its class's events
// with the device id filled in. DeviceClassBuilder groups per-device detail into classes for an
// engine that produces detail device by device.
//
// Units: times in seconds, sizes in bytes, work in FLOPs. Plain standard library only (no Qt).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace shardscope::sim {

enum class Stream : uint8_t { kCompute = 0, kCommunication = 1 };
inline constexpr int kNumStreams = 2;
std::string_view StreamName(Stream s);  // "compute" | "communication"
std::optional<Stream> StreamFromName(std::string_view name);

// What a byte of device memory holds.
enum class MemoryCategory : uint8_t {
  kParameters = 0,
  kOptimizerState = 1,
  kActivations = 2,
  kGradients = 3,
  kTemporaries = 4,
};
inline constexpr int kNumMemoryCategories = 5;
// "parameters" | "optimizer_state" | "activations" | "gradients" | "temporaries"
std::string_view MemoryCategoryName(MemoryCategory c);
std::optional<MemoryCategory> MemoryCategoryFromName(std::string_view name);

// Everything that determined the run, so two runs can be told apart and reproduced.
struct RunInputs {
  std::string module_name;
  std::string module_hash;       // hash of the module text (hex), whatever hash the caller uses
  std::string chip_preset;       // e.g. "TPU v4"
  std::string mesh_text;         // e.g. "X=4,Y=4"
  std::string topology_options;  // free text, e.g. "torus 4x4x4 wraparound=xyz"
  // How the mesh was laid on the slice (Topology::DescribePlacement); empty for runs stored before
  // schema version 6 (unknown).
  std::string placement;
  std::vector<std::pair<std::string, std::string>> settings;  // ordered key/values

  bool operator==(const RunInputs&) const = default;
};

// Headline figures of one step.
struct RunSummary {
  int64_t num_devices = 0;
  double step_time_s = 0;              // wall time of one step (slowest device)
  double compute_time_s = 0;           // busy time of the compute stream (slowest device)
  double communication_time_s = 0;     // busy time of the communication stream (slowest device)
  double idle_time_s = 0;              // step time with neither stream busy (slowest device)
  double exposed_communication_s = 0;  // communication not overlapped by compute
  double mfu = 0;                      // model FLOP utilisation, 0..1 (bubbles and recompute not counted)
  int64_t peak_memory_bytes = 0;       // highest per-device peak over all devices
  int64_t bytes_communicated = 0;      // collective payload bytes of one step, summed over devices
  double total_flops = 0;              // FLOPs of one step, summed over devices
  int64_t device_hbm_bytes = 0;        // the chip's HBM per device (0: unknown, e.g. an old store)
  // Pipelining and rematerialisation (GSPMD Tables 4 and 5; simulator/pipeline_accounting.h).
  // Bubble: compute a device spends in the iterations of a pipeline loop in which its stage works
  // on padding; recompute: compute of ops marked as rematerialised (IsRematerialization), those in
  // bubble iterations included (the two overlap there). Times are the mean over devices of each
  // device's compute time (seconds of its compute stream); FLOPs are summed over devices.
  int64_t pipeline_stages = 0;         // stages of the pipeline loops found (0: not pipelined)
  double bubble_time_s = 0;
  double recompute_time_s = 0;
  double bubble_flops = 0;
  double recompute_flops = 0;
  // Executed FLOPs over the peak: what a profiler reads ("raw FLOPS util"), counting bubbles and
  // recompute as useful, beside the true `mfu`. Runs stored before run-store schema 5 get their
  // MFU here (the engine then counted every executed FLOP as useful) and 0 for the others.
  double raw_flops_utilization = 0;

  double bubble_share() const { return step_time_s > 0 ? bubble_time_s / step_time_s : 0; }
  double recompute_share() const { return step_time_s > 0 ? recompute_time_s / step_time_s : 0; }

  // Whether the peak fits the device's HBM (true when the HBM is unknown), and by how much it does
  // not (0 when it fits).
  bool fits() const { return device_hbm_bytes <= 0 || peak_memory_bytes <= device_hbm_bytes; }
  int64_t missing_bytes() const { return fits() ? 0 : peak_memory_bytes - device_hbm_bytes; }

  bool operator==(const RunSummary&) const = default;
};

// One span on a device's compute or communication stream.
struct TimelineEvent {
  int64_t device = -1;  // -1 inside a DeviceClass; filled in when read for a device
  Stream stream = Stream::kCompute;
  double start_s = 0;
  double duration_s = 0;
  std::string instruction;  // instruction name, e.g. "dot.3"
  std::string kind;         // opcode / op family, e.g. "dot", "all-reduce", "fusion"
  int64_t bytes = 0;        // bytes moved (communication) or accessed (compute)
  double flops = 0;

  double end_s() const { return start_s + duration_s; }
  bool operator==(const TimelineEvent&) const = default;
};

// Bytes live on a device at one instant, by category.
struct MemorySample {
  double time_s = 0;
  std::array<int64_t, kNumMemoryCategories> bytes{};  // indexed by MemoryCategory

  int64_t& at(MemoryCategory c) { return bytes[static_cast<size_t>(c)]; }
  int64_t at(MemoryCategory c) const { return bytes[static_cast<size_t>(c)]; }
  int64_t total() const;
  bool operator==(const MemorySample&) const = default;
};

// A buffer live at the moment of peak memory.
struct PeakBuffer {
  std::string name;
  int64_t bytes = 0;
  MemoryCategory category = MemoryCategory::kTemporaries;
  bool operator==(const PeakBuffer&) const = default;
};

// One collective of the step.
struct CollectiveRecord {
  std::string instruction;     // e.g. "all-reduce.7"
  std::string kind;            // "all-reduce", "all-gather", "reduce-scatter", "all-to-all", ...
  std::string replica_groups;  // as in HLO text, e.g. "{{0,1},{2,3}}" or "[2,2]<=[4]"
  int64_t bytes = 0;           // payload bytes per device
  double time_s = 0;           // duration
  std::string regime;          // cost-model regime, e.g. "bandwidth-bound", "latency-bound"
  bool operator==(const CollectiveRecord&) const = default;
};

// The detail shared by every device of one class.
struct DeviceClass {
  std::string label;  // e.g. "pipeline stage 0"; may be empty
  int64_t peak_memory_bytes = 0;
  double peak_memory_time_s = 0;
  std::vector<TimelineEvent> events;  // device fields are -1
  std::vector<MemorySample> memory;   // in time order
  std::vector<PeakBuffer> peak_buffers;

  bool operator==(const DeviceClass&) const = default;
};

struct RunResult {
  // Set by the store: row id (0 = not stored) and creation time (ms since the Unix epoch; the
  // store stamps the current time when it is 0).
  int64_t id = 0;
  int64_t created_unix_ms = 0;
  std::string label;
  // The run's identity across stores (empty: none). Saving a run whose key is already stored
  // replaces the stored run (same id) instead of adding a second: a strategy search's candidate
  // key ("search:<hash>"), so a re-run sweep task or a repeated merge never duplicates a run.
  std::string key;

  RunInputs inputs;
  RunSummary summary;
  std::vector<DeviceClass> classes;
  std::vector<int32_t> device_class;  // device -> index into classes; size == summary.num_devices
  std::vector<CollectiveRecord> collectives;
  // Which original instruction each instruction of the partitioned program came from (set by the
  // caller that partitioned; lets a timeline event lead back to the op the user wrote).
  std::map<std::string, std::string> origins;
  // The annotations of the module that was partitioned (instruction name, HloSharding text), so
  // the run can be re-opened with the shardings it was made from (empty when not recorded).
  std::vector<std::pair<std::string, std::string>> annotations;

  int64_t num_devices() const { return static_cast<int64_t>(device_class.size()); }
  // True when per-device detail is present (false for a summary-only load).
  bool has_detail() const { return !device_class.empty(); }
  // The class of `device`, or nullptr when out of range.
  const DeviceClass* ClassOf(int64_t device) const;
  // The device's events (its class's events with `device` filled in); empty when out of range.
  std::vector<TimelineEvent> DeviceTimeline(int64_t device) const;
  // All devices of class `class_index`, ascending.
  std::vector<int64_t> DevicesOfClass(int32_t class_index) const;
  // The lowest-numbered device of each class (one representative per class), by class index.
  std::vector<int64_t> RepresentativeDevices() const;

  // Checks internal consistency: map size matches summary.num_devices, class indices in range, all
  // times finite and non-negative, byte counts non-negative. The store refuses invalid runs.
  Status Validate() const;

  bool operator==(const RunResult&) const = default;
};

// The identifying part of a stored run (what ListRuns returns).
struct RunOverview {
  int64_t id = 0;
  int64_t created_unix_ms = 0;
  std::string label;
  std::string key;  // RunResult::key
  RunInputs inputs;
  RunSummary summary;
  int64_t num_classes = 0;

  bool operator==(const RunOverview&) const = default;
};
RunOverview OverviewOf(const RunResult& run);
// "content:" + 16 hex digits hashing what a run is (creation time, label, inputs, summary, and
// the sizes of its detail): the identity of a run stored without a key.
std::string RunContentKey(const RunResult& run);

// Groups per-device detail into classes: devices whose detail (label included) is identical share
// one class.
// Use: builder.Add(device, detail) for every device (any order), then builder.Finish(run).
class DeviceClassBuilder {
 public:
  // Returns the class index `device` was assigned. Event device fields are ignored.
  // Error on a negative device or a device added twice.
  Result<int32_t> Add(int64_t device, DeviceClass detail);
  // For an engine that already knows `device` behaves exactly like an existing class (e.g. by
  // symmetry): assigns it without comparing detail. Error on a bad device or class index.
  Status AddToClass(int64_t device, int32_t class_index);
  int64_t num_classes() const { return static_cast<int64_t>(classes_.size()); }
  // Moves the classes and map into `run` and sets run.summary.num_devices. Error when some device
  // below the highest one added was never added.
  Status Finish(RunResult& run);

 private:
  std::vector<DeviceClass> classes_;
  std::unordered_multimap<uint64_t, int32_t> by_hash_;
  std::vector<int32_t> map_;  // -1 = not added yet
};

// Hash of a class's detail (event device fields excluded); equal details hash equal.
uint64_t HashDeviceDetail(const DeviceClass& detail);

}  // namespace shardscope::sim
