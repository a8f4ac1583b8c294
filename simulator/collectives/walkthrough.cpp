#include "simulator/collectives/walkthrough.h"

#include "core/base/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace shardscope::sim {

namespace {

// 1.5 -> "1½", 0.25 -> "¼", 3 -> "3"; other values with three significant digits.
std::string FormatCount(double v) {
  const double whole = std::floor(v + 1e-9);
  const double frac = v - whole;
  const char* glyph = nullptr;
  if (std::fabs(frac) < 1e-9) glyph = "";
  else if (std::fabs(frac - 0.5) < 1e-9) glyph = "\u00BD";
  else if (std::fabs(frac - 0.25) < 1e-9) glyph = "\u00BC";
  else if (std::fabs(frac - 0.75) < 1e-9) glyph = "\u00BE";
  if (glyph) {
    if (whole == 0 && *glyph) return glyph;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", whole);
    return buf + std::string(glyph);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string JoinInts(const std::vector<int64_t>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// "0, 1, 2, 3" or "0–3" for a run, "0, 4, 8, 12" otherwise; long lists shortened.
std::string ChunkList(const std::vector<int64_t>& v) {
  if (v.size() >= 3) {
    bool run = true;
    for (size_t i = 1; i < v.size(); ++i) run = run && v[i] == v[i - 1] + 1;
    if (run) return std::to_string(v.front()) + "\u2013" + std::to_string(v.back());
  }
  if (v.size() > 8) {
    std::vector<int64_t> head(v.begin(), v.begin() + 6);
    return JoinInts(head) + ", \u2026 (" + std::to_string(v.size()) + " in all)";
  }
  return JoinInts(v);
}

}  // namespace

// ---- The schedule as the walkthrough reads it ---------------------------------------------------------------

namespace {

// What a step of group 0 does, for the caption.
struct PhaseNote {
  int64_t part = 0;
  int64_t axis = -1;      // physical axis (grid); -1 for a plain sequence
  int64_t hop = 0;        // 1-based within the phase
  int64_t hops = 0;       // phase length
  int64_t line_size = 0;
  bool ring = false;
  int64_t block = 1;      // shards per block carried
  int64_t phase = 0;      // 0-based phase index of this part
  bool half = false;      // this hop carries halves
};

// A gather schedule (all-gather, reduce-scatter, all-reduce) with what the captions need.
struct GatherPlan {
  const CollectivePlan* schedule = nullptr;
  int64_t steps = 0;  // of one pass
  int64_t parts = 1;
  std::vector<std::vector<PhaseNote>> notes;  // group 0, per step of the all-gather pass

  const GroupLayout& layout(int64_t g) const { return schedule->plans[static_cast<size_t>(g)].layout; }
  const std::vector<int64_t>& group(int64_t g) const { return schedule->groups[static_cast<size_t>(g)]; }
  double Fraction(int64_t g, int64_t part) const {
    const auto& f = schedule->plans[static_cast<size_t>(g)].part_fractions;
    return part < static_cast<int64_t>(f.size()) ? f[static_cast<size_t>(part)] : 0.0;
  }
  // The devices at a stop (group order); the first one draws it.
  std::vector<int64_t> StopDevices(int64_t g, int64_t stop) const {
    std::vector<int64_t> out;
    for (int64_t pos : layout(g).stop_members[static_cast<size_t>(stop)]) out.push_back(group(g)[static_cast<size_t>(pos)]);
    return out;
  }
  int64_t StopDevice(int64_t g, int64_t stop) const {
    return group(g)[static_cast<size_t>(layout(g).stop_members[static_cast<size_t>(stop)].front())];
  }
};

GatherPlan ReadGather(const CollectivePlan& s) {
  GatherPlan G;
  G.schedule = &s;
  G.steps = s.pass_steps;
  G.parts = s.parts;
  if (s.plans.empty()) return G;
  for (const SchedulePhase& ph : s.plans.front().phases) {
    for (int64_t k = 0; k < ph.steps; ++k) {
      const int64_t step = ph.first_step + k;
      if (static_cast<int64_t>(G.notes.size()) <= step) G.notes.resize(static_cast<size_t>(step + 1));
      PhaseNote n;
      n.part = ph.part;
      n.axis = ph.physical_axis;
      n.hop = k + 1;
      n.hops = ph.steps;
      n.line_size = ph.line_size;
      n.ring = ph.ring;
      n.block = ph.block;
      n.phase = ph.phase;
      n.half = ph.ring && ph.line_size % 2 == 0 && k + 1 == ph.steps;
      G.notes[static_cast<size_t>(step)].push_back(n);
    }
  }
  return G;
}

// ---- Holdings -----------------------------------------------------------------------------------------------

// Per device: its group, position, and the devices of its chip in the group.
struct Membership {
  std::vector<int64_t> group, position;
  std::vector<int64_t> group_size;
};

Membership Members(const Topology& topo, const std::vector<std::vector<int64_t>>& groups) {
  Membership m;
  const size_t nd = static_cast<size_t>(topo.num_devices());
  m.group.assign(nd, -1);
  m.position.assign(nd, -1);
  m.group_size.assign(nd, 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const size_t d = static_cast<size_t>(groups[g][i]);
      m.group[d] = static_cast<int64_t>(g);
      m.position[d] = static_cast<int64_t>(i);
      m.group_size[d] = static_cast<int64_t>(groups[g].size());
    }
  }
  return m;
}

// The state of a gather / reduce: per part, per device, per chunk.
struct ChunkState {
  int64_t parts = 1;
  std::vector<std::vector<double>> fractions;  // per group, per part
  // gathered[j][d][c]: fraction of part j of chunk c held in its final form (all-gather data or a
  // fully reduced chunk); partial[j][d][c]: contributions (in devices) summed into d's copy.
  std::vector<std::vector<std::vector<double>>> gathered, partial;
};

enum class Mode { kGather, kReduce, kReducedGather };

std::string GatherText(const std::vector<HeldCell>& cells, const char* noun_singular, const char* noun_plural) {
  const size_t n = cells.size();
  std::vector<int64_t> full, partial;
  double total = 0;
  for (size_t c = 0; c < n; ++c) {
    total += cells[c].fill;
    if (cells[c].fill >= 1 - 1e-9) full.push_back(static_cast<int64_t>(c));
    else if (cells[c].fill > 1e-9) partial.push_back(static_cast<int64_t>(c));
  }
  if (full.size() == n) return std::string("holds all ") + std::to_string(n) + " " + noun_plural;
  std::string s;
  if (partial.empty()) {
    s = std::string("holds ") + (full.size() == 1 ? noun_singular : noun_plural) + " " + ChunkList(full) + " (" +
        std::to_string(full.size()) + " of " + std::to_string(n) + ")";
  } else {
    s = "holds " + FormatCount(total) + " of " + std::to_string(n) + " " + noun_plural + "' worth";
    if (!full.empty()) s += std::string(": all of ") + ChunkList(full) + ", part of " + ChunkList(partial);
    else s += ": part of " + ChunkList(partial);
  }
  return s;
}

std::vector<DeviceHolding> Snapshot(const Topology& topo, const Membership& mem, const ChunkState& st, Mode mode) {
  std::vector<DeviceHolding> out;
  const int64_t nd = topo.num_devices();
  for (int64_t d = 0; d < nd; ++d) {
    DeviceHolding h;
    h.device = d;
    h.group = mem.group[static_cast<size_t>(d)];
    h.position = mem.position[static_cast<size_t>(d)];
    if (h.group < 0) {
      h.text = "not in any replica group";
      out.push_back(std::move(h));
      continue;
    }
    const int64_t n = mem.group_size[static_cast<size_t>(d)];
    const double dn = static_cast<double>(n);
    h.cells.resize(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) {
      double fill = 0;
      for (int64_t j = 0; j < st.parts; ++j) {
        const double f = st.fractions[static_cast<size_t>(h.group)][static_cast<size_t>(j)];
        const double g = st.gathered[static_cast<size_t>(j)][static_cast<size_t>(d)][static_cast<size_t>(c)];
        const double p = st.partial[static_cast<size_t>(j)][static_cast<size_t>(d)][static_cast<size_t>(c)];
        switch (mode) {
          case Mode::kGather: fill += f * g; break;
          case Mode::kReduce: fill += f * p / dn; break;
          case Mode::kReducedGather: fill += f * g; break;  // the partial sums left over are not shown
        }
      }
      fill = std::clamp(fill, 0.0, 1.0);
      if (std::fabs(fill - 1) < 1e-9) fill = 1;
      h.cells[static_cast<size_t>(c)] = {fill > 1e-12 ? c : -1, fill};
    }
    const size_t own = static_cast<size_t>(h.position);
    if (mode == Mode::kGather) {
      h.text = GatherText(h.cells, "shard", "shards");
    } else if (mode == Mode::kReduce) {
      double summed = 0;
      for (int64_t j = 0; j < st.parts; ++j) {
        summed += st.fractions[static_cast<size_t>(h.group)][static_cast<size_t>(j)] * st.partial[static_cast<size_t>(j)][static_cast<size_t>(d)][own];
      }
      h.text = "its chunk " + std::to_string(h.position) + ": " + FormatCount(summed) + " of " + std::to_string(n) +
               " contributions added" + (summed >= dn - 1e-9 ? " (fully reduced)" : "");
    } else {
      std::vector<HeldCell> done(h.cells.size());
      for (size_t c = 0; c < h.cells.size(); ++c) {
        double g = 0;
        for (int64_t j = 0; j < st.parts; ++j) {
          g += st.fractions[static_cast<size_t>(h.group)][static_cast<size_t>(j)] * st.gathered[static_cast<size_t>(j)][static_cast<size_t>(d)][c];
        }
        done[c] = {static_cast<int64_t>(c), g};
      }
      h.text = GatherText(done, "reduced chunk", "reduced chunks");
      if (h.text.rfind("holds all", 0) == 0) h.text += ": the all-reduce is complete";
    }
    out.push_back(std::move(h));
  }
  return out;
}

ChunkState InitialState(const Topology& topo, const Membership& mem, const GatherPlan& G,
                        const std::vector<std::vector<int64_t>>& groups, Mode mode) {
  ChunkState st;
  st.parts = G.parts;
  for (const ScheduledGroup& sg : G.schedule->plans) st.fractions.push_back(sg.part_fractions);
  for (auto& f : st.fractions) f.resize(static_cast<size_t>(G.parts), 0.0);
  const size_t nd = static_cast<size_t>(topo.num_devices());
  st.gathered.assign(static_cast<size_t>(G.parts), std::vector<std::vector<double>>(nd));
  st.partial = st.gathered;
  for (int64_t j = 0; j < G.parts; ++j) {
    for (size_t d = 0; d < nd; ++d) {
      const int64_t n = mem.group_size[d];
      st.gathered[static_cast<size_t>(j)][d].assign(static_cast<size_t>(n), 0.0);
      st.partial[static_cast<size_t>(j)][d].assign(static_cast<size_t>(n), 0.0);
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupLayout& L = G.layout(static_cast<int64_t>(g));
    // A chip's devices share what the chip holds (on-chip, free): its shards, or the sum of its
    // devices' contributions.
    std::map<int64_t, std::vector<int64_t>> chunks_on_chip;
    if (L.product || L.kind == GroupLayout::Kind::kTrivial) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        chunks_on_chip[topo.ChipOfDevice(groups[g][i])].push_back(static_cast<int64_t>(i));
      }
    }
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const size_t d = static_cast<size_t>(groups[g][i]);
      std::vector<int64_t> own = {static_cast<int64_t>(i)};
      if (!chunks_on_chip.empty()) own = chunks_on_chip[topo.ChipOfDevice(groups[g][i])];
      for (int64_t j = 0; j < G.parts; ++j) {
        auto& gathered = st.gathered[static_cast<size_t>(j)][d];
        auto& partial = st.partial[static_cast<size_t>(j)][d];
        if (mode == Mode::kGather) {
          for (int64_t c : own) gathered[static_cast<size_t>(c)] = 1;
        } else {
          std::fill(partial.begin(), partial.end(), static_cast<double>(own.size()));
        }
      }
    }
  }
  return st;
}

// A hop of the schedule with the chunks it carries.
struct CarriedHop {
  const ScheduleHop* hop = nullptr;
  std::vector<int64_t> chunks;
};

// Applies one step's hops (all starting from the state at the step's start): gathered blocks fill
// in, partial sums are added on arrival.
void ApplyHops(const std::vector<CarriedHop>& hops, const GatherPlan& G, ChunkState* st) {
  bool reduce = false;
  for (const CarriedHop& c : hops) reduce = reduce || c.hop->reduce;
  const ChunkState before = reduce ? *st : ChunkState{};
  for (const CarriedHop& c : hops) {
    const ScheduleHop& h = *c.hop;
    const size_t part = static_cast<size_t>(h.part);
    if (h.reduce) {
      const int64_t src = G.StopDevice(h.group, h.from);
      for (int64_t dst : G.StopDevices(h.group, h.to)) {
        for (int64_t ch : c.chunks) {
          st->partial[part][static_cast<size_t>(dst)][static_cast<size_t>(ch)] +=
              h.fraction * before.partial[part][static_cast<size_t>(src)][static_cast<size_t>(ch)];
        }
      }
      continue;
    }
    for (int64_t dst : G.StopDevices(h.group, h.to)) {
      for (int64_t ch : c.chunks) {
        double& v = st->gathered[part][static_cast<size_t>(dst)][static_cast<size_t>(ch)];
        v = std::min(1.0, v + h.fraction);
      }
    }
  }
}


// ---- Naming axes ------------------------------------------------------------------------------------------

struct Namer {
  const Topology* topo = nullptr;
  const DeviceMesh* mesh = nullptr;

