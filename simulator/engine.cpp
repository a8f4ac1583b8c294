#include "simulator/engine.h"

#include "simulator/collective_timing.h"

#include "simulator/peak_breakdown.h"
#include "simulator/pipeline_accounting.h"

#include "core/base/units.h"

#include <algorithm>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <unordered_map>
#include <utility>


namespace shardscope::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---- collective timing per distinct collective ------------------------------------------------------------

using SpecTiming = CollectiveTiming;  // simulator/collective_timing.h

// True when every group is a translate of the first on the physical grid: same size, and member i
// sits at the same chip-coordinate offset from member 0 (and on the same core of its chip) in
// every group; along an axis with wraparound links offsets are taken round the ring (a translate
// across the wraparound is the same layout). Such groups all take the joint estimate's time.
bool Congruent(const std::vector<std::vector<int64_t>>& groups, const Topology& topo) {
  if (topo.is_switch()) {
    for (const auto& g : groups)
      if (g.size() != groups[0].size()) return false;
    return true;
  }
  std::vector<int64_t> ref;
  std::vector<int64_t> sig;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& g = groups[gi];
    sig.clear();
    if (g.empty()) return false;
    const std::vector<int64_t> c0 = topo.ChipCoords(topo.ChipOfDevice(g[0]));
    for (int64_t d : g) {
      const int64_t chip = topo.ChipOfDevice(d);
      const std::vector<int64_t> c = topo.ChipCoords(chip);
      for (size_t a = 0; a < c.size(); ++a) {
        int64_t off = c[a] - c0[a];
        const int64_t n = topo.shape()[a];
        if (topo.wraps(static_cast<int64_t>(a)) && n > 0) off = ((off % n) + n) % n;
        sig.push_back(off);
      }
      const auto& on_chip = topo.DevicesOnChip(chip);
      sig.push_back(std::find(on_chip.begin(), on_chip.end(), d) - on_chip.begin());
    }
    if (gi == 0) ref = sig;
    else if (sig != ref) return false;
  }
  return true;
}

// A collective-permute's timing (its groups: connected components of the pairs).
Result<SpecTiming> TimePermute(const CollectiveSpec& spec, const Topology& topo, const CollectiveOptions& copts) {
  SpecTiming t;
  const int64_t n = topo.num_devices();
  t.group_of.assign(static_cast<size_t>(n), -1);
  t.request.kind = spec.kind;
  t.request.operand_bytes = spec.operand_bytes;
  t.request.source_target_pairs = spec.pairs;
  // Groups: connected components of the pairs (a ring rotation is one group).
  std::vector<int64_t> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int64_t x) {
    while (parent[static_cast<size_t>(x)] != x) x = parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  std::vector<char> member(static_cast<size_t>(n), 0);
  for (const auto& [s, d] : spec.pairs) {
    if (s < 0 || s >= n || d < 0 || d >= n) {
      return Error("collective-permute pair {" + std::to_string(s) + "," + std::to_string(d) +
                   "} names a device outside the slice's " + std::to_string(n) + " devices");
    }
    member[static_cast<size_t>(s)] = member[static_cast<size_t>(d)] = 1;
    parent[static_cast<size_t>(find(s))] = find(d);
  }
  std::unordered_map<int64_t, int32_t> root_group;
  for (int64_t d = 0; d < n; ++d) {
    if (!member[static_cast<size_t>(d)]) continue;
    auto [it, fresh] = root_group.emplace(find(d), static_cast<int32_t>(t.group_size.size()));
    if (fresh) t.group_size.push_back(0);
    t.group_of[static_cast<size_t>(d)] = it->second;
    ++t.group_size[static_cast<size_t>(it->second)];
    ++t.members;
  }
  auto cost = EstimateCollectivePermute(topo, spec.pairs, spec.operand_bytes, copts);
  if (!cost.ok()) return cost.error();
  t.cost = std::move(cost).value();
  t.group_time.assign(t.group_size.size(), t.cost.time_s);
  t.max_time = t.alone_time = t.cost.time_s;
  return t;
}

// The timing of a collective over replica groups at one operand byte (group_time, max_time and
// alone_time unset; per_byte_group_latency / per_byte_group_data when the groups are not
// congruent): TimingAt scales it to any size, exactly as timing it there would.
Result<SpecTiming> TimeGroupsPerByte(CollectiveKind kind, const std::vector<std::vector<int64_t>>& spec_groups,
                                     const Topology& topo, const CollectiveOptions& copts) {
  SpecTiming t;
  const int64_t n = topo.num_devices();
  t.group_of.assign(static_cast<size_t>(n), -1);
  t.request.kind = kind;
  t.request.operand_bytes = 1.0;
  std::vector<std::vector<int64_t>> groups = spec_groups;
  if (groups.empty()) {
    groups.emplace_back(static_cast<size_t>(n));
    std::iota(groups.back().begin(), groups.back().end(), 0);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t d : groups[g]) {
      if (d < 0 || d >= n) {
        return Error(std::string(CollectiveKindName(kind)) + " replica group " + std::to_string(g) + " names device " +
                     std::to_string(d) + " but the slice has devices 0.." + std::to_string(n - 1));
      }
      if (t.group_of[static_cast<size_t>(d)] >= 0) {
        return Error(std::string(CollectiveKindName(kind)) + ": device " + std::to_string(d) +
                     " appears in more than one replica group");
      }
      t.group_of[static_cast<size_t>(d)] = static_cast<int32_t>(g);
    }
    t.group_size.push_back(static_cast<int32_t>(groups[g].size()));
    t.members += static_cast<int64_t>(groups[g].size());
  }
  auto cost = EstimateCollectivePerByte(topo, kind, groups, copts);
  if (!cost.ok()) return cost.error();
  t.cost = std::move(cost).value();
  if (groups.size() > 1 && !Congruent(groups, topo)) {
    // Groups laid out differently on the topology: each gets its own finish time with all groups
    // running together (links they share are shared fairly).
    std::vector<CollectiveRequest> reqs;
    for (const auto& g : groups) {
      CollectiveRequest r;
      r.kind = kind;
      r.groups = {g};
      r.operand_bytes = 1.0;
      reqs.push_back(std::move(r));
    }
    auto f = EstimateConcurrentCollectiveParts(topo, reqs, copts);
    if (!f.ok()) return f.error();
    t.per_byte_group_latency = std::move(f->latency_s);
    t.per_byte_group_data = std::move(f->data_done_s);
  }
  t.request.groups = std::move(groups);
  return t;
}

