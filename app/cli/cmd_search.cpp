// shardscope-cli search: which sharding strategy, for this model, on this pod (app/search).
//
//   search MODEL --chip CHIP --devices N [options]      the whole search in this process
//   search --paper CASE:COLUMN [options]                the search of a published configuration
//                                                       (a `reproduce` column): its model, sizes and pod
//   search FILE.hlo --chip CHIP --devices N [options]   method 2, the integer program over
//                                                       per-instruction shardings (any module;
//                                                       --method ilp on a zoo model too)
//   search plan MODEL --chip CHIP --devices N -o PLAN   the candidates worth evaluating, one JSON
//                                                       object per line (a sweep's task list)
//   search task PLAN [--index K] --db FILE              evaluates line K (1-based; default:
//                                                       $SLURM_ARRAY_TASK_ID) into its own store
//   search report DB... [--plan PLAN]                   ranks the search runs of merged stores;
//                                                       --plan lists the plan lines with no run
// docs/search.md has the sweep recipes (--jobs, GNU parallel, Slurm).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "app/cli/cli.h"
#include "app/cli/slice_options.h"
#include "app/search/auto_sharding.h"
#include "app/search/report.h"
#include "app/search/search.h"
#include "core/base/units.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/zoo.h"

namespace shardscope::cli {

using namespace shardscope::sim;
namespace {

constexpr const char* kName = "search";

// The options shared by `search MODEL` and `search plan MODEL`; the model is left in args.
// --paper CASE:COLUMN starts from a published configuration (search::SearchOfPaperColumn): its
// model, sizes and pod, which the other options then change; `from_paper` is set then.
int TakeSearchOptions(std::vector<std::string>& args, search::SearchOptions& o, bool* from_paper) {
  std::string v;
  *from_paper = TakeOption(args, "paper", &v);
  if (!*from_paper && std::find(args.begin(), args.end(), "--paper") != args.end())
    return UsageError(kName, "--paper takes CASE:COLUMN, a column of `reproduce` such as \"gspmd-table2:64B, 128 devices\"");
  if (*from_paper) {
    auto paper = search::SearchOfPaperColumn(v);
    if (!paper.ok()) return UsageError(kName, "--paper: " + paper.error().message);
    o = std::move(paper).value();
  }
  if (TakeOption(args, "chip", &v)) o.chip = v;
  if (TakeOption(args, "devices", &v)) {
    if (!ParseInt(v, 1, &o.devices)) return UsageError(kName, "--devices takes a positive integer");
  } else if (!*from_paper) {
    return UsageError(kName, "--devices N (a positive integer) is required");
  }
  if (TakeOption(args, "topology", &v)) o.slice = v;
  if (TakeOption(args, "cores-per-chip", &v) && !ParseInt(v, 1, &o.cores_per_chip))
    return UsageError(kName, "--cores-per-chip takes 1 or 2");
  while (TakeOption(args, "set", &v)) {
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0) return UsageError(kName, "--set expects KEY=VALUE, found '" + v + "'");
    o.settings[v.substr(0, eq)] = v.substr(eq + 1);
  }
  while (TakeOption(args, "family", &v)) {
    size_t start = 0;
    while (start <= v.size()) {
      size_t end = v.find(',', start);
      if (end == std::string::npos) end = v.size();
      if (end > start) o.families.push_back(v.substr(start, end - start));
      start = end + 1;
    }
  }
  while (TakeOption(args, "mesh", &v)) o.meshes.push_back(v);
  int64_t n = 0;
  if (TakeOption(args, "jobs", &v)) {
    if (!ParseInt(v, 1, &n)) return UsageError(kName, "--jobs takes a positive integer");
    o.jobs = static_cast<int>(n);
  }
  if (TakeOption(args, "confirm", &v)) {
    if (!ParseInt(v, 0, &n)) return UsageError(kName, "--confirm takes a non-negative integer");
    o.confirm = static_cast<int>(n);
  }
  if (TakeFlag(args, "exact")) o.evaluation.extrapolate = false;
  if (TakeFlag(args, "no-prune")) o.prune = false;
  return 0;
}

int CheckRest(const std::vector<std::string>& args, size_t positional, const std::string& what) {
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != positional) return UsageError(kName, "expected " + what + " (see --help)");
  return 0;
}