  // The mesh axes along which the devices of a group differ: "X", "X and Y".
  std::string GroupAxes(const std::vector<int64_t>& group) const {
    if (!mesh || group.size() < 2) return "";
    std::vector<std::string> names;
    const auto c0 = mesh->CoordsOf(group[0]);
    if (c0.size() != static_cast<size_t>(mesh->num_axes())) return "";
    for (int64_t a = 0; a < mesh->num_axes(); ++a) {
      for (int64_t d : group) {
        const auto c = mesh->CoordsOf(d);
        if (c.size() == c0.size() && c[static_cast<size_t>(a)] != c0[static_cast<size_t>(a)]) {
          names.push_back(mesh->axes()[static_cast<size_t>(a)].name);
          break;
        }
      }
    }
    if (names.empty()) return "";
    std::string s;
    for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : (i + 1 == names.size() ? " and " : ", ")) + names[i];
    return s;
  }
  // The name of physical axis `axis` as seen by the group: the mesh axis along which two adjacent
  // chips of the group differ; "physical axis N" otherwise.
  std::string PhysicalAxis(int64_t axis, const GatherPlan& G) const {
    const std::string fallback = "physical axis " + std::to_string(axis);
    const GroupLayout& L = G.layout(0);
    if (!mesh || axis < 0 || L.num_stops() == 0) return fallback;
    auto coords = topo->ChipCoords(L.chips.front());
    for (int64_t s = 0; s < L.num_stops(); ++s) {
      auto c = topo->ChipCoords(L.chips[static_cast<size_t>(s)]);
      int differing = 0;
      for (size_t a = 0; a < c.size(); ++a) differing += c[a] != coords[a];
      if (differing == 1 && c[static_cast<size_t>(axis)] != coords[static_cast<size_t>(axis)]) {
        const auto m0 = mesh->CoordsOf(G.StopDevice(0, 0)), m1 = mesh->CoordsOf(G.StopDevice(0, s));
        if (m0.size() != m1.size()) return fallback;
        std::string name;
        int diff = 0;
        for (size_t a = 0; a < m0.size(); ++a) {
          if (m0[a] != m1[a]) {
            name = mesh->axes()[a].name;
            ++diff;
          }
        }
        return diff == 1 ? name : fallback;
      }
    }
    return fallback;
  }
};

