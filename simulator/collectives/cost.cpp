#include "simulator/collectives/cost.h"

#include "simulator/collectives/schedule_emit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

namespace shardscope::sim {

namespace {

double CombineLatency(double latency, double bandwidth_time, LatencyModel model) {
  return model == LatencyModel::kAdditive ? latency + bandwidth_time : std::max(latency, bandwidth_time);
}

// A job for the fluid model: bytes it must move over each link (sparse), when it starts, and the
// job that must finish before it may start (the passes of an all-reduce), if any.
struct FluidJob {
  std::vector<std::pair<int64_t, double>> link_bytes;
  double start_s = 0;
  int64_t after = -1;  // an earlier job of the list
};

// Max-min fair progress of concurrent jobs. A job's rate is measured on its busiest link (bytes/s
// there); on every other link it uses rate x (bytes there / bytes on its busiest link). Rates are
// set by progressive filling and re-solved whenever a job starts or finishes. A job with `after`
// starts when that job finishes (or at its own start, if later). Returns each job's data-done time
// (its start when it moves nothing).
std::vector<double> RunFluid(const Topology& topo, const std::vector<FluidJob>& jobs) {
  const size_t n = jobs.size();
  std::vector<double> done_at(n, 0.0), remaining(n, 1.0), peak(n, 0.0);
  std::vector<std::vector<std::pair<int64_t, double>>> weights(n);  // link, bytes / peak bytes
  std::vector<char> done(n, 0);
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<double> start(n, kNever);  // when each job may start (after its predecessor)
  for (size_t j = 0; j < n; ++j) {
    if (jobs[j].after < 0) start[j] = jobs[j].start_s;
    // The busiest link in time (bytes / bandwidth) defines the job's unit of work.
    double peak_time = 0;
    for (const auto& [l, b] : jobs[j].link_bytes) peak_time = std::max(peak_time, b / topo.link(l).bandwidth);
    peak[j] = peak_time;  // seconds alone on an empty network
    for (const auto& [l, b] : jobs[j].link_bytes) {
      if (b > 0 && peak_time > 0) weights[j].emplace_back(l, b / peak_time);  // bytes/s this link needs at full speed
    }
  }
  // The jobs that start after each job, in list order.
  std::vector<std::vector<size_t>> successors(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t a = jobs[k].after;
    if (a >= 0 && static_cast<size_t>(a) < k) successors[static_cast<size_t>(a)].push_back(k);
  }
  // A job is done at `t`: its successors may start then (those that move nothing are done too).
  std::function<void(size_t, double)> finish = [&](size_t j, double t) {
    done[j] = 1;
    done_at[j] = t;
    for (size_t k : successors[j]) {
      start[k] = std::max(jobs[k].start_s, t);
      if (peak[k] <= 0) finish(k, start[k]);
    }
  };
  for (size_t j = 0; j < n; ++j) {
    if (!done[j] && peak[j] <= 0 && start[j] < kNever) finish(j, start[j]);
  }
  const size_t num_links = static_cast<size_t>(topo.num_links());
  std::vector<double> cap(num_links), demand(num_links);
  std::vector<double> speed(n, 0.0);  // fraction of full speed (1 = alone on the network)
  double now = kNever;
  for (size_t j = 0; j < n; ++j) {
    if (!done[j]) now = std::min(now, start[j]);
  }
  while (now < std::numeric_limits<double>::infinity()) {
    double next_start = std::numeric_limits<double>::infinity();
    std::vector<size_t> active;
    for (size_t j = 0; j < n; ++j) {
      if (done[j]) continue;
      if (start[j] <= now) active.push_back(j);
      else next_start = std::min(next_start, start[j]);
    }
    if (active.empty()) {
      now = next_start;
      continue;
    }
    // Progressive filling on the common speed level of the unfrozen jobs.
    std::vector<int64_t> used;
    for (size_t j : active) {
      for (const auto& [l, w] : weights[j]) {
        const size_t li = static_cast<size_t>(l);
        used.push_back(l);
        cap[li] = topo.link(l).bandwidth;
        demand[li] += w;
      }
    }
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::vector<char> frozen(n, 0);
    size_t unfrozen = active.size();
    double level = 0;
    while (unfrozen > 0) {
      double inc = std::numeric_limits<double>::infinity();
      for (int64_t l : used) {
        const size_t li = static_cast<size_t>(l);
        if (demand[li] > 1e-300) inc = std::min(inc, cap[li] / demand[li]);
      }
      if (!(inc < std::numeric_limits<double>::infinity())) break;
      level += inc;
      for (int64_t l : used) {
        const size_t li = static_cast<size_t>(l);
        if (demand[li] > 1e-300) cap[li] -= inc * demand[li];
      }
      for (size_t j : active) {
        if (frozen[j]) continue;
        bool saturated = false;
        for (const auto& [l, w] : weights[j]) {
          if (cap[static_cast<size_t>(l)] <= 1e-9 * topo.link(l).bandwidth) saturated = true;
        }
        if (!saturated) continue;
        frozen[j] = 1;
        speed[j] = level;
        --unfrozen;
        for (const auto& [l, w] : weights[j]) demand[static_cast<size_t>(l)] -= w;
      }
    }
    for (int64_t l : used) {
      cap[static_cast<size_t>(l)] = 0;
      demand[static_cast<size_t>(l)] = 0;
    }
    // Advance to the next finish or start. A job at speed s finishes its remaining fraction r of
    // `peak` seconds of work in r * peak / s.
    double dt = next_start - now;
    for (size_t j : active) dt = std::min(dt, remaining[j] * peak[j] / speed[j]);
    const double next = now + dt;
    for (size_t j : active) {
      remaining[j] -= dt * speed[j] / peak[j];
      if (remaining[j] <= 1e-9) {
        remaining[j] = 0;
        finish(j, next);
      }
    }
    now = next;
  }
  return done_at;
}

void FillTraffic(const Topology& topo, const std::vector<double>& totals, CollectiveCost* cost) {
  cost->link_traffic.clear();
  cost->total_link_bytes = 0;
  cost->max_link_bytes = 0;
  cost->busiest_link = -1;
  for (size_t l = 0; l < totals.size(); ++l) {
    if (totals[l] <= 0) continue;
    cost->link_traffic.push_back({static_cast<int64_t>(l), totals[l]});
    cost->total_link_bytes += totals[l];
    if (totals[l] > cost->max_link_bytes) {
      cost->max_link_bytes = totals[l];
      cost->busiest_link = static_cast<int64_t>(l);
    }
  }
}

// A schedule's link loads and latency, accumulated hop by hop: every hop's bytes on the links it
// crosses, per pass (an all-reduce's reduce-scatter and all-gather run one after the other); per
// replica group the sum over its steps of each step's longest crossing, the collective's latency
// the largest of its groups'.
struct ScheduleLoads {
  std::vector<std::vector<double>> passes;  // per pass, per link
  std::vector<double> totals;               // per link, all passes
  double latency = 0;
};

class LoadSink final : public ScheduleSink {
 public:
  LoadSink(const Topology& topo, const CollectivePlan& plan) : LoadSink(topo, plan, nullptr) {}
  // With `workspace`: the per-pass loads go to its arrays (num_links each, all zero on entry; at
  // least plan.num_passes() of them), which the caller reads and clears again, so that many
  // requests in a row (EstimateConcurrentCollectiveParts) allocate nothing; Finish() then returns
  // the latency only (passes and totals empty).
  // `touched` (with `workspace`): per pass, the links whose load was zero before this plan (so
  // the caller reads and clears those only, not every link of the slice).
  LoadSink(const Topology& topo, const CollectivePlan& plan, std::vector<std::vector<double>>* workspace,
           std::vector<std::vector<int64_t>>* touched = nullptr)
      : plan_(plan) {
    std::vector<std::vector<double>>& passes = workspace ? *workspace : out_.passes;
    const size_t num_passes = static_cast<size_t>(plan.num_passes());
    if (!workspace) {
      passes.assign(num_passes, std::vector<double>(static_cast<size_t>(topo.num_links()), 0.0));
    } else if (passes.size() < num_passes) {
      passes.resize(num_passes, std::vector<double>(static_cast<size_t>(topo.num_links()), 0.0));
    }
    if (workspace && touched) {
      if (touched->size() < passes.size()) touched->resize(passes.size());
      reduce_touched_ = &touched->front();
      gather_touched_ = &(*touched)[num_passes - 1];
    }
    reduce_loads_ = passes.front().data();
    gather_loads_ = passes[num_passes - 1].data();
    for (const auto& [link, bytes] : plan.counted_loads) Add(reduce_loads_, reduce_touched_, link, bytes);
    step_latency_.assign(static_cast<size_t>(std::max<int64_t>(plan.steps, 1)), 0.0);
  }

