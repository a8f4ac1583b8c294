#include "app/search/search.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "app/pipeline/reproduce.h"
#include "core/base/units.h"
#include "partitioner/hlo_sharding_util.h"
#include "partitioner/spmd/partition_memo.h"

namespace shardscope::search {

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs fn(i, worker) for i in [0, n) on `jobs` threads (the calling thread is one of them), each
// taking the next index when it is free; `worker` (0 .. jobs-1) says which thread runs it.
void ParallelForWorkers(size_t n, int jobs, const std::function<void(size_t, size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&](size_t worker) {
    for (size_t i = next++; i < n; i = next++) fn(i, worker);
  };
  const size_t threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, jobs)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& t : pool) t.join();
}

// The same without the worker.
void ParallelFor(size_t n, int jobs, const std::function<void(size_t)>& fn) {
  ParallelForWorkers(n, jobs, [&](size_t i, size_t) { fn(i); });
}

CandidateResult Unevaluated(const Candidate& c, Outcome outcome, std::string message) {
  CandidateResult r;
  r.candidate = c;
  r.outcome = outcome;
  r.message = std::move(message);
  return r;
}

// Prepared candidates that survive the memory bound, and results for those that do not.
struct Prepared {
  std::vector<std::optional<PreparedCandidate>> prepared;  // by candidate index
  std::vector<CandidateResult> results;                    // by candidate index (survivors: placeholders)
};

// The modules built for the bounds are dropped: kept for every candidate until its turn, they were
// most of the search's peak memory (260 of 311 MB at 128 devices), and the pages they took were
// fresh ones the kernel had to zero; EvaluateCandidate builds a survivor's again just before it
// partitions it, while the pages the previous candidate freed are still warm (docs/search.md).
// Since no module outlives its bounds, the bounds are taken at the cheapest depths that give them
// (PrepareFor::kBoundsOnly).
Prepared PrepareAll(const std::vector<Candidate>& candidates, const SearchOptions& options,
                    const std::function<void(const SearchProgress&)>& on_progress, std::mutex& progress_mutex,
                    std::atomic<int64_t>& done, int64_t total, const CancellationToken& cancel) {
  Prepared out;
  out.prepared.resize(candidates.size());
  out.results.resize(candidates.size());
  ParallelFor(candidates.size(), options.jobs, [&](size_t i) {
    const Candidate& c = candidates[i];
    CandidateResult& r = out.results[i];
    if (cancel.cancelled()) {
      r = Unevaluated(c, Outcome::kCancelled, "the search was cancelled");
      return;
    }
    auto p = PrepareCandidate(c, options.evaluation, PrepareFor::kBoundsOnly);
    bool decided = true;
    if (!p.ok()) {
      r = Unevaluated(c, Outcome::kInvalid, p.error().message);
    } else if (static_cast<double>(p->bounds.memory_bytes) > p->hbm_bytes) {
      r = Unevaluated(c, Outcome::kPrunedMemory,
                      "its entry parameters alone need " + FormatBytes(static_cast<double>(p->bounds.memory_bytes)) +
                          " per device; HBM holds " + FormatBytes(p->hbm_bytes));
      r.bounds = p->bounds;
      r.hbm_bytes = p->hbm_bytes;
    } else {
      decided = false;
      r = Unevaluated(c, Outcome::kSimulated, "");
      r.bounds = p->bounds;
      r.hbm_bytes = p->hbm_bytes;
      p->modules.clear();
      out.prepared[i] = std::move(p).value();
    }
    if (decided) {
      const int64_t d = ++done;
      if (on_progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        on_progress({d, total, "preparing", &r});
      }
    }
  });
  return out;
}

}  // namespace

Result<std::vector<Candidate>> GenerateCandidates(const SearchSpace& space, const std::vector<std::string>& families,
                                                  std::vector<std::string>* notes) {
  std::vector<const StrategyFamily*> chosen;
  if (families.empty()) {
    chosen = StrategyFamilies();
  } else {
    for (const std::string& name : families) {
      const StrategyFamily* f = FindFamily(name);
      if (!f) {
        std::string names;
        for (const StrategyFamily* g : StrategyFamilies()) names += (names.empty() ? "" : ", ") + std::string(g->name());
        return Error("unknown strategy family '" + name + "' (families: " + names + ")");
      }
      chosen.push_back(f);
    }
  }
  std::vector<Candidate> all;
  std::vector<std::string> local_notes;
  for (const StrategyFamily* f : chosen) f->Generate(space, all, notes ? *notes : local_notes);
  std::vector<Candidate> out;
  std::set<std::string> keys;
  for (Candidate& c : all)
    if (keys.insert(c.Key()).second) out.push_back(std::move(c));
  return out;
}

