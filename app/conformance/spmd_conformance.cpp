// The spmd kind of conformance case. See spmd_conformance.h.
#include "app/conformance/spmd_conformance.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>

#include "app/conformance/case_kinds.h"
#include "core/eval/numeric_verify.h"
#include "app/pipeline/partition.h"
#include "app/pipeline/propagate.h"
#include "core/ir/hlo_text.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope::conformance {

namespace {

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
    static const std::string kKey = "SpmdPartitionerOptions:", kArgs = "extra PartitionComputation args:";
    if (runs.empty()) continue;
    size_t skip = 0;
    if (t.rfind(kKey, 0) == 0) skip = kKey.size();
    else if (t.rfind(kArgs, 0) == 0) skip = kArgs.size();
    else continue;
    std::istringstream items(t.substr(skip));
    std::string item;
    while (std::getline(items, item, ',')) {
      item = Trim(item);
      const size_t eq = item.find('=');
      if (eq != std::string::npos) runs.back()[Trim(item.substr(0, eq))] = Trim(item.substr(eq + 1));
    }
  }
  return runs;
}

// Applies the options SpmdOptions models. The others (unrolled and bidirectional windowed einsum
// loops, gather/scatter method preferences, ...) choose between strategies the partitioner does not
// have; they are ignored, and the cases' expectations show what that costs.
Status ApplyRunOptions(const std::map<std::string, std::string>& opts, SpmdOptions* so) {
  for (const auto& [name, value] : opts) {
    if (name == "threshold_for_windowed_einsum_mib") {
      try {
        so->windowed_einsum_threshold_mib = std::stoll(value);
      } catch (...) {
        return Error("partitioner option " + name + "=" + value + " is not an integer");
      }
      continue;
    }
    if (name == "max_windowed_einsum_iteration") {
      if (value == "INT64_MAX") {
        so->windowed_einsum_max_iterations = std::numeric_limits<int64_t>::max();
        continue;
      }
      try {
        so->windowed_einsum_max_iterations = std::stoll(value);
      } catch (...) {
        return Error("partitioner option " + name + "=" + value + " is not an integer");
      }
      continue;
    }
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

std::vector<CheckResult> CheckSpmdExpectations(const Module& spmd, const SpmdExpectations& e) {
  std::vector<CheckResult> checks;
  const Census c = Collect(spmd);
  static const std::regex with_shape(R"(is ([a-z-]+) with per-partition result shape ([a-z0-9]+\[[0-9,]*\]))",
                                     std::regex::icase);
  static const std::regex no_shape(R"(is ([a-z-]+) \(shape not checked\))", std::regex::icase);
  static const std::regex exactly(R"(^exactly ([0-9]+) ([a-z-]+) instruction\(s\) in (entry|ENTRY))");
  static const std::regex none_of(R"(^NO ([a-z-]+) anywhere in the module)");
  static const std::regex at_least(R"(^at least one ([a-z-]+) in the module)");
  auto check = [&](std::string subject, std::string op_kind, std::string expected, std::string got, bool passed) {
    CheckResult r;
    r.subject = std::move(subject);
    r.op_kind = std::move(op_kind);
    r.expected = std::move(expected);
    r.got = std::move(got);
    r.passed = passed;
    checks.push_back(std::move(r));
  };
  auto count = [&](const std::vector<const Instruction*>& among, Opcode kind) {
    return static_cast<int64_t>(
        std::count_if(among.begin(), among.end(), [&](const Instruction* i) { return MatchesKind(i, kind); }));
  };
  for (const std::string& l : e.lines) {
    std::smatch m;
    if (std::regex_search(l, m, with_shape)) {
      auto kind = KindFromText(m[1].str());
      auto shape = ParseShape(m[2].str());
      if (!kind || !shape.ok()) continue;
      const bool found = std::any_of(c.all.begin(), c.all.end(), [&](const Instruction* i) {
        return MatchesKind(i, *kind) && MatchesShape(i, *kind, *shape);
      });
      const std::string want = "per-partition shape " + m[2].str();
      check(m[1].str(), m[1].str(), want, found ? want : "none with that shape", found);
    } else if (std::regex_search(l, m, no_shape)) {
      auto kind = KindFromText(m[1].str());
      if (!kind) continue;
      const int64_t n = count(c.all, *kind);
      check(m[1].str(), m[1].str(), "at least one", std::to_string(n), n > 0);
    } else if (std::regex_search(l, m, exactly)) {
      auto kind = KindFromText(m[2].str());
      if (!kind) continue;
      const int64_t want = std::stoll(m[1].str());
      const int64_t n = count(c.entry, *kind);
      check(m[2].str() + " in entry", m[2].str(), "exactly " + m[1].str(), std::to_string(n), n == want);
    } else if (std::regex_search(l, m, none_of)) {
      auto kind = KindFromText(m[1].str());
      if (!kind) continue;
      const int64_t n = count(c.all, *kind);
      check(m[1].str() + " anywhere", m[1].str(), "none", std::to_string(n), n == 0);
    } else if (std::regex_search(l, m, at_least)) {
      auto kind = KindFromText(m[1].str());
      if (!kind) continue;
      const int64_t n = count(c.all, *kind);
      check(m[1].str() + " anywhere", m[1].str(), "at least one", std::to_string(n), n > 0);
    } else if (l.rfind("module contains NO collectives", 0) == 0) {
      const int64_t n = std::count_if(c.all.begin(), c.all.end(), [](const Instruction* i) { return IsCollectiveKind(i->opcode()); });
      check("collectives", "collective", "none", std::to_string(n), n == 0);
    } else if (l.rfind("ENTRY root matches: ", 0) == 0) {
      // The root's per-partition shape: the trailing " : shape" at nesting depth 0.
      const std::string expr = l.substr(20);
      int depth = 0;
      size_t last = std::string::npos;
      for (size_t i = 0; i < expr.size(); ++i) {
        const char ch = expr[i];
        if (ch == '(' || ch == '[' || ch == '{') ++depth;
        else if (ch == ')' || ch == ']' || ch == '}') --depth;
        else if (depth == 0 && expr.compare(i, 3, " : ") == 0) last = i;
      }
      if (last == std::string::npos || !spmd.entry() || !spmd.entry()->root()) continue;
      auto shape = ParseShape(Trim(expr.substr(last + 3)));
      if (!shape.ok() || !shape->IsArray()) continue;
      const Instruction* root = spmd.entry()->root();
      check("ENTRY root", root->opcode_text(), "shape " + shape->ToString(false), "shape " + root->shape().ToString(false),
            root->shape().Compatible(*shape));
    }
  }
  return checks;
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

// The largest array of `m` (elements), for deciding whether to verify numerically.
int64_t LargestArray(const Module& m) {
  int64_t largest = 0;
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) largest = std::max(largest, i->shape().ElementCount());
  }
  return largest;
}

void RunCase(const CaseFiles& files, const ConformanceOptions& options, CaseResult* r, std::vector<CheckResult>* checks) {
  const std::string& name = files.name;
  std::string hlo, notes;
  if (!files.Read(".hlo", &hlo) || !files.Read(".notes", &notes)) {
    r->errors.push_back("cannot read " + files.Path(".hlo") + " and " + files.Path(".notes"));
    return;
  }
  const auto runs = ParseSpmdNotes(notes);
  const auto run_options = ParseRunOptions(notes);
  ParseOptions po;
  po.verify = false;
  auto parsed = ParseHloModule(hlo, files.Path(".hlo"), po);
  if (!parsed.ok()) {
    r->errors.push_back("parse: " + parsed.error().message);
    r->counted = false;
    return;
  }
  r->parsed = true;
  const Module& mod = **parsed;
  r->op_kind = CategoryOf(mod);
  // Ops without a dedicated handler; those used only inside scalar reducers/comparators need none.
  for (const auto& i : mod.entry()->instructions()) {
    if (HasSpmdHandler(*i)) continue;
    const std::string& op = i->opcode_text();
    if (std::find(r->unsupported.begin(), r->unsupported.end(), op) == r->unsupported.end()) r->unsupported.push_back(op);
  }
  if (runs.empty()) r->errors.push_back("no run block in " + name + ".notes");
  bool all_partitioned = true;
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const SpmdExpectations& run = runs[ri];
    auto m = mod.Clone();
    if (run.run_propagation) {
      auto propagated = pipeline::Propagate(*m, pipeline::StandardPropagationOptions(pipeline::EntryIo::kKeep));
      if (!propagated.ok()) {
        r->errors.push_back("propagation: " + propagated.error().message);
        continue;
      }
    }
    SpmdOptions so;
    so.num_partitions = run.num_partitions;
    // The windowed einsum threshold of the tests' partitioner: SpmdPartitionerOptions' default
    // (256 MiB); StatefulRngSpmdPartitioner's constructor default is 100000 MiB.
    so.windowed_einsum_threshold_mib = notes.find("StatefulRngSpmdPartitioner") != std::string::npos ? 100000 : 256;
    if (ri < run_options.size()) {
      Status os = ApplyRunOptions(run_options[ri], &so);
      if (!os.ok()) {
        r->errors.push_back("options: " + os.error().message);
        all_partitioned = false;
        continue;
      }
    }
    auto part = pipeline::Partition(*m, so);
    // A run that expects the partitioner to refuse the module (its status message containing a
    // text): the refusal is the result checked.
    std::optional<std::string> expected_error;
    for (const std::string& line : run.lines) {
      const std::string marker = "status().ToString() matches: HasSubstr(\"";
      const size_t at = line.find(marker);
      if (at == std::string::npos) continue;
      const size_t from = at + marker.size();
      const size_t to = line.find("\")", from);
      if (to != std::string::npos) expected_error = line.substr(from, to - from);
    }
    if (expected_error) {
      CheckResult c;
      c.case_name = name;
      c.subject = "partitioning";
      c.op_kind = "error";
      c.expected = "fails with \"" + *expected_error + "\"";
      c.got = part.ok() ? "partitioned" : "fails: " + part.error().message;
      c.passed = !part.ok() && part.error().message.find(*expected_error) != std::string::npos;
      checks->push_back(std::move(c));
      continue;
    }
    if (!part.ok()) {
      r->errors.push_back("partition: " + part.error().message);
      all_partitioned = false;
      continue;
    }
    for (CheckResult& c : CheckSpmdExpectations(*part->module, run)) {
      c.case_name = name;
      checks->push_back(std::move(c));
    }
    // Numerical verification: the partitioned program must compute the same thing. (Unreduced
    // inputs are modelled by the evaluator: device 0 holds the value.)
    if (options.verify_max_elements <= 0 || LargestArray(*m) > options.verify_max_elements || !r->unsupported.empty()) {
      continue;
    }
    if (auto why = WhyNotNumericallyVerifiable(*m)) {
      r->notes.push_back("not verified numerically: " + *why);
      continue;
    }
    auto v = VerifyPartitioned(*m, *part->module, run.num_partitions, 7);
    if (!v.ok()) {
      r->notes.push_back("not verified numerically: " + v.error().message);
      continue;
    }
    r->verified = v->match && r->verified != 0 ? 1 : 0;
    CheckResult c;
    c.case_name = name;
    c.subject = "numerical verification";
    c.op_kind = "verify";
    c.expected = "equal to the unpartitioned module";
    c.got = "max_abs_error " + std::to_string(v->max_abs_error);
    c.passed = v->match;
    checks->push_back(std::move(c));
  }
  r->partitioned = all_partitioned;
  r->counted = r->unsupported.empty();
}

}  // namespace

CaseKind SpmdCases() { return CaseKind{"spmd", {".notes"}, RateUnit::kCases, "cases match", /*partitions=*/true, &RunCase}; }

}  // namespace shardscope::conformance