// "A; b and c", capitalised.
std::string JoinClauses(const std::vector<std::string>& bits) {
  std::string joined;
  for (size_t i = 0; i < bits.size(); ++i) joined += (i == 0 ? "" : (i + 1 == bits.size() ? " and " : "; ")) + bits[i];
  if (!joined.empty()) joined[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(joined[0])));
  return joined;
}

std::string StepPrefix(int64_t k, int64_t total) {
  return "Step " + std::to_string(k) + " of " + std::to_string(total) + ": ";
}

// Captions of an all-gather (noun: "shard" or "reduced chunk").
std::string GatherCaption(const GatherPlan& G, int64_t step, const Namer& namer, const std::string& along,
                          const std::string& noun, int64_t n) {
  const GroupLayout& L = G.layout(0);
  const bool last = step + 1 == G.steps;
  const std::string nouns = noun + "s";
  std::string s;
  if (L.kind == GroupLayout::Kind::kSwitch) {
    return "Every device sends its " + noun + " straight to every other member through the switch (one hop up, one "
           "down). Every device now holds all " + std::to_string(n) + " " + nouns + ".";
  }
  if (L.kind == GroupLayout::Kind::kTrivial || step >= static_cast<int64_t>(G.notes.size())) {
    return "Other groups finish their last hops.";
  }
  const auto& notes = G.notes[static_cast<size_t>(step)];
  if (G.parts > 1) {
    if (step == 0) {
      s += "Each " + noun + " is split into " + std::to_string(G.parts) + " parts so that the links of every axis work at "
           "once. ";
    }
    std::vector<std::string> bits;
    for (const PhaseNote& p : notes) {
      std::string b = "part " + std::to_string(p.part + 1) + " moves along " + namer.PhysicalAxis(p.axis, G) + " (hop " +
                      std::to_string(p.hop) + " of " + std::to_string(p.hops) + (p.ring ? ", ring" : ", line");
      if (p.phase > 0) b += ", carrying blocks of " + std::to_string(p.block) + " " + nouns + " gathered earlier";
      if (p.half) b += ", the last hop carries half of each block each way";
      bits.push_back(b + ")");
    }
    s += JoinClauses(bits);
    s += ".";
    if (last) s += " Every device now holds all " + std::to_string(n) + " " + nouns + ".";
    return s;
  }
  const PhaseNote p = notes.empty() ? PhaseNote{} : notes.front();
  const std::string where = along.empty() ? "" : " along " + along;
  if (L.closed && p.ring) {
    if (step == 0) s = "Every device sends its own " + noun + " to both of its neighbours" + where + ", one copy each way round the ring.";
    else s = "Every device forwards the " + nouns + " it received in step " + std::to_string(step) + " one hop further, in the same direction.";
    if (p.half) {
      s += " N = " + std::to_string(L.num_stops()) + " is even, so this last hop carries only half a " + noun +
           " each way: the device opposite each owner receives one half from each side.";
    }
  } else if (L.closed) {
    if (step == 0) s = "Every device sends its own " + noun + " to its next neighbour" + where + " (the ring is used in one direction only).";
    else s = "Every device passes on the " + noun + " it received in step " + std::to_string(step) + " to its next neighbour.";
  } else {
    if (step == 0) {
      s = "Every device sends its own " + noun + " to its neighbours" + where + ". There is no wraparound link, so the "
          "devices at the two ends have one neighbour each.";
    } else {
      s = "The " + nouns + " keep travelling towards both ends of the line, one hop per step.";
    }
  }
  if (L.routed && step == 0) s += " (These devices are not neighbours on the network: each hop is routed over several links.)";
  if (last) {
    s += " Every device now holds all " + std::to_string(n) + " " + nouns + ".";
    if (!L.closed && L.num_stops() >= 3) {
      s += " A line needs N\u22121 = " + std::to_string(L.num_stops() - 1) + " steps; a ring with wraparound would need N/2 = " +
           std::to_string(L.num_stops() / 2) + ".";
    }
  }
  return s;
}

std::string ReduceCaption(const GatherPlan& G, int64_t step, const Namer& namer, const std::string& along, int64_t n) {
  const GroupLayout& L = G.layout(0);
  const int64_t fwd = G.steps - 1 - step;  // the all-gather step this one mirrors
  const bool first = step == 0, last = step + 1 == G.steps;
  if (L.kind == GroupLayout::Kind::kSwitch) {
    return "Every device sends its contribution to chunk i straight to member i through the switch; each member adds "
           "the N\u22121 contributions it receives to its own: every device now holds its chunk summed over all " +
           std::to_string(n) + " devices.";
  }
  if (L.kind == GroupLayout::Kind::kTrivial || fwd < 0 || fwd >= static_cast<int64_t>(G.notes.size())) return "Other groups finish.";
  const auto& notes = G.notes[static_cast<size_t>(fwd)];
  std::string s;
  if (G.parts > 1) {
    if (first) {
      s += "Each chunk is split into " + std::to_string(G.parts) + " parts so that the links of every axis work at once "
           "(the all-gather schedule run backwards). ";
    }
    std::vector<std::string> bits;
    for (const PhaseNote& p : notes) {
      std::string b = "part " + std::to_string(p.part + 1) + " sums along " + namer.PhysicalAxis(p.axis, G) + " (hop " +
                      std::to_string(p.hops - p.hop + 1) + " of " + std::to_string(p.hops);
      if (p.block > 1) b += ", partial sums of " + std::to_string(p.block) + " chunks per message";
      if (p.half) b += ", first hop: half each way";
      bits.push_back(b + ")");
    }
    s += JoinClauses(bits);
    s += ". Every message is added to the receiver's own partial sums on arrival.";
    if (last) s += " Every device now holds its own chunk summed over all " + std::to_string(n) + " devices.";
    return s;
  }
  const PhaseNote p = notes.empty() ? PhaseNote{} : notes.front();
  const std::string where = along.empty() ? "" : " along " + along;
  if (first) {
    if (L.closed && p.ring) {
      s = "Partial sums start at the devices farthest round the ring from each chunk's owner: each sends its contribution "
          "to that chunk one hop towards the owner" + where + ", in both directions.";
      if (p.half) s += " N is even, so the device opposite an owner sends half of that chunk each way.";
    } else if (L.closed) {
      s = "Each device sends its contribution to one chunk one hop round the ring" + where + " towards that chunk's owner.";
    } else {
      s = "The devices at the two ends of the line start: each sends its contribution to the chunk owned by the far end "
          "one hop inwards" + where + ".";
    }
  } else if (!last) {
    s = "Each device adds its own contribution to the partial sums it received in step " + std::to_string(step) +
        " and passes them one hop further towards their owners.";
  }
  if (last) {
    s += std::string(s.empty() ? "" : " ") + "Each device receives the partial sums of its own chunk from its neighbours and adds them to its own contribution: it now holds its chunk summed over all " +
         std::to_string(n) + " devices.";
  }
  s += " (Reduced on arrival: the receiver adds, so a message never grows.)";
  if (L.routed && first) s += " Each hop is routed over several links.";
  return s;
}


// ---- All-to-all ------------------------------------------------------------------------------------------------

int64_t DeviceOnChip(const Topology& topo, int64_t chip, const std::map<int64_t, int64_t>& member_on_chip) {
  auto it = member_on_chip.find(chip);
  if (it != member_on_chip.end()) return it->second;
  const auto& devs = topo.DevicesOnChip(chip);
  return devs.empty() ? -1 : devs.front();
}

// ---- The formula -------------------------------------------------------------------------------------------------

struct FormulaInputs {
  CollectiveKind kind;
  const Topology* topo;
  const CollectiveCost* cost;
  const CollectiveOptions* options;
  int64_t n = 0;             // group size
  int64_t groups = 0;
  double operand = 0;
  std::string along;
  const GroupLayout* layout = nullptr;  // group 0 (collectives other than permute)
  int64_t pairs = 0;
};

