#include "simulator/pipeline_accounting.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace shardscope::sim {

namespace {

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

// The chains or rings of `pairs` over devices 0 .. n - 1, each as its devices in flow order
// (starting where data enters; rings: see the header). Empty when the pairs are not disjoint
// chains/rings of one length >= 2 covering every device.
std::vector<std::vector<int64_t>> Paths(const Pairs& pairs, int64_t n, bool* ring) {
  if (n < 2 || pairs.empty()) return {};
  std::vector<int64_t> next(static_cast<size_t>(n), -1), prev(static_cast<size_t>(n), -1);
  for (const auto& [s, t] : pairs) {
    if (s < 0 || t < 0 || s >= n || t >= n || s == t) return {};
    if (next[static_cast<size_t>(s)] >= 0 || prev[static_cast<size_t>(t)] >= 0) return {};
    next[static_cast<size_t>(s)] = t;
    prev[static_cast<size_t>(t)] = s;
  }
  std::vector<std::vector<int64_t>> out;
  std::vector<char> seen(static_cast<size_t>(n), 0);
  // Chains: from each device nothing comes into.
  for (int64_t d = 0; d < n; ++d) {
    if (prev[static_cast<size_t>(d)] >= 0) continue;
    std::vector<int64_t> path;
    for (int64_t x = d; x >= 0 && !seen[static_cast<size_t>(x)]; x = next[static_cast<size_t>(x)]) {
      seen[static_cast<size_t>(x)] = 1;
      path.push_back(x);
    }
    out.push_back(std::move(path));
  }
  const bool chains = !out.empty();
  // Rings: what is left.
  for (int64_t d = 0; d < n; ++d) {
    if (seen[static_cast<size_t>(d)]) continue;
    if (chains) return {};  // chains and rings mixed: not one shift
    std::vector<int64_t> cycle;
    for (int64_t x = d; !seen[static_cast<size_t>(x)]; x = next[static_cast<size_t>(x)]) {
      seen[static_cast<size_t>(x)] = 1;
      cycle.push_back(x);
    }
    out.push_back(std::move(cycle));
  }
  for (const auto& p : out)
    if (p.size() < 2 || p.size() != out.front().size()) return {};
  *ring = !chains;
  return out;
}

// A ring's entry: the target of the one pair whose direction in device order differs from the
// others'; `first_loop` decides rings of two (and rings without a single such pair).
void RotateToEntry(std::vector<int64_t>& cycle, bool first_loop) {
  const size_t k = cycle.size();
  int64_t up = 0;
  for (size_t i = 0; i < k; ++i) up += cycle[(i + 1) % k] > cycle[i] ? 1 : 0;
  const int64_t down = static_cast<int64_t>(k) - up;
  size_t entry = 0;
  if (k > 2 && (up == 1 || down == 1)) {
    const bool odd_is_up = up == 1;
    for (size_t i = 0; i < k; ++i)
      if ((cycle[(i + 1) % k] > cycle[i]) == odd_is_up) entry = (i + 1) % k;
  } else {
    const auto lowest = std::min_element(cycle.begin(), cycle.end()) - cycle.begin();
    const auto highest = std::max_element(cycle.begin(), cycle.end()) - cycle.begin();
    entry = static_cast<size_t>(first_loop ? lowest : highest);
  }
  std::rotate(cycle.begin(), cycle.begin() + static_cast<std::ptrdiff_t>(entry), cycle.end());
}

Pairs Reversed(const Pairs& p) {
  Pairs r;
  r.reserve(p.size());
  for (const auto& [s, t] : p) r.emplace_back(t, s);
  std::sort(r.begin(), r.end());
  return r;
}

// "forward_body.spmd/dot.3[12]" -> ("forward_body", 12); false without an iteration suffix.
bool LoopIteration(const std::string& name, std::string* body, int64_t* iteration) {
  const auto slash = name.find('/');
  if (slash == std::string::npos) return false;
  const auto open = name.find('[', slash);
  if (open == std::string::npos) return false;
  const auto close = name.find(']', open);
  if (close == std::string::npos || close == open + 1) return false;
  int64_t t = 0;
  for (size_t k = open + 1; k < close; ++k) {
    if (name[k] < '0' || name[k] > '9' || t > (int64_t{1} << 50)) return false;
    t = t * 10 + (name[k] - '0');
  }
  *iteration = t;
  std::string c = name.substr(0, slash);
  const std::string suffix = ".spmd";
  if (c.size() > suffix.size() && c.compare(c.size() - suffix.size(), suffix.size(), suffix) == 0)
    c.resize(c.size() - suffix.size());
  *body = std::move(c);
  return true;
}

}  // namespace

double BubbleShareEstimate(int64_t stages, int64_t trips) {
  if (stages < 2 || trips < stages) return 0;
  return static_cast<double>(stages - 1) / static_cast<double>(trips);
}

int64_t PipelineStructure::stages() const {
  int64_t s = 0;
  for (const PipelineLoop& l : loops) s = std::max(s, l.stages);
  return s;
}

