// shardscope-cli runs: the SQLite run stores.
//
//   runs merge OUT.sqlite IN.sqlite...   copies every run of the inputs into OUT (created when
//                                        missing); a run whose key OUT already holds replaces it,
//                                        so merging again, or after a task was re-run, duplicates
//                                        nothing (RunStore::MergeFrom)
//   runs list DB                         one line per run
//   runs open DB ID [-o FILE.hlo]        re-opens a search candidate: its model rebuilt from the
//                                        run's settings with its annotations, as HLO text
//   runs compare DB A B                  two runs side by side; for search runs, the difference
//                                        explained
#include <iostream>

#include "app/cli/cli.h"
#include "app/cli/slice_options.h"
#include "app/pipeline/simulate.h"
#include "app/search/report.h"
#include "core/base/units.h"
#include "core/ir/hlo_text.h"

namespace shardscope::cli {

using namespace shardscope::sim;
namespace {

constexpr const char* kName = "runs";

int Merge(const std::vector<std::string>& args) {
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() < 2) return UsageError(kName, "usage: runs merge OUT.sqlite IN.sqlite...");
  auto out = pipeline::RunDatabase::Open(args[0]);
  if (!out.ok()) {
    std::cerr << args[0] << ": error: " << out.error().message << "\n";
    return 2;
  }
  MergeReport total;
  int failures = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    auto r = (*out)->MergeFrom(args[i]);
    if (!r.ok()) {
      std::cerr << args[i] << ": error: " << r.error().message << "\n";
      ++failures;
      continue;
    }
    total.runs_read += r->runs_read;
    total.added += r->added;
    total.replaced += r->replaced;
  }
  auto list = (*out)->List();
  std::cout << "merged " << args.size() - 1 - static_cast<size_t>(failures) << " of " << args.size() - 1 << " stores into "
            << args[0] << ": " << total.runs_read << " runs read, " << total.added << " added, " << total.replaced
            << " replaced; " << (list.ok() ? list->size() : 0) << " runs in " << args[0] << "\n";
  return failures ? 1 : 0;
}

int List(const std::vector<std::string>& args) {
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != 1) return UsageError(kName, "usage: runs list DB.sqlite");
  auto store = RunStore::Open(args[0], RunStore::OpenMode::kOpenExisting);
  if (!store.ok()) {
    std::cerr << args[0] << ": error: " << store.error().message << "\n";
    return 2;
  }
  auto runs = store->ListRuns();
  if (!runs.ok()) {
    std::cerr << args[0] << ": error: " << runs.error().message << "\n";
    return 2;
  }
  for (const RunOverview& r : *runs) {
    std::cout << r.id << "\t" << FormatSeconds(r.summary.step_time_s) << "\t"
              << FormatBytes(static_cast<double>(r.summary.peak_memory_bytes)) << "\t" << r.inputs.chip_preset << " "
              << r.inputs.mesh_text << "\t" << (r.label.empty() ? r.inputs.module_name : r.label)
              << (r.key.empty() ? "" : "\t" + r.key) << "\n";
  }
  return 0;
}

bool ParseId(const std::string& text, int64_t* id) { return ParseInt(text, 1, id); }

int Open(std::vector<std::string> args) {
  std::string out = "-";
  TakeOption(args, "o", &out);
  int64_t id = 0;
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != 2 || !ParseId(args[1], &id)) return UsageError(kName, "usage: runs open DB.sqlite RUN_ID [-o FILE.hlo]");
  auto store = RunStore::Open(args[0], RunStore::OpenMode::kOpenExisting);
  if (!store.ok()) {
    std::cerr << args[0] << ": error: " << store.error().message << "\n";
    return 2;
  }
  auto run = store->LoadRun(id, LoadDetail::kSummaryOnly);
  if (!run.ok()) {
    std::cerr << args[0] << ": error: " << run.error().message << "\n";
    return 2;
  }
  auto full = store->LoadRun(id, LoadDetail::kFull);
  const search::Settings annotations = full.ok() ? full->annotations : search::Settings{};
  auto module = search::ReopenCandidate(run->inputs.settings, annotations);
  if (!module.ok()) {
    std::cerr << args[0] << ": run " << id << ": error: " << module.error().message << "\n";
    return 2;
  }
  if (!WriteFile(out, PrintHloModule(**module))) return 2;
  if (out != "-")
    std::cerr << "wrote " << out << ": " << run->label << " (" << (*module)->instruction_count() << " instructions, "
              << (annotations.empty() ? "annotations rebuilt from the run's settings" : std::to_string(annotations.size()) + " stored annotations")
              << ")\n";
  // How to simulate it on the pod it was ranked on (its slice, cores per chip and mesh order).
  if (auto c = search::Candidate::FromSettings(run->inputs.settings); c.ok() && out != "-" && !c->chip.empty()) {
    std::string cmd = "shardscope-cli simulate " + out + " --chip " + c->chip + " --mesh " + c->mesh;
    if (!c->slice.empty()) cmd += " --topology " + c->slice;
    cmd += " --cores-per-chip " + std::to_string(c->cores_per_chip);
    if (!c->placement.empty()) cmd += " --mesh-order " + c->placement;
    if (c->OptionOn("weight_update_sharding")) cmd += " --weight-update-sharding";
    std::cerr << "simulate it on the pod it was ranked on: " << cmd << "\n";
  }
  return 0;
}

int Compare(const std::vector<std::string>& args) {
  int64_t a = 0, b = 0;
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != 3 || !ParseId(args[1], &a) || !ParseId(args[2], &b))
    return UsageError(kName, "usage: runs compare DB.sqlite RUN_A RUN_B");
  auto store = RunStore::Open(args[0], RunStore::OpenMode::kOpenExisting);
  if (!store.ok()) {
    std::cerr << args[0] << ": error: " << store.error().message << "\n";
    return 2;
  }
  auto c = store->CompareRuns(a, b);
  if (!c.ok()) {
    std::cerr << args[0] << ": error: " << c.error().message << "\n";
    return 2;
  }
  for (const ComparedFigure& f : c->figures) {
    auto fmt = [&](double v) {
      return f.unit == "s" ? FormatSeconds(v) : f.unit == "bytes" ? FormatBytes(v) : FormatPercent(v);
    };
    std::cout << f.name << ": " << fmt(f.a) << " -> " << fmt(f.b) << "\n";
  }
  auto ra = search::ResultFromRun(c->a), rb = search::ResultFromRun(c->b);
  if (ra.ok() && rb.ok()) std::cout << search::ExplainDifference(ra.value(), rb.value()) << "\n";
  return 0;
}

int Run(const std::vector<std::string>& args) {
  if (args.empty()) return UsageError(kName, "expected merge, list, open or compare (see --help)");
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "merge") return Merge(rest);
  if (args[0] == "list") return List(rest);
  if (args[0] == "open") return Open(rest);
  if (args[0] == "compare") return Compare(rest);
  return UsageError(kName, "unknown action '" + args[0] + "' (expected merge, list, open or compare)");
}

const bool registered = Register({kName,
                                  "merge OUT.sqlite IN.sqlite... | list DB | open DB RUN_ID [-o FILE.hlo] | compare DB RUN_A RUN_B",
                                  "Run stores: merge sweep results (idempotent), list, re-open a search candidate, compare two runs",
                                  &Run});

}  // namespace
}  // namespace shardscope::cli