// The MODEL operand of `search` and `search plan`: required, or with --paper optional and then the
// column's own model.
int TakeModel(std::vector<std::string>& args, bool from_paper, const std::string& what, search::SearchOptions& o) {
  if (from_paper && args.size() == 1 && args[0].rfind("--", 0) != 0 && args[0] != o.model)
    return UsageError(kName, "--paper's configuration is a " + o.model + ", not " + args[0]);
  if (from_paper && args.size() == 1 && args[0] == o.model) args.clear();
  if (int rc = CheckRest(args, from_paper ? 0 : 1, from_paper ? std::string("no MODEL beside --paper") : what)) return rc;
  if (!from_paper) o.model = args[0];
  return 0;
}

void PrintLeftOut(const std::vector<search::CandidateResult>& left_out, std::ostream& os) {
  std::map<std::string, int64_t> counts;
  for (const auto& r : left_out) ++counts[std::string(search::OutcomeName(r.outcome))];
  for (const auto& [k, n] : counts) os << "  " << k << ": " << n << "\n";
}

bool IsZooModel(const std::string& name) {
  for (const ZooModel& m : ZooList())
    if (m.name == name) return true;
  return false;
}

// search FILE.hlo | search MODEL --method ilp: method 2, the integer program (auto_sharding.h).
// Says where the runs went and writes --csv; false (the error printed) when the CSV cannot be written.
bool ReportStoreAndCsv(bool have_db, const std::string& db, bool have_csv, const std::string& csv,
                       const std::vector<search::CandidateResult>& ranked, const std::vector<size_t>& pareto) {
  if (have_db) std::cout << "runs stored in " << db << "\n";
  if (!have_csv) return true;
  if (Status w = search::WriteCsv(csv, ranked, pareto); !w.ok()) {
    std::cerr << csv << ": error: " << w.error().message << "\n";
    return false;
  }
  std::cout << "csv: " << csv << "\n";
  return true;
}

// Opens --db's store into *out when one is given; false (the error printed) when it cannot be.
bool OpenStore(bool have_db, const std::string& db, std::shared_ptr<pipeline::RunDatabase>* out) {
  if (!have_db) return true;
  auto store = pipeline::RunDatabase::Open(db);
  if (!store.ok()) {
    std::cerr << db << ": error: " << store.error().message << "\n";
    return false;
  }
  *out = store.value();
  return true;
}

