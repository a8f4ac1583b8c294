// shardscope-cli simulate: partition (when needed), simulate one step on a modelled pod, store, export.
//
// A module counts as already partitioned (an SPMD program) by core/ir/spmd_program.h's rule, or
// when no instruction carries a tiled sharding; otherwise its
// shardings are propagated and it is partitioned for the mesh's device count first (--partition /
// --no-partition force the choice); propagation may then also shard the entry parameters and
// outputs it was not given shardings for (--keep-io-shardings: no). The run is stored only when
// --db is given (no default database: a CLI run leaves no file behind unless asked).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "app/cli/cli.h"
#include "core/base/json.h"
#include "app/cli/slice_options.h"
#include "app/cli/all_reduce_combiner_options.h"
#include "app/cli/windowed_einsum_options.h"
#include "app/cli/wus_options.h"
#include "app/pipeline/pipeline.h"
#include "app/pipeline/weight_update_sharding_paper.h"
#include "core/ir/hlo_text.h"
#include "core/ir/scale_dims.h"
#include "core/ir/spmd_program.h"
#include "core/sharding/mesh.h"
#include "simulator/peak_breakdown.h"
#include "simulator/trace_export.h"

namespace shardscope::cli {

using namespace shardscope::sim;
namespace {

constexpr const char* kName = "simulate";

std::string SummaryJson(const Simulation& sim, int64_t run_id, bool partitioned) {
  const RunSummary& s = sim.run.summary;
  std::ostringstream os;
  os << "{\"module\":" << json::Quote(sim.run.inputs.module_name) << ",\"chip\":" << json::Quote(sim.run.inputs.chip_preset)
     << ",\"mesh\":" << json::Quote(sim.run.inputs.mesh_text) << ",\"topology\":" << json::Quote(sim.run.inputs.topology_options)
     << ",\"placement\":" << json::Quote(sim.run.inputs.placement)
     << ",\"partitioned_here\":" << (partitioned ? "true" : "false") << ",\"num_devices\":" << s.num_devices
     << ",\"device_classes\":" << sim.run.classes.size() << ",\"step_time_s\":" << FormatDouble(s.step_time_s)
     << ",\"compute_time_s\":" << FormatDouble(s.compute_time_s)
     << ",\"communication_time_s\":" << FormatDouble(s.communication_time_s)
     << ",\"exposed_communication_s\":" << FormatDouble(s.exposed_communication_s)
     << ",\"idle_time_s\":" << FormatDouble(s.idle_time_s) << ",\"mfu\":" << FormatDouble(s.mfu)
     << ",\"raw_flops_utilization\":" << FormatDouble(s.raw_flops_utilization)
     << ",\"pipeline_stages\":" << s.pipeline_stages << ",\"bubble_time_s\":" << FormatDouble(s.bubble_time_s)
     << ",\"bubble_share\":" << FormatDouble(s.bubble_share()) << ",\"recompute_time_s\":" << FormatDouble(s.recompute_time_s)
     << ",\"recompute_share\":" << FormatDouble(s.recompute_share()) << ",\"bubble_flops\":" << FormatDouble(s.bubble_flops)
     << ",\"recompute_flops\":" << FormatDouble(s.recompute_flops)
     << ",\"total_flops\":" << FormatDouble(s.total_flops) << ",\"bytes_communicated\":" << s.bytes_communicated
     << ",\"peak_memory_bytes\":" << s.peak_memory_bytes << ",\"device_hbm_bytes\":" << s.device_hbm_bytes
     << ",\"fits\":" << (s.fits() ? "true" : "false") << ",\"missing_bytes\":" << s.missing_bytes();
  // Peak breakdown of the class with the highest peak.
  const DeviceClass* top = nullptr;
  for (const DeviceClass& c : sim.run.classes)
    if (!top || c.peak_memory_bytes > top->peak_memory_bytes) top = &c;
  if (top) {
    std::array<int64_t, kNumMemoryCategories> by{};
    for (const PeakBuffer& b : top->peak_buffers) by[static_cast<size_t>(b.category)] += b.bytes;
    os << ",\"peak_memory_time_s\":" << FormatDouble(top->peak_memory_time_s) << ",\"peak_memory_by_category\":{";
    for (int k = 0; k < kNumMemoryCategories; ++k) {
      os << (k ? "," : "") << json::Quote(MemoryCategoryName(static_cast<MemoryCategory>(k))) << ":" << by[static_cast<size_t>(k)];
    }
    os << "},\"peak_buffer_groups\":[";
    const std::vector<PeakBufferGroup> groups = GroupPeakBuffers(top->peak_buffers);
    for (size_t k = 0; k < groups.size(); ++k) {
      const PeakBufferGroup& g = groups[k];
      os << (k ? "," : "") << "{\"pattern\":" << json::Quote(g.pattern) << ",\"category\":"
         << json::Quote(MemoryCategoryName(g.category)) << ",\"count\":" << g.count << ",\"bytes\":" << g.bytes
         << ",\"largest\":" << g.largest << "}";
    }
    os << "]";
  }
  os << ",\"collectives\":[";
  for (size_t k = 0; k < sim.run.collectives.size(); ++k) {
    const CollectiveRecord& c = sim.run.collectives[k];
    os << (k ? "," : "") << "{\"instruction\":" << json::Quote(c.instruction) << ",\"kind\":" << json::Quote(c.kind)
       << ",\"bytes\":" << c.bytes << ",\"time_s\":" << FormatDouble(c.time_s) << ",\"regime\":" << json::Quote(c.regime)
       << "}";
  }
  os << "],\"warnings\":[";
  for (size_t k = 0; k < sim.warnings.size(); ++k) os << (k ? "," : "") << json::Quote(sim.warnings[k]);
  os << "]";
  if (run_id > 0) os << ",\"run_id\":" << run_id;
  os << "}";
  return os.str();
}

int Run(const std::vector<std::string>& in) {
  std::vector<std::string> args = in;
  std::string db_path, trace_path, csv_path, csv_kind = "timeline", schedule_text, concurrent_text, trips_text, label;
  const SliceOptionTexts slice_texts = TakeSliceOptions(args);
  const bool have_db = TakeOption(args, "db", &db_path);
  const bool have_trace = TakeOption(args, "trace", &trace_path);
  const bool have_csv = TakeOption(args, "csv", &csv_path);
  TakeOption(args, "csv-kind", &csv_kind);
  const bool have_schedule = TakeOption(args, "schedule", &schedule_text);
  const bool have_concurrent = TakeOption(args, "concurrent-collectives", &concurrent_text);
  const bool have_trips = TakeOption(args, "trip-count", &trips_text);
  TakeOption(args, "label", &label);
  std::string scale_text, dim_text;
  bool have_scale = TakeOption(args, "scale-dims", &scale_text);
  ScaleDimsOptions scale_options;
  while (TakeOption(args, "scale-dim", &dim_text)) {
    // PARAM:DIM=F: that dimension's class times F.
    const size_t eq = dim_text.rfind('=');
    int64_t f = 0;
    try {
      size_t used = 0;
      if (eq != std::string::npos) f = std::stoll(dim_text.substr(eq + 1), &used);
      if (eq == std::string::npos || used != dim_text.size() - eq - 1) f = 0;
    } catch (...) {
      f = 0;
    }
    if (f < 1) return UsageError(kName, "--scale-dim takes PARAMETER:DIM=FACTOR (e.g. x:0=8), not '" + dim_text + "'");
    scale_options.factors[dim_text.substr(0, eq)] = f;
    have_scale = true;
  }
  const bool json = TakeFlag(args, "json");
  const bool no_fusion = TakeFlag(args, "no-fusion");
  const bool no_producer_fusion = TakeFlag(args, "no-producer-fusion");
  const bool no_in_place = TakeFlag(args, "no-in-place");
  const bool no_donate = TakeFlag(args, "no-donation");
  const bool no_tile_padding = TakeFlag(args, "no-tile-padding");
  const bool no_remat = TakeFlag(args, "no-remat");
  const bool all_peak_buffers = TakeFlag(args, "peak-buffers");
  const bool force_partition = TakeFlag(args, "partition");
  const bool force_no_partition = TakeFlag(args, "no-partition");
  const bool trace_all = TakeFlag(args, "trace-all-devices");
  const bool keep_io = TakeFlag(args, "keep-io-shardings");
  const bool no_code_motion = TakeFlag(args, "no-while-loop-all-reduce-code-motion");
  bool wus = false;
  WeightUpdateShardingOptions wus_options;
  if (std::string e = TakeWeightUpdateShardingOptions(args, &wus, &wus_options); !e.empty()) return UsageError(kName, e);
  pipeline::PipelineOptions run;
  if (std::string e = TakeAllReduceCombinerOptions(args, &run.all_reduce_combiner); !e.empty()) return UsageError(kName, e);
  if (std::string e = TakeWindowedEinsumOptions(args, &run.spmd); !e.empty()) return UsageError(kName, e);

  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != 1) return UsageError(kName, "expected exactly one FILE.hlo (see --help)");
  if (!slice_texts.chip) return UsageError(kName, "missing --chip (a preset such as tpu-v5e, or a chip .json file)");
  if (!slice_texts.mesh) return UsageError(kName, "missing --mesh (e.g. X=4,Y=4)");
  if (force_partition && force_no_partition) return UsageError(kName, "--partition and --no-partition contradict each other");
  if (csv_kind != "timeline" && csv_kind != "summary" && csv_kind != "memory") {
    return UsageError(kName, "--csv-kind must be timeline, summary or memory, not '" + csv_kind + "'");
  }