  void Hop(const ScheduleHop& h, std::span<const int64_t> links) override {
    if (h.group != group_) NextGroup(h.group);
    if (h.bytes <= 0 || links.empty()) return;
    // An all-reduce's passes (plan.PassOf): the reduce-scatter's hops, then the all-gather's.
    AddLoad(h.reduce, links, h.bytes);
    const size_t step = static_cast<size_t>(h.step);
    if (step >= step_latency_.size()) Grow(step);
    double& sl = step_latency_[step];
    if (h.latency > sl) sl = h.latency;
  }

  // Bulk form (schedule_emit::LoadsOnlySink): what Hop adds, for many hops at once.
  static constexpr bool kLoadsOnly = true;
  void Group(int32_t group) {
    if (group != group_) NextGroup(group);
  }
  void AddLoad(bool reduce, std::span<const int64_t> links, double bytes) {
    double* loads = reduce ? reduce_loads_ : gather_loads_;
    std::vector<int64_t>* touched = reduce ? reduce_touched_ : gather_touched_;
    if (!touched) {
      for (int64_t l : links) loads[l] += bytes;
      return;
    }
    for (int64_t l : links) Add(loads, touched, l, bytes);
  }
  void StepLatency(int64_t step, double latency) {
    const size_t s = static_cast<size_t>(step);
    if (s >= step_latency_.size()) Grow(s);
    double& sl = step_latency_[s];
    if (latency > sl) sl = latency;
  }