int RunAutoShardingCommand(const search::SearchOptions& o, const std::string& db, bool have_db, const std::string& csv,
                           bool have_csv, int64_t top, double time_limit_s, int64_t max_variables, bool annotate_all) {
  search::AutoShardingOptions ao;
  if (max_variables > 0) ao.max_variables = max_variables;
  ao.annotate_all = annotate_all;
  ao.meshes = o.meshes;
  ao.time_limit_s = time_limit_s;
  ao.evaluation = o.evaluation;
  std::unique_ptr<Module> module;
  if (IsZooModel(o.model)) {
    auto m = ZooBuild(o.model, o.settings);
    if (!m.ok()) {
      std::cerr << "shardscope-cli search: " << o.model << ": " << m.error().message << "\n";
      return 2;
    }
    module = std::move(m).value();
    ao.source.model = o.model;
    ao.source.settings = o.settings;
  } else {
    if (!o.settings.empty()) return UsageError(kName, "--set applies to zoo models, not to the HLO file " + o.model);
    std::string text;
    if (!ReadFile(o.model, &text)) return 2;
    auto m = ParseHloModule(text, o.model);
    if (!m.ok()) {
      std::cerr << o.model << ": error: " << m.error().message << "\n";
      return 2;
    }
    module = std::move(m).value();
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(o.model, ec);
    ao.source.model = module->name();
    ao.source.hlo_file = ec ? o.model : abs.lexically_normal().string();
    ao.source.hlo_hash = search::HloTextHash(text);
  }
  auto pod = search::MakePod(o.chip, o.devices, o.slice, o.cores_per_chip);
  if (!pod.ok()) {
    std::cerr << "shardscope-cli search: " << pod.error().message << "\n";
    return 2;
  }
  if (!OpenStore(have_db, db, &ao.store)) return 2;
  auto r = search::AutoShard(*module, pod.value(), ao);
  if (!r.ok()) {
    std::cerr << "shardscope-cli search: " << o.model << ": " << r.error().message << "\n";
    return 2;
  }
  const search::AutoShardingResult& s = r.value();
  std::cout << "pod: " << s.pod.Describe() << "\n";
  std::cout << (ao.source.hlo_file.empty() ? "model: " + o.model : "module: " + ao.source.model + " (" + ao.source.hlo_file + ")");
  for (const auto& [k, v] : o.settings) std::cout << " " << k << "=" << v;
  std::cout << "\nmethod: integer program over per-instruction shardings (" << s.plans.size() << " mesh"
            << (s.plans.size() == 1 ? "" : "es") << ")\n\n";
  for (const search::AutoShardingPlan& p : s.plans) std::cout << search::DescribePlan(p) << "\n\n";
  for (const auto& n : s.notes) std::cout << "note: " << n << "\n";
  std::cout << search::RankedTable(s.ranked, s.pareto, static_cast<size_t>(top));
  std::cout << "\nILP objective against the simulation:\n";
  for (const auto& [ri, pi] : s.plan_of_ranked) {
    const search::CandidateResult& c = s.ranked[ri];
    const search::AutoShardingPlan& p = s.plans[pi];
    std::cout << "  " << ri + 1 << ". " << c.candidate.Label() << ": objective " << FormatSeconds(p.objective_s) << ", simulated "
              << (c.simulated() ? FormatSeconds(c.summary.step_time_s) + " per step, peak " +
                                      FormatBytes(static_cast<double>(c.summary.peak_memory_bytes))
                                : std::string(search::OutcomeName(c.outcome)) + ": " + c.message)
              << "\n";
  }
  if (!s.ranked.empty() && s.ranked.front().fits()) {
    const search::CandidateResult& best = s.ranked.front();
    std::cout << "\nbest: " << best.candidate.Label() << " — " << FormatSeconds(best.summary.step_time_s) << " per step, MFU "
              << FormatPercent(best.summary.mfu) << ", " << FormatBytes(static_cast<double>(best.summary.peak_memory_bytes))
              << " of " << FormatBytes(best.hbm_bytes) << " HBM\n";
  }
  std::cout << "search time: " << FormatSeconds(s.wall_s) << " wall\n";
  if (!ReportStoreAndCsv(have_db, db, have_csv, csv, s.ranked, s.pareto)) return 2;
  return 0;
}

