#include "app/conformance/spmd_conformance.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <regex>
#include <sstream>

#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope {

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b);
}

bool ReadText(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::optional<Opcode> KindFromText(const std::string& s) { return OpcodeFromName(s); }

struct Census {
  std::vector<const Instruction*> all, entry;
};
Census Collect(const Module& m) {
  Census c;
  for (const auto& comp : m.computations())
    for (const auto& i : comp->instructions()) {
      c.all.push_back(i.get());
      if (comp.get() == m.entry()) c.entry.push_back(i.get());
    }
  return c;
}

bool MatchesKind(const Instruction* i, Opcode want) {
  if (i->opcode() == want) return true;
  // XLA writes reduce-scatter as all-reduce + dynamic-slice.
  if (want == Opcode::kAllReduce && i->opcode() == Opcode::kReduceScatter) return true;
  if (want == Opcode::kAllGather && i->opcode() == Opcode::kAllGatherStart) return true;
  if (want == Opcode::kCollectivePermute && i->opcode() == Opcode::kCollectivePermuteStart) return true;
  return false;
}

bool MatchesShape(const Instruction* i, Opcode want, const Shape& shape) {
  if (i->shape().Compatible(shape)) return true;
  // all-reduce S followed by dynamic-slice == reduce-scatter whose operand is S.
  if (want == Opcode::kAllReduce && i->opcode() == Opcode::kReduceScatter && i->operand_count() == 1 &&
      i->operand(0)->shape().Compatible(shape))
    return true;
  return false;
}

bool IsCollectiveKind(Opcode op) { return IsCollective(op) || op == Opcode::kReduceScatter; }

// The partitioner options a case's runs set (`SpmdPartitionerOptions: name=value, ...` lines),
// one map per run block in the order ParseSpmdNotes returns the runs.
std::vector<std::map<std::string, std::string>> ParseRunOptions(const std::string& text) {
  std::vector<std::map<std::string, std::string>> runs;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("run", 0) == 0 && line.find(':') != std::string::npos) {
      runs.emplace_back();
      continue;
    }
    const std::string t = Trim(line);
    static const std::string kKey = "SpmdPartitionerOptions:";
    if (runs.empty() || t.rfind(kKey, 0) != 0) continue;
    std::istringstream items(t.substr(kKey.size()));
    std::string item;
    while (std::getline(items, item, ',')) {
      item = Trim(item);
      const size_t eq = item.find('=');
      if (eq != std::string::npos) runs.back()[Trim(item.substr(0, eq))] = Trim(item.substr(eq + 1));
    }
  }
  return runs;
}

// Applies the options SpmdOptions models. The others (windowed einsum thresholds and loops,
// gather/scatter method preferences, ...) choose between strategies the partitioner does not have;
// they are ignored, and the cases' expectations show what that costs.
Status ApplyRunOptions(const std::map<std::string, std::string>& opts, SpmdOptions* so) {
  for (const auto& [name, value] : opts) {
    if (name != "conv_halo_exchange_always_on_lhs") continue;
    if (value != "true" && value != "false")
      return Error("partitioner option " + name + "=" + value + " is not a boolean");
    so->conv_halo_exchange_always_on_lhs = value == "true";
  }
  return Status::Ok();
}

}  // namespace

std::vector<SpmdExpectations> ParseSpmdNotes(const std::string& text) {
  std::vector<SpmdExpectations> runs;
  bool propagation = text.find("ShardingPropagation") != std::string::npos;
  std::istringstream in(text);
  std::string line;
  SpmdExpectations* cur = nullptr;
  while (std::getline(in, line)) {
    if (line.rfind("run", 0) == 0 && line.find(':') != std::string::npos) {
      runs.emplace_back();
      cur = &runs.back();
      cur->run_propagation = propagation;
      continue;
    }
    if (!cur) continue;
    std::string t = Trim(line);
    if (t.rfind("num_partitions:", 0) == 0) {
      cur->num_partitions = std::stoll(t.substr(15));
    } else if (t.rfind("- ", 0) == 0) {
      cur->lines.push_back(t.substr(2));
    }
  }
  return runs;
}