std::vector<size_t> RankResults(std::vector<CandidateResult>& results) {
  auto group = [](const CandidateResult& r) {
    if (r.fits()) return 0;
    if (r.simulated()) return 1;
    switch (r.outcome) {
      case Outcome::kPrunedBound: return 2;
      case Outcome::kPrunedMemory: return 3;
      case Outcome::kInvalid: return 4;
      case Outcome::kFailed: return 5;
      default: return 6;
    }
  };
  // Step times to the nanosecond: two candidates that run the same program (two strategies that
  // coincide on a 1-D mesh) tie even when one was extrapolated from smaller depths, and then the
  // one simulated at full depth ranks first.
  auto time_of = [](const CandidateResult& r) {
    return std::llround(1e9 * (r.simulated() ? r.summary.step_time_s : r.bounds.step_time_s));
  };
  std::stable_sort(results.begin(), results.end(), [&](const CandidateResult& a, const CandidateResult& b) {
    const int ga = group(a), gb = group(b);
    if (ga != gb) return ga < gb;
    if (time_of(a) != time_of(b)) return time_of(a) < time_of(b);
    if (a.extrapolated != b.extrapolated) return !a.extrapolated;
    return a.summary.peak_memory_bytes < b.summary.peak_memory_bytes;
  });
  // Pareto front over the candidates that fit: walk by ascending memory, keep each that is faster
  // than every smaller one.
  std::vector<size_t> fit;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].fits()) fit.push_back(i);
  std::stable_sort(fit.begin(), fit.end(), [&](size_t a, size_t b) {
    const auto& x = results[a].summary;
    const auto& y = results[b].summary;
    if (x.peak_memory_bytes != y.peak_memory_bytes) return x.peak_memory_bytes < y.peak_memory_bytes;
    return x.step_time_s < y.step_time_s;
  });
  std::vector<size_t> front;
  double best = 0;
  for (size_t i : fit) {
    const double t = results[i].summary.step_time_s;
    if (front.empty() || t < best) {
      front.push_back(i);
      best = t;
    }
  }
  return front;
}

CandidateResult EvaluateAndStore(const Candidate& candidate, const EvaluationOptions& options,
                                 const std::shared_ptr<pipeline::RunDatabase>& store, const CancellationToken& cancel) {
  auto p = PrepareCandidate(candidate, options);
  if (!p.ok()) return Unevaluated(candidate, Outcome::kInvalid, p.error().message);
  if (static_cast<double>(p->bounds.memory_bytes) > p->hbm_bytes) {
    CandidateResult r = Unevaluated(candidate, Outcome::kPrunedMemory,
                                    "its entry parameters alone need " + FormatBytes(static_cast<double>(p->bounds.memory_bytes)) +
                                        " per device; HBM holds " + FormatBytes(p->hbm_bytes));
    r.bounds = p->bounds;
    r.hbm_bytes = p->hbm_bytes;
    return r;
  }
  Evaluation ev = EvaluateCandidate(*p, options, cancel);
  StoreEvaluation(ev, store.get(), cancel);
  return ev.result;
}