// search MODEL ...
int RunSearchCommand(std::vector<std::string> args) {
  search::SearchOptions o;
  bool from_paper = false;
  if (int rc = TakeSearchOptions(args, o, &from_paper)) return rc;
  std::string db, csv, top_text, method = "auto", limit_text;
  const bool have_db = TakeOption(args, "db", &db);
  const bool have_csv = TakeOption(args, "csv", &csv);
  int64_t top = 20;
  if (TakeOption(args, "top", &top_text) && !ParseInt(top_text, 0, &top)) return UsageError(kName, "--top takes a non-negative integer");
  const bool quiet = TakeFlag(args, "quiet");
  TakeOption(args, "method", &method);
  if (method != "auto" && method != "ilp" && method != "enumerate")
    return UsageError(kName, "--method takes enumerate (method 1, zoo models) or ilp (method 2, any module)");
  int64_t time_limit = 120;
  if (TakeOption(args, "time-limit", &limit_text) && !ParseInt(limit_text, 1, &time_limit))
    return UsageError(kName, "--time-limit takes a positive number of seconds");
  const bool annotate_all = TakeFlag(args, "annotate-all");
  int64_t max_variables = 0;
  if (TakeOption(args, "max-variables", &limit_text) && !ParseInt(limit_text, 1, &max_variables))
    return UsageError(kName, "--max-variables takes a positive integer");
  if (int rc = TakeModel(args, from_paper, "one MODEL of the zoo or an HLO file", o)) return rc;
  const bool zoo = IsZooModel(o.model);
  if (!zoo && !std::filesystem::exists(o.model)) {
    std::string models;
    for (const ZooModel& m : ZooList()) models += (models.empty() ? "" : ", ") + m.name;
    std::cerr << "shardscope-cli search: '" << o.model << "' is neither a model of the zoo (" << models
              << ") nor an HLO file\n";
    return 2;
  }
  if (method == "enumerate" && !zoo)
    return UsageError(kName, "'" + o.model + "' is not a model of the zoo: enumeration searches zoo models; --method ilp takes HLO files");
  if (method == "ilp" || !zoo)
    return RunAutoShardingCommand(o, db, have_db, csv, have_csv, top, static_cast<double>(time_limit), max_variables, annotate_all);
  if (!OpenStore(have_db, db, &o.store)) return 2;
  auto progress = [&](const search::SearchProgress& p) {
    if (quiet || !p.last) return;
    std::cerr << "\r[" << p.done << "/" << p.total << "] " << p.stage << ": " << p.last->candidate.Label() << "\033[K" << std::flush;
  };
  auto r = search::RunSearch(o, progress);
  if (!quiet) std::cerr << "\r\033[K";
  if (!r.ok()) {
    std::cerr << "shardscope-cli search: " << r.error().message << "\n";
    return 2;
  }
  const search::SearchResult& s = r.value();
  std::cout << "pod: " << s.pod.Describe() << "\n";
  std::cout << "model: " << o.model;
  for (const auto& [k, v] : o.settings) std::cout << " " << k << "=" << v;
  std::cout << "\n";
  const auto& st = s.stats;
  std::cout << "candidates: " << st.generated << " generated, " << st.simulated << " simulated (" << st.confirmed
            << " confirmed at full depth), " << st.pruned_memory << " pruned by the memory bound, " << st.pruned_bound
            << " by the step-time bound, " << st.invalid << " invalid, " << st.failed << " failed\n";
  for (const auto& n : s.notes) std::cout << "note: " << n << "\n";
  std::cout << "\n" << search::RankedTable(s.ranked, s.pareto, static_cast<size_t>(top));
  std::cout << "\nPareto front (step time vs peak memory, smallest memory first):\n" << search::ParetoText(s.ranked, s.pareto);
  if (!s.ranked.empty() && s.ranked.front().fits()) {
    const search::CandidateResult& best = s.ranked.front();
    std::cout << "\nbest: " << best.candidate.Label() << " — " << FormatSeconds(best.summary.step_time_s) << " per step, MFU "
              << FormatPercent(best.summary.mfu) << ", " << FormatBytes(static_cast<double>(best.summary.peak_memory_bytes))
              << " of " << FormatBytes(best.hbm_bytes) << " HBM (" << best.evaluation << ")\n";
    if (s.ranked.size() > 1 && s.ranked[1].simulated())
      std::cout << "runner-up compared (A = best, B = runner-up): " << search::ExplainDifference(best, s.ranked[1]) << "\n";
  }
  std::cout << "search time: " << FormatSeconds(st.wall_s) << " wall (" << FormatSeconds(st.cpu_s) << " CPU; prepare "
            << FormatSeconds(st.prepare_s) << ", evaluate " << FormatSeconds(st.evaluate_s) << ", confirm "
            << FormatSeconds(st.confirm_s) << ") on " << o.jobs << " thread" << (o.jobs == 1 ? "" : "s") << "\n";
  if (!ReportStoreAndCsv(have_db, db, have_csv, csv, s.ranked, s.pareto)) return 2;
  if (st.generated > 0 && st.invalid == st.generated && !s.ranked.empty()) {
    // Nothing could be built (a setting out of range for every candidate): an error, not an empty result.
    std::cerr << "shardscope-cli search: every candidate is invalid; the first: " << s.ranked.front().message << "\n";
    if (s.valid_at_fewer_devices)
      std::cerr << "shardscope-cli search: " << search::ValidAtFewerDevicesNote(o, *s.valid_at_fewer_devices) << "\n";
    return 2;
  }
  return s.cancelled ? 1 : 0;
}

