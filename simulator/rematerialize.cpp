#include "simulator/rematerialize.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "simulator/memory_model.h"

namespace shardscope::sim {
namespace {

// Ops whose re-execution would not give the same value or would repeat an effect.
bool HasSideEffects(std::string_view kind) {
  return kind == "rng" || kind == "rng-bit-generator" || kind == "rng-get-and-update-state" || kind == "infeed" ||
         kind == "outfeed" || kind == "send" || kind == "recv" || kind == "send-done" || kind == "recv-done" ||
         kind == "custom-call" || kind == "after-all" || kind == "add-dependency";
}

struct Pick {
  int32_t buffer = -1;
  int32_t def_op = -1;
  int32_t next_use = -1;  // the first op at or after the peak that reads the buffer (old index)
  double cost_per_byte = 0;
};

// Inserts a clone of each pick's defining op before its next use and moves the later readers to
// the clone's buffer. Indices are renumbered once for the whole round.
void Apply(ExecProgram* p, std::vector<Pick> picks, RematerializationResult* out) {
  const size_t n = p->ops.size();
  std::stable_sort(picks.begin(), picks.end(), [](const Pick& a, const Pick& b) { return a.next_use < b.next_use; });
  // New buffers, one per pick.
  std::vector<int32_t> new_buffer(picks.size());
  for (size_t k = 0; k < picks.size(); ++k) {
    Buffer b = p->buffers[static_cast<size_t>(picks[k].buffer)];
    if (!b.name.empty()) b.name += ".remat";  // (unnamed: ExecProgramOptions::names)
    b.is_parameter = false;
    b.donated = false;
    new_buffer[k] = static_cast<int32_t>(p->buffers.size());
    p->buffers.push_back(std::move(b));
  }
  // Old op index -> new index, and each clone's new index.
  std::vector<int32_t> remap(n);
  std::vector<int32_t> clone_index(picks.size());
  {
    int32_t shift = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      while (k < picks.size() && picks[k].next_use == static_cast<int32_t>(i)) {
        clone_index[k] = static_cast<int32_t>(i) + shift;
        ++shift;
        ++k;
      }
      remap[i] = static_cast<int32_t>(i) + shift;
    }
  }
  // Ops before the first clone keep their places and their dependencies (always earlier ops): only
  // the tail from there on is rebuilt.
  const size_t first = picks.empty() ? n : static_cast<size_t>(picks.front().next_use);
  std::vector<ExecOp> tail(std::make_move_iterator(p->ops.begin() + static_cast<std::ptrdiff_t>(first)),
                           std::make_move_iterator(p->ops.end()));
  std::vector<ExecOp>& ops = p->ops;
  ops.resize(first);
  ops.reserve(n + picks.size());
  size_t k = 0;
  for (size_t i = first; i < n; ++i) {
    ExecOp& original = tail[i - first];
    for (; k < picks.size() && picks[k].next_use == static_cast<int32_t>(i); ++k) {
      // The defining op is before its next use, so it is in `ops` already (deps renumbered).
      ExecOp c = ops[static_cast<size_t>(remap[static_cast<size_t>(picks[k].def_op)])];
      if (!c.name.empty()) c.name += ".remat";
      c.defs = {new_buffer[k]};
      c.in_place.clear();
      c.recompute = true;
      c.loop = original.loop;
      c.iteration = original.iteration;
      p->buffers[static_cast<size_t>(new_buffer[k])].def_op = clone_index[k];
      out->added_time_s += c.duration_s;
      ops.push_back(std::move(c));
    }
    for (int32_t& d : original.deps) d = remap[static_cast<size_t>(d)];
    ops.push_back(std::move(original));
  }
  // Readers after a pick's clone read the clone (and wait for it): a buffer picked several times is
  // read, after each clone, from the latest one.
  const size_t old_buffers = p->buffers.size() - picks.size();
  std::vector<int32_t> current(old_buffers, -1);  // buffer -> the pick whose clone ran last
  std::vector<int32_t> pick_at(ops.size() - first, -1);  // op index - first -> the pick it clones
  for (size_t j = 0; j < picks.size(); ++j) pick_at[static_cast<size_t>(clone_index[j]) - first] = static_cast<int32_t>(j);
  for (size_t o = first; o < ops.size(); ++o) {
    ExecOp& op = ops[o];
    bool added = false;
    for (int32_t& u : op.uses) {
      if (u < 0 || static_cast<size_t>(u) >= old_buffers) continue;
      const int32_t j = current[static_cast<size_t>(u)];
      if (j < 0) continue;
      u = new_buffer[static_cast<size_t>(j)];
      op.deps.push_back(clone_index[static_cast<size_t>(j)]);
      added = true;
    }
    for (auto& [dst, src] : op.in_place) {
      if (src < 0 || static_cast<size_t>(src) >= old_buffers) continue;
      const int32_t j = current[static_cast<size_t>(src)];
      if (j >= 0) src = new_buffer[static_cast<size_t>(j)];
    }
    if (added) {
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
    }
    if (const int32_t j = pick_at[o - first]; j >= 0) current[static_cast<size_t>(picks[static_cast<size_t>(j)].buffer)] = j;
  }
  // Buffers defined by the original ops move with them.
  for (size_t b = 0; b < old_buffers; ++b) {
    int32_t& d = p->buffers[b].def_op;
    if (d >= 0) d = remap[static_cast<size_t>(d)];
  }
}

// One pass in program order, as XLA's HloRematerialization walks a scheduled computation: at each
// instant whose level (ops one after another, buffers as `prof` has them, less what earlier picks
// of the pass freed) exceeds the limit, the buffers live there that the op running then does not
// read are the candidates (the rules of the header), taken cheapest first until the level fits.
// A pick frees its buffer from that instant until its next use, where the clone defines it again;
// later instants see the lower level. After its clone the value may be picked again (freed until
// its next reader after that), as XLA's clone per remaining use frees it between uses; a clone
// reads only what is live at its place (a buffer a clone will read is not freed before the clone).
std::vector<Pick> SweepPicks(const ExecProgram& program, const SequentialPeak& prof, int64_t limit, int64_t max_picks) {
  std::vector<Pick> picks;
  const size_t n = program.ops.size();
  const size_t nb = program.buffers.size();
  if (n == 0 || max_picks <= 0) return picks;
  // Level changes per instant and the buffers allocated and freed at each (CSR lists).
  std::vector<int64_t> delta(n + 2, 0);
  std::vector<int32_t> alloc_count(n + 2, 0), free_count(n + 2, 0);
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bytes = program.buffers[b].bytes;
    const BufferLifetime& lt = prof.lifetimes[b];
    if (bytes == 0 || !(lt.free_s > lt.alloc_s)) continue;
    const size_t a = static_cast<size_t>(lt.alloc_s);
    delta[a] += bytes;
    ++alloc_count[a];
    if (std::isfinite(lt.free_s)) {
      const size_t f = static_cast<size_t>(lt.free_s);
      delta[f] -= bytes;
      ++free_count[f];
    }
  }
  auto offsets = [](const std::vector<int32_t>& count) {
    std::vector<int32_t> off(count.size() + 1, 0);
    for (size_t i = 0; i < count.size(); ++i) off[i + 1] = off[i] + count[i];
    return off;
  };
  const std::vector<int32_t> alloc_off = offsets(alloc_count), free_off = offsets(free_count);
  std::vector<int32_t> alloc_list(static_cast<size_t>(alloc_off.back())), free_list(static_cast<size_t>(free_off.back()));
  {
    std::vector<int32_t> ai(alloc_off.begin(), alloc_off.end() - 1), fi(free_off.begin(), free_off.end() - 1);
    for (size_t b = 0; b < nb; ++b) {
      const BufferLifetime& lt = prof.lifetimes[b];
      if (program.buffers[b].bytes == 0 || !(lt.free_s > lt.alloc_s)) continue;
      alloc_list[static_cast<size_t>(ai[static_cast<size_t>(lt.alloc_s)]++)] = static_cast<int32_t>(b);
      if (std::isfinite(lt.free_s)) free_list[static_cast<size_t>(fi[static_cast<size_t>(lt.free_s)]++)] = static_cast<int32_t>(b);
    }
  }
  // The readers of each buffer in op order (CSR).
  std::vector<int32_t> reader_off(nb + 1, 0);
  for (const ExecOp& op : program.ops)
    for (int32_t u : op.uses) ++reader_off[static_cast<size_t>(u) + 1];
  for (size_t b = 0; b < nb; ++b) reader_off[b + 1] += reader_off[b];
  std::vector<int32_t> readers(static_cast<size_t>(reader_off.back()));
  {
    std::vector<int32_t> ri(reader_off.begin(), reader_off.end() - 1);
    for (size_t o = 0; o < n; ++o)
      for (int32_t u : program.ops[o].uses) readers[static_cast<size_t>(ri[static_cast<size_t>(u)]++)] = static_cast<int32_t>(o);
  }
  auto next_use = [&](size_t b, int32_t t) -> int32_t {  // the first reader at or after t, or -1
    const auto first = readers.begin() + reader_off[b], last = readers.begin() + reader_off[b + 1];
    const auto it = std::lower_bound(first, last, t);
    return it == last ? -1 : *it;
  };
  auto live_at = [&](int32_t u, int32_t q) {
    const BufferLifetime& l = prof.lifetimes[static_cast<size_t>(u)];
    return l.alloc_s <= q && l.free_s > q;
  };
  // What does not change during the sweep, per buffer: whether it may be recomputed at all (a
  // computed, non-output, non-constant value that is freed, defined by an op without effects) and
  // its cost per byte. Only the recomputable live buffers are visited at an instant above the
  // limit (about one live buffer in eight in a training step).
  std::vector<char> recomputable(nb, 0);
  std::vector<double> cost_per_byte(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = program.buffers[b];
    if (buf.bytes <= 0 || buf.def_op < 0 || buf.is_output || buf.is_constant) continue;
    if (std::isinf(prof.lifetimes[b].free_s)) continue;
    const ExecOp& def = program.ops[static_cast<size_t>(buf.def_op)];
    if (def.kind != ExecKind::kCompute || HasSideEffects(def.kind_name)) continue;
    recomputable[b] = 1;
    cost_per_byte[b] = def.duration_s / static_cast<double>(buf.bytes);
  }
  // `live` keeps every live buffer in allocation order (a freed one's place taken by the last):
  // ties between candidates of equal cost go to the earlier place in it. `recomputable_live` is
  // the recomputable subset, in any order.
  std::vector<int32_t> live, live_pos(nb, -1);
  std::vector<int32_t> recomputable_live, recomputable_pos(nb, -1);
  std::vector<std::pair<int32_t, Pick>> placed;  // (place in `live`, candidate)
  std::vector<int64_t> restore(n + 2, 0);  // bytes a pick's clone defines again at an instant
  // A picked buffer is freed until its clone (freed_until); a buffer a clone reads must not be
  // freed before that clone runs (blocked_until).
  std::vector<int32_t> freed_until(nb, 0), blocked_until(nb, 0);
  // A buffer whose defining op's operands are not all available at its next use q stays so until
  // q (those operands' lifetimes are fixed and frees only grow): it is not looked at again before.
  std::vector<int32_t> unusable_until(nb, 0);
  std::vector<Pick> candidates;
  int64_t level = 0, freed_now = 0;
  for (size_t t = 0; t < n; ++t) {
    for (int32_t k = free_off[t]; k < free_off[t + 1]; ++k) {
      const int32_t b = free_list[static_cast<size_t>(k)];
      const int32_t at = live_pos[static_cast<size_t>(b)];
      if (at < 0) continue;
      live_pos[static_cast<size_t>(live.back())] = at;
      live[static_cast<size_t>(at)] = live.back();
      live.pop_back();
      live_pos[static_cast<size_t>(b)] = -1;
      if (const int32_t r = recomputable_pos[static_cast<size_t>(b)]; r >= 0) {
        recomputable_pos[static_cast<size_t>(recomputable_live.back())] = r;
        recomputable_live[static_cast<size_t>(r)] = recomputable_live.back();
        recomputable_live.pop_back();
        recomputable_pos[static_cast<size_t>(b)] = -1;
      }
    }
    for (int32_t k = alloc_off[t]; k < alloc_off[t + 1]; ++k) {
      const int32_t b = alloc_list[static_cast<size_t>(k)];
      live_pos[static_cast<size_t>(b)] = static_cast<int32_t>(live.size());
      live.push_back(b);
      if (recomputable[static_cast<size_t>(b)]) {
        recomputable_pos[static_cast<size_t>(b)] = static_cast<int32_t>(recomputable_live.size());
        recomputable_live.push_back(b);
      }
    }
    level += delta[t];
    freed_now -= restore[t];
    const int64_t excess = level - freed_now - limit;
    if (t == 0 || excess <= 0) continue;  // instant 0: the parameters before anything runs
    const int32_t at = static_cast<int32_t>(t);
    placed.clear();
    for (int32_t b : recomputable_live) {
      const size_t ub = static_cast<size_t>(b);
      if (freed_until[ub] > at || blocked_until[ub] > at || unusable_until[ub] > at) continue;
      const int32_t q = next_use(ub, at);
      if (q <= at) continue;  // read at this instant (or never again)
      const int32_t def_op = program.buffers[ub].def_op;
      bool ok = true;
      for (int32_t u : program.ops[static_cast<size_t>(def_op)].uses)
        ok = ok && freed_until[static_cast<size_t>(u)] < q && live_at(u, q);
      if (!ok) {
        unusable_until[ub] = q;
        continue;
      }
      placed.push_back({live_pos[ub], Pick{b, def_op, q, cost_per_byte[ub]}});
    }
    // Cheapest first; equal costs in their order in `live`.
    std::sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) {
      if (a.second.cost_per_byte != b.second.cost_per_byte) return a.second.cost_per_byte < b.second.cost_per_byte;
      return a.first < b.first;
    });
    candidates.clear();
    for (const auto& [place, pick] : placed) candidates.push_back(pick);
    int64_t freed = 0;
    for (const Pick& c : candidates) {
      if (freed >= excess || static_cast<int64_t>(picks.size()) >= max_picks) break;
      const ExecOp& def = program.ops[static_cast<size_t>(c.def_op)];
      if (blocked_until[static_cast<size_t>(c.buffer)] > at) continue;  // an earlier pick of this instant reads it
      bool ok = true;
      for (int32_t u : def.uses) ok = ok && freed_until[static_cast<size_t>(u)] < c.next_use;
      if (!ok) continue;
      picks.push_back(c);
      freed_until[static_cast<size_t>(c.buffer)] = c.next_use;
      for (int32_t u : def.uses) blocked_until[static_cast<size_t>(u)] = std::max(blocked_until[static_cast<size_t>(u)], c.next_use);
      const int64_t bytes = program.buffers[static_cast<size_t>(c.buffer)].bytes;
      freed += bytes;
      freed_now += bytes;
      restore[static_cast<size_t>(c.next_use)] += bytes;
    }
    if (static_cast<int64_t>(picks.size()) >= max_picks) break;
  }
  return picks;
}

}  // namespace