  ScheduleLoads Finish() {
    CloseGroup();
    // Groups whose loads were counted per axis: their steps at their hop latency.
    for (const ScheduledGroup& g : plan_.plans) {
      double t = 0;
      for (int64_t k = 0; k < g.counted_steps; ++k) t += g.counted_step_latency;
      out_.latency = std::max(out_.latency, t);
    }
    if (!out_.passes.empty()) {
      out_.totals = out_.passes[0];
      for (size_t p = 1; p < out_.passes.size(); ++p) {
        for (size_t l = 0; l < out_.totals.size(); ++l) out_.totals[l] += out_.passes[p][l];
      }
    }
    return std::move(out_);
  }

 private:
  [[gnu::noinline]] void NextGroup(int32_t group) {
    CloseGroup();
    group_ = group;
  }
  [[gnu::noinline]] void Grow(size_t step) { step_latency_.resize(step + 1, 0.0); }
  static void Add(double* loads, std::vector<int64_t>* touched, int64_t link, double bytes) {
    double& load = loads[link];
    if (touched && load == 0 && bytes != 0) touched->push_back(link);
    load += bytes;
  }
  void CloseGroup() {
    double t = 0;
    for (double& l : step_latency_) {
      t += l;
      l = 0;
    }
    out_.latency = std::max(out_.latency, t);
  }