namespace {

// Step 1: the pod and the candidates of every chosen family.
Result<std::vector<Candidate>> Generate(const SearchOptions& options, Pod& pod_out, std::vector<std::string>& notes) {
  auto pod = MakePod(options.chip, options.devices, options.slice, options.cores_per_chip);
  if (!pod.ok()) return pod.error();
  pod_out = pod.value();
  SearchSpace space(options.model, options.settings, pod.value());
  if (!space.known_model()) {
    auto probe = ZooBuild(options.model);  // its error lists the models
    return Error(probe.ok() ? "unknown model '" + options.model + "'" : probe.error().message);
  }
  auto candidates = GenerateCandidates(space, options.families, &notes);
  if (!candidates.ok()) return candidates.error();
  // A setting that neither the model nor a model the families derive from it has is a mistake (a
  // typo), not something to drop silently.
  {
    std::set<std::string> models = {options.model};
    for (const Candidate& c : *candidates) models.insert(c.model);
    std::set<std::string> known;
    std::string own;
    for (const ZooModel& m : ZooList()) {
      if (!models.count(m.name)) continue;
      for (const ZooParameter& p : m.parameters) {
        known.insert(p.name);
        if (m.name == options.model) own += (own.empty() ? "" : ", ") + p.name;
      }
    }
    for (const auto& [name, value] : options.settings)
      if (!known.count(name)) return Error("model " + options.model + " has no setting '" + name + "' (its settings: " + own + ")");
  }
  if (!options.meshes.empty()) {
    std::vector<DeviceMesh> wanted;
    for (const std::string& text : options.meshes) {
      auto m = DeviceMesh::Parse(text);
      if (!m.ok()) return Error("mesh '" + text + "': " + m.error().message);
      if (m->num_devices() != options.devices)
        return Error("mesh '" + text + "' has " + std::to_string(m->num_devices()) + " devices, the pod " +
                     std::to_string(options.devices));
      wanted.push_back(m.value());
    }
    std::vector<Candidate> kept;
    std::vector<std::string> generated;  // the meshes the families use, in order, for the message
    for (Candidate& c : *candidates) {
      if (std::find(generated.begin(), generated.end(), c.mesh) == generated.end()) generated.push_back(c.mesh);
      auto m = DeviceMesh::Parse(c.mesh);
      if (m.ok() && std::find(wanted.begin(), wanted.end(), m.value()) != wanted.end()) kept.push_back(std::move(c));
    }
    if (kept.empty() && !generated.empty()) {
      std::string list;
      for (size_t i = 0; i < generated.size() && i < 12; ++i) list += (i ? "; " : "") + generated[i];
      if (generated.size() > 12) list += "; ... (" + std::to_string(generated.size()) + " in all)";
      return Error("no candidate of " + options.model + " runs on the mesh(es) given by --mesh (axis names and order count); the families' meshes: " + list);
    }
    *candidates = std::move(kept);
  }
  if (candidates->empty()) {
    // Settings the model itself refuses leave every family without a candidate: say why.
    auto built = ZooBuild(options.model, options.settings);
    if (!built.ok()) return Error(built.error().message + " (so no strategy family has a candidate)");
    std::string names;
    for (const StrategyFamily* f : StrategyFamilies()) names += (names.empty() ? "" : ", ") + std::string(f->name());
    std::string why;
    for (const auto& n : notes) why += "; " + n;
    return Error("no strategy family generates candidates for " + options.model + " on " + std::to_string(options.devices) +
                 " devices (families: " + names + ")" + why);
  }
  return candidates;
}

}  // namespace

Result<SearchPlan> PlanSearch(const SearchOptions& options, const CancellationToken& cancel) {
  SearchPlan plan;
  auto candidates = Generate(options, plan.pod, plan.notes);
  if (!candidates.ok()) return candidates.error();
  plan.generated = static_cast<int64_t>(candidates->size());
  std::mutex progress_mutex;
  std::atomic<int64_t> done{0};
  Prepared prep = PrepareAll(*candidates, options, {}, progress_mutex, done, plan.generated, cancel);
  if (cancel.cancelled()) return CancelledError("planning the search");
  for (size_t i = 0; i < candidates->size(); ++i) {
    if (prep.prepared[i]) plan.candidates.push_back((*candidates)[i]);
    else plan.left_out.push_back(std::move(prep.results[i]));
  }
  return plan;
}