// Passes after the first recompute what the first one's clones still hold: a clone is shared by
// every later reader of its value (XLA clones once per remaining use instead), so it can be live
// across a later instant above the limit.
constexpr int kMaxPasses = 8;

RematerializationResult RematerializeToFit(ExecProgram* program, int64_t limit_bytes, int64_t max_values) {
  RematerializationResult out;
  if (!program) return out;
  SequentialPeak prof = ComputeSequentialPeak(*program);
  out.peak_before = out.peak_after = prof.peak_bytes;
  if (limit_bytes <= 0) return out;
  // A pass rewrites every instant above the limit; the next one measures the program it wrote (a
  // clone may be defined where the level was already high, and clones are candidates of the next
  // pass). A pass that does not lower the peak is undone: its recomputation would buy nothing.
  for (int round = 0; round < kMaxPasses && prof.peak_bytes > limit_bytes && out.values < max_values; ++round) {
    std::vector<Pick> picks = SweepPicks(*program, prof, limit_bytes, max_values - out.values);
    if (picks.empty()) break;
    RematerializationResult pass = out;
    for (const Pick& c : picks) pass.bytes += program->buffers[static_cast<size_t>(c.buffer)].bytes;
    pass.values += static_cast<int64_t>(picks.size());
    // What Apply changes, kept to undo the pass: the ops from the first clone's place on, the
    // buffers' defining ops and their count (Apply appends the clones' buffers).
    size_t first = program->ops.size();
    for (const Pick& c : picks) first = std::min(first, static_cast<size_t>(c.next_use));
    std::vector<ExecOp> tail(program->ops.begin() + static_cast<std::ptrdiff_t>(first), program->ops.end());
    const size_t buffers_before = program->buffers.size();
    std::vector<int32_t> def_ops(buffers_before);
    for (size_t b = 0; b < buffers_before; ++b) def_ops[b] = program->buffers[b].def_op;
    Apply(program, std::move(picks), &pass);
    SequentialPeak after = ComputeSequentialPeak(*program);
    if (after.peak_bytes >= prof.peak_bytes) {
      program->ops.resize(first);
      std::move(tail.begin(), tail.end(), std::back_inserter(program->ops));
      program->buffers.resize(buffers_before);
      for (size_t b = 0; b < buffers_before; ++b) program->buffers[b].def_op = def_ops[b];
      break;
    }
    out = pass;
    ++out.passes;
    prof = std::move(after);
    out.peak_after = prof.peak_bytes;
  }
  return out;
}

}  // namespace shardscope::sim
