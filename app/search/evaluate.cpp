#include "app/search/evaluate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>

#include "app/pipeline/pipeline.h"
#include "app/pipeline/simulate.h"
#include "app/pipeline/weight_update_sharding_paper.h"
#include "partitioner/hlo_sharding_util.h"
#include "partitioner/spmd/partition_memo.h"
#include "core/base/units.h"
#include "simulator/schedule.h"

namespace shardscope::search {

namespace {

std::string Num(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, p) : std::string("0");
}

bool ParseNum(std::string_view s, double* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(*out);
}

// A candidate's setting: its own value, else the model's default.
std::string SettingOf(const Candidate& c, std::string_view name) {
  if (auto it = c.settings.find(name); it != c.settings.end()) return it->second;
  for (const ZooModel& m : ZooList()) {
    if (m.name != c.model) continue;
    for (const ZooParameter& p : m.parameters)
      if (p.name == name) return p.default_value;
  }
  return {};
}

// Bytes each device must hold for the entry parameters of `module` on `devices` devices.
int64_t EntryParameterBytes(const Module& module, int64_t devices) {
  int64_t total = 0;
  if (!module.entry()) return 0;
  for (const Instruction* p : module.entry()->parameters()) {
    const int64_t bytes = p->shape().ByteSize();
    if (p->has_sharding() && !p->shape().IsTuple()) total += p->sharding()->BytesPerDevice(p->shape());
    else total += (bytes + devices - 1) / devices;
  }
  return total;
}

// The first annotation that splits a dimension into more shards than it has elements.
std::optional<std::string> OverSplit(const Module& module) {
  for (const auto& comp : module.computations()) {
    for (const auto& inst : comp->instructions()) {
      if (!inst->has_sharding() || !inst->shape().IsArray()) continue;
      const HloSharding& s = *inst->sharding();
      if (!s.IsTiled()) continue;
      for (int64_t d = 0; d < inst->shape().rank(); ++d) {
        const int64_t tiles = s.DimensionTiles(d);
        if (tiles > inst->shape().dim(d))
          return "the annotation of " + inst->name() + " splits its dim " + std::to_string(d) + " (" +
                 std::to_string(inst->shape().dim(d)) + ") " + std::to_string(tiles) + " ways";
      }
    }
  }
  return std::nullopt;
}

double Lin(double a, double b, double k) { return std::max(0.0, a + (b - a) * k); }

std::vector<CollectiveTotal> TotalsByKind(const RunResult& run) {
  std::map<std::string, CollectiveTotal> by;
  for (const CollectiveRecord& r : run.collectives) {
    CollectiveTotal& t = by[r.kind];
    t.kind = r.kind;
    t.count += 1;
    t.bytes += static_cast<double>(r.bytes);
    t.time_s += r.time_s;
  }
  std::vector<CollectiveTotal> out;
  for (auto& [k, t] : by) out.push_back(t);
  return out;
}

void SortByTime(std::vector<CollectiveTotal>& v) {
  std::stable_sort(v.begin(), v.end(), [](const CollectiveTotal& a, const CollectiveTotal& b) { return a.time_s > b.time_s; });
}

std::string DepthText(const PreparedCandidate& p) {
  const std::string param = p.depth ? p.depth->parameter : "depth";
  if (p.exact()) return p.depth ? "exact (" + param + "=" + std::to_string(p.full_depth) + ")" : "exact";
  std::string s = "extrapolated from " + param + "=";
  for (size_t i = 0; i < p.depths.size(); ++i) s += (i ? "," : "") + std::to_string(p.depths[i]);
  return s + " to " + std::to_string(p.full_depth);
}

// The replica mesh weight-update sharding's two-phase and partial schemes use (paper 000 section
// 5): a 2-D mesh is its own; a 1-D mesh placed canonically on a slice of several physical axes is
// rows of the minor physical ring with the chip's cores (2048 v3 cores on 32x32 chips: 32 rows of
// 64, a row being a ring of 32 chips), else the mesh itself (one phase over every replica).
DeviceMesh ReplicaMeshOf(const Pod& pod, const MeshChoice& choice) {
  const DeviceMesh& mesh = choice.mesh;
  if (mesh.num_axes() != 1 || !choice.canonical || pod.slice.size() < 2) return mesh;
  const int64_t cols = pod.chip.cores_per_chip * pod.slice.back();
  const int64_t n = mesh.num_devices();
  if (cols <= 1 || cols >= n || n % cols != 0) return mesh;
  return DeviceMesh({{"R", n / cols}, {"C", cols}});
}

// The candidate's annotated module at `depth` (the depth rule's parameter set to it), or the
// model as it is when the model has no depth rule. Not verified here: a module the search
// evaluates is verified, with its annotations, by the pipeline's propagation (which the zoo's own
// check after the build would repeat, a sixth of a build's cost); one built for the bounds is only
// counted and dropped.
Result<std::unique_ptr<Module>> BuildAtDepth(const Candidate& candidate, const std::optional<DepthRule>& rule, int64_t depth) {
  ZooOverrides o;
  if (rule) o[rule->parameter] = std::to_string(depth);
  ZooBuildOptions build;
  build.verify = false;
  return BuildCandidateModule(candidate, o, build);
}

}  // namespace

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kSimulated: return "simulated";
    case Outcome::kPrunedMemory: return "pruned: memory";
    case Outcome::kPrunedBound: return "pruned: bound";
    case Outcome::kInvalid: return "invalid";
    case Outcome::kFailed: return "failed";
    case Outcome::kCancelled: return "cancelled";
  }
  return "unknown";
}