// A per-byte timing (TimeGroupsPerByte) at `bytes`.
SpecTiming TimingAt(const SpecTiming& per_byte, double bytes, const CollectiveOptions& copts) {
  SpecTiming t;
  t.group_of = per_byte.group_of;
  t.group_size = per_byte.group_size;
  t.members = per_byte.members;
  t.request = per_byte.request;
  t.request.operand_bytes = bytes;
  t.cost = CollectiveCostAt(per_byte.cost, bytes, copts);
  t.alone_time = t.cost.time_s;
  if (per_byte.per_byte_group_data.empty()) {
    t.group_time.assign(per_byte.group_size.size(), t.cost.time_s);
  } else {
    t.group_time.resize(per_byte.per_byte_group_data.size());
    for (size_t g = 0; g < t.group_time.size(); ++g) {
      t.group_time[g] = CombineCollectiveLatency(per_byte.per_byte_group_latency[g], per_byte.per_byte_group_data[g] * bytes, copts);
    }
  }
  t.max_time = *std::max_element(t.group_time.begin(), t.group_time.end());
  return t;
}

Result<SpecTiming> TimeCollective(const CollectiveSpec& spec, const Topology& topo, const CollectiveOptions& copts) {
  if (spec.kind == CollectiveKind::kCollectivePermute) return TimePermute(spec, topo, copts);
  auto per_byte = TimeGroupsPerByte(spec.kind, spec.groups, topo, copts);
  if (!per_byte.ok()) return per_byte.error();
  return TimingAt(*per_byte, spec.operand_bytes, copts);
}

// ---- classes ------------------------------------------------------------------------------------------------

struct InFlight {
  int32_t op = -1;
  double remaining = 0;  // seconds of work at full speed
  double rate = 1;       // progress per second (1 = alone)
  double finish = 0;
};

struct ClassState {
  std::vector<int64_t> devices;
  std::vector<double> start, end;  // per op; NaN = not yet
  size_t next_compute = 0, next_comm = 0;
  int32_t running = -1;
  double running_end = 0;
  std::vector<InFlight> inflight;
  double inflight_t = 0;
  std::vector<int32_t> waiting;  // collectives arrived, not started
  // Per distinct collective: the replica groups this class's devices are in, with how many of
  // them each (group -1: devices outside every group), in order of first device. A pure function
  // of `devices`: emptied whenever they change (Engine::SetDevices).
  std::unordered_map<int32_t, std::vector<std::pair<int32_t, int32_t>>> groups_of_spec;
};

struct SyncState {
  std::vector<int32_t> arrived;  // per group
  std::vector<char> complete;    // per group
  std::vector<int32_t> classes;  // classes waiting on this collective
};