Result<SearchResult> RunSearch(const SearchOptions& options, const std::function<void(const SearchProgress&)>& on_progress,
                               const CancellationToken& cancel) {
  const double wall0 = Now(), cpu0 = ProcessCpuSeconds();
  SearchResult result;
  auto candidates = Generate(options, result.pod, result.notes);
  if (!candidates.ok()) return candidates.error();
  result.stats.generated = static_cast<int64_t>(candidates->size());
  const int64_t total = result.stats.generated;
  std::mutex progress_mutex;
  std::atomic<int64_t> done{0};

  // 2. Prepare.
  double t = Now();
  Prepared prep = PrepareAll(*candidates, options, on_progress, progress_mutex, done, total, cancel);
  result.stats.prepare_s = Now() - t;

  // 3. Evaluate the survivors, mesh by mesh, by ascending step-time bound. They share one memo of
  // collective timings (simulator/collective_timing.h): they run on one pod, and many of their
  // collectives recur (every depth of a candidate, every microbatch count on a mesh).
  EvaluationOptions evaluation = options.evaluation;
  // Figures only for now: the detail of the best ones is stored in step 4.
  evaluation.store_detail = false;
  if (!evaluation.simulation.collective_memo)
    evaluation.simulation.collective_memo = std::make_shared<sim::CollectiveTimingMemo>();
  t = Now();
  std::vector<size_t> order;
  for (size_t i = 0; i < prep.prepared.size(); ++i)
    if (prep.prepared[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Bounds& x = prep.prepared[a]->bounds;
    const Bounds& y = prep.prepared[b]->bounds;
    if (x.step_time_s != y.step_time_s) return x.step_time_s < y.step_time_s;
    return x.memory_bytes < y.memory_bytes;
  });
  // Then the candidates of one mesh together, the meshes in the order of their best bound: the
  // partitioner's memo is shared between the candidates of a mesh one thread evaluates in a row
  // (microbatch counts, schedules and depths on one mesh repeat most of their shardings), and
  // dropped when the thread moves to the next mesh, so at most one memo per thread is alive.
  auto mesh_key = [&](size_t i) { return prep.prepared[i]->candidate.mesh + "|" + prep.prepared[i]->mesh.order; };
  {
    std::map<std::string, size_t> rank;  // mesh -> its position among the meshes, by best bound
    for (size_t i : order) rank.emplace(mesh_key(i), rank.size());
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank.at(mesh_key(a)) < rank.at(mesh_key(b)); });
  }
  struct WorkerMemo {
    std::string mesh;
    std::shared_ptr<spmd::PartitionMemo> memo;
    std::shared_ptr<hlo_sharding_util::DotShardingMemo> dot_memo;  // the propagation's, likewise
  };
  std::vector<WorkerMemo> worker_memos(static_cast<size_t>(std::max(1, options.jobs)));
  struct Point {
    double time_s;
    int64_t memory;
    std::string label;
  };
  std::vector<Point> evaluated;  // candidates that fit
  std::mutex evaluated_mutex;
  ParallelForWorkers(order.size(), options.jobs, [&](size_t k, size_t worker) {
    const size_t i = order[k];
    PreparedCandidate& p = *prep.prepared[i];
    CandidateResult& r = prep.results[i];
    WorkerMemo& wm = worker_memos[worker];
    if (!wm.memo || wm.mesh != mesh_key(i)) {
      wm.mesh = mesh_key(i);
      wm.memo = std::make_shared<spmd::PartitionMemo>();
      wm.dot_memo = std::make_shared<hlo_sharding_util::DotShardingMemo>();
    }
    p.partition_memo = wm.memo;
    p.dot_memo = wm.dot_memo;
    if (cancel.cancelled()) {
      r.outcome = Outcome::kCancelled;
      r.message = "the search was cancelled";
    } else {
      std::optional<Point> dominated_by;
      if (options.prune) {
        std::lock_guard<std::mutex> lock(evaluated_mutex);
        for (const Point& e : evaluated)
          if (e.time_s <= p.bounds.step_time_s && e.memory <= p.bounds.memory_bytes) dominated_by = e;
      }
      if (dominated_by) {
        r.outcome = Outcome::kPrunedBound;
        r.message = "cannot beat " + dominated_by->label + " (" + FormatSeconds(dominated_by->time_s) + ", " +
                    FormatBytes(static_cast<double>(dominated_by->memory)) + "): its bounds are " +
                    FormatSeconds(p.bounds.step_time_s) + " and " + FormatBytes(static_cast<double>(p.bounds.memory_bytes));
      } else {
        Evaluation ev = EvaluateCandidate(p, evaluation, cancel);
        StoreEvaluation(ev, options.store.get(), cancel);
        r = std::move(ev.result);
        if (r.fits()) {
          std::lock_guard<std::mutex> lock(evaluated_mutex);
          evaluated.push_back({r.summary.step_time_s, r.summary.peak_memory_bytes, r.candidate.Label()});
        }
      }
    }
    p.modules.clear();
    p.partition_memo.reset();
    p.dot_memo.reset();
    const int64_t d = ++done;
    if (on_progress) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      on_progress({d, total, "evaluating", &r});
    }
  });
  worker_memos.clear();
  result.stats.evaluate_s = Now() - t;

  // 4. Confirm the best extrapolated candidates at full depth.
  t = Now();
  const std::vector<size_t> confirm = ConfirmationOrder(prep.results, options.confirm);
  EvaluationOptions exact = evaluation;
  exact.extrapolate = false;
  exact.store_detail = true;
  ParallelFor(confirm.size(), options.jobs, [&](size_t k) {
    const size_t i = confirm[k];
    if (cancel.cancelled()) return;
    CandidateResult r = EvaluateAndStore(prep.results[i].candidate, exact, options.store, cancel);
    if (r.simulated()) {
      const CandidateResult& before = prep.results[i];
      r.message = "confirmed at full depth (extrapolated step time was " + FormatSeconds(before.summary.step_time_s) +
                  (before.fits() ? std::string()
                                 : ", peak " + FormatBytes(static_cast<double>(before.summary.peak_memory_bytes)) +
                                       " without rematerialisation") +
                  ")";
      prep.results[i] = std::move(r);
    }
    const int64_t d = done.load();
    if (on_progress) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      on_progress({d, total, "confirming", &prep.results[i]});
    }
  });
  // The best `confirm` candidates evaluated exactly in step 3 are simulated again to store their
  // timelines (the same figures: the simulation is deterministic); confirmed ones have theirs.
  if (options.store) {
    const std::vector<size_t> detail = DetailOrder(prep.results, options.confirm, confirm);
    ParallelFor(detail.size(), options.jobs, [&](size_t k) {
      const size_t i = detail[k];
      if (cancel.cancelled()) return;
      CandidateResult r = EvaluateAndStore(prep.results[i].candidate, exact, options.store, cancel);
      if (r.simulated()) {
        r.message = prep.results[i].message;
        prep.results[i] = std::move(r);
      }
    });
  }
  result.stats.confirm_s = Now() - t;
  result.stats.confirmed = static_cast<int64_t>(confirm.size());

  result.ranked = std::move(prep.results);
  for (const CandidateResult& r : result.ranked) {
    switch (r.outcome) {
      case Outcome::kSimulated: ++result.stats.simulated; break;
      case Outcome::kPrunedMemory: ++result.stats.pruned_memory; break;
      case Outcome::kPrunedBound: ++result.stats.pruned_bound; break;
      case Outcome::kInvalid: ++result.stats.invalid; break;
      case Outcome::kFailed: ++result.stats.failed; break;
      case Outcome::kCancelled: result.cancelled = true; break;
    }
  }
  result.cancelled = result.cancelled || cancel.cancelled();
  if (!result.cancelled && result.stats.generated > 0 && result.stats.invalid == result.stats.generated) {
    result.valid_at_fewer_devices = LargestValidDeviceCount(options, cancel);
    if (result.valid_at_fewer_devices) result.notes.push_back(ValidAtFewerDevicesNote(options, *result.valid_at_fewer_devices));
  }
  result.pareto = RankResults(result.ranked);
  result.stats.wall_s = Now() - wall0;
  result.stats.cpu_s = ProcessCpuSeconds() - cpu0;
  return result;
}

