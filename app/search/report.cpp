#include "app/search/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/base/file_write.h"
#include "core/base/units.h"

namespace shardscope::search {

namespace {

// Display width of UTF-8 text (code points; our texts have no wide characters).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string Pad(const std::string& s, size_t w, bool right = false) {
  const size_t n = Width(s);
  if (n >= w) return s;
  return right ? std::string(w - n, ' ') + s : s + std::string(w - n, ' ');
}

std::string Table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned) {
  std::vector<size_t> widths;
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) {
      if (widths.size() <= c) widths.push_back(0);
      widths[c] = std::max(widths[c], Width(r[c]));
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const bool right = c < right_aligned.size() && right_aligned[c];
      line += (c ? "  " : "") + (c + 1 == r.size() && !right ? r[c] : Pad(r[c], widths[c], right));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string Count(double c) {
  const double r = std::round(c);
  std::ostringstream os;
  if (std::fabs(c - r) < 0.05) os << static_cast<int64_t>(r);
  else os << ThreeDigits(c);
  return os.str();
}

std::string Plural(const std::string& kind, double count) { return std::round(count) == 1 ? kind : kind + "s"; }

// "64 all-gathers of 96.0 MB (0.92 s)".
std::string CollectivePhrase(const CollectiveTotal& t) {
  const double per = t.count > 0 ? t.bytes / t.count : 0;
  return Count(t.count) + " " + Plural(t.kind, t.count) + " of " + FormatBytes(per) + " (" + FormatSeconds(t.time_s) + ")";
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string Real(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

std::string RankedTable(const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto, size_t max_rows) {
  const std::set<size_t> front(pareto.begin(), pareto.end());
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"#", "strategy", "step", "MFU", "peak / HBM", "comm", "exposed", "bubble", "dominant collectives"});
  size_t shown = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (max_rows && shown >= max_rows) break;
    const CandidateResult& r = ranked[i];
    std::string rank = std::to_string(i + 1) + (front.count(i) ? "*" : "");
    if (r.simulated()) {
      const std::string mem = FormatBytes(static_cast<double>(r.summary.peak_memory_bytes)) + " / " + FormatBytes(r.hbm_bytes) +
                              (r.fits() ? "" : " OVER");
      rows.push_back({rank, r.candidate.Label(), (r.extrapolated ? "~" : "") + FormatSeconds(r.summary.step_time_s),
                      FormatPercent(r.summary.mfu), mem, FormatPercent(r.communication_share()), FormatPercent(r.exposed_share()),
                      FormatPercent(r.candidate.bubble_fraction), r.DominantCollectives()});
    } else {
      rows.push_back({rank, r.candidate.Label(), "-", "-", "-", "-", "-", "-", std::string(OutcomeName(r.outcome)) + ": " + r.message});
    }
    ++shown;
  }
  std::string out = Table(rows, {false, false, true, true, true, true, true, true, false});
  if (max_rows && ranked.size() > shown) out += "... " + std::to_string(ranked.size() - shown) + " more (see the CSV)\n";
  out += "* on the Pareto front of step time vs peak memory; ~ extrapolated from smaller depths; comm: communication busy share "
         "of the step, exposed: the part not hidden behind compute\n";
  return out;
}

std::string ParetoText(const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto) {
  std::string out;
  size_t k = 0;
  for (size_t i : pareto) {
    const CandidateResult& r = ranked[i];
    out += std::to_string(++k) + ". " + r.candidate.Label() + ": " + FormatSeconds(r.summary.step_time_s) + ", " +
           FormatBytes(static_cast<double>(r.summary.peak_memory_bytes)) + " peak per device\n";
  }
  if (out.empty()) {
    const bool any = std::any_of(ranked.begin(), ranked.end(), [](const CandidateResult& r) { return r.simulated(); });
    out = any ? "(no candidate fits in HBM)\n" : "(no candidate was simulated: the reasons are in the table)\n";
  }
  return out;
}