class Engine {
 public:
  Engine(const ExecProgram& p, const std::vector<SpecTiming>& timing, const Topology& topo, const SimulationOptions& o,
         std::vector<std::string>* warnings)
      : prog_(p), timing_(timing), topo_(topo), opt_(o), warnings_(warnings) {
    // Collectives every device takes part in, each group taking the same time: a class holding
    // every device (the one class until timelines diverge) arrives at them and starts them in
    // O(groups), not O(devices) (Arrive, Resolve).
    uniform_time_.resize(timing.size(), -1);
    for (size_t k = 0; k < timing.size(); ++k) {
      const SpecTiming& t = timing[k];
      if (t.members != topo.num_devices() || t.group_time.empty()) continue;
      bool same = true;
      for (double g : t.group_time) same &= g == t.group_time.front();
      if (same) uniform_time_[k] = t.group_time.front();
    }
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (p.ops[i].kind == ExecKind::kCompute) compute_order_.push_back(static_cast<int32_t>(i));
      else comm_order_.push_back(static_cast<int32_t>(i));
    }
  }

  Status Run() {
    ClassState c0;
    c0.devices.resize(static_cast<size_t>(topo_.num_devices()));
    std::iota(c0.devices.begin(), c0.devices.end(), 0);
    c0.start.assign(prog_.ops.size(), kNaN);
    c0.end.assign(prog_.ops.size(), kNaN);
    classes_.push_back(std::move(c0));
    now_ = 0;
    Advance(0);
    for (int64_t guard = 0;; ++guard) {
      if (Status s = Resolve(); !s.ok()) return s;
      double t = kInf;
      for (const ClassState& c : classes_) t = std::min(t, NextEvent(c));
      if (!(t < kInf)) break;
      now_ = t;
      const size_t n = classes_.size();
      for (size_t c = 0; c < n; ++c) {
        if (ProcessEvents(c)) Advance(c);
      }
    }
    // Everything done?
    for (size_t c = 0; c < classes_.size(); ++c) {
      const ClassState& cs = classes_[c];
      for (size_t o = 0; o < prog_.ops.size(); ++o) {
        if (std::isnan(cs.end[o])) {
          std::string why = "simulation stalled: " + OpLabel(o) + " never finished on device " +
                            std::to_string(cs.devices.front());
          if (!cs.waiting.empty()) why += " (waiting for the replica group of " + OpLabel(static_cast<size_t>(cs.waiting.front())) + ")";
          return Error(why);
        }
      }
    }
    return Status::Ok();
  }

  std::vector<ClassState>& classes() { return classes_; }

 private:
  // An op's name, or its place in the program when it was built without names.
  std::string OpLabel(size_t o) const {
    const std::string& name = prog_.ops[o].name;
    return name.empty() ? "op " + std::to_string(o) + " (" + prog_.ops[o].kind_name + ")" : name;
  }

  bool DepsDone(const ClassState& c, int32_t op) const {
    for (int32_t d : prog_.ops[static_cast<size_t>(op)].deps) {
      const double e = c.end[static_cast<size_t>(d)];
      if (!(e <= now_)) return false;
    }
    return true;
  }

  static double NextEvent(const ClassState& c) {
    double t = c.running >= 0 ? c.running_end : kInf;
    for (const InFlight& f : c.inflight) t = std::min(t, f.finish);
    return t;
  }

  void Advance(size_t ci) {
    for (;;) {
      ClassState& c = classes_[ci];
      bool progress = false;
      if (c.running < 0 && c.next_compute < compute_order_.size()) {
        const int32_t op = compute_order_[c.next_compute];
        if (DepsDone(c, op)) {
          const double dur = prog_.ops[static_cast<size_t>(op)].duration_s;
          c.start[static_cast<size_t>(op)] = now_;
          ++c.next_compute;
          if (dur <= 0) {
            c.end[static_cast<size_t>(op)] = now_;
            progress = true;
          } else {
            c.running = op;
            c.running_end = now_ + dur;
          }
        }
      }
      while (c.next_comm < comm_order_.size() &&
             static_cast<int64_t>(c.inflight.size() + c.waiting.size()) < opt_.max_concurrent_collectives) {
        const int32_t op = comm_order_[c.next_comm];
        if (!DepsDone(c, op)) break;
        ++c.next_comm;
        Arrive(ci, op);
        progress = true;
      }
      if (!progress) break;
    }
  }

  void Arrive(size_t ci, int32_t op) {
    ClassState& c = classes_[ci];
    const SpecTiming& t = timing_[static_cast<size_t>(prog_.ops[static_cast<size_t>(op)].collective)];
    SyncState& s = syncs_[op];
    if (s.arrived.empty()) {
      s.arrived.assign(t.group_size.size(), 0);
      s.complete.assign(t.group_size.size(), 0);
    }
    if (WholeClass(c)) {
      s.arrived = t.group_size;
      s.complete.assign(t.group_size.size(), 1);
    } else {
      for (const auto& [g, count] : GroupsOf(ci, prog_.ops[static_cast<size_t>(op)].collective)) {
        if (g < 0) continue;
        if ((s.arrived[static_cast<size_t>(g)] += count) == t.group_size[static_cast<size_t>(g)]) s.complete[static_cast<size_t>(g)] = 1;
      }
    }
    s.classes.push_back(static_cast<int32_t>(ci));
    c.waiting.push_back(op);
    pending_.push_back(op);
  }

  // A class holding every device is the only one: its arrival completes every group.
  bool WholeClass(const ClassState& c) const { return static_cast<int64_t>(c.devices.size()) == topo_.num_devices(); }

  // The replica groups of collective `spec` class `ci`'s devices are in (ClassState::groups_of_spec):
  // a class arrives at and starts a collective in O(groups it touches), not O(its devices).
  const std::vector<std::pair<int32_t, int32_t>>& GroupsOf(size_t ci, int32_t spec) {
    ClassState& c = classes_[ci];
    auto [it, fresh] = c.groups_of_spec.try_emplace(spec);
    if (fresh) {
      const SpecTiming& t = timing_[static_cast<size_t>(spec)];
      std::unordered_map<int32_t, size_t> slot;
      for (int64_t d : c.devices) {
        const int32_t g = t.group_of[static_cast<size_t>(d)];
        auto [s, added] = slot.try_emplace(g, it->second.size());
        if (added) it->second.emplace_back(g, 0);
        ++it->second[s->second].second;
      }
    }
    return it->second;
  }

  void SetDevices(size_t ci, std::vector<int64_t> devices) {
    classes_[ci].devices = std::move(devices);
    classes_[ci].groups_of_spec.clear();
  }

  // Starts collectives whose groups are complete; splits classes whose members diverge.
  Status Resolve() {
    while (!pending_.empty()) {
      const int32_t op = pending_.back();
      pending_.pop_back();
      auto sit = syncs_.find(op);
      if (sit == syncs_.end()) continue;
      const SpecTiming& t = timing_[static_cast<size_t>(prog_.ops[static_cast<size_t>(op)].collective)];
      const std::vector<int32_t> waiting = sit->second.classes;
      std::vector<int32_t> still;
      for (int32_t ci : waiting) {
        // The usual case first: every device of the class ready, all with one duration.
        const double uniform = uniform_time_[static_cast<size_t>(prog_.ops[static_cast<size_t>(op)].collective)];
        if (uniform >= 0 && WholeClass(classes_[static_cast<size_t>(ci)])) {
          StartCollective(static_cast<size_t>(ci), op, uniform);
          continue;
        }
        {
          const SyncState& s = syncs_[op];
          bool one = true, any = false;
          double duration = 0;
          for (const auto& [g, count] : GroupsOf(static_cast<size_t>(ci), prog_.ops[static_cast<size_t>(op)].collective)) {
            double dur = 0;
            if (g >= 0) {
              if (!s.complete[static_cast<size_t>(g)]) {
                one = false;
                break;
              }
              dur = t.group_time[static_cast<size_t>(g)];
            }
            if (any && dur != duration) {
              one = false;
              break;
            }
            duration = dur;
            any = true;
          }
          if (one && any) {
            StartCollective(static_cast<size_t>(ci), op, duration);
            continue;
          }
        }
        // Partition the class's devices: not ready (-1) or ready with a duration.
        std::map<double, std::vector<int64_t>> ready;
        std::vector<int64_t> not_ready;
        {
          const SyncState& s = syncs_[op];
          for (int64_t d : classes_[static_cast<size_t>(ci)].devices) {
            const int32_t g = t.group_of[static_cast<size_t>(d)];
            if (g < 0) ready[0.0].push_back(d);
            else if (s.complete[static_cast<size_t>(g)]) ready[t.group_time[static_cast<size_t>(g)]].push_back(d);
            else not_ready.push_back(d);
          }
        }
        if (ready.empty()) {
          still.push_back(ci);
          continue;
        }
        const size_t parts = ready.size() + (not_ready.empty() ? 0 : 1);
        if (parts == 1) {
          StartCollective(static_cast<size_t>(ci), op, ready.begin()->first);
          continue;
        }
        if (static_cast<int64_t>(classes_.size() + parts - 1) > opt_.max_device_classes) {
          if (!warned_cap_) {
            warned_cap_ = true;
            warnings_->push_back("more than " + std::to_string(opt_.max_device_classes) +
                                 " distinct device timelines: further differences are merged (a class waits for "
                                 "all its replica groups and takes the slowest group's time)");
          }
          if (!not_ready.empty()) {
            still.push_back(ci);
            continue;
          }
          StartCollective(static_cast<size_t>(ci), op, ready.rbegin()->first);
          continue;
        }
        // Split: the original class keeps the not-ready devices (or the first ready part).
        std::vector<std::pair<std::vector<int64_t>, double>> ready_parts;
        for (auto& [dur, devs] : ready) ready_parts.emplace_back(std::move(devs), dur);
        std::vector<std::pair<size_t, double>> to_start;
        if (!not_ready.empty()) {
          for (auto& [devs, dur] : ready_parts) to_start.emplace_back(Split(static_cast<size_t>(ci), std::move(devs)), dur);
          SetDevices(static_cast<size_t>(ci), std::move(not_ready));
          still.push_back(ci);
        } else {
          for (size_t k = 1; k < ready_parts.size(); ++k) {
            to_start.emplace_back(Split(static_cast<size_t>(ci), std::move(ready_parts[k].first)), ready_parts[k].second);
          }
          SetDevices(static_cast<size_t>(ci), std::move(ready_parts[0].first));
          to_start.emplace_back(static_cast<size_t>(ci), ready_parts[0].second);
        }
        for (const auto& [cls, dur] : to_start) StartCollective(cls, op, dur);
      }
      // Classes created by splits while waiting were registered in syncs_[op].classes by Split;
      // keep only those still waiting.
      SyncState& s = syncs_[op];
      std::vector<int32_t> keep;
      for (int32_t ci : s.classes) {
        const auto& w = classes_[static_cast<size_t>(ci)].waiting;
        if (std::find(w.begin(), w.end(), op) != w.end()) keep.push_back(ci);
      }
      std::sort(keep.begin(), keep.end());
      keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
      if (keep.empty()) syncs_.erase(op);
      else s.classes = std::move(keep);
    }
    return Status::Ok();
  }

  // A new class with `devices` taken from class `ci` (same state). Returns its index.
  size_t Split(size_t ci, std::vector<int64_t> devices) {
    ClassState copy = classes_[ci];
    copy.devices = std::move(devices);
    copy.groups_of_spec.clear();
    classes_.push_back(std::move(copy));
    const size_t ni = classes_.size() - 1;
    for (int32_t op : classes_[ni].waiting) syncs_[op].classes.push_back(static_cast<int32_t>(ni));
    return ni;
  }

  void StartCollective(size_t ci, int32_t op, double duration) {
    ClassState& c = classes_[ci];
    c.waiting.erase(std::find(c.waiting.begin(), c.waiting.end(), op));
    c.start[static_cast<size_t>(op)] = now_;
    if (duration <= 0) {
      c.end[static_cast<size_t>(op)] = now_;
      Advance(ci);
      return;
    }
    AdvanceInFlight(c);
    c.inflight.push_back({op, duration, 1.0, now_ + duration});
    UpdateRates(c);
    Advance(ci);  // a slot may have been taken; nothing new can start, but keep the invariant
  }

  void AdvanceInFlight(ClassState& c) {
    const double dt = now_ - c.inflight_t;
    if (dt > 0) {
      for (InFlight& f : c.inflight) f.remaining = std::max(0.0, f.remaining - dt * f.rate);
    }
    c.inflight_t = now_;
  }

  void UpdateRates(ClassState& c) {
    if (c.inflight.size() == 1) {
      c.inflight[0].rate = 1;
    } else if (!c.inflight.empty()) {
      std::vector<size_t> idx(c.inflight.size());
      std::iota(idx.begin(), idx.end(), 0);
      auto spec_of = [&](size_t k) { return prog_.ops[static_cast<size_t>(c.inflight[k].op)].collective; };
      std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return spec_of(a) < spec_of(b); });
      std::vector<int32_t> key;
      for (size_t k : idx) key.push_back(spec_of(k));
      const std::vector<double>& slow = Slowdowns(key);
      for (size_t j = 0; j < idx.size(); ++j) c.inflight[idx[j]].rate = 1.0 / slow[j];
    }
    for (InFlight& f : c.inflight) f.finish = now_ + f.remaining / f.rate;
  }

  const std::vector<double>& Slowdowns(const std::vector<int32_t>& key) {
    auto it = slowdowns_.find(key);
    if (it != slowdowns_.end()) return it->second;
    std::vector<CollectiveRequest> reqs;
    for (int32_t s : key) reqs.push_back(timing_[static_cast<size_t>(s)].request);
    std::vector<double> slow(key.size(), 1.0);
    auto f = EstimateConcurrentCollectives(topo_, reqs, opt_.collectives);
    if (f.ok()) {
      for (size_t j = 0; j < key.size(); ++j) {
        const double alone = timing_[static_cast<size_t>(key[j])].alone_time;
        if (alone > 0 && (*f)[j] > alone) slow[j] = (*f)[j] / alone;
      }
    } else if (!warned_contention_) {
      warned_contention_ = true;
      warnings_->push_back("contention between concurrent collectives not modelled: " + f.error().message);
    }
    return slowdowns_.emplace(key, std::move(slow)).first->second;
  }

  bool ProcessEvents(size_t ci) {
    ClassState& c = classes_[ci];
    bool any = false;
    if (c.running >= 0 && c.running_end <= now_) {
      c.end[static_cast<size_t>(c.running)] = now_;
      c.running = -1;
      any = true;
    }
    bool done_comm = false;
    for (const InFlight& f : c.inflight) done_comm = done_comm || f.finish <= now_;
    if (done_comm) {
      AdvanceInFlight(c);
      std::vector<InFlight> rest;
      for (const InFlight& f : c.inflight) {
        if (f.finish <= now_) c.end[static_cast<size_t>(f.op)] = now_;
        else rest.push_back(f);
      }
      c.inflight = std::move(rest);
      UpdateRates(c);
      any = true;
    }
    return any;
  }

  const ExecProgram& prog_;
  const std::vector<SpecTiming>& timing_;
  std::vector<double> uniform_time_;  // per spec: the time of every group when all devices take part alike, else -1
  const Topology& topo_;
  const SimulationOptions& opt_;
  std::vector<std::string>* warnings_;
  std::vector<int32_t> compute_order_, comm_order_;
  std::vector<ClassState> classes_;
  std::unordered_map<int32_t, SyncState> syncs_;
  std::vector<int32_t> pending_;
  std::map<std::vector<int32_t>, std::vector<double>> slowdowns_;
  double now_ = 0;
  bool warned_cap_ = false;
  bool warned_contention_ = false;
};