  const CollectivePlan& plan_;
  ScheduleLoads out_;
  double* reduce_loads_ = nullptr;
  double* gather_loads_ = nullptr;
  std::vector<int64_t>* reduce_touched_ = nullptr;
  std::vector<int64_t>* gather_touched_ = nullptr;
  std::vector<double> step_latency_;
  int32_t group_ = 0;
};

ScheduleLoads LoadsOf(const Topology& topo, const CollectivePlan& plan) {
  LoadSink sink(topo, plan);
  schedule_emit::Emit(topo, plan, sink);
  return sink.Finish();
}

ScheduleLoads LoadsOf(const Topology& topo, const CollectiveSchedule& s) {
  LoadSink sink(topo, s.plan);
  for (size_t i = 0; i < s.hops.size(); ++i) sink.Hop(s.hops[i], s.links[i]);
  return sink.Finish();
}

// The busiest link of a pass in time (bytes / bandwidth; the first such link), or {-1, 0}.
LinkTraffic BusiestLink(const Topology& topo, const std::vector<double>& loads) {
  LinkTraffic best;
  double best_time = 0;
  for (size_t l = 0; l < loads.size(); ++l) {
    if (loads[l] <= 0) continue;
    const double t = loads[l] / topo.link(static_cast<int64_t>(l)).bandwidth;
    if (t > best_time) {
      best_time = t;
      best = {static_cast<int64_t>(l), loads[l]};
    }
  }
  return best;
}

CollectiveCost CostOf(const Topology& topology, const CollectivePlan& plan, const ScheduleLoads& loads,
                      const CollectiveOptions& options) {
  CollectiveCost cost;
  cost.kind = plan.kind;
  cost.latency_time_s = loads.latency;
  FillTraffic(topology, loads.totals, &cost);
  // The passes run one after the other, each at the pace of its busiest link.
  cost.max_link_bytes = 0;
  for (const auto& pass : loads.passes) {
    const LinkTraffic busiest = BusiestLink(topology, pass);
    cost.pass_busiest.push_back(busiest);
    if (busiest.link < 0) continue;
    cost.bandwidth_time_s += busiest.bytes / topology.link(busiest.link).bandwidth;
    cost.max_link_bytes += busiest.bytes;
  }
  cost.busiest_link = cost.pass_busiest.front().link;
  cost.time_s = CombineLatency(cost.latency_time_s, cost.bandwidth_time_s, options.latency_model);
  cost.steps = plan.steps;
  cost.regime = cost.latency_time_s > cost.bandwidth_time_s ? CostRegime::kLatencyBound : CostRegime::kBandwidthBound;
  cost.num_groups = static_cast<int64_t>(plan.groups.size());
  cost.group_size = plan.group_size;
  cost.bytes_per_device = plan.bytes_per_device;
  cost.algorithm = plan.algorithm;
  return cost;
}

}  // namespace

CollectiveCost TimeSchedule(const Topology& topology, const CollectiveSchedule& schedule, const CollectiveOptions& options) {
  return CostOf(topology, schedule.plan, LoadsOf(topology, schedule), options);
}

Result<CollectiveCost> EstimateCollectivePerByte(const Topology& topology, CollectiveKind kind,
                                                 const std::vector<std::vector<int64_t>>& groups,
                                                 const CollectiveOptions& options) {
  if (kind == CollectiveKind::kCollectivePermute) {
    return Error("collective-permute takes source/target pairs: use EstimateCollectivePermute");
  }
  auto plan = PlanCollective(topology, kind, groups, 1.0, options);
  if (!plan.ok()) return plan.error();
  return CostOf(topology, plan.value(), LoadsOf(topology, plan.value()), options);
}

CollectiveCost CollectiveCostAt(const CollectiveCost& per_byte, double operand_bytes, const CollectiveOptions& options) {
  CollectiveCost c = per_byte;
  const double b = operand_bytes;
  c.bandwidth_time_s = per_byte.bandwidth_time_s * b;
  c.time_s = CombineLatency(c.latency_time_s, c.bandwidth_time_s, options.latency_model);
  c.regime = c.latency_time_s > c.bandwidth_time_s ? CostRegime::kLatencyBound : CostRegime::kBandwidthBound;
  c.bytes_per_device = per_byte.bytes_per_device * b;
  c.total_link_bytes = per_byte.total_link_bytes * b;
  c.max_link_bytes = per_byte.max_link_bytes * b;
  for (LinkTraffic& t : c.pass_busiest) t.bytes *= b;
  for (LinkTraffic& t : c.link_traffic) t.bytes *= b;
  return c;
}

Result<CollectiveCost> EstimateCollective(const Topology& topology, CollectiveKind kind,
                                          const std::vector<std::vector<int64_t>>& groups, double operand_bytes,
                                          const CollectiveOptions& options) {
  if (kind == CollectiveKind::kCollectivePermute) {
    return Error("collective-permute takes source/target pairs: use EstimateCollectivePermute");
  }
  if (!(operand_bytes >= 0) || !std::isfinite(operand_bytes)) return Error("operand bytes must be a finite number >= 0");
  auto per_byte = EstimateCollectivePerByte(topology, kind, groups, options);
  if (!per_byte.ok()) return per_byte.error();
  return CollectiveCostAt(per_byte.value(), operand_bytes, options);
}

Result<CollectiveCost> EstimateCollectivePermute(const Topology& topology,
                                                 const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes,
                                                 const CollectiveOptions& options) {
  auto schedule = BuildPermuteSchedule(topology, pairs, bytes);
  if (!schedule.ok()) return schedule.error();
  const CollectiveSchedule& s = schedule.value();
  std::vector<LinkFlow> flows;
  flows.reserve(s.hops.size());
  for (size_t i = 0; i < s.hops.size(); ++i) flows.push_back({s.links[i], s.hops[i].bytes, 0.0});
  auto timings = SimulateFlows(topology, flows, options);
  if (!timings.ok()) return timings.error();
  CollectiveCost cost;
  cost.kind = CollectiveKind::kCollectivePermute;
  cost.num_groups = static_cast<int64_t>(pairs.size());
  cost.group_size = 2;
  std::vector<double> totals(static_cast<size_t>(topology.num_links()), 0.0);
  for (const auto& t : timings.value()) {
    cost.time_s = std::max(cost.time_s, t.finish_s);
    cost.bandwidth_time_s = std::max(cost.bandwidth_time_s, t.data_done_s - t.start_s);
    cost.latency_time_s = std::max(cost.latency_time_s, t.latency_s);
    cost.steps = std::max(cost.steps, t.hops);
  }
  for (size_t i = 0; i < flows.size(); ++i) {
    for (int64_t l : timings.value()[i].path) totals[static_cast<size_t>(l)] += flows[i].bytes;
  }
  cost.bytes_per_device = s.plan.bytes_per_device;
  cost.regime = cost.latency_time_s > cost.bandwidth_time_s ? CostRegime::kLatencyBound : CostRegime::kBandwidthBound;
  FillTraffic(topology, totals, &cost);
  cost.algorithm = s.plan.algorithm;
  return cost;
}

Result<std::vector<double>> EstimateConcurrentCollectives(const Topology& topology,
                                                          const std::vector<CollectiveRequest>& requests,
                                                          const CollectiveOptions& options) {
  auto parts = EstimateConcurrentCollectiveParts(topology, requests, options);
  if (!parts.ok()) return parts.error();
  std::vector<double> finish(requests.size(), 0.0);
  for (size_t r = 0; r < requests.size(); ++r) {
    finish[r] = CombineLatency(parts->latency_s[r], parts->data_done_s[r], options.latency_model);
  }
  return finish;
}

Result<ConcurrentCollectiveParts> EstimateConcurrentCollectiveParts(const Topology& topology,
                                                                   const std::vector<CollectiveRequest>& requests,
                                                                   const CollectiveOptions& options) {
  std::vector<FluidJob> jobs;
  std::vector<size_t> last_job;  // per request: its last pass's job
  std::vector<double> latency;
  // The requests' loads land in one set of per-link arrays, read into jobs and cleared again
  // (thousands of replica groups at 2048 devices: no arrays of every link made per group). One
  // fluid job per pass, each after the previous one, with the pass's loaded links in order.
  std::vector<std::vector<double>> workspace;
  std::vector<std::vector<int64_t>> touched;  // per pass: the links the request loaded
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& req = requests[r];
    auto plan = req.kind == CollectiveKind::kCollectivePermute
                    ? PlanPermute(topology, req.source_target_pairs, req.operand_bytes)
                    : PlanCollective(topology, req.kind, req.groups, req.operand_bytes, options);
    if (!plan.ok()) return Error("request " + std::to_string(r) + ": " + plan.error().message);
    LoadSink sink(topology, plan.value(), &workspace, &touched);
    schedule_emit::Emit(topology, plan.value(), sink);
    latency.push_back(sink.Finish().latency);
    const size_t num_passes = static_cast<size_t>(plan->num_passes());
    for (size_t p = 0; p < num_passes; ++p) {
      FluidJob job;
      std::vector<double>& pass = workspace[p];
      std::vector<int64_t>& links = touched[p];
      std::sort(links.begin(), links.end());  // in link order, as a scan of every link lists them
      for (int64_t l : links) {
        if (pass[static_cast<size_t>(l)] > 0) job.link_bytes.emplace_back(l, pass[static_cast<size_t>(l)]);
        pass[static_cast<size_t>(l)] = 0;
      }
      links.clear();
      if (p > 0) job.after = static_cast<int64_t>(jobs.size()) - 1;
      jobs.push_back(std::move(job));
    }
    last_job.push_back(jobs.size() - 1);
  }
  const std::vector<double> data_done = RunFluid(topology, jobs);
  ConcurrentCollectiveParts parts;
  parts.latency_s = std::move(latency);
  for (size_t r = 0; r < requests.size(); ++r) parts.data_done_s.push_back(data_done[last_job[r]]);
  return parts;
}