PipelineStructure FindPipelineStructure(const ExecProgram& program, int64_t num_devices) {
  PipelineStructure out;
  const size_t nl = program.loops.size();
  // The collective-permutes of each loop's iteration 0 (directly in its body).
  std::vector<std::vector<int32_t>> permutes(nl);
  for (size_t o = 0; o < program.ops.size(); ++o) {
    const ExecOp& op = program.ops[o];
    if (op.kind != ExecKind::kCollective || op.loop < 0 || op.iteration != 0 || op.collective < 0) continue;
    const CollectiveSpec& spec = program.collectives[static_cast<size_t>(op.collective)];
    if (spec.kind == CollectiveKind::kCollectivePermute) permutes[static_cast<size_t>(op.loop)].push_back(static_cast<int32_t>(o));
  }
  std::vector<int32_t> pipeline_of(nl, -1);  // loop -> index into out.loops
  for (size_t l = 0; l < nl; ++l) {
    const ExecLoop& loop = program.loops[l];
    for (int32_t o : permutes[l]) {
      const CollectiveSpec& spec = program.collectives[static_cast<size_t>(program.ops[static_cast<size_t>(o)].collective)];
      bool ring = false;
      auto paths = Paths(spec.pairs, num_devices, &ring);
      if (paths.empty() || loop.trips < static_cast<int64_t>(paths.front().size())) continue;
      // A halo exchange: another permute of the iteration sends the reverse way.
      const Pairs reverse = Reversed(spec.pairs);
      bool both_ways = false;
      for (int32_t q : permutes[l]) {
        if (q == o) continue;
        Pairs other = program.collectives[static_cast<size_t>(program.ops[static_cast<size_t>(q)].collective)].pairs;
        std::sort(other.begin(), other.end());
        both_ways = both_ways || other == reverse;
      }
      if (both_ways) continue;
      PipelineLoop p;
      p.loop = static_cast<int32_t>(l);
      p.shift = o;
      p.stages = static_cast<int64_t>(paths.front().size());
      p.trips = loop.trips;
      p.ring = ring;
      p.position.assign(static_cast<size_t>(num_devices), 0);
      for (auto& path : paths) {
        if (ring) RotateToEntry(path, out.loops.empty());
        for (size_t k = 0; k < path.size(); ++k) p.position[static_cast<size_t>(path[k])] = static_cast<int64_t>(k);
      }
      pipeline_of[l] = static_cast<int32_t>(out.loops.size());
      out.loops.push_back(std::move(p));
      break;
    }
  }
  // Each loop's nearest pipeline loop (itself or an enclosing one) and the iteration of it it runs in.
  std::vector<int32_t> owner(nl, -1);
  std::vector<int64_t> owner_iteration(nl, -1);  // -1: the op's own iteration (the loop is the pipeline)
  for (size_t l = 0; l < nl; ++l) {  // parents come before their children
    if (pipeline_of[l] >= 0) {
      owner[l] = pipeline_of[l];
      continue;
    }
    const int32_t parent = program.loops[l].parent;
    if (parent < 0 || static_cast<size_t>(parent) >= l) continue;
    owner[l] = owner[static_cast<size_t>(parent)];
    owner_iteration[l] = owner_iteration[static_cast<size_t>(parent)] >= 0 ? owner_iteration[static_cast<size_t>(parent)]
                                                                             : (pipeline_of[static_cast<size_t>(parent)] >= 0
                                                                                    ? program.loops[l].parent_iteration
                                                                                    : -1);
  }
  if (out.loops.empty()) return out;
  out.op_loop.assign(program.ops.size(), -1);
  out.op_iteration.assign(program.ops.size(), 0);
  for (size_t o = 0; o < program.ops.size(); ++o) {
    const int32_t l = program.ops[o].loop;
    if (l < 0 || owner[static_cast<size_t>(l)] < 0) continue;
    out.op_loop[o] = owner[static_cast<size_t>(l)];
    out.op_iteration[o] = owner_iteration[static_cast<size_t>(l)] >= 0 ? owner_iteration[static_cast<size_t>(l)]
                                                                       : program.ops[o].iteration;
  }
  return out;
}

TimelineBubble BubbleOnTimeline(const RunResult& run, int64_t device, int64_t stages,
                                const std::vector<TimelinePipelineLoop>& loops) {
  TimelineBubble out;
  if (stages < 2 || loops.empty()) return out;
  std::map<std::string, int64_t> position;
  std::map<std::string, std::string> loop_of_condition;
  for (const TimelinePipelineLoop& l : loops) {
    position.emplace(l.body, l.position);
    if (!l.condition.empty()) loop_of_condition.emplace(l.condition, l.body);
  }
  struct Iteration {
    double start = 0, end = 0, compute = 0;
  };
  std::map<std::pair<std::string, int64_t>, Iteration> iterations;
  std::map<std::string, int64_t> trips;
  for (const TimelineEvent& e : run.DeviceTimeline(device)) {
    std::string body;
    int64_t t = 0;
    if (!LoopIteration(e.instruction, &body, &t)) continue;
    const bool condition = loop_of_condition.count(body) > 0;
    if (condition) body = loop_of_condition[body];
    if (!position.count(body)) continue;
    if (!condition) trips[body] = std::max(trips[body], t + 1);
    auto [it, fresh] = iterations.emplace(std::make_pair(body, t), Iteration{e.start_s, e.end_s(), 0});
    if (!fresh) {
      it->second.start = std::min(it->second.start, e.start_s);
      it->second.end = std::max(it->second.end, e.end_s());
    }
    if (e.stream == Stream::kCompute) it->second.compute += e.duration_s;
  }
  for (const auto& [key, it] : iterations) {
    const auto& [body, t] = key;
    if (!PaddedIteration(position[body], stages, trips[body], t)) continue;
    out.spans.push_back({it.start, it.end, body, t});
    out.seconds += it.compute;
  }
  std::sort(out.spans.begin(), out.spans.end(),
            [](const TimelineBubbleSpan& a, const TimelineBubbleSpan& b) { return a.start_s < b.start_s; });
  if (run.summary.step_time_s > 0) out.share = out.seconds / run.summary.step_time_s;
  return out;
}

}  // namespace shardscope::sim