// ---- summary figures -------------------------------------------------------------------------------------

using Intervals = std::vector<std::pair<double, double>>;

Intervals Union(Intervals v) {
  // A stream's ops run one after another, so its intervals usually come sorted already.
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

double Length(const Intervals& v) {
  double s = 0;
  for (const auto& iv : v) s += iv.second - iv.first;
  return s;
}

// Total length of the intersection of two sorted, disjoint interval lists.
double Overlap(const Intervals& a, const Intervals& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return s;
}

// An FNV-1a-style hash over the module's structure: everything the simulation depends on (names,
// opcodes, shapes, operands, attributes that size or route work), without printing the module.
// Eight bytes a step (a byte at a time, hashing the replica groups of a 2048-device program was 2%
// of the strategy search).
class StructureHash {
 public:
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, sizeof w);
      h_ ^= w;
      h_ *= 1099511628211ull;
      h_ ^= h_ >> 29;
    }
    for (; i < n; ++i) {
      h_ ^= b[i];
      h_ *= 1099511628211ull;
    }
  }
  void Int(int64_t v) { Bytes(&v, sizeof v); }
  void Str(std::string_view s) {
    Int(static_cast<int64_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  void Ints(const std::vector<int64_t>& v) {
    Int(static_cast<int64_t>(v.size()));
    Bytes(v.data(), v.size() * sizeof(int64_t));
  }
  void Shape(const shardscope::Shape& s) {
    Int(static_cast<int64_t>(s.type));
    Ints(s.dims);
    Int(static_cast<int64_t>(s.tuple.size()));
    for (const auto& e : s.tuple) Shape(e);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

uint64_t HashModule(const Module& m) {
  StructureHash h;
  h.Str(m.name());
  h.Int(m.num_partitions);
  h.Str(m.entry() ? m.entry()->name() : "");
  for (const auto& c : m.computations()) {
    h.Str(c->name());
    for (const auto& ip : c->instructions()) {
      const Instruction& i = *ip;
      h.Str(i.name());
      h.Str(i.opcode_text());
      h.Shape(i.shape());
      for (const Instruction* o : i.operands()) h.Int(o->id());
      for (const Computation* cc : i.called_computations()) h.Str(cc ? cc->name() : "");
      h.Int(i.parameter_number);
      h.Int(i.tuple_index);
      h.Ints(i.dimensions);
      h.Ints(i.dot_dims.lhs_contracting);
      h.Ints(i.dot_dims.lhs_batch);
      h.Ints(i.slice.starts);
      h.Ints(i.slice.limits);
      h.Int(static_cast<int64_t>(i.replica_groups.groups.size()));
      for (const auto& g : i.replica_groups.groups) h.Ints(g);
      for (const auto& [a, b] : i.source_target_pairs) {
        h.Int(a);
        h.Int(b);
      }
      h.Int(static_cast<int64_t>(i.comparison));
      h.Str(i.literal.text);
      h.Str(i.backend_config);
      h.Str(i.custom_call_target);
      h.Str(i.metadata);
    }
  }
  return h.value();
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<Simulation> SimulateProgram(const ExecProgram& program, const Topology& topology, const SimulationOptions& options) {
  if (options.max_concurrent_collectives < 1) return Error("max_concurrent_collectives must be >= 1");
  if (options.max_device_classes < 1) return Error("max_device_classes must be >= 1");
  if (topology.num_devices() < 1) return Error("the topology has no devices");
  Simulation sim;
  sim.warnings = program.warnings;
  const int64_t n = topology.num_devices();

  auto t0 = std::chrono::steady_clock::now();
  std::vector<SpecTiming> timing;
  timing.reserve(program.collectives.size());
  CollectiveTimingMemo* memo = options.collective_memo.get();
  const std::string context = memo ? CollectiveTimingMemo::ContextKey(topology, options.collectives) : std::string();
  for (const CollectiveSpec& spec : program.collectives) {
    if (!memo) {
      auto t = TimeCollective(spec, topology, options.collectives);
      if (!t.ok()) return t.error();
      timing.push_back(std::move(t).value());
      continue;
    }
    // A collective over replica groups is kept at one byte, so one entry serves every size
    // (a gradient's all-reduce at each depth and microbatch count); a permute at its size.
    const bool permute = spec.kind == CollectiveKind::kCollectivePermute;
    const std::string key = CollectiveTimingMemo::CollectiveKey(spec.kind, permute ? spec.operand_bytes : -1.0, spec.groups, spec.pairs);
    std::shared_ptr<const CollectiveTiming> known = memo->Find(context, key);
    if (!known) {
      auto t = permute ? TimePermute(spec, topology, options.collectives)
                       : TimeGroupsPerByte(spec.kind, spec.groups, topology, options.collectives);
      if (!t.ok()) return t.error();
      known = memo->Store(context, key, std::move(t).value());
    }
    timing.push_back(permute ? *known : TimingAt(*known, spec.operand_bytes, options.collectives));
  }
  sim.stats.collective_cost_ms = MsSince(t0);

  t0 = std::chrono::steady_clock::now();
  Engine engine(program, timing, topology, options, &sim.warnings);
  if (Status s = engine.Run(); !s.ok()) return s.error();
  std::vector<ClassState>& classes = engine.classes();
  sim.stats.engine_ms = MsSince(t0);

  // Per-class detail.
  t0 = std::chrono::steady_clock::now();
  RunResult& run = sim.run;
  DeviceClassBuilder builder;
  struct ClassFigures {
    double step = 0, compute = 0, comm = 0, idle = 0, exposed = 0;
    int64_t peak = 0;
  };
  std::vector<ClassFigures> figures(classes.size());
  for (size_t ci = 0; ci < classes.size(); ++ci) {
    const ClassState& c = classes[ci];
    DeviceClass detail;
    double step_end = 0;
    Intervals compute, comm;
    for (size_t o = 0; o < program.ops.size(); ++o) {
      const ExecOp& op = program.ops[o];
      const double s = c.start[o], e = c.end[o];
      step_end = std::max(step_end, e);
      if (op.kind == ExecKind::kCompute) {
        if (e > s) {
          compute.emplace_back(s, e);
          if (options.timelines)
            detail.events.push_back({-1, Stream::kCompute, s, e - s, op.name, op.kind_name,
                                     static_cast<int64_t>(std::llround(op.bytes)), op.flops});
        }
      } else {
        const SpecTiming& t = timing[static_cast<size_t>(op.collective)];
        comm.emplace_back(s, e);
        if (options.timelines)
          detail.events.push_back({-1, Stream::kCommunication, s, e - s, op.name, op.kind_name,
                                   static_cast<int64_t>(std::llround(t.cost.bytes_per_device)), 0.0});
      }
    }
    MemoryProfileOptions memory_options = options.memory;
    memory_options.peak_only = memory_options.peak_only || !options.timelines;
    auto mem = ComputeMemoryProfile(program, c.start, c.end, step_end, memory_options);
    if (!mem.ok()) return mem.error();
    detail.peak_memory_bytes = mem->peak_bytes;
    detail.peak_memory_time_s = mem->peak_time_s;
    detail.memory = std::move(mem->samples);
    detail.peak_buffers = std::move(mem->peak_buffers);
    ClassFigures& f = figures[ci];
    f.step = step_end;
    f.peak = detail.peak_memory_bytes;
    const Intervals cu = Union(compute), mu = Union(comm);
    f.compute = Length(cu);
    f.comm = Length(mu);
    const double both = Overlap(cu, mu);
    f.exposed = f.comm - both;
    f.idle = std::max(0.0, step_end - (f.compute + f.comm - both));
    auto idx = builder.Add(c.devices.front(), std::move(detail));
    if (!idx.ok()) return idx.error();
    for (size_t k = 1; k < c.devices.size(); ++k) {
      if (Status s = builder.AddToClass(c.devices[k], *idx); !s.ok()) return s.error();
    }
  }
  if (Status s = builder.Finish(run); !s.ok()) return s.error();
  sim.stats.memory_ms = MsSince(t0);
  // Labels: which devices each class holds.
  {
    std::vector<std::vector<int64_t>> members(run.classes.size());
    for (size_t d = 0; d < run.device_class.size(); ++d) members[static_cast<size_t>(run.device_class[d])].push_back(static_cast<int64_t>(d));
    for (size_t k = 0; k < run.classes.size(); ++k) {
      const auto& m = members[k];
      std::string label = run.classes.size() == 1 ? (m.size() == 1 ? std::string("1 device") : "all " + std::to_string(m.size()) + " devices")
                                                  : std::to_string(m.size()) + (m.size() == 1 ? " device: " : " devices: ");
      if (run.classes.size() > 1) {
        for (size_t j = 0; j < m.size() && j < 8; ++j) label += (j ? "," : "") + std::to_string(m[j]);
        if (m.size() > 8) label += ",...";
      }
      run.classes[k].label = label;
    }
  }

  // Summary: the slowest class.
  size_t slow = 0;
  for (size_t ci = 1; ci < figures.size(); ++ci)
    if (figures[ci].step > figures[slow].step) slow = ci;
  RunSummary& sum = run.summary;
  sum.num_devices = n;
  sum.step_time_s = figures[slow].step;
  sum.compute_time_s = figures[slow].compute;
  sum.communication_time_s = figures[slow].comm;
  sum.idle_time_s = figures[slow].idle;
  sum.exposed_communication_s = figures[slow].exposed;
  for (const ClassFigures& f : figures) sum.peak_memory_bytes = std::max(sum.peak_memory_bytes, f.peak);
  sum.device_hbm_bytes = static_cast<int64_t>(topology.chip().device_hbm_bytes());
  sum.total_flops = program.flops * static_cast<double>(n);
  double comm_bytes = 0;
  for (const ExecOp& op : program.ops) {
    if (op.kind != ExecKind::kCollective) continue;
    const SpecTiming& t = timing[static_cast<size_t>(op.collective)];
    comm_bytes += t.cost.bytes_per_device * static_cast<double>(t.members);
  }
  sum.bytes_communicated = static_cast<int64_t>(std::llround(comm_bytes));
  // Bubbles and recompute (simulator/pipeline_accounting.h), device by device: a class's devices
  // share one timeline but may sit at different pipeline positions, so the devices of a class are
  // grouped by their positions and each group's bubble is summed once.
  double recompute_in_bubble_flops = 0;
  {
    const PipelineStructure pipe = FindPipelineStructure(program, n);
    sum.pipeline_stages = pipe.stages();
    std::vector<size_t> piped_ops;
    for (size_t o = 0; o < program.ops.size(); ++o)
      if (program.ops[o].kind == ExecKind::kCompute && pipe.pipelined() && pipe.op_loop[o] >= 0) piped_ops.push_back(o);
    double bubble_s = 0, recompute_s = 0;
    for (const ClassState& c : classes) {
      const double members = static_cast<double>(c.devices.size());
      for (size_t o = 0; o < program.ops.size(); ++o) {
        const ExecOp& op = program.ops[o];
        if (op.kind != ExecKind::kCompute || !op.recompute) continue;
        recompute_s += members * (c.end[o] - c.start[o]);
        sum.recompute_flops += members * op.flops;
      }
      if (piped_ops.empty()) continue;
      std::map<std::vector<int64_t>, int64_t> by_position;  // positions in every pipeline loop -> devices
      for (int64_t d : c.devices) {
        std::vector<int64_t> key;
        for (const PipelineLoop& l : pipe.loops) key.push_back(l.position[static_cast<size_t>(d)]);
        ++by_position[key];
      }
      for (const auto& [key, count] : by_position) {
        int64_t device = -1;  // one device with these positions
        for (int64_t d : c.devices) {
          bool same = true;
          for (size_t k = 0; k < pipe.loops.size() && same; ++k) same = pipe.loops[k].position[static_cast<size_t>(d)] == key[k];
          if (same) {
            device = d;
            break;
          }
        }
        const double w = static_cast<double>(count);
        for (size_t o : piped_ops) {
          if (!pipe.InBubble(o, device)) continue;
          const ExecOp& op = program.ops[o];
          bubble_s += w * (c.end[o] - c.start[o]);
          sum.bubble_flops += w * op.flops;
          if (op.recompute) recompute_in_bubble_flops += w * op.flops;
        }
      }
    }
    sum.bubble_time_s = bubble_s / static_cast<double>(n);
    sum.recompute_time_s = recompute_s / static_cast<double>(n);
  }
  const double peak = topology.chip().device_peak_flops() * static_cast<double>(n);
  // True MFU counts neither bubbles nor recompute: the useful share of the executed FLOPs, applied
  // to the model's FLOPs when given (counted over the unrolled loops, they hold both alike).
  const double wasted = sum.bubble_flops + sum.recompute_flops - recompute_in_bubble_flops;
  const double useful_share = sum.total_flops > 0 ? std::clamp(1 - wasted / sum.total_flops, 0.0, 1.0) : 1.0;
  const double useful = (options.model_flops > 0 ? options.model_flops : sum.total_flops) * useful_share;
  sum.mfu = sum.step_time_s > 0 && peak > 0 ? useful / (sum.step_time_s * peak) : 0;
  sum.raw_flops_utilization = sum.step_time_s > 0 && peak > 0 ? sum.total_flops / (sum.step_time_s * peak) : 0;

  // Collectives (durations on the slowest class).
  for (size_t o = 0; o < program.ops.size(); ++o) {
    const ExecOp& op = program.ops[o];
    if (op.kind != ExecKind::kCollective) continue;
    const SpecTiming& t = timing[static_cast<size_t>(op.collective)];
    const CollectiveSpec& spec = program.collectives[static_cast<size_t>(op.collective)];
    CollectiveRecord r;
    r.instruction = op.name;
    r.kind = op.kind_name;
    r.replica_groups = spec.groups_text;
    r.bytes = static_cast<int64_t>(std::llround(op.bytes));
    r.time_s = classes[slow].end[o] - classes[slow].start[o];
    r.regime = std::string(CostRegimeName(t.cost.regime));
    run.collectives.push_back(std::move(r));
  }

  // Inputs.
  run.label = options.label;
  run.inputs.chip_preset = topology.chip().name;
  run.inputs.mesh_text = options.mesh_text;
  run.inputs.topology_options = topology.Describe();
  run.inputs.placement = topology.DescribePlacement();
  auto& st = run.inputs.settings;
  st.emplace_back("schedule", std::string(ScheduleKindName(options.program.schedule)));
  st.emplace_back("fuse_elementwise", options.program.fuse_elementwise ? "1" : "0");
  st.emplace_back("in_place_reuse", options.program.in_place_reuse ? "1" : "0");
  st.emplace_back("donate_parameters", options.program.donate_parameters ? "1" : "0");
  st.emplace_back("pad_to_layout_tiles", options.program.pad_to_layout_tiles ? "1" : "0");
  st.emplace_back("default_trip_count", std::to_string(options.program.default_trip_count));
  st.emplace_back("max_concurrent_collectives", std::to_string(options.max_concurrent_collectives));
  st.emplace_back("latency_model", options.collectives.latency_model == LatencyModel::kAdditive ? "additive" : "overlapped");
  st.emplace_back("bidirectional", options.collectives.bidirectional ? "1" : "0");
  st.emplace_back("flops_efficiency", std::to_string(topology.chip().flops_efficiency));
  st.emplace_back("hbm_efficiency", std::to_string(topology.chip().hbm_efficiency));
  st.emplace_back("mxu_tile", std::to_string(topology.chip().mxu_tile));
  st.emplace_back("op_overhead_s", std::to_string(topology.chip().op_overhead));
  if (options.model_flops > 0) st.emplace_back("model_flops", std::to_string(options.model_flops));

  sim.stats.exec_ops = static_cast<int64_t>(program.ops.size());
  for (const ExecOp& op : program.ops) (op.kind == ExecKind::kCompute ? sim.stats.compute_ops : sim.stats.collective_ops)++;
  sim.stats.distinct_collectives = static_cast<int64_t>(program.collectives.size());
  sim.stats.buffers = static_cast<int64_t>(program.buffers.size());
  sim.stats.device_classes = static_cast<int64_t>(classes.size());
  if (Status s = run.Validate(); !s.ok()) return Error("internal: the simulated run is inconsistent: " + s.error().message);
  return sim;
}

Result<Simulation> Simulate(const Module& module, const Topology& topology, const SimulationOptions& options) {
  const int64_t n = topology.num_devices();
  if (module.num_partitions > 1 && module.num_partitions != n) {
    return Error("the module is partitioned for " + std::to_string(module.num_partitions) + " devices but the topology (" +
                 topology.ShapeString() + ") has " + std::to_string(n) + "; choose a mesh with " +
                 std::to_string(module.num_partitions) + " devices");
  }
  auto t0 = std::chrono::steady_clock::now();
  ExecProgramOptions program_options = options.program;
  program_options.num_devices = n;
  // Without timelines no compute op's or buffer's name is read (the figures do not depend on them).
  if (!options.timelines) program_options.names = false;
  // Built without rematerialisation, which then runs on a copy: the rounds below rematerialise
  // the same program again at lower targets instead of building it again.
  ExecProgramOptions build_options = program_options;
  build_options.rematerialize = false;
  auto built = BuildExecProgram(module, topology.chip(), build_options);
  if (!built.ok()) return built.error();
  std::optional<ExecProgram> rematerialized;
  if (auto target = RematerializationTarget(*built, topology.chip(), program_options)) {
    rematerialized = *built;
    RematerializeTo(&*rematerialized, *target);
  }
  const ExecProgram* program = rematerialized ? &*rematerialized : &*built;
  double build_ms = MsSince(t0);
  auto sim = SimulateProgram(*program, topology, options);
  if (!sim.ok()) return sim.error();
  // Rematerialisation aims at the peak with ops one after another; the run's own peak is higher
  // where asynchronous collectives keep their operands longer. When rematerialisation ran and the
  // run still exceeds HBM, its target is set that much below the sequential peak it reached (at most four times), as XLA's limit
  // counts the buffers its asynchronous collectives hold.
  const int64_t hbm = static_cast<int64_t>(topology.chip().device_hbm_bytes());
  for (int round = 0; round < 4 && program->rematerialized_values > 0 && hbm > 0 &&
                      sim->run.summary.peak_memory_bytes > hbm;
       ++round) {
    const int64_t target = program->rematerialized_peak_bytes - (sim->run.summary.peak_memory_bytes - hbm);
    if (target <= 0) break;
    ExecProgramOptions lower = program_options;
    lower.rematerialize_limit_bytes = target;
    auto t1 = std::chrono::steady_clock::now();
    const std::optional<int64_t> lower_target = RematerializationTarget(*built, topology.chip(), lower);
    if (!lower_target) break;
    ExecProgram again = *built;
    RematerializeTo(&again, *lower_target);
    auto sim_again = SimulateProgram(again, topology, options);
    build_ms += MsSince(t1);
    if (!sim_again.ok()) break;
    if (sim_again->run.summary.peak_memory_bytes >= sim->run.summary.peak_memory_bytes) break;
    rematerialized = std::move(again);
    program = &*rematerialized;
    sim = std::move(sim_again);
    program_options = lower;
  }
  sim->stats.build_ms = build_ms;
  sim->stats.schedule = program->schedule;
  sim->stats.sequential_peak_bytes = program->sequential_peak_bytes;
  sim->stats.rematerialized_values = program->rematerialized_values;
  sim->stats.rematerialized_bytes = program->rematerialized_bytes;
  sim->stats.rematerialized_peak_bytes = program->rematerialized_peak_bytes;
  sim->run.inputs.module_name = module.name();
  sim->run.inputs.module_hash = Hex(HashModule(module));
  return sim;
}

std::string DescribeSimulation(const Simulation& sim) {
  const RunSummary& s = sim.run.summary;
  std::ostringstream os;
  auto pct = [&](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", s.step_time_s > 0 ? 100.0 * v / s.step_time_s : 0.0);
    return std::string(buf);
  };
  os << "devices: " << s.num_devices << " (" << sim.run.classes.size() << " distinct timeline"
     << (sim.run.classes.size() == 1 ? "" : "s") << ")\n";
  os << "step time: " << FormatSeconds(s.step_time_s) << "\n";
  os << "  compute: " << FormatSeconds(s.compute_time_s) << " (" << pct(s.compute_time_s) << ")\n";
  os << "  communication: " << FormatSeconds(s.communication_time_s) << " (" << pct(s.communication_time_s)
     << "), exposed " << FormatSeconds(s.exposed_communication_s) << " (" << pct(s.exposed_communication_s) << ")\n";
  os << "  idle: " << FormatSeconds(s.idle_time_s) << " (" << pct(s.idle_time_s) << ")\n";
  char mfu[32];
  std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * s.mfu);
  os << "FLOP utilisation (MFU): " << mfu << " (" << s.total_flops << " FLOPs per step)\n";
  if (s.pipeline_stages > 0 || s.recompute_time_s > 0) {
    char raw[32];
    std::snprintf(raw, sizeof raw, "%.1f%%", 100 * s.raw_flops_utilization);
    os << "raw FLOPS utilisation: " << raw << " (bubbles and recompute counted as useful)\n";
    if (s.pipeline_stages > 0)
      os << "  pipeline bubbles: " << FormatSeconds(s.bubble_time_s) << " (" << pct(s.bubble_time_s) << ", "
         << s.pipeline_stages << " stages)\n";
    os << "  recompute: " << FormatSeconds(s.recompute_time_s) << " (" << pct(s.recompute_time_s) << ")\n";
  }
  os << "collectives: " << sim.run.collectives.size() << ", " << FormatBytes(static_cast<double>(s.bytes_communicated))
     << " moved in total\n";
  if (sim.stats.schedule == ScheduleKind::kMemoryList && sim.stats.sequential_peak_bytes[1] > 0) {
    os << "schedule: memory-list (program order peaks at "
       << FormatBytes(static_cast<double>(sim.stats.sequential_peak_bytes[0])) << ", over HBM; the list schedule at "
       << FormatBytes(static_cast<double>(sim.stats.sequential_peak_bytes[1])) << ")\n";
  } else if (sim.stats.sequential_peak_bytes[1] > 0) {
    os << "schedule: program order (over HBM; the memory list schedule peaks no lower: "
       << FormatBytes(static_cast<double>(sim.stats.sequential_peak_bytes[1])) << ")\n";
  }
  if (sim.stats.rematerialized_values > 0) {
    os << "rematerialisation (as XLA's under the memory limit): " << sim.stats.rematerialized_values
       << " values recomputed instead of kept (" << FormatBytes(static_cast<double>(sim.stats.rematerialized_bytes))
       << "); ops one after another now peak at " << FormatBytes(static_cast<double>(sim.stats.rematerialized_peak_bytes))
       << "\n";
  }
  os << "peak memory per device: " << FormatBytes(static_cast<double>(s.peak_memory_bytes)) << " (" << s.peak_memory_bytes
     << " bytes)\n";
  if (!s.fits()) {
    os << "DOES NOT FIT: the peak exceeds the " << FormatBytes(static_cast<double>(s.device_hbm_bytes))
       << " of HBM per device by " << FormatBytes(static_cast<double>(s.missing_bytes()))
       << " (what dominates: the categories and largest buffers below)\n";
  } else if (s.device_hbm_bytes > 0) {
    os << "fits: " << FormatBytes(static_cast<double>(s.device_hbm_bytes - s.peak_memory_bytes)) << " of the "
       << FormatBytes(static_cast<double>(s.device_hbm_bytes)) << " HBM per device left\n";
  }
  // Breakdown at the peak of the class holding the highest peak.
  const DeviceClass* top = nullptr;
  for (const DeviceClass& c : sim.run.classes)
    if (!top || c.peak_memory_bytes > top->peak_memory_bytes) top = &c;
  if (top) {
    std::array<int64_t, kNumMemoryCategories> by{};
    for (const PeakBuffer& b : top->peak_buffers) by[static_cast<size_t>(b.category)] += b.bytes;
    for (int k = 0; k < kNumMemoryCategories; ++k) {
      os << "  " << MemoryCategoryName(static_cast<MemoryCategory>(k)) << ": "
         << FormatBytes(static_cast<double>(by[static_cast<size_t>(k)])) << "\n";
    }
    os << "  at " << FormatSeconds(top->peak_memory_time_s) << "; what is live, by kind (digits as #):\n";
    os << DescribePeakBufferGroups(GroupPeakBuffers(top->peak_buffers), 8);
  }
  for (const std::string& w : sim.warnings) os << "warning: " << w << "\n";
  return os.str();
}

}  // namespace shardscope::sim
