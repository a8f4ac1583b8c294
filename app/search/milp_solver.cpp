#include "app/search/milp_solver.h"

#include <cfloat>
#include <chrono>
#include <cmath>
#include <string>

#include <Cbc_C_Interface.h>

namespace shardscope::search {

int MilpProblem::AddBinary(double cost) {
  cost_.push_back(cost);
  lower_.push_back(0);
  upper_.push_back(1);
  integer_.push_back(1);
  return num_columns() - 1;
}

int MilpProblem::AddContinuous(double lower, double upper, double cost) {
  cost_.push_back(cost);
  lower_.push_back(lower);
  upper_.push_back(upper);
  integer_.push_back(0);
  return num_columns() - 1;
}

void MilpProblem::AddRow(const std::vector<std::pair<int, double>>& terms, Sense sense, double rhs) {
  if (row_start_.empty()) row_start_.push_back(0);
  for (const auto& t : terms) row_terms_.push_back(t);
  row_start_.push_back(static_cast<int64_t>(row_terms_.size()));
  sense_.push_back(static_cast<char>(sense));
  rhs_.push_back(rhs);
}

int MilpProblem::num_integers() const {
  int n = 0;
  for (char c : integer_) n += c ? 1 : 0;
  return n;
}

std::string MilpStatusName(MilpSolution::Status s) {
  switch (s) {
    case MilpSolution::Status::kOptimal: return "optimal";
    case MilpSolution::Status::kFeasible: return "feasible (stopped at the time limit, not proven optimal)";
    case MilpSolution::Status::kInfeasible: return "infeasible";
    case MilpSolution::Status::kNoSolution: return "no solution found within the time limit";
  }
  return "unknown";
}

std::string MilpSolverName() { return std::string("COIN-OR CBC ") + Cbc_getVersion(); }

class MilpSolverAccess {
 public:
  static Result<MilpSolution> Solve(const MilpProblem& p, const MilpOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    const int n = p.num_columns();
    if (n == 0) return Error("the integer program has no variables");
    // Column-major copy of the rows (CBC's loadProblem takes compressed sparse columns).
    std::vector<CoinBigIndex> start(static_cast<size_t>(n) + 1, 0);
    for (const auto& [col, coef] : p.row_terms_) {
      if (col < 0 || col >= n) return Error("the integer program refers to column " + std::to_string(col) + " of " + std::to_string(n));
      ++start[static_cast<size_t>(col) + 1];
    }
    for (int c = 0; c < n; ++c) start[static_cast<size_t>(c) + 1] += start[static_cast<size_t>(c)];
    std::vector<int> index(p.row_terms_.size());
    std::vector<double> value(p.row_terms_.size());
    std::vector<CoinBigIndex> fill(start.begin(), start.end() - 1);
    const int m = p.num_rows();
    std::vector<double> row_lower(static_cast<size_t>(m)), row_upper(static_cast<size_t>(m));
    for (int r = 0; r < m; ++r) {
      for (int64_t k = p.row_start_[static_cast<size_t>(r)]; k < p.row_start_[static_cast<size_t>(r) + 1]; ++k) {
        const auto& [col, coef] = p.row_terms_[static_cast<size_t>(k)];
        const auto at = static_cast<size_t>(fill[static_cast<size_t>(col)]++);
        index[at] = r;
        value[at] = coef;
      }
      const double rhs = p.rhs_[static_cast<size_t>(r)];
      const char sense = p.sense_[static_cast<size_t>(r)];
      row_lower[static_cast<size_t>(r)] = sense == 'L' ? -DBL_MAX : rhs;
      row_upper[static_cast<size_t>(r)] = sense == 'G' ? DBL_MAX : rhs;
    }
    Cbc_Model* model = Cbc_newModel();
    Cbc_loadProblem(model, n, m, start.data(), index.data(), value.data(), p.lower_.data(), p.upper_.data(), p.cost_.data(),
                    row_lower.data(), row_upper.data());
    for (int c = 0; c < n; ++c)
      if (p.integer_[static_cast<size_t>(c)]) Cbc_setInteger(model, c);
    Cbc_setObjSense(model, 1);
    Cbc_setLogLevel(model, 0);
    Cbc_setMaximumSeconds(model, options.time_limit_s);
    Cbc_setAllowableFractionGap(model, options.relative_gap);
    if (options.threads > 1) Cbc_setParameter(model, "threads", std::to_string(options.threads).c_str());
    Cbc_solve(model);
    MilpSolution s;
    const double* x = Cbc_getColSolution(model);
    const bool have = x && Cbc_numberSavedSolutions(model) > 0;
    if (Cbc_isProvenOptimal(model) && have) s.status = MilpSolution::Status::kOptimal;
    else if (Cbc_isProvenInfeasible(model)) s.status = MilpSolution::Status::kInfeasible;
    else if (have) s.status = MilpSolution::Status::kFeasible;
    else s.status = MilpSolution::Status::kNoSolution;
    if (s.has_solution()) {
      s.values.assign(x, x + n);
      s.objective = Cbc_getObjValue(model);
    }
    s.best_bound = Cbc_getBestPossibleObjValue(model);
    Cbc_deleteModel(model);
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }
};

Result<MilpSolution> SolveMilp(const MilpProblem& problem, const MilpOptions& options) {
  return MilpSolverAccess::Solve(problem, options);
}

}  // namespace shardscope::search