double CandidateResult::communication_share() const {
  return summary.step_time_s > 0 ? summary.communication_time_s / summary.step_time_s : 0;
}

double CandidateResult::exposed_share() const {
  return summary.step_time_s > 0 ? summary.exposed_communication_s / summary.step_time_s : 0;
}

std::string CandidateResult::DominantCollectives(size_t max_kinds) const {
  std::string s;
  for (size_t i = 0; i < collectives.size() && i < max_kinds; ++i) {
    const CollectiveTotal& t = collectives[i];
    if (t.time_s <= 0) break;
    if (!s.empty()) s += ", ";
    const double count = std::round(t.count);
    s += t.kind + " " + FormatPercent(summary.step_time_s > 0 ? t.time_s / summary.step_time_s : 0) + " (" +
         Num(count) + " x " + FormatBytes(count > 0 ? t.bytes / count : 0) + ")";
  }
  return s.empty() ? "none" : s;
}

Result<PreparedCandidate> PrepareCandidate(const Candidate& candidate, const EvaluationOptions& options, PrepareFor use) {
  PreparedCandidate p;
  p.candidate = candidate;
  auto pod = PodOf(candidate);
  if (!pod.ok()) return pod.error();
  p.pod = std::move(pod).value();
  auto mesh = MeshOf(candidate, p.pod);
  if (!mesh.ok()) return mesh.error();
  p.mesh = std::move(mesh).value();
  p.hbm_bytes = p.pod.chip.device_hbm_bytes();

  p.depth = DepthRuleOf(candidate.model, [&](std::string_view k) { return SettingOf(candidate, k); });
  if (p.depth) {
    const std::string v = SettingOf(candidate, p.depth->parameter);
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), p.full_depth);
    if (ec != std::errc() || ptr != v.data() + v.size() || p.full_depth < 1)
      return Error(p.depth->parameter + " = '" + v + "' is not a positive integer");
  }
  const int64_t unit = p.depth ? p.depth->unit : 1;
  // Two consecutive depths from the model's first linear one (`DepthRule::linear_from`): from
  // there on each added block adds the same work and, closely, the same memory
  // (tests/test_search.cpp checks both against full-depth simulations).
  if (options.extrapolate && p.depth && p.full_depth > 5 * unit && p.full_depth % unit == 0) {
    p.depths = {p.depth->linear_from * unit, (p.depth->linear_from + 1) * unit};
  } else {
    p.depths = {p.full_depth};
  }
  const int64_t n = p.pod.devices;
  const bool bounds_only = use == PrepareFor::kBoundsOnly && !p.exact();
  const std::vector<int64_t> built_depths = bounds_only ? std::vector<int64_t>{unit, 2 * unit} : p.depths;
  std::vector<double> mem, flops;
  for (int64_t d : built_depths) {
    auto m = BuildAtDepth(candidate, p.depth, d);
    if (!m.ok()) return m.error();
    if ((*m)->num_partitions != n)
      return Error("the model is built for " + std::to_string((*m)->num_partitions) + " devices, the mesh " + candidate.mesh +
                   " has " + std::to_string(n));
    if (auto over = OverSplit(**m)) return Error(*over);
    mem.push_back(static_cast<double>(EntryParameterBytes(**m, n)));
    flops.push_back(CountModuleFlops(**m));
    if (!bounds_only) p.modules.push_back(std::move(m).value());
  }
  const double k = p.exact() ? 0
                             : static_cast<double>(p.full_depth - built_depths[0]) /
                                   static_cast<double>(built_depths[1] - built_depths[0]);
  p.bounds.memory_bytes = static_cast<int64_t>(p.exact() ? mem[0] : Lin(mem[0], mem[1], k));
  p.bounds.flops = p.exact() ? flops[0] : Lin(flops[0], flops[1], k);
  const double rate = p.pod.chip.device_peak_flops() * p.pod.chip.flops_efficiency * static_cast<double>(n);
  p.bounds.step_time_s = rate > 0 ? p.bounds.flops / rate : 0;
  return p;
}