std::optional<ValidAtFewerDevices> LargestValidDeviceCount(const SearchOptions& options, const CancellationToken& cancel) {
  for (int64_t d = options.devices / 2; d >= 1 && !cancel.cancelled(); d /= 2) {
    SearchOptions o = options;
    o.devices = d;
    o.slice.clear();  // the pod's default shape at d devices
    o.meshes.clear();
    o.store = nullptr;
    auto plan = PlanSearch(o, cancel);
    if (!plan.ok()) continue;  // no pod of d devices of this chip, or no family has a candidate
    int64_t valid = static_cast<int64_t>(plan->candidates.size());
    for (const CandidateResult& r : plan->left_out) valid += r.outcome == Outcome::kInvalid ? 0 : 1;
    if (valid > 0) return ValidAtFewerDevices{d, valid, plan->generated};
  }
  return std::nullopt;
}

std::string ValidAtFewerDevicesNote(const SearchOptions& options, const ValidAtFewerDevices& v) {
  return "no candidate can split this model's dimensions over " + std::to_string(options.devices) +
         " devices; on " + std::to_string(v.devices) + " devices " + std::to_string(v.valid) + " of " +
         std::to_string(v.generated) + " candidates are valid: search a larger model (the sizes in --set: batch, "
         "widths, heads, experts) or fewer devices";
}