double CombineCollectiveLatency(double latency_s, double bandwidth_time_s, const CollectiveOptions& options) {
  return CombineLatency(latency_s, bandwidth_time_s, options.latency_model);
}

// ---- Contention ----------------------------------------------------------------------------------------

Result<std::vector<TransferTiming>> SimulateFlows(const Topology& topo, const std::vector<LinkFlow>& flows,
                                                  const CollectiveOptions& options) {
  std::vector<TransferTiming> out(flows.size());
  std::vector<FluidJob> jobs(flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    const auto& f = flows[i];
    if (!(f.bytes >= 0) || !std::isfinite(f.bytes)) return Error("flow " + std::to_string(i) + " has invalid bytes");
    if (!(f.start_s >= 0) || !std::isfinite(f.start_s)) return Error("flow " + std::to_string(i) + " has an invalid start time");
    std::map<int64_t, double> per_link;
    for (int64_t l : f.path) {
      if (l < 0 || l >= topo.num_links()) return Error("flow " + std::to_string(i) + " uses unknown link " + std::to_string(l));
      per_link[l] = f.bytes;  // a link listed twice is still crossed by the same bytes at once
    }
    jobs[i].start_s = f.start_s;
    jobs[i].link_bytes.assign(per_link.begin(), per_link.end());
    out[i].start_s = f.start_s;
    out[i].path = f.path;
    out[i].hops = static_cast<int64_t>(f.path.size());
    out[i].latency_s = topo.PathLatency(f.path);
  }
  const std::vector<double> data_done = RunFluid(topo, jobs);
  for (size_t i = 0; i < flows.size(); ++i) {
    auto& t = out[i];
    t.data_done_s = data_done[i];
    t.finish_s = options.latency_model == LatencyModel::kAdditive ? t.data_done_s + t.latency_s
                                                                   : std::max(t.start_s + t.latency_s, t.data_done_s);
  }
  return out;
}

