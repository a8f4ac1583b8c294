#include "simulator/collective_steps.h"

#include "core/base/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace shardscope {

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


// ---- How a group lies on the network (LayOutReplicaGroup, the cost model's own plan) ----------------------

namespace {

struct Stop {  // a stop of a ring/line or a cell of a grid: one chip and the group's devices on it
  int64_t chip = -1;
  std::vector<int64_t> devices;  // group members on this chip (group order); the first one draws
  std::vector<int64_t> chunks;   // their positions in the group
};

// The cost model's layout of a group (LayOutReplicaGroup), plus each stop's devices.
struct Layout : GroupLayout {
  std::vector<Stop> stops;   // kSequence: in ring/line order; kGrid/kSwitch: any order
  std::map<int64_t, size_t> stop_of_chip;
};

// The walkthrough's view of the cost model's layout: the same plan, with each stop's devices.
Layout LayoutGroup(const Topology& topo, const std::vector<int64_t>& group) {
  Layout L;
  static_cast<GroupLayout&>(L) = LayOutReplicaGroup(topo, group);
  const GroupLayout& p = L;
  if (L.kind == Layout::Kind::kTrivial) return L;
  if (p.product) {
    // One stop per chip, holding the group's devices on it.
    for (int64_t chip : p.chips) {
      Stop s;
      s.chip = chip;
      for (size_t i = 0; i < group.size(); ++i) {
        if (topo.ChipOfDevice(group[i]) == chip) {
          s.devices.push_back(group[i]);
          s.chunks.push_back(static_cast<int64_t>(i));
        }
      }
      L.stops.push_back(std::move(s));
    }
    for (size_t i = 0; i < L.stops.size(); ++i) L.stop_of_chip[L.stops[i].chip] = i;
  } else {
    // One stop per device, in the layout's order.
    for (size_t i = 0; i < p.members.size(); ++i) {
      const int64_t pos = p.members[i];
      L.stops.push_back({p.chips[i], {group[static_cast<size_t>(pos)]}, {pos}});
    }
  }
  return L;
}

// ---- Gather schedules -------------------------------------------------------------------------------------

struct Move {
  int64_t step = 0;  // 0-based
  int64_t group = 0;
  int64_t part = 0;
  size_t from = 0, to = 0;  // stops of the group's layout
  std::vector<int64_t> chunks;
  double half = 1;          // 1, or 0.5 on the last hop of an even bidirectional ring
  std::vector<int64_t> path;
  // The reduce-scatter runs the schedule backwards: its partial sum goes rs_from -> rs_to. Usually
  // the reverse hop; on a one-way ring the reverse is reflected round the chunk's owner so the
  // partial sums keep to the ring's direction.
  size_t rs_from = 0, rs_to = 0;
  bool rs_reflected = false;
};

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

struct GatherPlan {
  std::vector<Layout> layouts;  // per group
  std::vector<Move> moves;
  int64_t steps = 0;
  int64_t parts = 1;                            // the most parts any group uses
  std::vector<std::vector<double>> fractions;   // per group: the size of each part (sequences: {1})
  std::vector<std::vector<PhaseNote>> notes;    // group 0, per step
  double Fraction(int64_t group, int64_t part) const {
    const auto& f = fractions[static_cast<size_t>(group)];
    return part < static_cast<int64_t>(f.size()) ? f[static_cast<size_t>(part)] : 0.0;
  }
};

// Shards flow along a sequence of stops (ring or line), as AddSequenceAllGather schedules them.
int64_t EmitSequence(const Topology& topo, const std::vector<size_t>& stops_in_order, const Layout& L, bool closed,
                     bool bidirectional, int64_t step0, int64_t group, int64_t part,
                     const std::vector<std::vector<int64_t>>& block_of_stop, std::vector<Move>* out) {
  const int64_t n = static_cast<int64_t>(stops_in_order.size());
  if (n <= 1) return 0;
  auto at = [&](int64_t i) { return stops_in_order[static_cast<size_t>(((i % n) + n) % n)]; };
  auto chip = [&](int64_t i) { return L.stops[at(i)].chip; };
  auto emit = [&](int64_t step, int64_t from, int64_t to, int64_t origin, double half) {
    Move m;
    m.step = step;
    m.group = group;
    m.part = part;
    m.from = at(from);
    m.to = at(to);
    m.chunks = block_of_stop[at(origin)];
    m.half = half;
    m.path = topo.Route(chip(from), chip(to));
    m.rs_from = m.to;
    m.rs_to = m.from;
    if (closed && n >= 3 && !bidirectional) {
      // Hop k of a one-way ring carries origin o from o+k-1 to o+k; its reduce-scatter twin carries
      // the partial sum of o's chunk from o-k to o-k+1 (it reaches o after N-1 steps).
      const int64_t k = to - origin;
      m.rs_from = at(origin - k);
      m.rs_to = at(origin - k + 1);
      m.rs_reflected = true;
    }
    out->push_back(std::move(m));
  };
  if (closed && n >= 3) {
    if (bidirectional) {
      const int64_t k_max = n / 2;
      for (int64_t src = 0; src < n; ++src) {
        for (int64_t k = 1; k <= k_max; ++k) {
          const double half = (n % 2 == 0 && k == k_max) ? 0.5 : 1.0;
          emit(step0 + k - 1, src + k - 1, src + k, src, half);
          emit(step0 + k - 1, src - k + 1, src - k, src, half);
        }
      }
      return k_max;
    }
    for (int64_t src = 0; src < n; ++src) {
      for (int64_t k = 1; k < n; ++k) emit(step0 + k - 1, src + k - 1, src + k, src, 1.0);
    }
    return n - 1;
  }
  for (int64_t src = 0; src < n; ++src) {
    for (int64_t k = 1; src + k < n; ++k) emit(step0 + k - 1, src + k - 1, src + k, src, 1.0);
    for (int64_t k = 1; src - k >= 0; ++k) emit(step0 + k - 1, src - k + 1, src - k, src, 1.0);
  }
  return n - 1;
}

void NoteSequence(std::vector<std::vector<PhaseNote>>* notes, int64_t step0, int64_t steps, PhaseNote base) {
  for (int64_t k = 0; k < steps; ++k) {
    if (static_cast<int64_t>(notes->size()) <= step0 + k) notes->resize(static_cast<size_t>(step0 + k + 1));
    PhaseNote n = base;
    n.hop = k + 1;
    n.hops = steps;
    n.half = base.ring && base.line_size % 2 == 0 && k + 1 == steps && n.half;
    (*notes)[static_cast<size_t>(step0 + k)].push_back(n);
  }
}

GatherPlan BuildGather(const Topology& topo, const std::vector<std::vector<int64_t>>& groups, bool bidirectional) {
  GatherPlan G;
  for (size_t g = 0; g < groups.size(); ++g) G.layouts.push_back(LayoutGroup(topo, groups[g]));
  G.fractions.assign(groups.size(), {1.0});
  for (size_t g = 0; g < groups.size(); ++g) {
    const Layout& L = G.layouts[g];
    const int64_t gi = static_cast<int64_t>(g);
    std::vector<std::vector<int64_t>> blocks;
    for (const Stop& s : L.stops) blocks.push_back(s.chunks);
    switch (L.kind) {
      case Layout::Kind::kTrivial: break;
      case Layout::Kind::kSwitch: {
        for (size_t i = 0; i < L.stops.size(); ++i) {
          for (size_t j = 0; j < L.stops.size(); ++j) {
            if (i == j) continue;
            Move m;
            m.step = 0;
            m.group = gi;
            m.from = i;
            m.to = j;
            m.chunks = L.stops[i].chunks;
            m.path = topo.Route(L.stops[i].chip, L.stops[j].chip);
            m.rs_from = j;
            m.rs_to = i;
            G.moves.push_back(std::move(m));
          }
        }
        G.steps = std::max<int64_t>(G.steps, 1);
        if (g == 0) {
          G.notes.assign(1, {});
          PhaseNote n;
          n.hop = n.hops = 1;
          n.line_size = static_cast<int64_t>(L.stops.size());
          G.notes[0].push_back(n);
        }
        break;
      }
      case Layout::Kind::kSequence: {
        std::vector<size_t> order(L.stops.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        const int64_t steps = EmitSequence(topo, order, L, L.closed, bidirectional, 0, gi, 0, blocks, &G.moves);
        G.steps = std::max(G.steps, steps);
        if (g == 0) {
          PhaseNote base;
          base.axis = L.axes.empty() ? -1 : L.axes[0];
          base.line_size = static_cast<int64_t>(L.stops.size());
          base.ring = L.closed && bidirectional;
          base.block = L.per_chip;
          base.half = true;
          NoteSequence(&G.notes, 0, steps, base);
        }
        break;
      }
      case Layout::Kind::kGrid: {
        const size_t m = L.axes.size();
        const std::vector<double> frac = GridAllGatherFractions(L.size, L.ring, bidirectional);
        G.parts = std::max(G.parts, static_cast<int64_t>(m));
        G.fractions[g] = frac;
        int64_t total = 0;
        for (size_t j = 0; j < m; ++j) {
          std::vector<std::vector<int64_t>> held = blocks;  // per stop: chunks of part j held
          int64_t offset = 0;
          int64_t block_size = L.per_chip;
          for (size_t q = 0; q < m; ++q) {
            const size_t a = (j + q) % m;
            const int64_t phase_steps = (L.ring[a] && bidirectional) ? L.size[a] / 2 : L.size[a] - 1;
            std::vector<std::vector<int64_t>> next = held;
            std::vector<int64_t> idx(m, 0);
            while (true) {
              std::vector<int64_t> offsets = idx;
              std::vector<size_t> line;
              for (int64_t x = 0; x < L.size[a]; ++x) {
                offsets[a] = x;
                line.push_back(L.stop_of_chip.at(L.ChipAtOffsets(topo, offsets)));
              }
              if (frac[j] > 0) {
                EmitSequence(topo, line, L, L.ring[a], bidirectional, offset, gi, static_cast<int64_t>(j), held, &G.moves);
              }
              // After the phase every stop of the line holds the union of the line's blocks.
              std::vector<int64_t> all;
              for (size_t s : line) all.insert(all.end(), held[s].begin(), held[s].end());
              std::sort(all.begin(), all.end());
              for (size_t s : line) next[s] = all;
              size_t b = 0;
              for (; b < m; ++b) {
                if (b == a) continue;
                if (++idx[b] < L.size[b]) break;
                idx[b] = 0;
              }
              if (b == m) break;
            }
            if (g == 0) {
              PhaseNote base;
              base.part = static_cast<int64_t>(j);
              base.axis = L.axes[a];
              base.line_size = L.size[a];
              base.ring = L.ring[a] && bidirectional;
              base.block = block_size;
              base.phase = static_cast<int64_t>(q);
              base.half = true;
              if (frac[j] > 0) NoteSequence(&G.notes, offset, phase_steps, base);
            }
            held = std::move(next);
            offset += phase_steps;
            block_size *= L.size[a];
          }
          total = std::max(total, offset);
        }
        G.steps = std::max(G.steps, total);
        break;
      }
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
  st.fractions = G.fractions;
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
    const Layout& L = G.layouts[g];
    // A chip's devices share what the chip holds (on-chip, free): its shards, or the sum of its
    // devices' contributions.
    std::map<int64_t, std::vector<int64_t>> chunks_on_chip;
    if (L.product || L.kind == Layout::Kind::kTrivial) {
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

// Applies one step's moves (all starting from the state at the step's start).
void ApplyMoves(const std::vector<const Move*>& moves, const GatherPlan& G, bool reduce, ChunkState* st) {
  if (reduce) {
    const ChunkState before = *st;
    for (const Move* m : moves) {
      const Layout& L = G.layouts[static_cast<size_t>(m->group)];
      const int64_t src = L.stops[m->from].devices.front();
      for (int64_t dst : L.stops[m->to].devices) {
        for (int64_t c : m->chunks) {
          st->partial[static_cast<size_t>(m->part)][static_cast<size_t>(dst)][static_cast<size_t>(c)] +=
              m->half * before.partial[static_cast<size_t>(m->part)][static_cast<size_t>(src)][static_cast<size_t>(c)];
        }
      }
    }
    return;
  }
  for (const Move* m : moves) {
    const Layout& L = G.layouts[static_cast<size_t>(m->group)];
    for (int64_t dst : L.stops[m->to].devices) {
      for (int64_t c : m->chunks) {
        double& v = st->gathered[static_cast<size_t>(m->part)][static_cast<size_t>(dst)][static_cast<size_t>(c)];
        v = std::min(1.0, v + m->half);
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
  std::string PhysicalAxis(int64_t axis, const Layout& L) const {
    const std::string fallback = "physical axis " + std::to_string(axis);
    if (!mesh || axis < 0 || L.stops.empty()) return fallback;
    const Stop& s0 = L.stops.front();
    auto coords = topo->ChipCoords(s0.chip);
    for (const Stop& s : L.stops) {
      auto c = topo->ChipCoords(s.chip);
      int differing = 0;
      for (size_t a = 0; a < c.size(); ++a) differing += c[a] != coords[a];
      if (differing == 1 && c[static_cast<size_t>(axis)] != coords[static_cast<size_t>(axis)]) {
        const auto m0 = mesh->CoordsOf(s0.devices.front()), m1 = mesh->CoordsOf(s.devices.front());
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

std::string StepPrefix(int64_t k, int64_t total) {
  return "Step " + std::to_string(k) + " of " + std::to_string(total) + ": ";
}

// Captions of an all-gather (noun: "shard" or "reduced chunk").
std::string GatherCaption(const GatherPlan& G, int64_t step, const Namer& namer, const std::string& along,
                          const std::string& noun, int64_t n) {
  const Layout& L = G.layouts.front();
  const bool last = step + 1 == G.steps;
  const std::string nouns = noun + "s";
  std::string s;
  if (L.kind == Layout::Kind::kSwitch) {
    return "Every device sends its " + noun + " straight to every other member through the switch (one hop up, one "
           "down). Every device now holds all " + std::to_string(n) + " " + nouns + ".";
  }
  if (L.kind == Layout::Kind::kTrivial || step >= static_cast<int64_t>(G.notes.size())) {
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
      std::string b = "part " + std::to_string(p.part + 1) + " moves along " + namer.PhysicalAxis(p.axis, L) + " (hop " +
                      std::to_string(p.hop) + " of " + std::to_string(p.hops) + (p.ring ? ", ring" : ", line");
      if (p.phase > 0) b += ", carrying blocks of " + std::to_string(p.block) + " " + nouns + " gathered earlier";
      if (p.half) b += ", the last hop carries half of each block each way";
      bits.push_back(b + ")");
    }
    std::string joined;
    for (size_t i = 0; i < bits.size(); ++i) joined += (i == 0 ? "" : (i + 1 == bits.size() ? " and " : "; ")) + bits[i];
    if (!joined.empty()) joined[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(joined[0])));
    s += joined;
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
      s += " N = " + std::to_string(L.stops.size()) + " is even, so this last hop carries only half a " + noun +
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
    if (!L.closed && L.stops.size() >= 3) {
      s += " A line needs N\u22121 = " + std::to_string(L.stops.size() - 1) + " steps; a ring with wraparound would need N/2 = " +
           std::to_string(L.stops.size() / 2) + ".";
    }
  }
  return s;
}

std::string ReduceCaption(const GatherPlan& G, int64_t step, const Namer& namer, const std::string& along, int64_t n) {
  const Layout& L = G.layouts.front();
  const int64_t fwd = G.steps - 1 - step;  // the all-gather step this one mirrors
  const bool first = step == 0, last = step + 1 == G.steps;
  if (L.kind == Layout::Kind::kSwitch) {
    return "Every device sends its contribution to chunk i straight to member i through the switch; each member adds "
           "the N\u22121 contributions it receives to its own: every device now holds its chunk summed over all " +
           std::to_string(n) + " devices.";
  }
  if (L.kind == Layout::Kind::kTrivial || fwd < 0 || fwd >= static_cast<int64_t>(G.notes.size())) return "Other groups finish.";
  const auto& notes = G.notes[static_cast<size_t>(fwd)];
  std::string s;
  if (G.parts > 1) {
    if (first) {
      s += "Each chunk is split into " + std::to_string(G.parts) + " parts so that the links of every axis work at once "
           "(the all-gather schedule run backwards). ";
    }
    std::vector<std::string> bits;
    for (const PhaseNote& p : notes) {
      std::string b = "part " + std::to_string(p.part + 1) + " sums along " + namer.PhysicalAxis(p.axis, L) + " (hop " +
                      std::to_string(p.hops - p.hop + 1) + " of " + std::to_string(p.hops);
      if (p.block > 1) b += ", partial sums of " + std::to_string(p.block) + " chunks per message";
      if (p.half) b += ", first hop: half each way";
      bits.push_back(b + ")");
    }
    std::string joined;
    for (size_t i = 0; i < bits.size(); ++i) joined += (i == 0 ? "" : (i + 1 == bits.size() ? " and " : "; ")) + bits[i];
    if (!joined.empty()) joined[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(joined[0])));
    s += joined;
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
  const Layout* layout = nullptr;  // group 0 (collectives other than permute)
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
  // The busiest link in time.
  double best = -1;
  for (const auto& lt : cost.link_traffic) {
    const double t = lt.bytes / topo.link(lt.link).bandwidth;
    if (t > best) {
      best = t;
      f.link_bytes = lt.bytes;
      f.link_bandwidth = topo.link(lt.link).bandwidth;
    }
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
      const Layout& L = *in.layout;
      if (L.kind == Layout::Kind::kSequence && !L.routed) {
        if (L.closed && in.options->bidirectional) why = " ((N\u22121)/2 each way round a bidirectional ring";
        else if (L.closed) why = " (N\u22121 round a one-way ring";
        else why = " (N\u22121 on a line without wraparound";
        if (L.per_chip > 1) why += ", counting a chip's " + std::to_string(L.per_chip) + " devices together";
        why += in.kind == CollectiveKind::kAllReduce ? ", twice: reduce-scatter and all-gather)" : ")";
      } else if (L.kind == Layout::Kind::kGrid) {
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
  if (!in.layout || in.layout->kind == Layout::Kind::kTrivial) return f;
  const Layout& L = *in.layout;
  std::vector<int64_t> sizes;
  bool wrap = true;
  if (L.product) {
    sizes = L.size;
    for (bool r : L.ring) wrap = wrap && r;
  } else {
    sizes = {static_cast<int64_t>(L.stops.size())};
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
  auto cost = EstimateCollective(topo, kind, groups_in, operand_bytes, options.collective);
  if (!cost.ok()) return cost.error();
  CollectiveWalkthrough w;
  w.kind = kind;
  w.cost = cost.value();
  w.operand_bytes = operand_bytes;
  w.algorithm = w.cost.algorithm;
  w.groups = groups_in;
  if (w.groups.empty()) {
    w.groups.emplace_back();
    for (int64_t d = 0; d < topo.num_devices(); ++d) w.groups.back().push_back(d);
  }
  w.num_groups = static_cast<int64_t>(w.groups.size());
  for (const auto& g : w.groups) w.group_size = std::max(w.group_size, static_cast<int64_t>(g.size()));
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
    // Route every piece; hop k of its route happens in step k+1.
    struct Hop {
      int64_t step;
      StepTransfer t;
    };
    std::vector<Hop> hops;
    int64_t steps = 0;
    int64_t transfers = 0;
    for (size_t g = 0; g < w.groups.size(); ++g) {
      const auto& grp = w.groups[g];
      std::map<int64_t, int64_t> member_on_chip;
      for (int64_t d : grp) member_on_chip.emplace(topo.ChipOfDevice(d), d);
      for (size_t i = 0; i < grp.size(); ++i) {
        for (size_t j = 0; j < grp.size(); ++j) {
          if (i == j) continue;
          const int64_t a = topo.ChipOfDevice(grp[i]), b = topo.ChipOfDevice(grp[j]);
          std::vector<std::pair<double, std::vector<int64_t>>> routes;
          if (topo.is_switch() || !bidir) routes.emplace_back(1.0, topo.Route(a, b, bidir ? RoutePolicy::kShortest : RoutePolicy::kPositiveOnly));
          else routes = topo.SplitRoutes(a, b);
          for (const auto& [fraction, path] : routes) {
            StepTransfer base;
            base.group = static_cast<int64_t>(g);
            base.chunks = {static_cast<int64_t>(i)};
            base.fraction = fraction;
            base.bytes = piece_bytes * fraction;
            base.final_dst_device = grp[j];
            base.piece = (fraction < 1 ? FormatCount(fraction) + " of piece " : std::string("piece ")) +
                         std::to_string(grp[i]) + "\u2192" + std::to_string(grp[j]);
            if (path.empty()) {  // devices of one chip: free, shown in step 1
              StepTransfer t = base;
              t.src_device = grp[i];
              t.dst_device = grp[j];
              t.on_chip = true;
              hops.push_back({0, t});
              ++transfers;
              continue;
            }
            if (topo.is_switch()) {  // one step through the switch
              StepTransfer t = base;
              t.src_device = grp[i];
              t.dst_device = grp[j];
              t.path = path;
              t.hops = 1;
              hops.push_back({0, t});
              ++transfers;
              steps = std::max<int64_t>(steps, 1);
              continue;
            }
            for (size_t k = 0; k < path.size(); ++k) {
              const TopologyLink& link = topo.link(path[k]);
              StepTransfer t = base;
              t.src_device = k == 0 ? grp[i] : DeviceOnChip(topo, link.src, member_on_chip);
              t.dst_device = k + 1 == path.size() ? grp[j] : DeviceOnChip(topo, link.dst, member_on_chip);
              t.path = {path[k]};
              t.hops = 1;
              t.axis = link.axis;
              t.direction = link.direction;
              t.wraparound = link.wraparound;
              hops.push_back({static_cast<int64_t>(k), t});
              ++transfers;
            }
            steps = std::max(steps, static_cast<int64_t>(path.size()));
          }
        }
      }
      if (transfers > options.max_transfers) break;
    }
    if (!hops.empty()) steps = std::max<int64_t>(steps, 1);
    Status size = CheckSize(transfers, steps * nd * n, options);
    if (!size.ok()) return size.error();
    w.steps.resize(static_cast<size_t>(steps));
    for (auto& h : hops) w.steps[static_cast<size_t>(h.step)].transfers.push_back(std::move(h.t));
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
    const Layout L0 = LayoutGroup(topo, w.groups.front());
    fi.layout = &L0;
    w.formula = MakeFormula(fi);
    Finalize(&w, topo);
    return w;
  }

  // All-gather, reduce-scatter, all-reduce: one gather schedule, run forwards and/or backwards.
  const GatherPlan G = BuildGather(topo, w.groups, bidir);
  w.parts = static_cast<int64_t>(G.fractions.front().size());
  w.part_fractions = G.fractions.front();
  const int64_t S = G.steps;
  const double unit = kind == CollectiveKind::kAllGather ? operand_bytes : operand_bytes / static_cast<double>(std::max<int64_t>(1, n));
  auto unit_of_group = [&](int64_t g) {
    return kind == CollectiveKind::kAllGather ? operand_bytes
                                              : operand_bytes / static_cast<double>(w.groups[static_cast<size_t>(g)].size());
  };
  const int64_t phases = kind == CollectiveKind::kAllReduce ? 2 : 1;
  {
    int64_t chunk_refs = 0;
    for (const Move& m : G.moves) chunk_refs += static_cast<int64_t>(m.chunks.size());
    Status size = CheckSize(static_cast<int64_t>(G.moves.size()) * phases, S * phases * nd * n + chunk_refs, options);
    if (!size.ok()) return size.error();
  }
  std::vector<std::vector<const Move*>> by_step(static_cast<size_t>(S));
  for (const Move& m : G.moves) by_step[static_cast<size_t>(m.step)].push_back(&m);

  auto parts_of = [&](int64_t g) { return static_cast<int64_t>(G.fractions[static_cast<size_t>(g)].size()); };
  auto transfer_of = [&](const Move& m, bool reverse, bool reduce) {
    const Layout& L = G.layouts[static_cast<size_t>(m.group)];
    StepTransfer t;
    t.group = m.group;
    const Stop& from = L.stops[reverse ? m.to : m.from];
    const Stop& to = L.stops[reverse ? m.from : m.to];
    t.src_device = from.devices.front();
    t.dst_device = to.devices.front();
    t.chunks = m.chunks;
    t.part = m.part;
    const double part_fraction = G.Fraction(m.group, m.part);
    t.fraction = m.half * part_fraction;
    t.bytes = unit_of_group(m.group) * static_cast<double>(m.chunks.size()) * m.half * part_fraction;
    t.reduce_on_arrival = reduce;
    t.path = m.path;  // (reduce: replaced by the reversed route below)
    t.hops = static_cast<int64_t>(t.path.size());
    t.on_chip = t.path.empty();
    if (!t.path.empty()) {
      const TopologyLink& first = topo.link(t.path.front());
      t.axis = first.axis;
      t.direction = first.direction;
    }
    for (int64_t l : t.path) t.wraparound = t.wraparound || topo.link(l).wraparound;
    t.half = m.half < 1;
    if (reduce) {
      t.piece = PieceLabel(m.chunks, m.half, m.part, parts_of(m.group), "partial sum of chunk", "partial sums of chunks");
    } else if (kind == CollectiveKind::kAllReduce) {
      t.piece = PieceLabel(m.chunks, m.half, m.part, parts_of(m.group), "reduced chunk", "reduced chunks");
    } else {
      t.piece = PieceLabel(m.chunks, m.half, m.part, parts_of(m.group), "shard", "shards");
    }
    return t;
  };
  // Reverse-path routes for reduce: the reduce-scatter runs each all-gather hop backwards. The
  // cost model charges the forward route's links (same bytes per link overall by symmetry of the
  // schedule); use the exact reverse of each link so arrows point the right way.
  auto reverse_path = [&](const std::vector<int64_t>& path) {
    std::vector<int64_t> out;
    for (size_t i = path.size(); i-- > 0;) {
      const TopologyLink& l = topo.link(path[i]);
      int64_t back = topo.LinkBetween(l.dst, l.src);
      // Prefer the link that runs along the same axis the other way (rings of 2 have one link).
      for (int64_t cand : topo.OutLinks(l.dst)) {
        const TopologyLink& c = topo.link(cand);
        if (c.dst == l.src && c.axis == l.axis && c.wraparound == l.wraparound) back = cand;
      }
      out.push_back(back);
    }
    return out;
  };

  ChunkState st = InitialState(topo, mem, G, w.groups, kind == CollectiveKind::kAllGather ? Mode::kGather : Mode::kReduce);
  const Mode first_mode = kind == CollectiveKind::kAllGather ? Mode::kGather : Mode::kReduce;
  w.initial = Snapshot(topo, mem, st, first_mode);
  const int64_t total_steps = S * phases;
  auto run_phase = [&](bool reduce, int64_t step_base, Mode mode) {
    for (int64_t s = 0; s < S; ++s) {
      CollectiveStep step;
      step.index = step_base + s + 1;
      const int64_t fwd = reduce ? S - 1 - s : s;
      for (const Move* m : by_step[static_cast<size_t>(fwd)]) {
        StepTransfer t = transfer_of(*m, reduce, reduce);
        if (reduce) {
          const Layout& L = G.layouts[static_cast<size_t>(m->group)];
          t.src_device = L.stops[m->rs_from].devices.front();
          t.dst_device = L.stops[m->rs_to].devices.front();
          t.path = m->rs_reflected ? topo.Route(L.stops[m->rs_from].chip, L.stops[m->rs_to].chip) : reverse_path(m->path);
          t.hops = static_cast<int64_t>(t.path.size());
          t.on_chip = t.path.empty();
          t.wraparound = false;
          for (int64_t l : t.path) t.wraparound = t.wraparound || topo.link(l).wraparound;
          if (!t.path.empty()) {
            t.axis = topo.link(t.path.front()).axis;
            t.direction = topo.link(t.path.front()).direction;
          }
          // Which fraction of the sum the message carries: the sender's coverage.
          double covered = 0;
          const int64_t c0 = m->chunks.front();
          covered = st.partial[static_cast<size_t>(m->part)][static_cast<size_t>(t.src_device)][static_cast<size_t>(c0)];
          if (m->chunks.size() == 1) {
            const std::string added = FormatCount(covered) + " of " + std::to_string(mem.group_size[static_cast<size_t>(t.src_device)]) + " added";
            if (!t.piece.empty() && t.piece.back() == ')') t.piece.insert(t.piece.size() - 1, "; " + added);
            else t.piece += " (" + added + ")";
          }
        }
        step.transfers.push_back(std::move(t));
      }
      // Reduce moves go backwards: swap the roles in a copy of the moves for the state update.
      std::vector<Move> applied;
      applied.reserve(by_step[static_cast<size_t>(fwd)].size());
      for (const Move* m : by_step[static_cast<size_t>(fwd)]) {
        Move r = *m;
        if (reduce) {
          r.from = m->rs_from;
          r.to = m->rs_to;
        }
        applied.push_back(std::move(r));
      }
      std::vector<const Move*> ptrs;
      for (const Move& m : applied) ptrs.push_back(&m);
      ApplyMoves(ptrs, G, reduce, &st);
      step.after = Snapshot(topo, mem, st, mode);
      const std::string prefix = StepPrefix(step.index, total_steps);
      if (kind == CollectiveKind::kAllReduce) {
        step.phase = reduce ? "reduce-scatter" : "all-gather";
        step.caption = prefix + (reduce ? "(reduce-scatter) " : "(all-gather of the reduced chunks) ") +
                       (reduce ? ReduceCaption(G, s, namer, along, n) : GatherCaption(G, s, namer, along, "reduced chunk", n));
      } else {
        step.caption = prefix + (reduce ? ReduceCaption(G, s, namer, along, n) : GatherCaption(G, s, namer, along, "shard", n));
      }
      w.steps.push_back(std::move(step));
    }
  };
  if (kind == CollectiveKind::kAllGather) {
    run_phase(false, 0, Mode::kGather);
  } else if (kind == CollectiveKind::kReduceScatter) {
    run_phase(true, 0, Mode::kReduce);
  } else {
    run_phase(true, 0, Mode::kReduce);
    // Each device's own chunk is now fully reduced: it is what the all-gather phase spreads.
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
    run_phase(false, S, Mode::kReducedGather);
  }

  // Summary.
  const std::string groups_text = std::to_string(w.num_groups) + (w.num_groups == 1 ? " group" : " groups") + " of " +
                                  std::to_string(n) + " devices" + (along.empty() ? "" : " along " + along);
  const std::string steps_text = std::to_string(total_steps) + (total_steps == 1 ? " step" : " steps");
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
  const Layout& L0 = G.layouts.front();
  if (L0.kind == Layout::Kind::kSequence) {
    if (L0.closed && bidir) w.summary += "A bidirectional ring with wraparound: N/2 = " + std::to_string(S) + " steps per pass.";
    else if (L0.closed) w.summary += "A ring used in one direction: N\u22121 = " + std::to_string(S) + " steps per pass.";
    else w.summary += "A line without wraparound: N\u22121 = " + std::to_string(S) + " steps per pass.";
  } else if (L0.kind == Layout::Kind::kGrid) {
    w.summary += "The group spans " + std::to_string(L0.axes.size()) + " physical axes: each " +
                 std::string(kind == CollectiveKind::kAllGather ? "shard" : "chunk") + " is split into " + std::to_string(G.parts) +
                 " parts that cross the axes in different orders, " + std::to_string(S) + " steps per pass.";
  } else if (L0.kind == Layout::Kind::kSwitch) {
    w.summary += "Through a switch every device reaches every other in one hop.";
  } else {
    w.summary += "Nothing moves over the network: the group's devices share one chip.";
  }
  if (w.num_groups > 1) w.summary += " All " + std::to_string(w.num_groups) + " groups run at the same time.";
  (void)steps_text;

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
  if (!shift_axis.empty() && !cyclic) {
    w.halo = std::string("Halo exchange: a shift by ") + (shift > 0 ? "+1" : "\u22121") + " along " + shift_axis +
             " without wraparound. Every device sends its edge (the halo) to its " + (shift > 0 ? "next" : "previous") +
             " neighbour along " + shift_axis + "; the device at the " + (shift > 0 ? "last" : "first") +
             " position has no neighbour beyond the edge, so it sends nothing. (GSPMD exchanges halos both ways with two "
             "such permutes, one per direction.)";
  }
  const std::string rotation = !shift_axis.empty() && cyclic
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
      if (from >= 0) parts.push_back((after ? "received " : "will receive ") + std::string(w.halo.empty() ? "the block" : "the halo") + " of " + std::to_string(from));
      if (parts.empty()) parts.push_back(w.halo.empty() ? "takes no part" : "at the edge: sends and receives nothing here");
      for (size_t i = 0; i < parts.size(); ++i) h.text += (i ? "; " : "") + parts[i];
      out.push_back(std::move(h));
    }
    return out;
  };
  w.initial = snapshot(false);
  for (const auto& [s, t] : pairs) {
    if (s == t) continue;
    StepTransfer tr;
    tr.src_device = s;
    tr.dst_device = t;
    tr.final_dst_device = t;
    tr.chunks = {s};
    tr.bytes = bytes;
    tr.piece = w.halo.empty() ? "block of " + std::to_string(s) : "halo of " + std::to_string(s);
    tr.path = topo.Route(topo.ChipOfDevice(s), topo.ChipOfDevice(t));
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

}  // namespace shardscope
