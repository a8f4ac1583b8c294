// A mixed-integer linear program and its solver, behind a small interface: the rest of the project
// builds a MilpProblem (columns with bounds, costs and integrality; rows as sparse linear
// constraints) and gets back the column values. The solver is COIN-OR CBC (Debian
// coinor-libcbc-dev, its C interface); milp_solver.cpp is the only file that sees its API.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/base/cancellation.h"
#include "core/base/status.h"

namespace shardscope::search {

class MilpProblem {
 public:
  // Column index of a new variable (minimised: cost x value).
  int AddBinary(double cost);
  int AddContinuous(double lower, double upper, double cost);
  enum class Sense : char { kLessEqual = 'L', kGreaterEqual = 'G', kEqual = 'E' };
  // A row: sum(coefficient x column) `sense` rhs.
  void AddRow(const std::vector<std::pair<int, double>>& terms, Sense sense, double rhs);

  int num_columns() const { return static_cast<int>(cost_.size()); }
  int num_rows() const { return static_cast<int>(rhs_.size()); }
  int64_t num_nonzeros() const { return static_cast<int64_t>(row_terms_.size()); }
  int num_integers() const;

 private:
  friend class MilpSolverAccess;
  std::vector<double> cost_, lower_, upper_;
  std::vector<char> integer_;
  std::vector<int64_t> row_start_;  // into row_terms_; one past the last row at the end
  std::vector<std::pair<int, double>> row_terms_;
  std::vector<char> sense_;
  std::vector<double> rhs_;
};

struct MilpOptions {
  double time_limit_s = 120;  // then the best solution found, if any (status kFeasible)
  double relative_gap = 1e-6;
  int threads = 1;
};

struct MilpSolution {
  enum class Status : uint8_t {
    kOptimal,     // proven optimal (within relative_gap)
    kFeasible,    // stopped (time limit) with a solution that is not proven optimal
    kInfeasible,  // proven: no assignment satisfies the rows
    kNoSolution,  // stopped before any solution was found
  };
  Status status = Status::kNoSolution;
  double objective = 0;
  double best_bound = 0;  // the solver's lower bound on the optimum
  std::vector<double> values;  // per column (kOptimal / kFeasible)
  double seconds = 0;
  bool has_solution() const { return status == Status::kOptimal || status == Status::kFeasible; }
};
std::string MilpStatusName(MilpSolution::Status s);  // "optimal", "feasible (time limit)", ...

// "COIN-OR CBC 2.10.8"
std::string MilpSolverName();

// Error only when the solver cannot run (an empty or malformed problem); infeasibility is a status.
Result<MilpSolution> SolveMilp(const MilpProblem& problem, const MilpOptions& options = {});

}  // namespace shardscope::search