// search plan MODEL ... -o PLAN
int RunPlan(std::vector<std::string> args) {
  search::SearchOptions o;
  bool from_paper = false;
  if (int rc = TakeSearchOptions(args, o, &from_paper)) return rc;
  std::string out;
  if (!TakeOption(args, "o", &out) && !TakeOption(args, "output", &out)) return UsageError(kName, "search plan needs -o PLAN.jsonl");
  const bool append = TakeFlag(args, "append");
  if (int rc = TakeModel(args, from_paper, "one MODEL of the zoo", o)) return rc;
  auto plan = search::PlanSearch(o);
  if (!plan.ok()) {
    std::cerr << "shardscope-cli search plan: " << plan.error().message << "\n";
    return 2;
  }
  std::string text;
  if (append) {
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  const size_t before = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  for (const auto& c : plan->candidates) text += c.ToJson() + "\n";
  if (!WriteFile(out, text)) return 2;
  std::cout << "pod: " << plan->pod.Describe() << "\n"
            << plan->generated << " candidates generated, " << plan->candidates.size() << " planned as tasks "
            << before + 1 << ".." << before + plan->candidates.size() << " of " << out << "; left out:\n";
  PrintLeftOut(plan->left_out, std::cout);
  for (const auto& n : plan->notes) std::cout << "note: " << n << "\n";
  return 0;
}

Result<std::vector<std::string>> ReadPlanLines(const std::string& path) {
  std::string text;
  if (!ReadFile(path, &text)) return Error("cannot read the plan '" + path + "'");
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// search task PLAN --index K --db FILE
int RunTask(std::vector<std::string> args) {
  std::string index_text, db;
  bool have_index = TakeOption(args, "index", &index_text);
  if (!have_index) {
    if (const char* env = std::getenv("SLURM_ARRAY_TASK_ID")) {
      index_text = env;
      have_index = true;
    }
  }
  if (!TakeOption(args, "db", &db)) return UsageError(kName, "search task needs --db FILE (the task's own store)");
  search::EvaluationOptions eo;
  if (TakeFlag(args, "exact")) eo.extrapolate = false;
  if (int rc = CheckRest(args, 1, "one PLAN file")) return rc;
  int64_t index = 0;
  if (!have_index || !ParseInt(index_text, 1, &index))
    return UsageError(kName, "search task needs --index K (1-based), or SLURM_ARRAY_TASK_ID in the environment");
  auto lines = ReadPlanLines(args[0]);
  if (!lines.ok()) {
    std::cerr << "shardscope-cli search task: " << lines.error().message << "\n";
    return 2;
  }
  if (index > static_cast<int64_t>(lines->size())) {
    std::cerr << "shardscope-cli search task: " << args[0] << " has " << lines->size() << " tasks, not " << index << "\n";
    return 2;
  }
  auto candidate = search::Candidate::FromJson((*lines)[static_cast<size_t>(index - 1)]);
  if (!candidate.ok()) {
    std::cerr << args[0] << ":" << index << ": error: " << candidate.error().message << "\n";
    return 2;
  }
  auto store = pipeline::RunDatabase::Open(db);
  if (!store.ok()) {
    std::cerr << db << ": error: " << store.error().message << "\n";
    return 2;
  }
  const search::CandidateResult r = search::EvaluateAndStore(candidate.value(), eo, store.value());
  std::cout << "task " << index << ": " << r.candidate.Label() << ": " << search::OutcomeName(r.outcome);
  if (r.simulated())
    std::cout << ", " << FormatSeconds(r.summary.step_time_s) << " per step, "
              << FormatBytes(static_cast<double>(r.summary.peak_memory_bytes)) << " peak; run " << r.run_id << " in " << db;
  else
    std::cout << ": " << r.message;
  std::cout << "\n";
  return r.outcome == search::Outcome::kFailed || r.outcome == search::Outcome::kCancelled ? 2 : 0;
}

// search report DB... [--plan PLAN] [--csv FILE] [--top N]
int RunReport(std::vector<std::string> args) {
  std::string plan_path, csv, top_text;
  const bool have_plan = TakeOption(args, "plan", &plan_path);
  const bool have_csv = TakeOption(args, "csv", &csv);
  int64_t top = 20;
  if (TakeOption(args, "top", &top_text) && !ParseInt(top_text, 0, &top)) return UsageError(kName, "--top takes a non-negative integer");
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.empty()) return UsageError(kName, "search report needs at least one store (DB.sqlite)");
  std::vector<search::CandidateResult> results;
  std::set<std::string> keys;
  int64_t other_runs = 0;
  for (const std::string& path : args) {
    auto store = RunStore::Open(path, RunStore::OpenMode::kOpenExisting);
    if (!store.ok()) {
      std::cerr << path << ": error: " << store.error().message << "\n";
      return 2;
    }
    auto runs = store->ListRuns();
    if (!runs.ok()) {
      std::cerr << path << ": error: " << runs.error().message << "\n";
      return 2;
    }
    for (const RunOverview& ov : *runs) {
      auto r = search::ResultFromRun(ov);
      if (!r.ok()) {
        ++other_runs;
        continue;
      }
      if (!keys.insert(r->candidate.Key()).second) continue;  // the same candidate in two stores
      results.push_back(std::move(r).value());
    }
  }
  auto pareto = search::RankResults(results);
  std::cout << results.size() << " search runs" << (other_runs ? " (" + std::to_string(other_runs) + " other runs ignored)" : "")
            << "\n\n"
            << search::RankedTable(results, pareto, static_cast<size_t>(top)) << "\nPareto front:\n"
            << search::ParetoText(results, pareto);
  if (have_csv) {
    if (Status w = search::WriteCsv(csv, results, pareto); !w.ok()) {
      std::cerr << csv << ": error: " << w.error().message << "\n";
      return 2;
    }
    std::cout << "csv: " << csv << "\n";
  }
  if (!have_plan) return 0;
  auto lines = ReadPlanLines(plan_path);
  if (!lines.ok()) {
    std::cerr << "shardscope-cli search report: " << lines.error().message << "\n";
    return 2;
  }
  std::vector<size_t> missing;
  for (size_t i = 0; i < lines->size(); ++i) {
    auto c = search::Candidate::FromJson((*lines)[i]);
    if (!c.ok() || !keys.count(c->Key())) missing.push_back(i + 1);
  }
  std::cout << "plan " << plan_path << ": " << lines->size() - missing.size() << " of " << lines->size() << " tasks have a run";
  if (missing.empty()) {
    std::cout << "\n";
    return 0;
  }
  std::cout << "; missing:";
  for (size_t i : missing) std::cout << " " << i;
  std::cout << "\n";
  return 1;
}

int Run(const std::vector<std::string>& in) {
  std::vector<std::string> args = in;
  if (!args.empty() && args[0] == "plan") return RunPlan({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "task") return RunTask({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "report") return RunReport({args.begin() + 1, args.end()});
  return RunSearchCommand(args);
}

const bool registered = Register(
    {kName,
     "MODEL|FILE.hlo --chip CHIP --devices N | --paper CASE:COLUMN [--method enumerate|ilp] [--time-limit S] [--max-variables N] [--annotate-all] [--topology 4x8x8] [--cores-per-chip K] [--set K=V ...] [--family F,...] [--mesh X=8,Y=16 ...] [--jobs K] "
     "[--db FILE] [--csv FILE] [--top N] [--exact] [--no-prune] [--confirm K] [--quiet] | plan MODEL ... -o PLAN [--append] | "
     "task PLAN [--index K] --db FILE [--exact] | report DB... [--plan PLAN] [--csv FILE] [--top N]",
     "Search the sharding strategies of a zoo model (enumeration) or any HLO module (integer program, --method ilp) on a pod: ranked table, Pareto front, runs stored; plan/task/report for sweeps",
     &Run});

}  // namespace
}  // namespace shardscope::cli