  auto resolved = ResolveSlice(slice_texts);
  if (!resolved.ok()) return UsageError(kName, resolved.error().message);
  const DeviceMesh& mesh = resolved->mesh;
  const Topology& topology = resolved->topology;

  SimulationOptions options;
  options.mesh_text = mesh.ToString();
  options.label = label;
  options.program.fuse_elementwise = !no_fusion;
  options.program.fuse_producers_into_dots = !no_producer_fusion;
  options.program.in_place_reuse = !no_in_place;
  options.program.donate_parameters = !no_donate;
  options.program.pad_to_layout_tiles = !no_tile_padding;
  options.program.rematerialize = !no_remat;
  options.collectives = resolved->collectives;
  if (have_schedule) {
    auto s = ScheduleKindFromName(schedule_text);
    if (!s.ok()) return UsageError(kName, "--schedule: " + s.error().message);
    options.program.schedule = s.value();
  }
  if (have_concurrent && !ParseInt(concurrent_text, 1, &options.max_concurrent_collectives)) {
    return UsageError(kName, "--concurrent-collectives takes a positive integer");
  }
  if (have_trips && !ParseInt(trips_text, 0, &options.program.default_trip_count)) {
    return UsageError(kName, "--trip-count takes a non-negative integer (used for while loops of unknown trip count)");
  }

