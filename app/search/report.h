// What a search shows, as plain data and text: the ranked table, the Pareto front of step time vs
// peak memory, CSV, the comparison of two candidates with the difference explained ("B is 18%
// faster: it replaces 64 all-gathers of 96 MiB by 64 reduce-scatters of 48 MiB ..."), and the
// model behind the GUI's Strategies panel (rows, scatter points coloured by family, the HBM line),
// so the widget only draws it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/search/evaluate.h"
#include "app/search/search.h"
#include "core/base/status.h"

namespace shardscope::search {

// The ranked table, one row per candidate (at most `max_rows`; 0: all), with a legend line.
// Columns: rank, strategy, step time, MFU, peak memory / HBM, communication share (busy, and the
// part not hidden behind compute), bubble share, the collectives that dominate, and '~' for figures
// extrapolated from smaller depths.
std::string RankedTable(const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto, size_t max_rows = 0);
// The Pareto front, smallest memory first: "1. 2D finalized on X=32,Y=64: 4.81 s, 15.1 GB".
std::string ParetoText(const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto);
// One header line and one line per candidate (every outcome; RFC 4180 quoting).
std::string CsvText(const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto);
Status WriteCsv(const std::string& path, const std::vector<CandidateResult>& ranked, const std::vector<size_t>& pareto);

// Why `b` differs from `a`: the step time ratio, the collectives by kind that changed most (what
// one has that the other has not), compute, bubbles and peak memory. Both must be simulated.
std::string ExplainDifference(const CandidateResult& a, const CandidateResult& b);

// Two candidates side by side: one line per figure (strategy, mesh, step time, MFU, peak memory
// against HBM, compute, communication, bubbles, then one per collective kind either has, the one
// taking most time first) with A's and B's values as text, and ExplainDifference(a, b) without its
// closing "A: ..." / "B: ..." lines (the labels are fields). A candidate
// that was not simulated shows "-" and its outcome.
struct ComparisonLine {
  std::string what, a, b;
};
struct Comparison {
  std::string a_label, b_label;  // Candidate::Label
  std::vector<ComparisonLine> lines;
  std::string explanation;
};
Comparison CompareSideBySide(const CandidateResult& a, const CandidateResult& b);

// The Strategies panel's data.
struct StrategyRow {
  size_t rank = 0;          // 1-based, as ranked
  std::string label;        // Candidate::Label
  std::string family;
  std::string outcome;      // OutcomeName, or "fits" / "over HBM"
  double step_time_s = 0;   // simulated, else the bound
  double mfu = 0;
  double peak_bytes = 0;
  double communication_share = 0;
  double bubble_share = 0;
  std::string collectives;  // DominantCollectives
  bool extrapolated = false;
  bool pareto = false;
  int64_t run_id = 0;
};
struct ScatterPoint {
  double step_time_s = 0;
  double peak_bytes = 0;
  size_t family = 0;  // index into StrategyPanelModel::families (the colour)
  size_t row = 0;     // index into rows
  bool pareto = false;
  bool fits = false;
};
struct StrategyPanelModel {
  std::vector<StrategyRow> rows;
  std::vector<ScatterPoint> points;  // simulated candidates only
  std::vector<std::string> families; // in order of first appearance
  std::vector<size_t> pareto;        // rows, by ascending memory
  double hbm_bytes = 0;              // the horizontal line of the scatter plot
  std::vector<CandidateResult> results;  // as ranked (rows[i] is results[i])

  static StrategyPanelModel FromResults(std::vector<CandidateResult> ranked, std::vector<size_t> pareto);
  // ExplainDifference of rows a and b; a message when either was not simulated.
  std::string Compare(size_t a, size_t b) const;
  // CompareSideBySide of rows a and b; an empty comparison whose explanation says why when either
  // row does not exist.
  Comparison SideBySide(size_t a, size_t b) const;
};

}  // namespace shardscope::search
