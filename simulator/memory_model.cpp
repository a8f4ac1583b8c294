#include "simulator/memory_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <span>
#include <string_view>

namespace shardscope::sim {

namespace {

// (By value: a temporary, such as an op_name just parsed, is lowered in place, not copied.)
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool Contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }
bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Whether `s` contains one of the words below: one pass over `s`, trying at each place only the
// words that start with its letter ("momentum" contains "moment"; every classified value of every
// simulation asks this twice).
bool HasOptimizerWord(std::string_view s) {
  static constexpr std::string_view kA[] = {"adam", "accumulator", "adafactor"};
  static constexpr std::string_view kM[] = {"moment"};
  static constexpr std::string_view kO[] = {"opt_state", "optimizer_state"};
  static constexpr std::string_view kS[] = {"slot"};
  static constexpr std::string_view kV[] = {"velocity"};
  for (size_t i = 0; i < s.size(); ++i) {
    std::span<const std::string_view> words;
    switch (s[i]) {
      case 'a': words = kA; break;
      case 'm': words = kM; break;
      case 'o': words = kO; break;
      case 's': words = kS; break;
      case 'v': words = kV; break;
      default: continue;
    }
    const std::string_view rest = s.substr(i);
    for (std::string_view w : words)
      if (rest.starts_with(w)) return true;
  }
  return false;
}

bool IsInputName(std::string_view n) {
  if (n == "x" || n == "y") return true;
  static constexpr std::string_view kPrefixes[] = {"input", "target", "label", "batch", "data", "tokens", "images",
                                                   "features"};
  for (auto p : kPrefixes)
    if (StartsWith(n, p)) return true;
  return false;
}

bool InOptimizerScope(std::string_view name, std::string_view op_name) {
  return StartsWith(op_name, "optimizer") || StartsWith(name, "optimizer") || Contains(op_name, "/optimizer/");
}

bool IsBackward(std::string_view name, std::string_view op_name) {
  return StartsWith(op_name, "backward") || Contains(op_name, "/backward/") || StartsWith(name, "backward") ||
         Contains(name, "_backward_") || Contains(name, "grad");
}

bool IsDataMovement(Opcode op) {
  switch (op) {
    case Opcode::kConvert: case Opcode::kCopy: case Opcode::kTranspose: case Opcode::kSlice:
    case Opcode::kDynamicSlice: case Opcode::kDynamicUpdateSlice: case Opcode::kPad: case Opcode::kConcatenate:
    case Opcode::kReverse: case Opcode::kGather: case Opcode::kBitcast: case Opcode::kReshape:
    case Opcode::kAllGather: case Opcode::kAllGatherStart: case Opcode::kAllReduce: case Opcode::kAllReduceStart:
    case Opcode::kReduceScatter: case Opcode::kAllToAll: case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
      return true;
    default:
      return false;
  }
}

}  // namespace

MemoryCategory ClassifyValue(const Instruction& inst, bool is_entry_parameter,
                             const std::set<std::string, std::less<>>& entry_parameter_names,
                             std::optional<MemoryCategory> operand_category) {
  const std::string name = Lower(inst.name());
  const std::string op_name = Lower(inst.op_name());
  if (is_entry_parameter) {
    if (HasOptimizerWord(name) || Contains(name, "optimizer") || HasOptimizerWord(op_name)) {
      return MemoryCategory::kOptimizerState;
    }
    if ((EndsWith(inst.name(), "_m") || EndsWith(inst.name(), "_v")) &&
        entry_parameter_names.count(std::string_view(inst.name()).substr(0, inst.name().size() - 2))) {
      return MemoryCategory::kOptimizerState;
    }
    if (IsInputName(name)) return MemoryCategory::kActivations;
    return MemoryCategory::kParameters;
  }
  // 2. optimizer state
  if (HasOptimizerWord(name) || HasOptimizerWord(op_name) || EndsWith(name, "_m_new") || EndsWith(name, "_v_new")) {
    return MemoryCategory::kOptimizerState;
  }
  // 3. updated weights
  const bool optimizer = InOptimizerScope(name, op_name);
  if (optimizer && EndsWith(name, "_new")) return MemoryCategory::kParameters;
  // 4. data movement inherits
  if (IsDataMovement(inst.opcode()) && operand_category) return *operand_category;
  // 5. optimizer temporaries
  if (optimizer) return MemoryCategory::kTemporaries;
  // 6. gradients
  if (IsBackward(name, op_name)) return MemoryCategory::kGradients;
  // 7. forward / loss scopes
  if (!op_name.empty()) return MemoryCategory::kActivations;
  return MemoryCategory::kTemporaries;
}