std::string CsvText(const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto) {
  const std::set<size_t> front(pareto.begin(), pareto.end());
  std::string out =
      "rank,family,strategy,label,model,mesh,placement,chip,devices,slice,options,outcome,message,step_time_s,mfu,peak_memory_bytes,"
      "hbm_bytes,fits,compute_time_s,communication_time_s,exposed_communication_s,communication_share,bubble_fraction,"
      "bytes_communicated,bound_step_time_s,bound_memory_bytes,pareto,evaluation,dominant_collectives,run_id,key\n";
  for (size_t i = 0; i < ranked.size(); ++i) {
    const CandidateResult& r = ranked[i];
    const Candidate& c = r.candidate;
    std::string options;
    for (const auto& [k, v] : c.options) options += (options.empty() ? "" : ";") + k + "=" + v;
    if (!c.annotate.empty()) options += (options.empty() ? "" : ";") + std::string("annotate=") + c.annotate;
    const RunSummary& s = r.summary;
    const std::vector<std::string> fields = {
        std::to_string(i + 1), c.family, c.strategy, c.Label(), c.model, c.mesh, c.placement, c.chip, std::to_string(c.devices()),
        c.slice, options, std::string(OutcomeName(r.outcome)), r.message, Real(s.step_time_s), Real(s.mfu),
        std::to_string(s.peak_memory_bytes), Real(r.hbm_bytes), r.fits() ? "1" : "0", Real(s.compute_time_s),
        Real(s.communication_time_s), Real(s.exposed_communication_s), Real(r.communication_share()), Real(c.bubble_fraction),
        std::to_string(s.bytes_communicated), Real(r.bounds.step_time_s), std::to_string(r.bounds.memory_bytes),
        front.count(i) ? "1" : "0", r.evaluation, r.simulated() ? r.DominantCollectives(3) : "", std::to_string(r.run_id), c.Key()};
    for (size_t f = 0; f < fields.size(); ++f) {
      if (f) out += ',';
      out += CsvField(fields[f]);
    }
    out += "\n";
  }
  return out;
}

Status WriteCsv(const std::string& path, const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto) {
  return WriteFileAtomically(path, CsvText(ranked, pareto));  // whole or not at all (core/base/file_write.h)
}