Result<SearchOptions> SearchOfPaperColumn(std::string_view case_name, std::string_view column) {
  auto found = pipeline::FindReproduceCase(case_name);
  if (!found.ok()) return found.error();
  const pipeline::ReproduceColumn* col = nullptr;
  std::string labels;
  for (const pipeline::ReproduceColumn& c : (*found)->columns) {
    if (c.label == column) col = &c;
    labels += (labels.empty() ? "\"" : ", \"") + c.label + "\"";
  }
  const std::string where = std::string(case_name) + ":" + std::string(column);
  if (!col) return Error(where + ": " + std::string(case_name) + " has no column '" + std::string(column) + "' (its columns: " + labels + ")");
  if (!col->weight_update_sharding_case.empty() || !col->book_collective_case.empty())
    return Error(where + " is not a zoo configuration (it is " +
                 (col->book_collective_case.empty() ? "a weight-update-sharding paper case" : "a collective of the book") +
                 "): nothing to search");
  auto mesh = DeviceMesh::Parse(col->mesh);
  if (!mesh.ok()) return Error(where + ": mesh '" + col->mesh + "': " + mesh.error().message);
  SearchOptions o;
  o.model = col->model;
  o.chip = col->chip;
  o.devices = mesh->num_devices();
  o.cores_per_chip = col->cores_per_chip;
  for (size_t i = 0; i < col->slice.size(); ++i) o.slice += (i ? "x" : "") + std::to_string(col->slice[i]);
  const std::vector<std::string_view>& chosen = StrategyChoiceSettings();
  for (const auto& [k, v] : col->settings)
    if (std::find(chosen.begin(), chosen.end(), k) == chosen.end()) o.settings[k] = v;
  return o;
}

Result<SearchOptions> SearchOfPaperColumn(std::string_view case_and_column) {
  const size_t colon = case_and_column.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == case_and_column.size())
    return Error("expected CASE:COLUMN such as \"gspmd-table2:64B, 128 devices\", got \"" + std::string(case_and_column) + "\"");
  return SearchOfPaperColumn(case_and_column.substr(0, colon), case_and_column.substr(colon + 1));
}

namespace {
// The simulated candidates: the ones that fit by step time, then the others.
std::vector<size_t> SimulatedByTime(const std::vector<CandidateResult>& results) {
  std::vector<size_t> by_time;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].simulated()) by_time.push_back(i);
  std::stable_sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) {
    const CandidateResult& x = results[a];
    const CandidateResult& y = results[b];
    if (x.fits() != y.fits()) return x.fits();
    return x.summary.step_time_s < y.summary.step_time_s;
  });
  return by_time;
}
}  // namespace

std::vector<size_t> ConfirmationOrder(const std::vector<CandidateResult>& results, int confirm) {
  const std::vector<size_t> by_time = SimulatedByTime(results);
  std::vector<size_t> out;
  for (size_t i : by_time) {
    if (static_cast<int>(out.size()) >= confirm) break;
    if (results[i].extrapolated) out.push_back(i);
  }
  // Over the HBM by extrapolation, faster than the best that fits (or nothing fits): at full depth
  // rematerialisation may make them fit, at the cost of some recompute.
  const CandidateResult* best_fit = nullptr;
  for (size_t i : by_time)
    if (results[i].fits()) {
      best_fit = &results[i];
      break;
    }
  int over = 0;
  for (size_t i : by_time) {
    const CandidateResult& r = results[i];
    if (over >= confirm) break;
    if (r.fits() || !r.extrapolated) continue;
    if (best_fit && r.summary.step_time_s >= best_fit->summary.step_time_s) break;  // by time from here
    if (std::find(out.begin(), out.end(), i) == out.end()) {
      out.push_back(i);
      ++over;
    }
  }
  return out;
}

std::vector<size_t> DetailOrder(const std::vector<CandidateResult>& results, int count, const std::vector<size_t>& confirmed) {
  const std::vector<size_t> by_time = SimulatedByTime(results);
  std::vector<size_t> out;
  for (size_t k = 0; k < by_time.size() && static_cast<int>(k) < std::max(count, 1); ++k) {
    const size_t i = by_time[k];
    if (!results[i].extrapolated && std::find(confirmed.begin(), confirmed.end(), i) == confirmed.end()) out.push_back(i);
  }
  return out;
}

}  // namespace shardscope::search