Result<PreparedCandidate> PrepareGivenModule(const Candidate& candidate, const Pod& pod, const MeshChoice& mesh,
                                             std::unique_ptr<Module> module) {
  if (!module) return Error("no module");
  PreparedCandidate p;
  p.candidate = candidate;
  p.pod = pod;
  p.mesh = mesh;
  p.hbm_bytes = pod.chip.device_hbm_bytes();
  const int64_t n = pod.devices;
  if (module->num_partitions != n)
    return Error("the module is set for " + std::to_string(module->num_partitions) + " devices, the pod has " + std::to_string(n));
  if (auto over = OverSplit(*module)) return Error(*over);
  p.full_depth = 1;
  p.depths = {1};
  p.bounds.memory_bytes = EntryParameterBytes(*module, n);
  p.bounds.flops = CountModuleFlops(*module);
  const double rate = pod.chip.device_peak_flops() * pod.chip.flops_efficiency * static_cast<double>(n);
  p.bounds.step_time_s = rate > 0 ? p.bounds.flops / rate : 0;
  p.modules.push_back(std::move(module));
  p.given_module = true;
  return p;
}

void StoreEvaluation(Evaluation& ev, pipeline::RunDatabase* store, const CancellationToken& cancel) {
  if (!ev.run || !store) return;
  auto id = store->Save(*ev.run, cancel);
  if (!id.ok()) {
    ev.result.outcome = Outcome::kFailed;
    ev.result.message = "storing the run: " + id.error().message;
  } else {
    ev.result.run_id = id.value();
  }
}

