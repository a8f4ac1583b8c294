#include "app/pipeline/small_twin.h"

#include <charconv>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "app/pipeline/propagate.h"
#include "core/ir/scale_dims.h"

namespace shardscope::pipeline {
namespace {

// Instructions by "computation/name" (the zoo's names do not depend on the sizes).
std::map<std::string, const Instruction*> ByName(const Module& m) {
  std::map<std::string, const Instruction*> out;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions()) out.emplace(c->name() + "/" + i->name(), i.get());
  return out;
}

std::optional<int64_t> IntOf(const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

// Whether a sharding written for `from` fits `to` (the same opcode, and the same rank, or the same
// number of tuple elements).
bool SameKind(const Instruction& from, const Instruction& to) {
  if (from.opcode() != to.opcode() || from.opcode_text() != to.opcode_text()) return false;
  if (from.shape().IsTuple() != to.shape().IsTuple()) return false;
  if (from.shape().IsTuple()) return from.shape().tuple.size() == to.shape().tuple.size();
  return from.shape().rank() == to.shape().rank();
}

// The tiles dimension `d` of `i` is split into by its sharding (1: none known).
int64_t TilesOf(const Instruction* i, int64_t d) {
  if (!i || !i->has_sharding() || i->shape().IsTuple() || i->sharding()->IsTuple()) return 1;
  return std::max<int64_t>(1, i->sharding()->DimensionTiles(d));
}

// Whether every instruction of `twin` with a counterpart in `full` keeps each dimension whole on
// the tiles the counterpart's sharding splits it into, and at least min_dim long where it was.
bool KeepsShardedDims(const Module& twin, const std::map<std::string, const Instruction*>& full, int64_t min_dim) {
  for (const auto& [name, i] : ByName(twin)) {
    auto f = full.find(name);
    if (f == full.end() || !SameKind(*f->second, *i) || i->shape().IsTuple()) continue;
    for (int64_t d = 0; d < i->shape().rank(); ++d) {
      const int64_t full_dim = f->second->shape().dim(d), dim = i->shape().dim(d), t = TilesOf(f->second, d);
      if (dim < std::min(full_dim, min_dim)) return false;
      if (full_dim % t == 0 && dim % t != 0) return false;
    }
  }
  return true;
}

std::string Describe(const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>& changed) {
  std::string s;
  for (const auto& [name, fromto] : changed)
    s += (s.empty() ? "" : ", ") + name + " " + std::to_string(fromto.first) + " -> " + std::to_string(fromto.second);
  return s;
}

}  // namespace

Result<SmallTwin> BuildSmallTwin(std::string_view model, const ZooOverrides& settings, const Module& full,
                                 int64_t min_dim, const CancellationToken& cancel) {
  const auto models = ZooList();
  const ZooModel* entry = nullptr;
  for (const ZooModel& m : models)
    if (m.name == model) entry = &m;
  if (!entry) return Error("unknown zoo model '" + std::string(model) + "'");
  // One pass over the settings from `from`; a second pass starts from the first's result (a
  // setting tied to another, the U-Net's image to its levels, shrinks once the other has).
  using Changes = std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>;
  struct Shrunk {
    ZooOverrides settings;
    Changes changed;
  };
  const auto full_names = ByName(full);
  auto shrink = [&](const ZooOverrides& from) -> Result<Shrunk> {
    auto base = ZooBuild(model, from);
    if (!base.ok()) return Error("building " + std::string(model) + ": " + base.error().message);
    auto base_mesh = ZooMesh(model, from);
    if (!base_mesh.ok()) return base_mesh.error();
    const auto base_names = ByName(**base);
    const int64_t base_count = (*base)->instruction_count();

    ZooOverrides twin = from;
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> changed;
    for (const ZooParameter& p : entry->parameters) {
      if (cancel.cancelled()) return CancelledError("building the small twin");
      auto it = from.find(p.name);
      const std::optional<int64_t> v = IntOf(it != from.end() ? it->second : p.default_value);
      if (!v || *v < 2) continue;
      ZooOverrides probe = from;
      probe[p.name] = std::to_string(2 * *v);
      auto probe_mesh = ZooMesh(model, probe);
      if (!probe_mesh.ok() || !(probe_mesh.value() == base_mesh.value())) continue;  // a mesh setting: kept
      auto doubled = ZooBuild(model, probe);
      if (!doubled.ok()) continue;  // cannot be told what it sizes: kept
      int64_t value = *v;
      if ((*doubled)->instruction_count() != base_count) {
        // A depth: its smallest divisor of at least 2 with which the model builds.
        for (int64_t d = 2; d < *v; ++d) {
          if (*v % d != 0) continue;
          ZooOverrides trial = from;
          trial[p.name] = std::to_string(d);
          if (ZooBuild(model, trial).ok()) {
            value = d;
            break;
          }
        }
      } else {
        // A size: every dimension it sizes stays whole on its tiles in `full`, and keeps at least
        // min_dim elements where it had them. A dimension d0 = v x a / b (a, b coprime; the circular
        // schedule's layers per stage are layers / stages) split t ways needs v' = b x m with t | m x a.
        int64_t need = 1, at_least = min_dim;
        bool linear = true;
        for (const auto& [name, twice] : ByName(**doubled)) {
          auto b = base_names.find(name);
          if (b == base_names.end() || b->second->shape().IsTuple() || twice->shape().IsTuple() ||
              b->second->shape().rank() != twice->shape().rank())
            continue;
          auto f = full_names.find(name);
          const Instruction* sharded = f != full_names.end() && SameKind(*f->second, *b->second) ? f->second : nullptr;
          for (int64_t d = 0; d < b->second->shape().rank(); ++d) {
            const int64_t d0 = b->second->shape().dim(d), d1 = twice->shape().dim(d);
            if (d0 == d1) continue;
            if (d1 != 2 * d0) {
              linear = false;  // not proportional to the setting (v + 1, a window): keep it
              break;
            }
            const int64_t g = std::gcd(d0, *v), a = d0 / g, b = *v / g, t = TilesOf(sharded, d);
            need = std::lcm(need, b * (t / std::gcd(t, a)));
            at_least = std::max(at_least, (std::min(d0, min_dim) * b + a - 1) / a);
          }
          if (!linear) break;
        }
        if (linear) {
          // The smallest multiple of `need` that divides the setting and keeps its dimensions long enough.
          for (int64_t m = need; m < *v; m += need) {
            if (m >= at_least && *v % m == 0) {
              value = m;
              break;
            }
          }
        } else {
          // Not proportional everywhere (the pipelined loop's iterations grow with the layers per
          // stage): the smallest divisor of at least 2 whose build keeps every dimension whole on
          // the tiles `full` splits it into, and at least 2 long where it was (a count of layers or
          // iterations, not a width a LayerNorm averages over).
          for (int64_t d = 2; d < *v; ++d) {
            if (*v % d != 0) continue;
            ZooOverrides trial = from;
            trial[p.name] = std::to_string(d);
            auto m = ZooBuild(model, trial);
            if (m.ok() && KeepsShardedDims(**m, full_names, 2)) {
              value = d;
              break;
            }
          }
        }
      }
      if (value != *v) {
        twin[p.name] = std::to_string(value);
        changed.push_back({p.name, {*v, value}});
      }
    }
    // Settings that shrink alone but not together (the MoE's batch must stay a multiple of its
    // groups): put back the first whose return alone lets the twin build, else the last; again.
    auto built = ZooBuild(model, twin);
    while (!built.ok() && !changed.empty()) {
      size_t back = changed.size() - 1;
      for (size_t k = 0; k + 1 < changed.size(); ++k) {
        ZooOverrides trial = twin;
        trial[changed[k].first] = std::to_string(changed[k].second.first);
        if (ZooBuild(model, trial).ok()) {
          back = k;
          break;
        }
      }
      twin[changed[back].first] = std::to_string(changed[back].second.first);
      changed.erase(changed.begin() + static_cast<std::ptrdiff_t>(back));
      built = ZooBuild(model, twin);
    }
    if (!built.ok()) return Error("building the small twin: " + built.error().message);
    return Shrunk{std::move(twin), std::move(changed)};
  };
  auto first = shrink(settings);
  if (!first.ok()) return first.error();
  auto second = shrink(first->settings);
  ZooOverrides twin = second.ok() ? second->settings : first->settings;
  // What changed from the given settings, in parameter order.
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> changed;
  for (const ZooParameter& p : entry->parameters) {
    const auto was = settings.find(p.name);
    const auto now = twin.find(p.name);
    if (now == twin.end()) continue;
    const std::string before = was != settings.end() ? was->second : p.default_value;
    if (before != now->second) changed.push_back({p.name, {IntOf(before).value_or(0), IntOf(now->second).value_or(0)}});
  }
  auto built = BuildShardedAs(model, twin, full, cancel);
  if (!built.ok()) return Error("building the small twin: " + built.error().message);

  SmallTwin out;
  out.settings = std::move(twin);
  out.changes = Describe(changed);
  out.module = std::move(built->module);
  out.shardings_copied = built->shardings_copied;
  return out;
}

Result<ShardedAs> BuildShardedAs(std::string_view model, const ZooOverrides& settings, const Module& sharded,
                                 const CancellationToken& cancel) {
  auto built = ZooBuild(model, settings);
  if (!built.ok()) return built.error();
  ShardedAs out;
  out.module = std::move(built).value();
  out.module->num_partitions = sharded.num_partitions;
  // `sharded`'s sharding, instruction by instruction. An instruction `sharded` has no counterpart
  // of (a layer beyond its depth) keeps the zoo's own annotation, if any; the rest is what
  // propagation infers.
  const auto names = ByName(sharded);
  for (const auto& c : out.module->computations()) {
    for (const auto& i : c->instructions()) {
      auto f = names.find(c->name() + "/" + i->name());
      if (f == names.end() || !SameKind(*f->second, *i)) continue;
      i->clear_sharding();
      if (!f->second->has_sharding()) continue;
      i->set_sharding(*f->second->sharding());
      ++out.shardings_copied;
    }
  }
  // Entry parameters and outputs without a sharding may take one, as the document's did (a layer
  // beyond `sharded`'s depth then has its optimizer state sharded as its weights, not replicated);
  // those that have one keep it.
  PropagationOptions options = StandardPropagationOptions(EntryIo::kKeep);
  options.propagate_to_parameters.clear();
  for (const Instruction* p : out.module->entry()->parameters()) options.propagate_to_parameters.push_back(!p->has_sharding());
  if (options.propagate_to_parameters.empty()) options.propagate_to_parameters = {false};
  options.propagate_to_output = {!out.module->entry()->root()->has_sharding()};
  auto propagated = Propagate(*out.module, options, cancel);
  if (!propagated.ok()) return Error("propagating its shardings: " + propagated.error().message);
  return out;
}

Result<TwinVerification> VerifySmallTwin(std::string_view model, const ZooOverrides& settings, const Module& full,
                                         int64_t devices, const VerifyOptions& limits, const CancellationToken& cancel) {
  // The roomiest twin the evaluator takes: dimensions of at least 8 first (at 2 a LayerNorm over
  // two values is so ill-conditioned that another order of partial sums, the partitioned
  // program's, moved a bf16 gradient by 60%), shorter only when that twin is too large.
  TwinVerification out;
  for (int64_t min_dim : {8, 4, 2}) {
    auto twin = BuildSmallTwin(model, settings, full, min_dim, cancel);
    if (!twin.ok()) return twin.error();
    SpmdOptions o;
    o.num_partitions = devices;
    auto spmd = Partition(*twin->module, o, cancel);
    if (!spmd.ok()) return Error("partitioning the small twin: " + spmd.error().message);
    out.changes = twin->changes;
    out.instructions = twin->module->instruction_count();
    // Inputs of one magnitude: the twin keeps the model's depth where its sharding needs it (16
    // layers of a circular pipeline on 8 stages), and 16 bf16 layers of inputs up to 16x apart
    // overflow in the reference itself.
    VerifyOptions v = limits;
    v.float_exponent_spread = 0;
    out.verdict = Verify(*twin->module, *spmd->module, devices, v, cancel);
    // A few isolated elements over the tolerance (a LayerNorm scale's gradient of a tiny variance,
    // amplifying the other order of partial sums) are judged by the check itself: it leaves out
    // the elements its own program cannot pin down (VerifyReport::ill_conditioned).
    if (out.verdict.state != VerificationVerdict::State::kSkipped) break;
  }
  return out;
}

Result<TwinVerification> VerifyShrunkTwin(const Module& full, int64_t devices, const VerifyOptions& limits,
                                          const CancellationToken& cancel) {
  TwinVerification out;
  for (int64_t min_dim : {8, 4, 2}) {
    if (cancel.cancelled()) return CancelledError("verifying a shrunk twin");
    ScaleDimsOptions o;
    o.shrink = true;
    o.min_dim = min_dim;
    auto twin = ScaleModuleDims(full, 1, o);
    if (!twin.ok()) return Error("shrinking the module: " + twin.error().message);
    std::string changes;
    int64_t listed = 0, more = 0;
    const auto& before = full.entry()->parameters();
    const auto& after = twin->module->entry()->parameters();
    for (size_t p = 0; p < before.size() && p < after.size(); ++p) {
      if (!before[p] || !after[p] || before[p]->shape() == after[p]->shape()) continue;
      if (listed++ >= 6) {
        ++more;
        continue;
      }
      changes += (changes.empty() ? "" : ", ") + before[p]->name() + " " + before[p]->shape().ToString(false) + " -> " +
                 after[p]->shape().ToString(false);
    }
    if (more) changes += " and " + std::to_string(more) + " more";
    SpmdOptions so;
    so.num_partitions = devices;
    auto spmd = Partition(*twin->module, so, cancel);
    if (!spmd.ok()) return Error("partitioning the shrunk twin: " + spmd.error().message);
    out.changes = changes.empty() ? std::string("no dimension shrinks") : "dimensions shrunk: " + changes;
    out.instructions = twin->module->instruction_count();
    out.verdict = Verify(*twin->module, *spmd->module, devices, limits, cancel);
    if (out.verdict.state != VerificationVerdict::State::kSkipped || changes.empty()) break;
  }
  return out;
}

}  // namespace shardscope::pipeline
