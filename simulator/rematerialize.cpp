#include "simulator/rematerialize.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string_view>
#include <unordered_set>
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
    b.name += ".remat";
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
      c.name += ".remat";
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
  // Readers after each pick's clone read the clone (and wait for it). One pass over the ops: a
  // buffer is picked at most once a round.
  const size_t old_buffers = p->buffers.size() - picks.size();
  std::vector<int32_t> pick_of(old_buffers, -1);
  for (size_t j = 0; j < picks.size(); ++j) pick_of[static_cast<size_t>(picks[j].buffer)] = static_cast<int32_t>(j);
  auto picked = [&](int32_t b, size_t o) -> int32_t {  // the pick redirecting buffer b at op o, or -1
    if (b < 0 || static_cast<size_t>(b) >= old_buffers) return -1;
    const int32_t j = pick_of[static_cast<size_t>(b)];
    return j >= 0 && o > static_cast<size_t>(clone_index[static_cast<size_t>(j)]) ? j : -1;
  };
  for (size_t o = first; o < ops.size(); ++o) {
    ExecOp& op = ops[o];
    bool added = false;
    for (int32_t& u : op.uses) {
      const int32_t j = picked(u, o);
      if (j < 0) continue;
      u = new_buffer[static_cast<size_t>(j)];
      op.deps.push_back(clone_index[static_cast<size_t>(j)]);
      added = true;
    }
    for (auto& [dst, src] : op.in_place) {
      const int32_t j = picked(src, o);
      if (j >= 0) src = new_buffer[static_cast<size_t>(j)];
    }
    if (added) {
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
    }
  }
  // Buffers defined by the original ops move with them.
  for (size_t b = 0; b < old_buffers; ++b) {
    int32_t& d = p->buffers[b].def_op;
    if (d >= 0) d = remap[static_cast<size_t>(d)];
  }
}

}  // namespace

RematerializationResult RematerializeToFit(ExecProgram* program, int64_t limit_bytes, int64_t max_values) {
  RematerializationResult out;
  if (!program) return out;
  SequentialPeak prof = ComputeSequentialPeak(*program);
  out.peak_before = out.peak_after = prof.peak_bytes;
  if (limit_bytes <= 0) return out;
  // A round may only move the peak to another instant of the same height (a plateau); give up when
  // many rounds in a row do not lower it.
  int stalled = 0;
  while (prof.peak_bytes > limit_bytes && out.values < max_values && stalled < 64) {
    const double t = prof.peak_time_s;
    const size_t n = program->ops.size();
    const int32_t at = static_cast<int32_t>(std::llround(t));
    if (at <= 0 || static_cast<size_t>(at) >= n) break;  // the peak is the parameters before anything runs
    // The next reader of each buffer at or after the peak's op.
    const size_t nb = program->buffers.size();
    std::vector<int32_t> next_use(nb, -1);
    for (size_t o = n; o-- > static_cast<size_t>(at);)
      for (int32_t u : program->ops[o].uses) next_use[static_cast<size_t>(u)] = static_cast<int32_t>(o);
    std::vector<Pick> candidates;
    for (size_t b = 0; b < nb; ++b) {
      const Buffer& buf = program->buffers[b];
      const BufferLifetime& lt = prof.lifetimes[b];
      if (buf.bytes <= 0 || buf.def_op < 0 || buf.is_output || buf.is_constant) continue;
      if (!(lt.alloc_s <= t && lt.free_s > t) || std::isinf(lt.free_s)) continue;
      const int32_t q = next_use[b];
      if (q <= at) continue;  // read at the peak itself (or never again)
      const ExecOp& def = program->ops[static_cast<size_t>(buf.def_op)];
      if (def.kind != ExecKind::kCompute || HasSideEffects(def.kind_name)) continue;
      bool operands_live = true;
      for (int32_t u : def.uses) {
        const BufferLifetime& ul = prof.lifetimes[static_cast<size_t>(u)];
        if (!(ul.alloc_s <= q && ul.free_s > q)) {
          operands_live = false;
          break;
        }
      }
      if (!operands_live) continue;
      candidates.push_back({static_cast<int32_t>(b), buf.def_op, q, def.duration_s / static_cast<double>(buf.bytes)});
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Pick& a, const Pick& b) { return a.cost_per_byte < b.cost_per_byte; });
    const int64_t excess = prof.peak_bytes - limit_bytes;
    int64_t freed = 0;
    std::vector<Pick> picks;
    std::unordered_set<int32_t> picked, read_by_picked;
    for (const Pick& c : candidates) {
      if (freed >= excess || out.values + static_cast<int64_t>(picks.size()) >= max_values) break;
      const ExecOp& def = program->ops[static_cast<size_t>(c.def_op)];
      if (read_by_picked.count(c.buffer)) continue;
      bool reads_picked = false;
      for (int32_t u : def.uses) reads_picked = reads_picked || picked.count(u) > 0;
      if (reads_picked) continue;
      picks.push_back(c);
      picked.insert(c.buffer);
      for (int32_t u : def.uses) read_by_picked.insert(u);
      freed += program->buffers[static_cast<size_t>(c.buffer)].bytes;
    }
    if (picks.empty()) break;
    for (const Pick& c : picks) out.bytes += program->buffers[static_cast<size_t>(c.buffer)].bytes;
    out.values += static_cast<int64_t>(picks.size());
    Apply(program, std::move(picks), &out);
    prof = ComputeSequentialPeak(*program);
    stalled = prof.peak_bytes < out.peak_after ? 0 : stalled + 1;
    out.peak_after = std::min(out.peak_after, prof.peak_bytes);
  }
  return out;
}

}  // namespace shardscope::sim