namespace {

// When each buffer is allocated and freed, given each op's start and end (the rules of the header).
template <class StartOf, class EndOf>
std::vector<BufferLifetime> Lifetimes(const ExecProgram& program, StartOf op_start, EndOf op_end) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const size_t nops = program.ops.size();
  const size_t nb = program.buffers.size();
  std::vector<BufferLifetime> lifetimes(nb);
  std::vector<double> last_use(nb, -1.0);
  std::vector<int32_t> taken_by(nb, -1);
  for (size_t o = 0; o < nops; ++o) {
    const ExecOp& op = program.ops[o];
    for (int32_t b : op.uses) {
      double& lu = last_use[static_cast<size_t>(b)];
      lu = std::max(lu, op_end(o));
    }
    for (const auto& [out, in] : op.in_place) taken_by[static_cast<size_t>(in)] = static_cast<int32_t>(o);
  }
  // Uses other than the in-place taker (the taker frees the buffer when it starts).
  std::vector<double> other_use(nb, -1.0);
  for (size_t o = 0; o < nops; ++o) {
    for (int32_t b : program.ops[o].uses) {
      if (taken_by[static_cast<size_t>(b)] == static_cast<int32_t>(o)) continue;
      double& u = other_use[static_cast<size_t>(b)];
      u = std::max(u, op_end(o));
    }
  }
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = program.buffers[b];
    BufferLifetime& lt = lifetimes[b];
    lt.alloc_s = buf.def_op >= 0 ? op_start(static_cast<size_t>(buf.def_op)) : 0.0;
    if (buf.is_output || buf.is_constant || (buf.is_parameter && !buf.donated)) {
      lt.free_s = kInf;
    } else if (taken_by[b] >= 0) {
      lt.free_s = std::max(op_start(static_cast<size_t>(taken_by[b])), other_use[b]);
    } else if (last_use[b] >= 0) {
      lt.free_s = last_use[b];
    } else {
      lt.free_s = buf.def_op >= 0 ? op_end(static_cast<size_t>(buf.def_op)) : lt.alloc_s;
    }
    if (lt.free_s < lt.alloc_s) lt.free_s = lt.alloc_s;
  }
  return lifetimes;
}

}  // namespace

SequentialPeak ComputeSequentialPeak(const ExecProgram& program) {
  const size_t n = program.ops.size();
  SequentialPeak out;
  out.lifetimes = Lifetimes(
      program, [](size_t k) { return static_cast<double>(k); }, [](size_t k) { return static_cast<double>(k + 1); });
  // Every instant is an op index in [0, n]: the level changes by delta[t] at instant t. As in
  // ComputeMemoryProfile, the first sample is the state before anything runs (parameters and
  // constants), and a later instant is the peak only when strictly higher.
  std::vector<int64_t> delta(n + 2, 0);
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer& buf = program.buffers[b];
    if (buf.def_op < 0) out.peak_bytes += buf.bytes;
    if (buf.bytes == 0) continue;
    const BufferLifetime& lt = out.lifetimes[b];
    if (!(lt.free_s > lt.alloc_s)) continue;
    delta[static_cast<size_t>(lt.alloc_s)] += buf.bytes;
    if (std::isfinite(lt.free_s)) delta[static_cast<size_t>(lt.free_s)] -= buf.bytes;
  }
  int64_t level = 0;
  for (size_t t = 0; t < delta.size(); ++t) {
    level += delta[t];
    if (level > out.peak_bytes) {
      out.peak_bytes = level;
      out.peak_time_s = static_cast<double>(t);
    }
  }
  return out;
}

