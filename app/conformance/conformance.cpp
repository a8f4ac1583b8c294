// The conformance framework: case discovery, the kinds' table, tallies and the report. See
// conformance.h.
#include "app/conformance/conformance.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/conformance/case_kinds.h"

namespace shardscope::conformance {

namespace {

const std::vector<CaseKind>& Kinds() {
  static const std::vector<CaseKind> kinds = {PropagationCases(), SpmdCases(), DumpCases()};
  return kinds;
}

std::string Count(int64_t n) { return std::to_string(n); }

}  // namespace

bool CaseFiles::Read(std::string_view extension, std::string* text) const {
  std::ifstream in(Path(extension), std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return true;
}

std::vector<std::string> NonEmptyLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t t = line.find('\t', start);
    parts.push_back(line.substr(start, t == std::string::npos ? std::string::npos : t - start));
    if (t == std::string::npos) break;
    start = t + 1;
  }
  return parts;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b);
}

// ---- Report ----------------------------------------------------------------------------------------

std::string ConformanceReport::SummaryLine() const {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%s: %lld/%lld %s (%.1f%%)", kind.c_str(), static_cast<long long>(rate.passed),
                static_cast<long long>(rate.total), rate_phrase.c_str(), Rate());
  return buf;
}

void ConformanceReport::Finish() {
  rate = {};
  by_op_kind.clear();
  cases_by_kind.clear();
  unsupported_ops.clear();
  cases_parsed = cases_partitioned = cases_holding = 0;
  cases_verified = verify_mismatches = holding_without_checks = 0;
  for (const CaseResult& c : cases) {
    cases_parsed += c.parsed;
    cases_partitioned += c.partitioned;
    cases_holding += c.holds();
    if (c.holds() && c.checks == 0 && c.counted) ++holding_without_checks;
    if (c.verified >= 0) {
      ++cases_verified;
      verify_mismatches += c.verified == 0;
    }
    for (const auto& op : c.unsupported) ++unsupported_ops[op];
    if (unit == RateUnit::kCases && c.counted) {
      for (Tally* t : {&rate, &cases_by_kind[c.op_kind]}) {
        ++t->total;
        t->passed += c.holds();
      }
    }
  }
  for (const CheckResult& r : checks) {
    std::vector<Tally*> tallies = {&by_op_kind[r.op_kind]};
    if (unit == RateUnit::kChecks) tallies.push_back(&rate);
    for (Tally* t : tallies) {
      ++t->total;
      t->passed += r.passed;
    }
  }
}

std::string FormatReport(const ConformanceReport& report, bool verbose) {
  std::string out;
  for (const auto& c : report.checks) {
    if (c.passed) continue;
    out += "FAIL " + c.case_name + "  " + c.subject + "  expected " + c.expected + "  got " + c.got;
    if (!c.note.empty()) out += "  (" + c.note + ")";
    out += "\n";
  }
  const std::string held = "hold";
  for (const auto& c : report.cases) {
    for (const auto& e : c.errors) out += "ERROR " + c.name + ": " + e + "\n";
    if (!c.unsupported.empty()) {
      out += "UNSUPPORTED " + c.name + ":";
      for (const auto& u : c.unsupported) out += " " + u;
      out += " (" + Count(c.passed) + "/" + Count(c.checks) + " checks hold)\n";
    }
    if (!verbose) continue;
    for (const auto& n : c.notes) out += "NOTE " + c.name + ": " + n + "\n";
    if (c.holds()) out += "OK " + c.name + " (" + Count(c.passed) + "/" + Count(c.checks) + " checks hold)\n";
  }
  char buf[200];
  const bool by_case = report.unit == RateUnit::kCases;
  auto table = [&](const char* title, const char* what, const std::map<std::string, Tally>& rows) {
    out += title;
    std::snprintf(buf, sizeof(buf), "  %-26s %8s %8s %8s\n", "op", what, held.c_str(), "rate");
    out += buf;
    for (const auto& [kind, t] : rows) {
      std::snprintf(buf, sizeof(buf), "  %-26s %8lld %8lld %7.1f%%\n", kind.c_str(), static_cast<long long>(t.total),
                    static_cast<long long>(t.passed), t.Rate());
      out += buf;
    }
  };
  table(by_case ? "\nchecks by op kind:\n" : "\nby op kind:\n", "checks", report.by_op_kind);
  if (by_case) table("\ncases by kind (the cases the rate counts):\n", "cases", report.cases_by_kind);
  out += "\nunsupported ops (cases using them" + std::string(by_case ? ", excluded from the rate):" : "):");
  if (report.unsupported_ops.empty()) out += " none";
  out += "\n";
  for (const auto& [op, n] : report.unsupported_ops) out += "  " + op + ": " + Count(n) + "\n";
  out += "\n";
  if (report.cases_verified > 0) {
    out += "numerically verified " + Count(report.cases_verified) + " cases (" + Count(report.verify_mismatches) +
           " mismatches)\n";
  }
  if (report.holding_without_checks > 0) {
    out += Count(report.holding_without_checks) + " cases hold without any checkable expectation\n";
  }
  const int64_t n = static_cast<int64_t>(report.cases.size());
  out += "cases: " + Count(n) + ", parsed: " + Count(report.cases_parsed);
  if (report.partitions) out += ", partitioned: " + Count(report.cases_partitioned);
  out += ", holding every check: " + Count(report.cases_holding) + "\n";
  out += report.SummaryLine() + "\n";
  return out;
}

// ---- Running ---------------------------------------------------------------------------------------

std::vector<std::string> ConformanceKinds() {
  std::vector<std::string> names;
  for (const auto& k : Kinds()) names.push_back(k.name);
  return names;
}

Result<ConformanceReport> RunConformance(std::string_view kind_name, const std::string& dir,
                                         const ConformanceOptions& options) {
  const auto& kinds = Kinds();
  auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const CaseKind& k) { return k.name == kind_name; });
  if (kind == kinds.end()) {
    std::string known;
    for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k.name;
    return Error("unknown conformance kind '" + std::string(kind_name) + "' (known: " + known + ")");
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error("conformance directory not found: " + dir);
  std::vector<std::pair<std::string, std::string>> found;  // (name, file)
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() ||
        std::find(kind->case_extensions.begin(), kind->case_extensions.end(), ext) == kind->case_extensions.end()) {
      continue;
    }
    found.emplace_back(entry.path().stem().string(), entry.path().string());
  }
  if (ec) return Error("cannot list " + dir + ": " + ec.message());
  if (found.empty()) {
    std::string extensions;
    for (const auto& e : kind->case_extensions) extensions += (extensions.empty() ? "NAME" : " or NAME") + e;
    return Error(dir + ": no " + kind->name + " cases (expected " + extensions + " files)");
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.second < b.second; });

  ConformanceReport report;
  report.kind = kind->name;
  report.unit = kind->unit;
  report.partitions = kind->partitions;
  report.rate_phrase = kind->rate_phrase;
  for (const auto& [name, file] : found) {
    if (!options.filter.empty() && name.find(options.filter) == std::string::npos) continue;
    CaseResult c;
    c.name = name;
    const size_t first = report.checks.size();
    kind->run(CaseFiles{dir, name, file}, options, &c, &report.checks);
    for (size_t i = first; i < report.checks.size(); ++i) {
      ++c.checks;
      c.passed += report.checks[i].passed;
    }
    report.cases.push_back(std::move(c));
  }
  report.Finish();
  return report;
}

}  // namespace shardscope::conformance
