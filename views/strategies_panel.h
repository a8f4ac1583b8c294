// The Strategies panel: "how should I shard this model on this pod?" — the controls of a strategy
// search (chip, device count, the model's settings; Search, Cancel, a progress bar), the ranked
// candidates (step time, MFU, peak memory against HBM, communication and bubble shares, the
// collectives that dominate), a scatter plot of step time against peak memory (one series per
// strategy family, the HBM capacity as a line, the Pareto front), and two selected candidates side
// by side with the difference explained.
//
// Widgets only: the search, the ranking and the explanation are app/search's; the session's glue
// (app/gui/search_jobs.h) runs the search through the job tracker and hands the panel its results
// in the display terms below (views do not see app/). The panel asks through its signals: a search,
// a cancel, a candidate chosen (one row selected: it becomes the document), two compared.
#pragma once

#include <array>
#include <vector>

#include <QString>
#include <QStringList>
#include <QWidget>

class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QStandardItemModel;
class QTabWidget;
class QTableView;
class QTextBrowser;
class QScatterSeries;

namespace shardscope::views {

class ElidingLabel;

// One ranked candidate as the panel shows it.
struct StrategyEntry {
  QString label;        // "2D finalized on X=2,Y=4"
  QString family;
  QString outcome;      // "fits", "over HBM", "pruned: memory", ...
  QString collectives;  // the dominant collectives, or why it was left out
  double step_time_s = 0;  // simulated, else the bound
  double mfu = 0;
  double peak_bytes = 0;
  double communication_share = 0;
  double bubble_share = 0;
  bool simulated = false, fits = false, extrapolated = false, pareto = false;
};

// A simulated candidate on the scatter plot.
struct StrategyPoint {
  double step_time_s = 0, peak_bytes = 0;
  int family = 0;  // index into StrategyResults::families
  int row = 0;     // index into StrategyResults::rows
  bool pareto = false;
};

struct StrategyResults {
  QString summary;                   // the pod and what the search did
  std::vector<StrategyEntry> rows;   // ranked
  QStringList families;              // the series, in order of first appearance
  std::vector<StrategyPoint> points;
  std::vector<int> pareto;           // rows on the front, by ascending peak memory
  double hbm_bytes = 0;
};

// Two candidates side by side: (what, A, B) lines and the difference in words.
struct StrategyComparison {
  QString a_label, b_label;
  std::vector<std::array<QString, 3>> lines;
  QString explanation;
};

class StrategiesPanel : public QWidget {
  Q_OBJECT

 public:
  explicit StrategiesPanel(QWidget* parent = nullptr);

  // What a search would search: the model (with the settings a search starts from), or why the
  // document cannot be searched (`supported` false: Search is disabled and `message` says why).
  // What a search covers: a zoo model with its settings, or (takes_settings false) the document's
  // own module, described by `message` (the settings field is off).
  void setSubject(const QString& model, bool supported, const QString& message, bool takes_settings = true);
  void setChips(const QStringList& chips, const QString& current);
  QString chip() const;
  void setChip(const QString& chip);
  int devices() const;
  void setDevices(int devices);
  // The model's settings "k=v k=v" (the zoo's --set), empty: the defaults.
  QString settingsText() const;
  void setSettingsText(const QString& text);
  // The strategy families a search may use (names, and a sentence each for the tooltip), all checked;
  // the Families button's menu checks them on and off. selectedFamilies(): the checked ones, empty
  // when all are (the search's "every family"). Off while the subject takes no settings (method 2).
  void setFamilies(const QStringList& names, const QStringList& summaries);
  QStringList selectedFamilies() const;
  void setSelectedFamilies(const QStringList& names);  // empty: all
  QPushButton* familiesButton() const { return families_; }

  // ---- Set by the glue ----
  void setRunning(bool running);
  bool isRunning() const { return running_; }
  void setProgress(int done, int total, const QString& stage);
  void setResults(StrategyResults results);
  void setError(const QString& message);
  // One line unless `wrap` (errors, what cannot be searched); the whole text is its tooltip.
  void setStatus(const QString& text, bool wrap = false);
  void setComparison(const StrategyComparison& comparison);
  const StrategyResults& results() const { return results_; }

  // ---- For tests and the screenshot ----
  QTableView* table() const { return table_; }
  QChart* chart() const { return chart_; }
  // The chart's legend (rich text: a swatch and the name of every series).
  QLabel* legend() const { return legend_; }
  QProgressBar* progressBar() const { return progress_; }
  QPushButton* searchButton() const { return search_; }
  QPushButton* cancelButton() const { return cancel_; }
  QTextBrowser* comparisonView() const { return comparison_; }
  ElidingLabel* statusLabel() const { return status_; }
  // The rows selected, in the order they were selected.
  const std::vector<int>& selectedRows() const { return selection_order_; }
  // Selects exactly these rows (the first becomes the current one).
  void selectRows(const std::vector<int>& rows);

 public slots:
  // Asks for a search with the controls' values (the Search button).
  void startSearch();

 signals:
  // `families`: the families to search, empty for all.
  void searchRequested(const QString& chip, int devices, const QString& settings, const QStringList& families);
  void cancelRequested();
  void candidateChosen(int row);
  void comparisonRequested(int a, int b);
  // setResults showed new results.
  void resultsChanged();

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void onSelectionChanged();
  void rebuildChart();
  void updateSelectionMarks();
  void applyPalette();
  void updateFamiliesButton();

  QLabel* subject_;
  QLineEdit* settings_;
  QPushButton* families_;
  QComboBox* chip_;
  QSpinBox* devices_;
  QPushButton* search_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  ElidingLabel* status_;
  QStandardItemModel* model_;
  QTableView* table_;
  QChart* chart_;
  QChartView* chart_view_;
  QLabel* legend_;
  QScatterSeries* selected_series_ = nullptr;
  QTextBrowser* comparison_;
  QTabWidget* side_;  // the chart and the comparison
  StrategyResults results_;
  std::vector<int> selection_order_;
  bool running_ = false;
  bool supported_ = false;
  bool takes_settings_ = true;
  double time_scale_ = 1, bytes_scale_ = 1;  // chart units
};

}  // namespace shardscope::views