CostFormula MakeFormula(const FormulaInputs& in) {
  CostFormula f;
  const Topology& topo = *in.topo;
  const CollectiveCost& cost = *in.cost;
  const bool additive = in.options->latency_model == LatencyModel::kAdditive;
  f.time_s = cost.time_s;
  f.latency_s = cost.latency_time_s;
  f.bandwidth_s = cost.bandwidth_time_s;
  f.hop_latency_s = topo.chip().hop_latency;
  f.hops = f.hop_latency_s > 0 ? f.latency_s / f.hop_latency_s : 0;
  // The busiest link (an all-reduce: the busiest link of each of its two passes, added).
  if (cost.busiest_link >= 0) {
    f.link_bytes = cost.max_link_bytes;
    f.link_bandwidth = topo.link(cost.busiest_link).bandwidth;
  }
  if (f.link_bandwidth <= 0) f.link_bandwidth = topo.chip().ici_link_bandwidth;
  const double n = static_cast<double>(std::max<int64_t>(1, in.n));
  std::string unit_name;
  switch (in.kind) {
    case CollectiveKind::kAllGather: f.unit_bytes = in.operand; unit_name = "shard"; break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce: f.unit_bytes = in.operand / n; unit_name = "chunk"; break;
    case CollectiveKind::kAllToAll: f.unit_bytes = in.operand / n; unit_name = "piece"; break;
    case CollectiveKind::kCollectivePermute: f.unit_bytes = in.operand; unit_name = "message"; break;
  }
  // Latency term: T_hop x hops when it is a whole number of hops.
  std::string lat;
  const bool whole_hops = f.hop_latency_s > 0 && std::fabs(f.hops - std::round(f.hops)) < 1e-6;
  if (whole_hops) lat = FormatSeconds(f.hop_latency_s) + " \u00D7 " + std::to_string(static_cast<int64_t>(std::llround(f.hops)));
  else lat = FormatSeconds(f.latency_s);
  // Bandwidth term: V_link / W when that is what the model computed (always for the ring
  // schedules; a permute whose sends share links fairly also ends at the busiest link's load / W).
  std::string bw;
  const bool link_form = f.link_bytes > 0 && std::fabs(f.link_bytes / f.link_bandwidth - f.bandwidth_s) <= 1e-9 * std::max(1e-12, f.bandwidth_s);
  if (link_form) bw = FormatBytes(f.link_bytes) + " / " + FormatRate(f.link_bandwidth);
  else bw = FormatSeconds(f.bandwidth_s);
  f.symbolic = additive ? "T = T_hop \u00D7 hops + V_link / W" : "T = max(T_hop \u00D7 hops, V_link / W)";
  f.substituted = additive ? lat + " + " + bw : "max(" + lat + ", " + bw + ")";
  f.result = FormatSeconds(f.time_s) + " (" + std::string(CostRegimeName(cost.regime)) + ")";
  f.text = f.symbolic + " = " + f.substituted + " = " + f.result;

  // Legend.
  if (in.kind == CollectiveKind::kCollectivePermute) {
    f.legend.push_back(std::to_string(in.pairs) + " point-to-point sends of B = " + FormatBytes(in.operand) + " each, all at once");
  } else {
    f.legend.push_back("N = " + std::to_string(in.n) + " devices per group" +
                       (in.along.empty() ? "" : " (along " + in.along + ")") + ", " + std::to_string(in.groups) +
                       (in.groups == 1 ? " group" : " groups at once"));
    switch (in.kind) {
      case CollectiveKind::kAllGather:
        f.legend.push_back("S = " + FormatBytes(in.operand) + ": each device's shard; the result is N \u00D7 S = " +
                           FormatBytes(n * in.operand));
        break;
      case CollectiveKind::kReduceScatter:
        f.legend.push_back("B = " + FormatBytes(in.operand) + ": each device's unreduced buffer, cut into N chunks of " +
                           FormatBytes(f.unit_bytes) + "; each device ends with one chunk, summed");
        break;
      case CollectiveKind::kAllReduce:
        f.legend.push_back("B = " + FormatBytes(in.operand) + ": each device's buffer, cut into N chunks of " +
                           FormatBytes(f.unit_bytes) + " (reduce-scatter, then all-gather)");
        break;
      case CollectiveKind::kAllToAll:
        f.legend.push_back("B = " + FormatBytes(in.operand) + ": each device's buffer, cut into N pieces of " +
                           FormatBytes(f.unit_bytes) + "; piece j goes to member j");
        break;
      case CollectiveKind::kCollectivePermute: break;
    }
  }
  if (f.link_bytes > 0) {
    std::string why;
    const double ratio = f.unit_bytes > 0 ? f.link_bytes / f.unit_bytes : 0;
    std::string carries = "the busiest one-way link carries " + FormatCount(ratio) + " " + unit_name + (std::fabs(ratio - 1) < 1e-9 ? "" : "s");
    if (in.layout && in.kind != CollectiveKind::kAllToAll && in.kind != CollectiveKind::kCollectivePermute) {
      const GroupLayout& L = *in.layout;
      if (L.kind == GroupLayout::Kind::kSequence && !L.routed) {
        if (L.closed && in.options->bidirectional) why = " ((N\u22121)/2 each way round a bidirectional ring";
        else if (L.closed) why = " (N\u22121 round a one-way ring";
        else why = " (N\u22121 on a line without wraparound";
        if (L.per_chip > 1) why += ", counting a chip's " + std::to_string(L.per_chip) + " devices together";
        why += in.kind == CollectiveKind::kAllReduce ? ", twice: reduce-scatter and all-gather)" : ")";
      } else if (L.kind == GroupLayout::Kind::kGrid) {
        why = " (parts of each " + unit_name + " cross every axis; blocks grow as they go" +
              std::string(in.kind == CollectiveKind::kAllReduce ? ", twice: reduce-scatter and all-gather)" : ")");
      }
    }
    f.legend.push_back("V_link = " + FormatBytes(f.link_bytes) + ": " + carries + why);
    f.legend.push_back("W = " + FormatRate(f.link_bandwidth) + ": one direction of one " +
                       (topo.is_switch() ? std::string("switch port") : std::string("ICI link")) + " (" + topo.chip().name + ")");
  }
  if (f.hop_latency_s > 0) {
    f.legend.push_back("T_hop = " + FormatSeconds(f.hop_latency_s) + " per hop; " +
                       (whole_hops ? FormatCount(std::round(f.hops)) + (std::llround(f.hops) == 1 ? " hop" : " hops") + " on the critical path over " + std::to_string(cost.steps) +
                                         (cost.steps == 1 ? " step" : " synchronous steps")
                                   : "latency " + FormatSeconds(f.latency_s) + " over " + std::to_string(cost.steps) + " steps"));
  }
  f.legend.push_back(std::string(cost.regime == CostRegime::kLatencyBound ? "Latency-bound: the hops (" : "Bandwidth-bound: the bytes (") +
                     FormatSeconds(cost.regime == CostRegime::kLatencyBound ? f.latency_s : f.bandwidth_s) + ") outweigh the " +
                     (cost.regime == CostRegime::kLatencyBound ? "bytes (" + FormatSeconds(f.bandwidth_s) + ")"
                                                              : "hop latency (" + FormatSeconds(f.latency_s) + ")") +
                     (additive ? "; the additive model adds both"
                               : in.kind == CollectiveKind::kCollectivePermute ? "; the overlapped model takes the larger term"
                                                                               : "; the steps pipeline, so the larger term wins"));
  f.legend.push_back("Algorithm: " + cost.algorithm);

  // The book's closed form.
  if (topo.is_switch()) {
    f.book = "The book's ICI formulas are for TPU rings and tori; a switch sends directly.";
    return f;
  }
  const double w = topo.chip().ici_link_bandwidth;
  if (in.kind == CollectiveKind::kCollectivePermute) {
    f.book_time_s = BookCollectiveTime(in.kind, in.operand, w, f.hop_latency_s, {1}, true);
    f.book = "Book (How To Scale Your Model, part 3): T \u2248 max(T_min, B / W) = max(" + FormatSeconds(f.hop_latency_s) + ", " +
             FormatBytes(in.operand) + " / " + FormatRate(w) + ") = " + FormatSeconds(f.book_time_s) + " for one send over one link.";
    return f;
  }
  if (!in.layout || in.layout->kind == GroupLayout::Kind::kTrivial) return f;
  const GroupLayout& L = *in.layout;
  std::vector<int64_t> sizes;
  bool wrap = true;
  if (L.product) {
    sizes = L.size;
    for (bool r : L.ring) wrap = wrap && r;
  } else {
    sizes = {L.num_stops()};
    wrap = L.closed;
  }
  double V = in.operand;
  if (in.kind == CollectiveKind::kAllGather || in.kind == CollectiveKind::kAllToAll) V = n * in.operand;
  f.book_time_s = BookCollectiveTime(in.kind, V, w, f.hop_latency_s, sizes, wrap);
  int64_t sum = 0, sum_minus_one = 0, prod = 1;
  for (int64_t x : sizes) {
    sum += x;
    sum_minus_one += x - 1;
    prod *= x;
  }
  const bool multi = sizes.size() > 1;
  const std::string axes_form = multi ? " \u00D7 axes" : "";
  const std::string axes_num = multi ? " \u00D7 " + std::to_string(sizes.size()) : "";
  const std::string quarter = in.kind == CollectiveKind::kAllToAll ? " / 4" : "";
  std::string lat_form, lat_num, bw_form, bw_num;
  if (wrap) {
    lat_form = "T_min \u00D7 \u03A3|X|/2";
    lat_num = FormatSeconds(f.hop_latency_s) + " \u00D7 " + FormatCount(static_cast<double>(sum) / 2);
    bw_form = (multi ? "V / (W_ICI" + axes_form + ")" : std::string("V / W_ICI")) + quarter;
    bw_num = FormatBytes(V) + " / " + (multi ? "(" + FormatRate(2 * w) + axes_num + ")" : FormatRate(2 * w)) + quarter;
  } else {
    lat_form = "T_min \u00D7 \u03A3(|X|\u22121)";
    lat_num = FormatSeconds(f.hop_latency_s) + " \u00D7 " + std::to_string(sum_minus_one);
    bw_form = "(N\u22121)/N \u00D7 V / " + (multi ? "(W" + axes_form + ")" : std::string("W")) + quarter;
    bw_num = std::to_string(prod - 1) + "/" + std::to_string(prod) + " \u00D7 " + FormatBytes(V) + " / " +
             (multi ? "(" + FormatRate(w) + axes_num + ")" : FormatRate(w)) + quarter;
  }
  const std::string twice = in.kind == CollectiveKind::kAllReduce ? "2 \u00D7 " : "";
  const std::string form = twice + "max(" + lat_form + ", " + bw_form + ")";
  const std::string nums = twice + "max(" + lat_num + ", " + bw_num + ")";
  f.book = "Book (How To Scale Your Model, part 3): T \u2248 " + form + " = " + nums + " = " + FormatSeconds(f.book_time_s) +
           ", with V = " + FormatBytes(V) +
           (in.kind == CollectiveKind::kAllGather ? " the whole gathered array" : in.kind == CollectiveKind::kAllToAll ? " the whole array" : " the buffer") +
           (wrap ? " and W_ICI both directions of a link." : " and W one direction of a link (no wraparound).");
  if (wrap) f.book += " Its V / W_ICI is the large-N limit: the exact ring moves (N\u22121)/N of V.";
  return f;
}