  std::string text;
  if (!ReadFile(args[0], &text)) return 2;
  auto parsed = ParseHloModule(text, args[0]);
  if (!parsed.ok()) {
    std::cerr << parsed.error().message << "\n";
    return 2;
  }
  if (have_scale) {
    // The same program at k times its sizes (core/ir/scale_dims.h): simulate at real size what was
    // annotated (and verified) small.
    int64_t k = scale_text.empty() ? 1 : 0;
    try {
      size_t used = 0;
      if (!scale_text.empty()) k = std::stoll(scale_text, &used);
      if (!scale_text.empty() && used != scale_text.size()) k = 0;
    } catch (...) {
      k = 0;
    }
    if (k < 1) return UsageError(kName, "--scale-dims takes a whole number >= 1, not '" + scale_text + "'");
    auto scaled = ScaleModuleDims(**parsed, k, scale_options);
    if (!scaled.ok()) {
      std::cerr << args[0] << ": error: " << scaled.error().message << "\n";
      return 2;
    }
    if (!json)
      std::cout << "dimensions scaled by " << k << ": " << scaled->scaled_parameter_dims << " parameter dimensions x" << k
                << ", " << scaled->kept_parameter_dims << " kept\n";
    *parsed = std::move(scaled->module);
  }
  // A module XLA's backend already fused runs its own kernels: no second fusion.
  if (IsBackendOptimized(**parsed)) options.program.fuse_elementwise = false;
  const int64_t devices = topology.num_devices();
  // The step's inputs and outputs may take the shardings propagation infers (XLA's
  // allow_spmd_sharding_propagation_to_output/parameters): unannotated optimizer state and
  // updated weights then stay sharded instead of being gathered. --keep-io-shardings: off.
  run.propagation = pipeline::StandardPropagationOptions(keep_io ? pipeline::EntryIo::kKeep : pipeline::EntryIo::kShard);
  run.partitioning = force_partition      ? pipeline::Partitioning::kAlways
                     : force_no_partition ? pipeline::Partitioning::kNever
                                          : pipeline::Partitioning::kWhenNeeded;
  if (force_no_partition) run.propagation.reset();
  run.while_loop_all_reduce_code_motion = !no_code_motion;
  run.topology = topology;
  run.simulation = options;
  // The pass's cost model takes the simulated chip's figures and, unless given, the mesh as its
  // replica mesh.
  if (wus) run.weight_update_sharding = pipeline::WeightUpdateShardingOptionsFor(topology, mesh, wus_options);
  const int64_t declared_partitions = (*parsed)->num_partitions;
  auto r = pipeline::RunPipeline(std::move(parsed).value(), run);
  const bool partition = r.partition.has_value();
  if (partition && !json) {
    std::cout << "partitioned for " << devices << " devices (" << r.partition->module->instruction_count() << " instructions)\n";
  }
  if (!r.ok()) {
    std::cerr << args[0] << ": error: ";
    if (r.failed == pipeline::Stage::kPropagate) std::cerr << "sharding propagation failed: ";
    else if (r.failed == pipeline::Stage::kPartition) std::cerr << "partitioning for " << devices << " devices failed: ";
    else if (r.failed == pipeline::Stage::kWeightUpdateSharding) std::cerr << "weight-update sharding failed: ";
    else if (r.failed == pipeline::Stage::kAllReduceCombiner) std::cerr << "all-reduce combiner failed: ";
    std::cerr << r.status.error().message << "\n";
    if (r.failed == pipeline::Stage::kPartition && declared_partitions > 1 && declared_partitions != devices) {
      std::cerr << "  the module is written for num_partitions=" << declared_partitions << "; --mesh " << mesh.ToString()
                << " has " << devices << " devices: give a mesh of " << declared_partitions << " devices\n";
    }
    return 2;
  }
  const Simulation* sim = &*r.simulation;
  if (r.weight_update_sharding && !json) {
    // Before and after: the step, its peak memory and its collectives by kind; per weight what the
    // pass did.
    auto kinds = [](const Simulation& s) {
      std::map<std::string, int64_t> k;
      for (const auto& c : s.run.collectives) ++k[c.kind];
      std::string t;
      for (const auto& [name, n] : k) t += " " + std::to_string(n) + " " + name;
      return t;
    };
    if (r.simulation_before)
      std::cout << "before weight-update sharding: step " << FormatDouble(r.simulation_before->run.summary.step_time_s * 1e6)
                << " us, peak memory " << r.simulation_before->run.summary.peak_memory_bytes << " bytes, collectives:"
                << kinds(*r.simulation_before) << "\n";
    std::cout << DescribeWeightUpdateSharding(*r.weight_update_sharding);
    std::cout << "after weight-update sharding: step " << FormatDouble(sim->run.summary.step_time_s * 1e6) << " us, peak memory "
              << sim->run.summary.peak_memory_bytes << " bytes, collectives:" << kinds(*sim) << "\n";
    if (r.weight_update_sharding->split)
      std::cout << "(the main program; its sharding and unsharding programs run outside the training loop)\n";
  }

