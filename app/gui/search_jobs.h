// The strategy search for the GUI: serves the Strategies panel (views/strategies_panel.h). A search
// of the document's zoo model (app/search RunSearch) runs on the job tracker's search lane with its
// progress shown and a Cancel; its ranked results, scatter points and comparisons come from
// search::StrategyPanelModel and go to the panel in its display terms. Choosing a candidate builds
// it off the GUI thread the way a zoo example is built (pipeline::BuildZooModel with the
// candidate's settings, then its annotation rule) and makes it the document — graph, mesh,
// partitioned program and instruction table follow — and simulates one step of it on its chip
// (the timeline follows). A document that is a module of its own (an HLO file, a project) is
// searched with method 2 (search::AutoShard: an integer program over its per-instruction
// shardings, each solution simulated); choosing a row makes that row's annotated module the
// document.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <QObject>
#include <QString>
#include <QStringList>

#include "views/job_tracker.h"

namespace shardscope {
class Module;
}

namespace shardscope::search {
struct StrategyPanelModel;
}

namespace shardscope::views {
class StrategiesPanel;
}

namespace shardscope::gui {

class Session;
struct SearchOutcome;  // a search job's result (search_jobs.cpp)

class SearchJobs : public QObject {
  Q_OBJECT

 public:
  SearchJobs(Session* session, views::StrategiesPanel* panel, QObject* parent = nullptr);
  ~SearchJobs() override;

  // The zoo model the document was built from ("" when it was not: an HLO file, a project).
  QString documentModel() const { return model_; }
  // True when the document is a module of its own (an HLO file, a project): a search solves the
  // strategy search's method 2, an integer program over its per-instruction shardings.
  bool searchesModule() const { return module_mode_; }
  // Starts a search of the document's model on `devices` of `chip` with the model settings
  // `settings` ("k=v k=v"); a running search is cancelled first. For a module of its own, method 2
  // on every mesh of the pod (settings do not apply). False (and the panel says why) when there
  // is no document or the settings do not parse. `families`: the strategy families to search
  // (empty: all; an unknown name is the search's error).
  bool start(const QString& chip, int devices, const QString& settings, const QStringList& families = {});
  // After a published configuration became the document (the Papers menu, --paper): the panel
  // offers its search — the column's chip, device count and model settings, the strategy choices
  // left to the search (search::SearchOfPaperColumn). False (nothing changed) when the document is
  // not that configuration's model or the column is not a zoo configuration.
  bool offerPaperSearch(const QString& case_name, const QString& column);
  void cancel();
  bool busy() const;
  // Makes ranked row `row` the document (in the background).
  void choose(int row);
  void compare(int a, int b);
  // The last search's results (null before the first).
  const search::StrategyPanelModel* results() const { return results_.get(); }
  // The row whose candidate the document shows (-1: none).
  int chosenRow() const { return chosen_row_; }

 signals:
  // Candidate `row` became the document.
  void candidateOpened(int row, const QString& label);

 private:
  void onModuleReset();
  bool startAutoSharding(const QString& chip, int devices);
  void searchCancelled();  // a search's job ended cancelled
  // A search's job ended: true with its results taken, false (the panel shows the error) without.
  bool searchFinished(const SearchOutcome& out);

  Session* session_;
  views::StrategiesPanel* panel_;
  std::shared_ptr<const search::StrategyPanelModel> results_;
  views::JobTracker::JobId search_job_ = 0;
  QString model_;  // the document's zoo model
  QString search_model_, search_settings_text_;  // of the last search (a chosen candidate's origin)
  QString sizes_settings_text_;  // what the simulated sizes last put in the settings field
  // The pod a paper configuration offered (offerPaperSearch): its slice and cores per chip apply
  // while the panel's chip and device count are still the ones offered.
  struct OfferedPod {
    QString chip;
    int devices = 0;
    std::string slice;
    int64_t cores_per_chip = 0;
  } offered_;
  bool loading_candidate_ = false;  // the next document is the chosen candidate
  bool module_mode_ = false;         // the document is a module of its own (method 2)
  bool search_module_mode_ = false;  // the last search was method 2
  // Method 2's results: the annotated module of each ranked row (null: no solution), and the
  // document's source it was searched from.
  std::vector<std::shared_ptr<const Module>> annotated_;
  QString search_source_kind_, search_source_;
  int chosen_row_ = -1;
  int pending_row_ = -1;
};

}  // namespace shardscope::gui