Status CheckSize(int64_t transfers, int64_t cells, const WalkthroughOptions& o) {
  if (transfers > o.max_transfers) {
    return Error("this collective has " + std::to_string(transfers) + " transfers to show, more than the " +
                 std::to_string(o.max_transfers) + " a walkthrough draws; pick a collective over fewer devices");
  }
  if (cells > o.max_cells) {
    return Error("this collective is too large to step through (" + std::to_string(cells) +
                 " device-cell-steps); pick a collective over fewer devices");
  }
  return Status::Ok();
}

void Finalize(CollectiveWalkthrough* w, const Topology& topo) {
  w->link_bytes.assign(static_cast<size_t>(topo.num_links()), 0.0);
  for (const auto& s : w->steps) {
    for (const auto& t : s.transfers) {
      for (int64_t l : t.path) w->link_bytes[static_cast<size_t>(l)] += t.bytes;
    }
  }
}

std::string PieceLabel(const std::vector<int64_t>& chunks, double half, int64_t part, int64_t parts, const char* singular,
                       const char* plural) {
  std::string s;
  if (chunks.size() == 1) s = std::string(singular) + " " + std::to_string(chunks.front());
  else s = std::string(plural) + " " + ChunkList(chunks);
  if (half < 1) s = "half of " + s;
  if (parts > 1) s += " (part " + std::to_string(part + 1) + " of " + std::to_string(parts) + ")";
  return s;
}

}  // namespace

// ---- The walkthroughs ------------------------------------------------------------------------------------------