Evaluation EvaluateCandidate(PreparedCandidate& p, const EvaluationOptions& options, const CancellationToken& cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  Evaluation ev;
  CandidateResult& r = ev.result;
  r.candidate = p.candidate;
  r.bounds = p.bounds;
  r.hbm_bytes = p.hbm_bytes;
  r.extrapolated = !p.exact();
  r.evaluation = DepthText(p);
  auto finish = [&]() -> Evaluation& {
    r.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return ev;
  };
  auto topology = TopologyFor(p.pod, p.mesh);
  if (!topology.ok()) {
    r.outcome = Outcome::kFailed;
    r.message = "placing the mesh: " + topology.error().message;
    return finish();
  }
  std::vector<Simulation> sims;
  Settings annotations;
  // One memo for the candidate's depths, or the one the search shares between the candidates on
  // one mesh (PreparedCandidate::partition_memo): kept across every candidate, the memo's tile
  // maps (per-device tables at thousands of devices) grew the heap faster than they saved time.
  const auto partition_memo = p.partition_memo ? p.partition_memo : std::make_shared<spmd::PartitionMemo>();
  const auto dot_memo = p.dot_memo ? p.dot_memo : std::make_shared<hlo_sharding_util::DotShardingMemo>();
  if (p.modules.empty() && !p.given_module) {
    // Dropped after the bounds (the search keeps none while it prepares the others): built again
    // here, just before they are partitioned (docs/search.md, "the allocator's pages").
    for (int64_t d : p.depths) {
      auto m = BuildAtDepth(p.candidate, p.depth, d);
      if (!m.ok()) {
        r.outcome = Outcome::kFailed;
        r.message = "building the candidate again: " + m.error().message;
        return finish();
      }
      p.modules.push_back(std::move(m).value());
    }
  }
  for (size_t i = 0; i < p.depths.size(); ++i) {
    if (i >= p.modules.size() || !p.modules[i]) {
      r.outcome = Outcome::kFailed;
      r.message = "internal: the candidate was evaluated twice";
      return finish();
    }
    if (p.exact()) annotations = AnnotationList(*p.modules[i]);
    pipeline::PipelineOptions o;
    o.propagation = pipeline::StandardPropagationOptions(pipeline::EntryIo::kShard);
    o.propagation->dot_memo = dot_memo;
    o.partitioning = pipeline::Partitioning::kAlways;
    o.spmd.num_partitions = p.pod.devices;
    // The second depth's partitioning starts with the first one's answers (a memo answer depends
    // only on its key, the device count and the options).
    o.spmd.memo = partition_memo;
    o.topology = topology.value();
    if (p.candidate.OptionOn("weight_update_sharding")) {
      // The pass with the simulated chip's figures and the pod's replica mesh, as `simulate
      // --weight-update-sharding` runs it; only the program after it is simulated.
      o.weight_update_sharding = pipeline::WeightUpdateShardingOptionsFor(topology.value(), ReplicaMeshOf(p.pod, p.mesh));
      o.simulate_before_weight_update_sharding = false;
    }
    SimulationOptions so = options.simulation;
    so.mesh_text = p.candidate.mesh;
    so.label = p.candidate.Label();
    so.model_flops = 0;
    // A run stored with its figures only needs no timelines (the figures are the same).
    so.timelines = options.store_detail;
    if (!p.exact()) {
      // The shallow depths in program order, never rematerialised: a sample that reached the HBM
      // would be scheduled or rematerialised differently from the other, and the line through
      // the two would not be the full depth's (peaks 4-16x off, either way). The extrapolated
      // peak is the program-order one; the search confirms at full depth, under the memory
      // limit, the candidates it puts over the HBM faster than the best that fits.
      so.program.schedule = sim::ScheduleKind::kProgramOrder;
      so.program.rematerialize = false;
    }
    o.simulation = so;
    auto run = pipeline::RunPipeline(std::move(p.modules[i]), o, cancel);
    for (const auto& [stage, ms] : run.millis) r.stage_millis[std::string(pipeline::StageName(stage))] += ms;
    if (!run.ok()) {
      r.outcome = run.cancelled ? Outcome::kCancelled : Outcome::kFailed;
      r.message = run.FailureText();
      return finish();
    }
    sims.push_back(std::move(*run.simulation));
  }

  RunResult stored;
  if (p.exact()) {
    r.collectives = TotalsByKind(sims[0].run);
    if (options.store_detail) {
      stored = std::move(sims[0].run);
    } else {
      stored.inputs = std::move(sims[0].run.inputs);
      stored.summary = sims[0].run.summary;
    }
    r.summary = stored.summary;
    stored.annotations = std::move(annotations);
  } else {
    const double k = static_cast<double>(p.full_depth - p.depths[0]) / static_cast<double>(p.depths[1] - p.depths[0]);
    r.summary = ExtrapolateSummary(sims[0].run.summary, sims[1].run.summary, k);
    const RunSummary& s = r.summary;
    std::map<std::string, std::pair<CollectiveTotal, CollectiveTotal>> kinds;
    for (const CollectiveTotal& t : TotalsByKind(sims[0].run)) kinds[t.kind].first = t;
    for (const CollectiveTotal& t : TotalsByKind(sims[1].run)) kinds[t.kind].second = t;
    for (auto& [kind, ab] : kinds) {
      CollectiveTotal t;
      t.kind = kind;
      t.count = Lin(ab.first.count, ab.second.count, k);
      t.bytes = Lin(ab.first.bytes, ab.second.bytes, k);
      t.time_s = Lin(ab.first.time_s, ab.second.time_s, k);
      r.collectives.push_back(t);
    }
    // The stored run: the full-depth figures only, no per-device detail (no timeline was
    // simulated at this depth; re-open the candidate and simulate it to see one).
    stored.inputs = sims[1].run.inputs;
    stored.summary = s;
  }
  SortByTime(r.collectives);
  r.outcome = Outcome::kSimulated;
  stored.label = p.candidate.Label();
  stored.key = p.candidate.Key();
  for (auto& kv : p.candidate.ToSettings()) stored.inputs.settings.push_back(std::move(kv));
  for (auto& kv : ResultSettings(r)) stored.inputs.settings.push_back(std::move(kv));
  ev.run = std::move(stored);
  return finish();
}