std::vector<std::string> CheckSpmdExpectations(const Module& spmd, const SpmdExpectations& e, int64_t* checks) {
  std::vector<std::string> fails;
  *checks = 0;
  const Census c = Collect(spmd);
  static const std::regex with_shape(R"(is ([a-z-]+) with per-partition result shape ([a-z0-9]+\[[0-9,]*\]))",
                                     std::regex::icase);
  static const std::regex no_shape(R"(is ([a-z-]+) \(shape not checked\))", std::regex::icase);
  static const std::regex exactly(R"(^exactly ([0-9]+) ([a-z-]+) instruction\(s\) in (entry|ENTRY))");
  static const std::regex none_of(R"(^NO ([a-z-]+) anywhere in the module)");
  static const std::regex at_least(R"(^at least one ([a-z-]+) in the module)");
  for (const std::string& l : e.lines) {
    std::smatch m;
    if (std::regex_search(l, m, with_shape)) {
      auto kind = KindFromText(m[1].str());
      auto shape = ParseShape(m[2].str());
      if (!kind || !shape.ok()) continue;
      ++*checks;
      bool found = std::any_of(c.all.begin(), c.all.end(), [&](const Instruction* i) {
        return MatchesKind(i, *kind) && MatchesShape(i, *kind, *shape);
      });
      if (!found) fails.push_back("expected " + m[1].str() + " with per-partition shape " + m[2].str());
    } else if (std::regex_search(l, m, no_shape)) {
      auto kind = KindFromText(m[1].str());
      if (!kind) continue;
      ++*checks;
      bool found = std::any_of(c.all.begin(), c.all.end(), [&](const Instruction* i) { return MatchesKind(i, *kind); });
      if (!found) fails.push_back("expected a " + m[1].str());
    } else if (std::regex_search(l, m, exactly)) {
      auto kind = KindFromText(m[2].str());
      if (!kind) continue;
      ++*checks;
      const int64_t want = std::stoll(m[1].str());
      int64_t n = std::count_if(c.entry.begin(), c.entry.end(), [&](const Instruction* i) { return MatchesKind(i, *kind); });
      if (n != want) fails.push_back("expected exactly " + m[1].str() + " " + m[2].str() + " in entry, found " + std::to_string(n));
    } else if (std::regex_search(l, m, none_of)) {
      auto kind = KindFromText(m[1].str());
      if (!kind) continue;
      ++*checks;
      int64_t n = std::count_if(c.all.begin(), c.all.end(), [&](const Instruction* i) { return MatchesKind(i, *kind); });
      if (n) fails.push_back("expected no " + m[1].str() + ", found " + std::to_string(n));
    } else if (std::regex_search(l, m, at_least)) {
      auto kind = KindFromText(m[1].str());
      if (!kind) continue;
      ++*checks;
      bool found = std::any_of(c.all.begin(), c.all.end(), [&](const Instruction* i) { return MatchesKind(i, *kind); });
      if (!found) fails.push_back("expected at least one " + m[1].str());
    } else if (l.rfind("module contains NO collectives", 0) == 0) {
      ++*checks;
      int64_t n = std::count_if(c.all.begin(), c.all.end(), [](const Instruction* i) { return IsCollectiveKind(i->opcode()); });
      if (n) fails.push_back("expected no collectives, found " + std::to_string(n));
    } else if (l.rfind("ENTRY root matches: ", 0) == 0) {
      // The root's per-partition shape: the trailing " : shape" at nesting depth 0.
      const std::string expr = l.substr(20);
      int depth = 0;
      size_t last = std::string::npos;
      for (size_t i = 0; i < expr.size(); ++i) {
        char ch = expr[i];
        if (ch == '(' || ch == '[' || ch == '{') ++depth;
        else if (ch == ')' || ch == ']' || ch == '}') --depth;
        else if (depth == 0 && expr.compare(i, 3, " : ") == 0) last = i;
      }
      if (last == std::string::npos || !spmd.entry() || !spmd.entry()->root()) continue;
      auto shape = ParseShape(Trim(expr.substr(last + 3)));
      if (!shape.ok() || !shape->IsArray()) continue;
      ++*checks;
      if (!spmd.entry()->root()->shape().Compatible(*shape))
        fails.push_back("expected root shape " + shape->ToString(false) + ", found " +
                        spmd.entry()->root()->shape().ToString(false));
    }
  }
  return fails;
}