Result<CollectiveWalkthrough> WalkThroughCollective(const Topology& topo, CollectiveKind kind,
                                                    const std::vector<std::vector<int64_t>>& groups_in,
                                                    double operand_bytes, const WalkthroughOptions& options) {
  if (kind == CollectiveKind::kCollectivePermute) {
    return Error("collective-permute takes source-target pairs: use WalkThroughCollectivePermute");
  }
  // The schedule the cost model times, every piece listed (no per-axis counting).
  CollectiveOptions listed = options.collective;
  listed.per_axis_all_to_all = false;
  auto built = BuildCollectiveSchedule(topo, kind, groups_in, operand_bytes, listed, options.max_transfers);
  if (!built.ok()) return built.error();
  const CollectiveSchedule& sched = built.value();
  CollectiveWalkthrough w;
  w.kind = kind;
  w.cost = TimeSchedule(topo, sched, options.collective);
  w.operand_bytes = operand_bytes;
  w.algorithm = w.cost.algorithm;
  const CollectivePlan& plan = sched.plan;
  w.groups = plan.groups;
  w.num_groups = static_cast<int64_t>(w.groups.size());
  w.group_size = plan.group_size;
  w.colour_count = w.group_size;
  const int64_t n = w.group_size;
  const Membership mem = Members(topo, w.groups);
  const DeviceMesh* mesh = options.mesh && options.mesh->num_devices() == topo.num_devices() ? &*options.mesh : nullptr;
  const Namer namer{&topo, mesh};
  const std::string along = namer.GroupAxes(w.groups.front());
  const bool bidir = options.collective.bidirectional;
  const int64_t nd = topo.num_devices();

  if (kind == CollectiveKind::kAllToAll) {
    const double piece_bytes = operand_bytes / static_cast<double>(std::max<int64_t>(1, n));
    // Every hop of every piece: hop k of its route happens in step k+1 (devices of one chip and
    // sends through a switch in step 1).
    int64_t steps = plan.steps;
    if (!sched.hops.empty()) steps = std::max<int64_t>(steps, 1);
    Status size = CheckSize(static_cast<int64_t>(sched.hops.size()), steps * nd * n, options);
    if (!size.ok()) return size.error();
    w.steps.resize(static_cast<size_t>(steps));
    std::vector<std::map<int64_t, int64_t>> member_on_chip(w.groups.size());
    for (size_t g = 0; g < w.groups.size(); ++g) {
      for (int64_t d : w.groups[g]) member_on_chip[g].emplace(topo.ChipOfDevice(d), d);
    }
    for (size_t i = 0; i < sched.hops.size(); ++i) {
      const ScheduleHop& h = sched.hops[i];
      const std::vector<int64_t>& links = sched.links[i];
      const auto& grp = w.groups[static_cast<size_t>(h.group)];
      const int64_t src = grp[static_cast<size_t>(h.origin)], dst = grp[static_cast<size_t>(h.target)];
      StepTransfer t;
      t.group = h.group;
      t.chunks = {h.origin};
      t.fraction = h.fraction;
      t.bytes = h.bytes;
      t.final_dst_device = dst;
      const auto& names = options.piece_names;
      const bool named = static_cast<int64_t>(names.size()) == n &&
                         static_cast<int64_t>(names[static_cast<size_t>(h.origin)].size()) == n;
      const std::string what = named ? names[static_cast<size_t>(h.origin)][static_cast<size_t>(h.target)]
                                     : std::to_string(src) + "\u2192" + std::to_string(dst);
      t.piece = named ? (h.fraction < 1 ? FormatCount(h.fraction) + " of " : std::string()) + what
                      : (h.fraction < 1 ? FormatCount(h.fraction) + " of piece " : std::string("piece ")) + what;
      if (links.empty()) {  // devices of one chip: free, shown in step 1
        t.src_device = src;
        t.dst_device = dst;
        t.on_chip = true;
      } else if (topo.is_switch()) {  // one step through the switch
        t.src_device = src;
        t.dst_device = dst;
        t.path = links;
        t.hops = 1;
      } else {
        const int64_t k = h.first_link;
        const TopologyLink& link = topo.link(links.front());
        const bool last = k + 1 == h.route_links;
        t.src_device = k == 0 ? src : DeviceOnChip(topo, link.src, member_on_chip[static_cast<size_t>(h.group)]);
        t.dst_device = last ? dst : DeviceOnChip(topo, link.dst, member_on_chip[static_cast<size_t>(h.group)]);
        t.path = {link.id};
        t.hops = 1;
        t.axis = link.axis;
        t.direction = link.direction;
        t.wraparound = link.wraparound;
      }
      w.steps[static_cast<size_t>(h.step)].transfers.push_back(std::move(t));
    }
    // Holdings: cell c of member i starts with piece i->c and ends with piece c->i.
    std::vector<std::vector<HeldCell>> cells(static_cast<size_t>(nd));
    std::vector<int64_t> in_transit(static_cast<size_t>(nd), 0);
    for (size_t g = 0; g < w.groups.size(); ++g) {
      for (size_t i = 0; i < w.groups[g].size(); ++i) {
        cells[static_cast<size_t>(w.groups[g][i])].assign(w.groups[g].size(), {static_cast<int64_t>(i), 1.0});
      }
    }
    auto snapshot = [&]() {
      std::vector<DeviceHolding> out;
      for (int64_t d = 0; d < nd; ++d) {
        DeviceHolding h;
        h.device = d;
        h.group = mem.group[static_cast<size_t>(d)];
        h.position = mem.position[static_cast<size_t>(d)];
        h.cells = cells[static_cast<size_t>(d)];
        if (h.group < 0) {
          h.text = in_transit[static_cast<size_t>(d)] ? "not in the group; forwarding " + std::to_string(in_transit[static_cast<size_t>(d)]) + " pieces"
                                                      : "not in any replica group";
        } else {
          std::vector<int64_t> from;
          for (size_t c = 0; c < h.cells.size(); ++c) {
            if (h.cells[c].colour == static_cast<int64_t>(c) && h.cells[c].fill >= 1 - 1e-9) from.push_back(static_cast<int64_t>(c));
          }
          const int64_t members = static_cast<int64_t>(h.cells.size());
          if (static_cast<int64_t>(from.size()) == members) {
            h.text = "holds one piece from every member (" + std::to_string(members) + "): done";
          } else {
            h.text = "holds pieces from members " + ChunkList(from) + " (" + std::to_string(from.size()) + " of " + std::to_string(members) + ")";
          }
          if (in_transit[static_cast<size_t>(d)]) h.text += "; forwarding " + std::to_string(in_transit[static_cast<size_t>(d)]) + " pieces";
        }
        out.push_back(std::move(h));
      }
      return out;
    };
    w.initial = snapshot();
    for (size_t s = 0; s < w.steps.size(); ++s) {
      std::fill(in_transit.begin(), in_transit.end(), 0);
      auto& step = w.steps[s];
      // Departures first (a cell empties), then arrivals (a cell fills with the sender's colour).
      for (const auto& t : step.transfers) {
        const bool first_hop = t.on_chip || s == 0 || topo.is_switch();
        if (!first_hop) continue;
        const int64_t src = w.groups[static_cast<size_t>(t.group)][static_cast<size_t>(t.chunks.front())];
        auto& cell = cells[static_cast<size_t>(src)][static_cast<size_t>(mem.position[static_cast<size_t>(t.final_dst_device)])];
        cell.fill = std::max(0.0, cell.fill - t.fraction);
        if (cell.fill < 1e-12) cell = {-1, 0.0};
      }
      for (const auto& t : step.transfers) {
        if (t.dst_device == t.final_dst_device) {
          auto& cell = cells[static_cast<size_t>(t.dst_device)][static_cast<size_t>(t.chunks.front())];
          if (cell.colour != t.chunks.front()) cell = {t.chunks.front(), 0.0};
          cell.fill = std::min(1.0, cell.fill + t.fraction);
        } else {
          ++in_transit[static_cast<size_t>(t.dst_device)];
        }
      }
      // Departures of later hops are not first hops: a piece leaves its source only in step 1.
      step.index = static_cast<int64_t>(s) + 1;
      step.after = snapshot();
    }
    // Fix departures: pieces whose first hop is in step 1 were handled; nothing else departs.
    int64_t max_dist = static_cast<int64_t>(w.steps.size());
    for (size_t s = 0; s < w.steps.size(); ++s) {
      std::string c = StepPrefix(static_cast<int64_t>(s) + 1, max_dist);
      if (s == 0) {
        c += topo.is_switch()
                 ? "Each device's buffer is cut into N = " + std::to_string(n) + " pieces; piece j goes straight to member j through the switch."
                 : "Each device's buffer is cut into N = " + std::to_string(n) + " pieces and piece j sets off towards member j" +
                       (along.empty() ? "" : " (along " + along + ")") + ", one hop per step (store-and-forward)." +
                       (bidir ? " A piece whose two ways round a ring are equally long goes half each way." : " Rings are used in one direction only.");
        if (w.steps.size() > 1) c += " Pieces for the neighbours arrive now.";
      } else {
        c += "Pieces still on their way move one more hop; pieces for devices " + std::to_string(s + 1) + " hops away arrive.";
      }
      if (s + 1 == w.steps.size()) c += " Every device now holds one piece from every member: the buffer has been transposed across the group.";
      w.steps[s].caption = c;
    }
    w.summary = "All-to-all over " + std::to_string(w.num_groups) + (w.num_groups == 1 ? " group" : " groups") + " of " +
                std::to_string(n) + " devices" + (along.empty() ? "" : " along " + along) + ": every device sends 1/N of its " +
                FormatBytes(operand_bytes) + " buffer (" + FormatBytes(piece_bytes) + ") to each other member, " +
                std::to_string(n * (n - 1)) + " pieces per group. " + std::to_string(w.steps.size()) +
                " steps: the farthest piece travels that many hops.";
    FormulaInputs fi{kind, &topo, &w.cost, &options.collective, n, w.num_groups, operand_bytes, along, nullptr, 0};
    const GroupLayout L0 = LayOutReplicaGroup(topo, w.groups.front());
    fi.layout = &L0;
    w.formula = MakeFormula(fi);
    Finalize(&w, topo);
    return w;
  }

  // All-gather, reduce-scatter, all-reduce: one gather schedule, run forwards and/or backwards.
  const GatherPlan G = ReadGather(plan);
  w.parts = static_cast<int64_t>(plan.plans.front().part_fractions.size());
  w.part_fractions = plan.plans.front().part_fractions;
  const int64_t S = G.steps;
  const double unit = kind == CollectiveKind::kAllGather ? operand_bytes : operand_bytes / static_cast<double>(std::max<int64_t>(1, n));
  const int64_t phases = kind == CollectiveKind::kAllReduce ? 2 : 1;
  {
    int64_t chunk_refs = 0;
    for (const ScheduleHop& h : sched.hops) chunk_refs += CarriedChunkCount(plan, h);
    Status size = CheckSize(static_cast<int64_t>(sched.hops.size()), S * phases * nd * n + chunk_refs / phases, options);
    if (!size.ok()) return size.error();
  }
  std::vector<std::vector<size_t>> by_step(static_cast<size_t>(plan.steps));
  for (size_t i = 0; i < sched.hops.size(); ++i) by_step[static_cast<size_t>(sched.hops[i].step)].push_back(i);
  auto parts_of = [&](int64_t g) { return static_cast<int64_t>(plan.plans[static_cast<size_t>(g)].part_fractions.size()); };

  const Mode first_mode = kind == CollectiveKind::kAllGather ? Mode::kGather : Mode::kReduce;
  ChunkState st = InitialState(topo, mem, G, w.groups, first_mode);
  w.initial = Snapshot(topo, mem, st, first_mode);
  const int64_t total_steps = S * phases;
  for (int64_t s = 0; s < total_steps; ++s) {
    // Which pass this step belongs to: the reduce-scatter's (partial sums) or the all-gather's.
    const bool reduce = kind == CollectiveKind::kReduceScatter || (kind == CollectiveKind::kAllReduce && s < S);
    const int64_t local = reduce || kind == CollectiveKind::kAllGather ? s : s - S;  // step within its pass
    const Mode mode = reduce ? Mode::kReduce : kind == CollectiveKind::kAllReduce ? Mode::kReducedGather : Mode::kGather;
    CollectiveStep step;
    step.index = s + 1;
    std::vector<CarriedHop> carried;
    for (size_t i : by_step[static_cast<size_t>(s)]) {
      const ScheduleHop* h = &sched.hops[i];
      CarriedHop c{h, CarriedChunks(plan, *h)};
      StepTransfer t;
      t.group = h->group;
      t.src_device = G.StopDevice(h->group, h->from);
      t.dst_device = G.StopDevice(h->group, h->to);
      t.chunks = c.chunks;
      t.part = h->part;
      t.fraction = h->fraction * G.Fraction(h->group, h->part);
      t.half = h->fraction < 1;
      t.bytes = h->bytes;
      t.reduce_on_arrival = h->reduce;
      t.path = sched.links[i];
      t.hops = static_cast<int64_t>(t.path.size());
      t.on_chip = t.path.empty();
      if (!t.path.empty()) {
        const TopologyLink& first = topo.link(t.path.front());
        t.axis = first.axis;
        t.direction = first.direction;
      }
      for (int64_t l : t.path) t.wraparound = t.wraparound || topo.link(l).wraparound;
      if (reduce) {
        t.piece = PieceLabel(c.chunks, h->fraction, h->part, parts_of(h->group), "partial sum of chunk", "partial sums of chunks");
        if (c.chunks.size() == 1) {
          // Which fraction of the sum the message carries: the sender's coverage.
          const double covered = st.partial[static_cast<size_t>(h->part)][static_cast<size_t>(t.src_device)][static_cast<size_t>(c.chunks.front())];
          const std::string added = FormatCount(covered) + " of " + std::to_string(mem.group_size[static_cast<size_t>(t.src_device)]) + " added";
          if (!t.piece.empty() && t.piece.back() == ')') t.piece.insert(t.piece.size() - 1, "; " + added);
          else t.piece += " (" + added + ")";
        }
      } else if (kind == CollectiveKind::kAllReduce) {
        t.piece = PieceLabel(c.chunks, h->fraction, h->part, parts_of(h->group), "reduced chunk", "reduced chunks");
      } else {
        t.piece = PieceLabel(c.chunks, h->fraction, h->part, parts_of(h->group), "shard", "shards");
      }
      step.transfers.push_back(std::move(t));
      carried.push_back(std::move(c));
    }
    ApplyHops(carried, G, &st);
    step.after = Snapshot(topo, mem, st, mode);
    const std::string prefix = StepPrefix(step.index, total_steps);
    if (kind == CollectiveKind::kAllReduce) {
      step.phase = reduce ? "reduce-scatter" : "all-gather";
      step.caption = prefix + (reduce ? "(reduce-scatter) " : "(all-gather of the reduced chunks) ") +
                     (reduce ? ReduceCaption(G, local, namer, along, n) : GatherCaption(G, local, namer, along, "reduced chunk", n));
    } else {
      step.caption = prefix + (reduce ? ReduceCaption(G, local, namer, along, n) : GatherCaption(G, local, namer, along, "shard", n));
    }
    w.steps.push_back(std::move(step));
    if (kind == CollectiveKind::kAllReduce && s + 1 == S) {
      // Each device's own chunk is now fully reduced: it is what the all-gather pass spreads.
      for (int64_t j = 0; j < st.parts; ++j) {
        for (int64_t d = 0; d < nd; ++d) {
          const int64_t pos = mem.position[static_cast<size_t>(d)];
          if (pos < 0) continue;
          auto& gathered = st.gathered[static_cast<size_t>(j)][static_cast<size_t>(d)];
          const auto& partial = st.partial[static_cast<size_t>(j)][static_cast<size_t>(d)];
          const double full = static_cast<double>(mem.group_size[static_cast<size_t>(d)]);
          for (size_t c = 0; c < gathered.size(); ++c) {
            if (partial[c] >= full - 1e-9) gathered[c] = 1;
          }
        }
      }
    }
  }

  // Summary.
  const std::string groups_text = std::to_string(w.num_groups) + (w.num_groups == 1 ? " group" : " groups") + " of " +
                                  std::to_string(n) + " devices" + (along.empty() ? "" : " along " + along);
  switch (kind) {
    case CollectiveKind::kAllGather:
      w.summary = "All-gather over " + groups_text + ": every device starts with its own " + FormatBytes(operand_bytes) +
                  " shard and ends with all " + std::to_string(n) + " (" + FormatBytes(operand_bytes * static_cast<double>(n)) + "). ";
      break;
    case CollectiveKind::kReduceScatter:
      w.summary = "Reduce-scatter over " + groups_text + ": every device starts with an unreduced " + FormatBytes(operand_bytes) +
                  " buffer (N chunks of " + FormatBytes(unit) + ") and ends with one chunk summed over the group. ";
      break;
    default:
      w.summary = "All-reduce over " + groups_text + ": a reduce-scatter (steps 1\u2013" + std::to_string(S) +
                  ") leaves each device one fully summed chunk of " + FormatBytes(unit) + ", then an all-gather (steps " +
                  std::to_string(S + 1) + "\u2013" + std::to_string(2 * S) + ") gives every device the whole summed " +
                  FormatBytes(operand_bytes) + " buffer. ";
      break;
  }
  const GroupLayout& L0 = G.layout(0);
  if (L0.kind == GroupLayout::Kind::kSequence) {
    if (L0.closed && bidir) w.summary += "A bidirectional ring with wraparound: N/2 = " + std::to_string(S) + " steps per pass.";
    else if (L0.closed) w.summary += "A ring used in one direction: N\u22121 = " + std::to_string(S) + " steps per pass.";
    else w.summary += "A line without wraparound: N\u22121 = " + std::to_string(S) + " steps per pass.";
  } else if (L0.kind == GroupLayout::Kind::kGrid) {
    w.summary += "The group spans " + std::to_string(L0.axes.size()) + " physical axes: each " +
                 std::string(kind == CollectiveKind::kAllGather ? "shard" : "chunk") + " is split into " + std::to_string(G.parts) +
                 " parts that cross the axes in different orders, " + std::to_string(S) + " steps per pass.";
  } else if (L0.kind == GroupLayout::Kind::kSwitch) {
    w.summary += "Through a switch every device reaches every other in one hop.";
  } else {
    w.summary += "Nothing moves over the network: the group's devices share one chip.";
  }
  if (w.num_groups > 1) w.summary += " All " + std::to_string(w.num_groups) + " groups run at the same time.";

  FormulaInputs fi{kind, &topo, &w.cost, &options.collective, n, w.num_groups, operand_bytes, along, &L0, 0};
  w.formula = MakeFormula(fi);
  Finalize(&w, topo);
  return w;
}