RunSummary ExtrapolateSummary(const RunSummary& a, const RunSummary& b, double k) {
  RunSummary s;
  s.num_devices = b.num_devices;
  // A deeper model neither runs faster nor peaks lower than the deeper of the two it is
  // extrapolated from: when the two samples fall with depth (a schedule or rematerialisation
  // that differs between them), the line would go below that, even below zero ("2D Attempt 2"
  // on X=16,Y=128 at 2048 cores extrapolated to a peak of 0 bytes and ranked as fitting).
  s.step_time_s = std::max(Lin(a.step_time_s, b.step_time_s, k), std::max(a.step_time_s, b.step_time_s));
  s.compute_time_s = Lin(a.compute_time_s, b.compute_time_s, k);
  s.communication_time_s = Lin(a.communication_time_s, b.communication_time_s, k);
  s.idle_time_s = Lin(a.idle_time_s, b.idle_time_s, k);
  s.exposed_communication_s = Lin(a.exposed_communication_s, b.exposed_communication_s, k);
  s.peak_memory_bytes = std::max(static_cast<int64_t>(std::llround(Lin(static_cast<double>(a.peak_memory_bytes),
                                                                       static_cast<double>(b.peak_memory_bytes), k))),
                                 std::max(a.peak_memory_bytes, b.peak_memory_bytes));
  s.bytes_communicated = static_cast<int64_t>(std::llround(Lin(static_cast<double>(a.bytes_communicated),
                                                               static_cast<double>(b.bytes_communicated), k)));
  s.total_flops = Lin(a.total_flops, b.total_flops, k);
  // MFU x step time is proportional to the useful FLOPs, which grow linearly with depth.
  s.mfu = s.step_time_s > 0 ? Lin(a.mfu * a.step_time_s, b.mfu * b.step_time_s, k) / s.step_time_s : 0;
  s.raw_flops_utilization = s.step_time_s > 0 ? Lin(a.raw_flops_utilization * a.step_time_s,
                                                    b.raw_flops_utilization * b.step_time_s, k) / s.step_time_s
                                              : 0;
  // Pipeline bubbles and recompute grow with the layers per stage, like the rest of the step.
  s.pipeline_stages = b.pipeline_stages;
  s.bubble_time_s = std::max(0.0, Lin(a.bubble_time_s, b.bubble_time_s, k));
  s.recompute_time_s = std::max(0.0, Lin(a.recompute_time_s, b.recompute_time_s, k));
  s.bubble_flops = std::max(0.0, Lin(a.bubble_flops, b.bubble_flops, k));
  s.recompute_flops = std::max(0.0, Lin(a.recompute_flops, b.recompute_flops, k));
  return s;
}