Result<MemoryProfile> ComputeMemoryProfile(const ExecProgram& program, const std::vector<double>& op_start,
                                           const std::vector<double>& op_end, double step_end_s,
                                           const MemoryProfileOptions& options) {
  const size_t nops = program.ops.size();
  if (op_start.size() != nops || op_end.size() != nops) {
    return Error("memory profile: " + std::to_string(nops) + " ops but " + std::to_string(op_start.size()) +
                 " start and " + std::to_string(op_end.size()) + " end times");
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const size_t nb = program.buffers.size();
  MemoryProfile prof;
  prof.lifetimes = Lifetimes(
      program, [&](size_t k) { return op_start[k]; }, [&](size_t k) { return op_end[k]; });
  // Events: (time, buffer, +1 alloc / -1 free). The level after all events at one instant counts.
  struct Ev {
    double t;
    int32_t b;
    int8_t sign;
  };
  std::vector<Ev> ev;
  ev.reserve(nb * 2);
  for (size_t b = 0; b < nb; ++b) {
    if (program.buffers[b].bytes == 0) continue;
    const BufferLifetime& lt = prof.lifetimes[b];
    if (!(lt.free_s > lt.alloc_s)) continue;  // never live at any instant's end
    ev.push_back({lt.alloc_s, static_cast<int32_t>(b), +1});
    if (lt.free_s < kInf) ev.push_back({lt.free_s, static_cast<int32_t>(b), -1});
  }
  std::sort(ev.begin(), ev.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });
  MemorySample level;
  if (!options.peak_only) prof.samples.reserve(ev.size() / 2 + 3);
  // The state before anything runs: parameters and constants (an op starting at time 0 may free
  // one in place at once; the memory held before it still counts).
  bool initial_is_peak = true;
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = program.buffers[b];
    if (buf.def_op < 0) level.at(buf.category) += buf.bytes;
  }
  level.time_s = 0;
  prof.samples.push_back(level);
  prof.peak_bytes = level.total();
  prof.peak_time_s = 0;
  prof.peak_by_category = level.bytes;
  MemorySample previous = level;  // the last sample (kept alone when only the peak is wanted)
  level = MemorySample{};
  for (size_t i = 0; i < ev.size();) {
    const double t = ev[i].t;
    for (; i < ev.size() && ev[i].t == t; ++i) {
      const Buffer& buf = program.buffers[static_cast<size_t>(ev[i].b)];
      level.at(buf.category) += ev[i].sign * buf.bytes;
    }
    level.time_s = t;
    if (previous.bytes == level.bytes) continue;
    previous = level;
    if (!options.peak_only) prof.samples.push_back(level);
    const int64_t total = level.total();
    if (total > prof.peak_bytes) {
      initial_is_peak = false;
      prof.peak_bytes = total;
      prof.peak_time_s = t;
      prof.peak_by_category = level.bytes;
    }
  }
  if (options.peak_only) return prof;
  if (step_end_s > prof.samples.back().time_s) {
    MemorySample last = prof.samples.back();
    last.time_s = step_end_s;
    prof.samples.push_back(last);
  }
  // Buffers live at the peak (before anything ran: the parameters and constants).
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = program.buffers[b];
    const BufferLifetime& lt = prof.lifetimes[b];
    const bool live = initial_is_peak ? buf.def_op < 0
                                      : lt.alloc_s <= prof.peak_time_s && lt.free_s > prof.peak_time_s;
    if (buf.bytes > 0 && live) prof.peak_buffers.push_back({buf.name, buf.bytes, buf.category});
  }
  std::stable_sort(prof.peak_buffers.begin(), prof.peak_buffers.end(),
                   [](const PeakBuffer& a, const PeakBuffer& b) { return a.bytes > b.bytes; });
  // Downsampling keeps each bucket's highest sample (and the first and last).
  if (options.max_samples >= 3 && prof.samples.size() > options.max_samples) {
    const size_t n = prof.samples.size();
    const size_t buckets = options.max_samples - 2;
    std::vector<MemorySample> out;
    out.reserve(options.max_samples);
    out.push_back(prof.samples.front());
    for (size_t k = 0; k < buckets; ++k) {
      const size_t lo = 1 + (n - 2) * k / buckets, hi = 1 + (n - 2) * (k + 1) / buckets;
      if (lo >= hi) continue;
      size_t best = lo;
      for (size_t j = lo; j < hi; ++j)
        if (prof.samples[j].total() > prof.samples[best].total()) best = j;
      out.push_back(prof.samples[best]);
    }
    out.push_back(prof.samples.back());
    prof.samples = std::move(out);
  }
  return prof;
}

}  // namespace shardscope::sim