Result<CollectiveWalkthrough> WalkThroughCollectivePermute(const Topology& topo,
                                                           const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                                           double bytes, const WalkthroughOptions& options) {
  const int64_t nd = topo.num_devices();
  std::set<int64_t> sources, targets;
  for (const auto& [s, t] : pairs) {
    if (s < 0 || s >= nd || t < 0 || t >= nd) {
      return Error("source-target pair {" + std::to_string(s) + "," + std::to_string(t) + "} names a device outside 0.." +
                   std::to_string(nd - 1));
    }
    if (!sources.insert(s).second) return Error("device " + std::to_string(s) + " is the source of more than one pair");
    if (!targets.insert(t).second) return Error("device " + std::to_string(t) + " is the target of more than one pair");
  }
  auto cost = EstimateCollectivePermute(topo, pairs, bytes, options.collective);
  if (!cost.ok()) return cost.error();
  CollectiveWalkthrough w;
  w.kind = CollectiveKind::kCollectivePermute;
  w.cost = cost.value();
  w.pairs = pairs;
  w.operand_bytes = bytes;
  w.algorithm = w.cost.algorithm;
  w.num_groups = 1;
  w.group_size = 2;
  w.colour_count = nd;
  Status size = CheckSize(static_cast<int64_t>(pairs.size()), nd * 2, options);
  if (!size.ok()) return size.error();

  // Halo exchange / rotation recognition on the mesh.
  const DeviceMesh* mesh = options.mesh && options.mesh->num_devices() == nd ? &*options.mesh : nullptr;
  std::string shift_axis;
  int64_t shift = 0;
  bool cyclic = false;
  if (mesh && !pairs.empty()) {
    const std::set<std::pair<int64_t, int64_t>> have(pairs.begin(), pairs.end());
    auto as_set = [](const Result<std::vector<std::pair<int64_t, int64_t>>>& r) {
      return r.ok() ? std::set<std::pair<int64_t, int64_t>>(r->begin(), r->end()) : std::set<std::pair<int64_t, int64_t>>{};
    };
    for (const auto& axis : mesh->axes()) {
      if (axis.size < 2 || !shift_axis.empty()) continue;
      for (bool cyc : {false, true}) {
        if (!shift_axis.empty()) break;
        if (have == as_set(ShiftPairsAlongAxis(*mesh, axis.name, +1, cyc))) shift = +1;
        else if (have == as_set(ShiftPairsAlongAxis(*mesh, axis.name, -1, cyc))) shift = -1;
        else continue;
        shift_axis = axis.name;
        cyclic = cyc;
      }
    }
  }
  if (!shift_axis.empty() && !cyclic && !options.pipeline_shift) {
    w.halo = std::string("Halo exchange: a shift by ") + (shift > 0 ? "+1" : "\u22121") + " along " + shift_axis +
             " without wraparound. Every device sends its edge (the halo) to its " + (shift > 0 ? "next" : "previous") +
             " neighbour along " + shift_axis + "; the device at the " + (shift > 0 ? "last" : "first") +
             " position has no neighbour beyond the edge, so it sends nothing. (GSPMD exchanges halos both ways with two "
             "such permutes, one per direction.)";
  }
  const std::string rotation =
      options.pipeline_shift
          ? std::string("A pipeline shift (GSPMD \u00A73.3): every stage sends its buffer \u2014 the microbatch it has just "
                        "computed on \u2014 to the next stage") +
                (shift_axis.empty() ? std::string()
                                    : " along " + shift_axis + (cyclic ? "; the last stage's wraps round to the first (the "
                                                                         "circular schedule)"
                                                                       : "; the last stage's result leaves the pipeline")) +
                "."
      : !shift_axis.empty() && cyclic
                                   ? std::string("A rotation by ") + (shift > 0 ? "+1" : "\u22121") + " along " + shift_axis +
                                         " (cyclic: the device at the end sends to the one at the start)."
                                   : "";

  // Holdings: cell 0 = the device's own block, cell 1 = what it receives.
  CollectiveStep step;
  step.index = 1;
  std::vector<std::vector<HeldCell>> cells(static_cast<size_t>(nd));
  std::vector<int64_t> received_from(static_cast<size_t>(nd), -1), sent_to(static_cast<size_t>(nd), -1);
  for (int64_t d = 0; d < nd; ++d) cells[static_cast<size_t>(d)] = {{d, 1.0}};
  for (const auto& [s, t] : pairs) {
    sent_to[static_cast<size_t>(s)] = t;
    if (s != t) received_from[static_cast<size_t>(t)] = s;
  }
  auto snapshot = [&](bool after) {
    std::vector<DeviceHolding> out;
    for (int64_t d = 0; d < nd; ++d) {
      DeviceHolding h;
      h.device = d;
      const int64_t from = received_from[static_cast<size_t>(d)], to = sent_to[static_cast<size_t>(d)];
      h.group = (from >= 0 || to >= 0) ? 0 : -1;
      h.position = d;
      h.cells = {{d, 1.0}};
      if (after && from >= 0) h.cells.push_back({from, 1.0});
      std::vector<std::string> parts;
      if (to >= 0 && to != d) parts.push_back((after ? "sent its block to " : "will send its block to ") + std::to_string(to));
      if (from >= 0)
        parts.push_back((after ? "received " : "will receive ") +
                        std::string(!w.halo.empty() ? "the halo" : options.pipeline_shift ? "the buffer" : "the block") + " of " +
                        std::to_string(from));
      if (parts.empty()) parts.push_back(w.halo.empty() ? "takes no part" : "at the edge: sends and receives nothing here");
      for (size_t i = 0; i < parts.size(); ++i) h.text += (i ? "; " : "") + parts[i];
      out.push_back(std::move(h));
    }
    return out;
  };
  w.initial = snapshot(false);
  auto sched = BuildPermuteSchedule(topo, pairs, bytes);
  if (!sched.ok()) return sched.error();
  for (size_t i = 0; i < sched->hops.size(); ++i) {
    const ScheduleHop& h = sched->hops[i];
    const auto [s, t] = pairs[static_cast<size_t>(h.origin)];
    if (s == t) continue;
    StepTransfer tr;
    tr.src_device = s;
    tr.dst_device = t;
    tr.final_dst_device = t;
    tr.chunks = {s};
    tr.bytes = h.bytes;
    tr.piece = (!w.halo.empty() ? "halo of " : options.pipeline_shift ? "buffer of " : "block of ") + std::to_string(s);
    tr.path = sched->links[i];
    tr.hops = static_cast<int64_t>(tr.path.size());
    tr.on_chip = tr.path.empty();
    if (!tr.path.empty()) {
      tr.axis = topo.link(tr.path.front()).axis;
      tr.direction = topo.link(tr.path.front()).direction;
    }
    for (int64_t l : tr.path) tr.wraparound = tr.wraparound || topo.link(l).wraparound;
    step.transfers.push_back(std::move(tr));
  }
  step.after = snapshot(true);
  int64_t max_hops = 0;
  for (const auto& t : step.transfers) max_hops = std::max(max_hops, t.hops);
  step.caption = StepPrefix(1, 1) + "All " + std::to_string(step.transfers.size()) + " sends happen at once: each source sends its " +
                 FormatBytes(bytes) + " block straight to its target" +
                 (max_hops > 1 ? " (the longest route crosses " + std::to_string(max_hops) + " links)" : "") + ". " +
                 (!w.halo.empty() ? w.halo : rotation);
  w.steps.push_back(std::move(step));
  w.summary = "Collective-permute: " + std::to_string(w.steps.front().transfers.size()) + " point-to-point sends of " +
              FormatBytes(bytes) + ", all in one step; sends that share a link share its bandwidth." +
              (!w.halo.empty() ? " It is a halo exchange." : rotation.empty() ? "" : " " + rotation);
  FormulaInputs fi{CollectiveKind::kCollectivePermute, &topo, &w.cost, &options.collective, 2, 1, bytes, "", nullptr,
                   static_cast<int64_t>(w.steps.front().transfers.size())};
  w.formula = MakeFormula(fi);
  Finalize(&w, topo);
  return w;
}

Result<CollectiveWalkthrough> WalkThroughOnMesh(const DeviceMesh& mesh, std::string_view chip, CollectiveKind kind,
                                                const std::vector<std::vector<int64_t>>& groups,
                                                const std::vector<std::pair<int64_t, int64_t>>& pairs, double operand_bytes,
                                                const TopologyOptions& topology_options, WalkthroughOptions options) {
  auto spec = ResolveChip(chip);
  if (!spec.ok()) return spec.error();
  auto topo = Topology::ForMesh(spec.value(), mesh, {}, topology_options);
  if (!topo.ok()) return Error("cannot place mesh " + mesh.ToString() + " on " + std::string(chip) + ": " + topo.error().message);
  options.mesh = mesh;
  if (kind == CollectiveKind::kCollectivePermute) return WalkThroughCollectivePermute(topo.value(), pairs, operand_bytes, options);
  return WalkThroughCollective(topo.value(), kind, groups, operand_bytes, options);
}

}  // namespace shardscope::sim