// ---- results as run settings ----------------------------------------------------------------------

Settings ResultSettings(const CandidateResult& r) {
  Settings s = {{"result.evaluation", r.evaluation},
                {"result.bound_memory_bytes", std::to_string(r.bounds.memory_bytes)},
                {"result.bound_step_time_s", Num(r.bounds.step_time_s)},
                {"result.bound_flops", Num(r.bounds.flops)},
                {"result.hbm_bytes", Num(r.hbm_bytes)},
                {"result.bubble_fraction", Num(r.candidate.bubble_fraction)}};
  std::string coll;
  for (const CollectiveTotal& t : r.collectives) {
    if (!coll.empty()) coll += ";";
    coll += t.kind + ":" + Num(t.count) + ":" + Num(t.bytes) + ":" + Num(t.time_s);
  }
  s.emplace_back("result.collectives", coll);
  return s;
}

Result<CandidateResult> ResultFromRun(const RunOverview& run) {
  auto c = Candidate::FromSettings(run.inputs.settings);
  if (!c.ok()) return Error("run " + std::to_string(run.id) + ": " + c.error().message);
  CandidateResult r;
  r.candidate = std::move(c).value();
  r.outcome = Outcome::kSimulated;
  r.summary = run.summary;
  r.run_id = run.id;
  for (const auto& [k, v] : run.inputs.settings) {
    double x = 0;
    if (k == "result.evaluation") {
      r.evaluation = v;
      r.extrapolated = v.rfind("extrapolated", 0) == 0;
    } else if (k == "result.bound_memory_bytes" && ParseNum(v, &x)) {
      r.bounds.memory_bytes = static_cast<int64_t>(x);
    } else if (k == "result.bound_step_time_s" && ParseNum(v, &x)) {
      r.bounds.step_time_s = x;
    } else if (k == "result.bound_flops" && ParseNum(v, &x)) {
      r.bounds.flops = x;
    } else if (k == "result.hbm_bytes" && ParseNum(v, &x)) {
      r.hbm_bytes = x;
    } else if (k == "result.bubble_fraction" && ParseNum(v, &x)) {
      r.candidate.bubble_fraction = x;
    } else if (k == "result.collectives" && !v.empty()) {
      size_t start = 0;
      while (start <= v.size()) {
        size_t end = v.find(';', start);
        if (end == std::string::npos) end = v.size();
        const std::string item = v.substr(start, end - start);
        const size_t a = item.find(':'), b = item.find(':', a + 1), c2 = item.find(':', b + 1);
        CollectiveTotal t;
        if (a == std::string::npos || b == std::string::npos || c2 == std::string::npos ||
            !ParseNum(std::string_view(item).substr(a + 1, b - a - 1), &t.count) ||
            !ParseNum(std::string_view(item).substr(b + 1, c2 - b - 1), &t.bytes) ||
            !ParseNum(std::string_view(item).substr(c2 + 1), &t.time_s))
          return Error("run " + std::to_string(run.id) + ": malformed result.collectives '" + v + "'");
        t.kind = item.substr(0, a);
        r.collectives.push_back(t);
        start = end + 1;
      }
    }
  }
  return r;
}

}  // namespace shardscope::search