std::string ExplainDifference(const CandidateResult& a, const CandidateResult& b) {
  if (!a.simulated() || !b.simulated()) return "both candidates must be simulated to be compared";
  const double ta = a.summary.step_time_s, tb = b.summary.step_time_s;
  std::ostringstream os;
  const std::string an = "A (" + a.candidate.Label() + ")", bn = "B (" + b.candidate.Label() + ")";
  if (ta <= 0 || tb <= 0) {
    os << "B takes " << FormatSeconds(tb) << " per step, A " << FormatSeconds(ta) << ".";
  } else if (std::fabs(tb - ta) <= 0.005 * ta) {
    os << "A and B take the same time per step (" << FormatSeconds(ta) << " vs " << FormatSeconds(tb) << ").";
  } else if (tb < ta) {
    os << "B is " << FormatPercent(1 - tb / ta) << " faster than A (" << FormatSeconds(tb) << " vs " << FormatSeconds(ta)
       << " per step).";
  } else {
    os << "B is " << FormatPercent(tb / ta - 1) << " slower than A (" << FormatSeconds(tb) << " vs " << FormatSeconds(ta)
       << " per step).";
  }
  // Collectives by kind.
  std::map<std::string, std::pair<CollectiveTotal, CollectiveTotal>> kinds;
  for (const CollectiveTotal& t : a.collectives) kinds[t.kind].first = t;
  for (const CollectiveTotal& t : b.collectives) kinds[t.kind].second = t;
  std::vector<const CollectiveTotal*> gone, added;
  struct Change {
    const CollectiveTotal* x;
    const CollectiveTotal* y;
    double delta;
  };
  std::vector<Change> changed;
  for (auto& [kind, xy] : kinds) {
    const bool in_a = xy.first.count > 0.5, in_b = xy.second.count > 0.5;
    if (in_a && !in_b) gone.push_back(&xy.first);
    else if (!in_a && in_b) added.push_back(&xy.second);
    else if (in_a && in_b && std::fabs(xy.second.time_s - xy.first.time_s) > 0.01 * std::max(ta, tb))
      changed.push_back({&xy.first, &xy.second, xy.second.time_s - xy.first.time_s});
  }
  auto by_time = [](const CollectiveTotal* x, const CollectiveTotal* y) { return x->time_s > y->time_s; };
  std::sort(gone.begin(), gone.end(), by_time);
  std::sort(added.begin(), added.end(), by_time);
  std::sort(changed.begin(), changed.end(), [](const Change& x, const Change& y) { return std::fabs(x.delta) > std::fabs(y.delta); });
  std::vector<std::string> parts;
  auto list = [](const std::vector<const CollectiveTotal*>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 3; ++i) s += (i ? (i + 1 == std::min<size_t>(v.size(), 3) ? " and " : ", ") : "") + CollectivePhrase(*v[i]);
    return s;
  };
  if (!gone.empty() && !added.empty()) parts.push_back("B replaces " + list(gone) + " by " + list(added));
  else if (!gone.empty()) parts.push_back("B has no " + list(gone));
  else if (!added.empty()) parts.push_back("B adds " + list(added));
  for (size_t i = 0; i < changed.size() && i < 2; ++i) {
    const Change& c = changed[i];
    parts.push_back("its " + c.y->kind + "s take " + FormatSeconds(c.y->time_s) + " instead of " + FormatSeconds(c.x->time_s) +
                    " (" + Count(c.y->count) + " of " + FormatBytes(c.y->count > 0 ? c.y->bytes / c.y->count : 0) + " vs " +
                    Count(c.x->count) + " of " + FormatBytes(c.x->count > 0 ? c.x->bytes / c.x->count : 0) + ")");
  }
  const double ca = a.summary.compute_time_s, cb = b.summary.compute_time_s;
  if (std::fabs(cb - ca) > 0.01 * std::max(ta, tb))
    parts.push_back("compute takes " + FormatSeconds(cb) + " instead of " + FormatSeconds(ca));
  const double ea = a.summary.exposed_communication_s, eb = b.summary.exposed_communication_s;
  if (std::fabs(eb - ea) > 0.01 * std::max(ta, tb))
    parts.push_back("communication not hidden behind compute: " + FormatSeconds(eb) + " instead of " + FormatSeconds(ea));
  if (std::fabs(b.candidate.bubble_fraction - a.candidate.bubble_fraction) > 0.005)
    parts.push_back("pipeline bubbles: " + FormatPercent(b.candidate.bubble_fraction) + " of the step instead of " +
                    FormatPercent(a.candidate.bubble_fraction));
  if (!parts.empty()) {
    os << " ";
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string p = parts[i];
      if (i == 0) p[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(p[0])));
      os << p << (i + 1 < parts.size() ? "; " : ".");
    }
  }
  const double ma = static_cast<double>(a.summary.peak_memory_bytes), mb = static_cast<double>(b.summary.peak_memory_bytes);
  os << " Peak memory per device: " << FormatBytes(mb) << " vs " << FormatBytes(ma);
  if (ma > 0 && std::fabs(mb - ma) > 0.005 * ma) os << " (" << (mb > ma ? "+" : "-") << FormatBytes(std::fabs(mb - ma)) << ")";
  os << (b.fits() ? "" : "; B does not fit in HBM") << (a.fits() ? "" : "; A does not fit in HBM") << ".";
  os << "\nA: " << an << "\nB: " << bn;
  return os.str();
}