Result<std::vector<TransferTiming>> SimulateTransfers(const Topology& topo, const std::vector<Transfer>& transfers,
                                                      const CollectiveOptions& options) {
  std::vector<LinkFlow> flows;
  flows.reserve(transfers.size());
  for (size_t i = 0; i < transfers.size(); ++i) {
    const auto& t = transfers[i];
    if (t.src_device < 0 || t.src_device >= topo.num_devices() || t.dst_device < 0 || t.dst_device >= topo.num_devices()) {
      return Error("transfer " + std::to_string(i) + " names a device outside 0.." + std::to_string(topo.num_devices() - 1));
    }
    flows.push_back({topo.Route(topo.ChipOfDevice(t.src_device), topo.ChipOfDevice(t.dst_device)), t.bytes, t.start_s});
  }
  return SimulateFlows(topo, flows, options);
}

// ---- The book's closed forms ---------------------------------------------------------------------------

double BookCollectiveTime(CollectiveKind kind, double V, double w, double t_min, const std::vector<int64_t>& sizes,
                          bool wraparound) {
  if (sizes.empty() || w <= 0) return 0;
  const double n_axes = static_cast<double>(sizes.size());
  double n = 1, sum = 0, sum_minus_one = 0;
  for (int64_t s : sizes) {
    n *= static_cast<double>(s);
    sum += static_cast<double>(s);
    sum_minus_one += static_cast<double>(s - 1);
  }
  const double W = 2 * w;  // the book's bidirectional W_ICI
  double latency, bandwidth;
  if (wraparound) {
    latency = t_min * sum / 2;
    bandwidth = V / (W * n_axes);
  } else {
    latency = t_min * sum_minus_one;
    bandwidth = (n - 1) * (V / n) / (w * n_axes);
  }
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return std::max(latency, bandwidth);
    case CollectiveKind::kAllReduce: return 2 * std::max(latency, bandwidth);
    case CollectiveKind::kAllToAll: return std::max(latency, bandwidth / 4);
    case CollectiveKind::kCollectivePermute: return std::max(t_min, V / w);
  }
  return 0;
}

}  // namespace shardscope::sim