  int64_t run_id = 0;
  if (have_db) {
    auto store = pipeline::RunDatabase::Open(db_path);
    if (!store.ok()) {
      std::cerr << db_path << ": error: " << store.error().message << "\n";
      return 2;
    }
    auto id = (*store)->Save(sim->run);
    if (!id.ok()) {
      std::cerr << db_path << ": error: storing the run failed: " << id.error().message << "\n";
      return 2;
    }
    run_id = id.value();
  }
  // Exports: every device for small runs; one device per class beyond 64 devices (all devices of a
  // class share one timeline) unless --trace-all-devices.
  ExportSelection selection;
  selection.one_device_per_class = devices > 64 && !trace_all;
  if (have_trace) {
    TraceExportOptions to;
    to.selection = selection;
    if (Status s = ExportChromeTrace(sim->run, trace_path, to); !s.ok()) {
      std::cerr << trace_path << ": error: " << s.error().message << "\n";
      return 2;
    }
  }
  if (have_csv) {
    if (Status s = ExportCsv(sim->run, csv_kind, csv_path, selection); !s.ok()) {
      std::cerr << csv_path << ": error: " << s.error().message << "\n";
      return 2;
    }
  }

  if (json) {
    std::cout << SummaryJson(*sim, run_id, partition) << "\n";
  } else {
    if (r.all_reduce_combiner && r.all_reduce_combiner->changed())
      std::cout << kAllReduceCombinerName << ": " << r.all_reduce_combiner->Summary() << "\n";
    std::cout << "chip: " << topology.chip().name << ", " << topology.Describe() << ", mesh " << mesh.ToString() << "\n";
    std::cout << "placement: " << topology.DescribePlacement() << "\n";
    std::cout << DescribeSimulation(*sim);
    if (all_peak_buffers) {
      // Every buffer live at the peak of the class with the highest peak, grouped by kind.
      const DeviceClass* top = nullptr;
      for (const DeviceClass& c : sim->run.classes)
        if (!top || c.peak_memory_bytes > top->peak_memory_bytes) top = &c;
      if (top) std::cout << "every buffer live at the peak, by kind:\n" << DescribePeakBufferGroups(GroupPeakBuffers(top->peak_buffers), 0);
    }
    if (run_id > 0) std::cout << "stored run " << run_id << " in " << db_path << "\n";
    if (have_trace) std::cout << "trace: " << trace_path << (selection.one_device_per_class ? " (one device per class)" : "") << "\n";
    if (have_csv) std::cout << csv_kind << " csv: " << csv_path << "\n";
  }
  char last[128];
  std::snprintf(last, sizeof last, "step_time_us: %.3f peak_memory_bytes: %lld", sim->run.summary.step_time_s * 1e6,
                static_cast<long long>(sim->run.summary.peak_memory_bytes));
  std::cout << last << "\n";
  return 0;
}

const bool kRegistered = Register(
    {"simulate",
     "FILE.hlo --chip CHIP --mesh X=4,Y=4 [--db FILE] [--trace OUT.json] [--csv OUT.csv] [--csv-kind timeline|summary|memory] "
     "[--json] [--no-wraparound|--wraparound] [--topology 4x4] [--placement snake|row-major] [--mesh-order Y,X] [--cores-per-chip 2] "
     "[--schedule memory-limit|program-order|memory-list|collectives-early] [--concurrent-collectives K] [--trip-count N] [--no-fusion] [--no-producer-fusion] "
     "[--no-in-place] [--no-donation] [--no-tile-padding] [--no-remat] [--peak-buffers] [--latency-model overlapped|additive] [--one-direction] [--partition|--no-partition] "
     "[--keep-io-shardings] [--scale-dims K] [--scale-dim PARAM:DIM=F]... [--no-while-loop-all-reduce-code-motion] " WINDOWED_EINSUM_OPTION_USAGE " " ALL_REDUCE_COMBINER_OPTION_USAGE " [--trace-all-devices] [--label TEXT] [--weight-update-sharding [" WUS_OPTION_USAGE "]]",
     "Simulate one step on a modelled pod (partitioning first when needed); last line: step_time_us: T peak_memory_bytes: B",
     &Run});

}  // namespace
}  // namespace shardscope::cli