Comparison CompareSideBySide(const CandidateResult& a, const CandidateResult& b) {
  Comparison c;
  c.a_label = a.candidate.Label();
  c.b_label = b.candidate.Label();
  auto add = [&](std::string what, std::string x, std::string y) { c.lines.push_back({std::move(what), std::move(x), std::move(y)}); };
  auto each = [&](const std::string& what, auto value) { add(what, value(a), value(b)); };
  auto sim = [](const CandidateResult& r, const std::string& text) { return r.simulated() ? text : std::string("-"); };
  each("strategy", [](const CandidateResult& r) { return r.candidate.strategy; });
  each("family", [](const CandidateResult& r) { return r.candidate.family; });
  each("mesh", [](const CandidateResult& r) {
    return r.candidate.mesh + (r.candidate.placement.empty() ? "" : " (placed " + r.candidate.placement + ")");
  });
  each("outcome", [](const CandidateResult& r) {
    if (r.simulated()) return std::string(r.fits() ? "fits in HBM" : "over HBM");
    return std::string(OutcomeName(r.outcome)) + (r.message.empty() ? "" : ": " + r.message);
  });
  each("step time", [&](const CandidateResult& r) {
    return sim(r, (r.extrapolated ? "~" : "") + FormatSeconds(r.summary.step_time_s));
  });
  each("MFU", [&](const CandidateResult& r) { return sim(r, FormatPercent(r.summary.mfu)); });
  each("peak memory / HBM", [&](const CandidateResult& r) {
    return sim(r, FormatBytes(static_cast<double>(r.summary.peak_memory_bytes)) + " / " + FormatBytes(r.hbm_bytes));
  });
  each("compute", [&](const CandidateResult& r) { return sim(r, FormatSeconds(r.summary.compute_time_s)); });
  each("communication (busy / exposed)", [&](const CandidateResult& r) {
    return sim(r, FormatPercent(r.communication_share()) + " / " + FormatPercent(r.exposed_share()));
  });
  each("pipeline bubbles", [&](const CandidateResult& r) { return sim(r, FormatPercent(r.candidate.bubble_fraction)); });
  // Collective kinds, the one taking most time (in either) first.
  std::map<std::string, double> longest;
  for (const CandidateResult* r : {&a, &b})
    for (const CollectiveTotal& t : r->collectives) longest[t.kind] = std::max(longest[t.kind], t.time_s);
  std::vector<std::pair<std::string, double>> kinds(longest.begin(), longest.end());
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  for (const auto& [kind, unused] : kinds) {
    (void)unused;
    auto phrase = [&, kind = kind](const CandidateResult& r) {
      if (!r.simulated()) return std::string("-");
      for (const CollectiveTotal& t : r.collectives)
        if (t.kind == kind && t.count > 0.5)
          return Count(t.count) + " \u00d7 " + FormatBytes(t.bytes / t.count) + " (" + FormatSeconds(t.time_s) + ")";
      return std::string("none");
    };
    add(kind + "s", phrase(a), phrase(b));
  }
  // The labels are fields of their own: the explanation without its "A: ..." / "B: ..." lines.
  c.explanation = ExplainDifference(a, b);
  c.explanation = c.explanation.substr(0, c.explanation.find('\n'));
  return c;
}

StrategyPanelModel StrategyPanelModel::FromResults(std::vector<CandidateResult> ranked, std::vector<size_t> pareto) {
  StrategyPanelModel m;
  m.pareto = pareto;
  const std::set<size_t> front(pareto.begin(), pareto.end());
  for (size_t i = 0; i < ranked.size(); ++i) {
    const CandidateResult& r = ranked[i];
    StrategyRow row;
    row.rank = i + 1;
    row.label = r.candidate.Label();
    row.family = r.candidate.family;
    row.outcome = r.simulated() ? (r.fits() ? "fits" : "over HBM") : std::string(OutcomeName(r.outcome));
    row.step_time_s = r.simulated() ? r.summary.step_time_s : r.bounds.step_time_s;
    row.mfu = r.summary.mfu;
    row.peak_bytes = static_cast<double>(r.simulated() ? r.summary.peak_memory_bytes : r.bounds.memory_bytes);
    row.communication_share = r.communication_share();
    row.bubble_share = r.candidate.bubble_fraction;
    row.collectives = r.simulated() ? r.DominantCollectives() : r.message;
    row.extrapolated = r.extrapolated;
    row.pareto = front.count(i) > 0;
    row.run_id = r.run_id;
    auto f = std::find(m.families.begin(), m.families.end(), row.family);
    const size_t family = static_cast<size_t>(f - m.families.begin());
    if (f == m.families.end()) m.families.push_back(row.family);
    if (r.hbm_bytes > 0) m.hbm_bytes = r.hbm_bytes;
    if (r.simulated()) m.points.push_back({row.step_time_s, row.peak_bytes, family, i, row.pareto, r.fits()});
    m.rows.push_back(std::move(row));
  }
  m.results = std::move(ranked);
  return m;
}

std::string StrategyPanelModel::Compare(size_t a, size_t b) const {
  if (a >= results.size() || b >= results.size()) return "choose two candidates of the table";
  return ExplainDifference(results[a], results[b]);
}

Comparison StrategyPanelModel::SideBySide(size_t a, size_t b) const {
  if (a >= results.size() || b >= results.size()) {
    Comparison c;
    c.explanation = "choose two candidates of the table";
    return c;
  }
  return CompareSideBySide(results[a], results[b]);
}

}  // namespace shardscope::search