namespace {

std::string CategoryOf(const Module& m) {
  static const Opcode order[] = {Opcode::kConvolution, Opcode::kDot, Opcode::kGather, Opcode::kScatter,
                                 Opcode::kReduceWindow, Opcode::kSelectAndScatter, Opcode::kSort, Opcode::kWhile,
                                 Opcode::kConditional, Opcode::kReshape, Opcode::kTranspose, Opcode::kPad,
                                 Opcode::kSlice, Opcode::kConcatenate, Opcode::kDynamicSlice,
                                 Opcode::kDynamicUpdateSlice, Opcode::kReduce, Opcode::kBroadcast,
                                 Opcode::kCustomCall};
  for (Opcode op : order)
    for (const auto& c : m.computations())
      for (const auto& i : c->instructions())
        if (i->opcode() == op) return std::string(OpcodeName(op));
  return "elementwise/other";
}

}  // namespace

Result<SpmdConformanceSummary> RunSpmdConformance(const std::string& dir, std::ostream& out,
                                                  const SpmdConformanceOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error(dir + ": not a directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".notes") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  if (names.empty()) return Error(dir + ": no .notes files (expected NAME.hlo + NAME.notes cases)");
  SpmdConformanceSummary sum;
  std::map<std::string, std::pair<int64_t, int64_t>> by_kind;  // kind -> (supported cases, matched)
  for (const std::string& name : names) {
    SpmdCaseResult r;
    r.name = name;
    ++sum.total;
    std::string hlo, notes;
    if (!ReadText(dir + "/" + name + ".hlo", &hlo) || !ReadText(dir + "/" + name + ".notes", &notes)) {
      r.failures.push_back("cannot read case files");
      sum.cases.push_back(r);
      continue;
    }
    auto runs = ParseSpmdNotes(notes);
    const auto run_options = ParseRunOptions(notes);
    ParseOptions po;
    po.verify = false;
    auto parsed = ParseHloModule(hlo, dir + "/" + name + ".hlo", po);
    if (!parsed.ok()) {
      r.failures.push_back("parse: " + parsed.error().message);
      r.supported = false;
      sum.cases.push_back(r);
      continue;
    }
    r.parsed = true;
    ++sum.parsed;
    const Module& mod = **parsed;
    r.category = CategoryOf(mod);
    for (const auto& c : mod.computations())
      for (const auto& i : c->instructions())
        if (!HasSpmdHandler(i->opcode())) {
          std::string op = i->opcode_text();
          if (std::find(r.unsupported.begin(), r.unsupported.end(), op) == r.unsupported.end()) r.unsupported.push_back(op);
        }
    // Ops used only inside scalar reducers/comparators don't need handlers.
    r.unsupported.erase(std::remove_if(r.unsupported.begin(), r.unsupported.end(),
                                       [&](const std::string& op) {
                                         for (const auto& i : mod.entry()->instructions())
                                           if (i->opcode_text() == op) return false;
                                         return true;
                                       }),
                        r.unsupported.end());
    r.supported = r.unsupported.empty();
    for (const auto& op : r.unsupported) ++sum.unsupported_ops[op];
    bool all_ok = !runs.empty();
    bool all_partitioned = true;
    for (size_t ri = 0; ri < runs.size(); ++ri) {
      const SpmdExpectations& run = runs[ri];
      auto m = mod.Clone();
      if (run.run_propagation && options.propagate) {
        Status ps = options.propagate(*m);
        if (!ps.ok()) {
          r.failures.push_back("propagation: " + ps.error().message);
          all_ok = false;
          continue;
        }
      }
      SpmdOptions so;
      so.num_partitions = run.num_partitions;
      if (ri < run_options.size()) {
        Status os = ApplyRunOptions(run_options[ri], &so);
        if (!os.ok()) {
          r.failures.push_back("options: " + os.error().message);
          all_ok = all_partitioned = false;
          continue;
        }
      }
      auto part = PartitionModule(*m, so);
      if (!part.ok()) {
        r.failures.push_back("partition: " + part.error().message);
        all_ok = all_partitioned = false;
        continue;
      }
      int64_t checks = 0;
      auto fails = CheckSpmdExpectations(*part->module, run, &checks);
      // Numerical verification: the partitioned program must compute the same thing.
      int64_t largest = 0;
      bool unreduced = false;  // partial sums: the one-device reference has no meaning for them
      std::function<void(const HloSharding&)> scan = [&](const HloSharding& s) {
        if (s.kind() == HloSharding::Kind::kUnreduced) unreduced = true;
        for (auto t : s.subgroup_types()) unreduced |= t == HloSharding::SubgroupType::kUnreduced;
        for (const auto& e : s.tuple_elements()) scan(e);
      };
      for (const auto& c : m->computations())
        for (const auto& i : c->instructions()) {
          largest = std::max(largest, i->shape().ElementCount());
          if (i->has_sharding()) scan(*i->sharding());
        }
      (void)unreduced;  // the evaluator models unreduced inputs (device 0 holds the value)
      if (options.verify_max_elements > 0 && largest <= options.verify_max_elements && r.supported) {
        auto v = VerifyPartitioned(*m, *part->module, run.num_partitions, 7);
        if (!v.ok()) {
          r.failures.push_back("not verified numerically: " + v.error().message);
        } else {
          ++checks;
          r.verified = v->match && r.verified != 0 ? 1 : 0;
          if (!v->match) fails.push_back("numerical mismatch: max_abs_error " + std::to_string(v->max_abs_error));
        }
      }
      r.checks += checks;
      r.checks_held += checks - static_cast<int64_t>(fails.size());
      for (auto& f : fails) r.failures.push_back(f);
      if (!fails.empty()) all_ok = false;
    }
    r.partitioned = all_partitioned;
    if (all_partitioned) ++sum.partitioned;
    r.match = all_ok;
    if (r.verified >= 0) {
      ++sum.verified;
      if (r.verified == 0) ++sum.verify_mismatches;
    }
    if (r.match) ++sum.matched;
    if (r.supported) {
      ++sum.supported;
      ++by_kind[r.category].first;
      if (r.match) {
        ++sum.matched_supported;
        if (r.checks == 0) ++sum.matched_supported_without_checks;
        ++by_kind[r.category].second;
      }
    }
    if (!r.match || options.verbose) {
      for (const auto& f : r.failures) out << name << ": " << f << "\n";
      if (r.match) out << name << ": ok\n";
    }
    sum.cases.push_back(std::move(r));
  }
  out << "\nby op kind (cases whose ops are all supported):\n";
  out << "  " << std::left << std::setw(24) << "kind" << std::right << std::setw(8) << "cases" << std::setw(9)
      << "match\n";
  for (const auto& [kind, v] : by_kind)
    out << "  " << std::left << std::setw(24) << kind << std::right << std::setw(8) << v.first << std::setw(8)
        << v.second << "\n";
  out << "\nunsupported ops (cases using them, excluded from the rate):";
  if (sum.unsupported_ops.empty()) out << " none";
  out << "\n";
  for (const auto& [op, n] : sum.unsupported_ops) out << "  " << op << ": " << n << "\n";
  out << "\nnumerically verified " << sum.verified << " cases (" << sum.verify_mismatches << " mismatches); "
      << sum.matched_supported_without_checks << " matching cases had no checkable expectation at all\n";
  out << "parsed " << sum.parsed << "/" << sum.total << ", partitioned " << sum.partitioned << "/" << sum.total
      << ", matched " << sum.matched << "/" << sum.total << " overall\n";
  const double pct = sum.supported ? 100.0 * static_cast<double>(sum.matched_supported) / static_cast<double>(sum.supported) : 0.0;
  out << "spmd: " << sum.matched_supported << "/" << sum.supported << " cases match (" << std::fixed
      << std::setprecision(1) << pct << "%)\n";
  return sum;
}

}  // namespace shardscope
