#include "views/strategies_panel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <QAction>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QMenu>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QTextBrowser>
#include <QValueAxis>
#include <QVBoxLayout>

#include "core/base/units.h"
#include "views/narrow_layout.h"
#include "views/sharding_style.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

// One colour per strategy family (the scatter plot's series and the table's family column).
QColor FamilyColor(int index, bool dark) {
  static const char* kLight[] = {"#1f77b4", "#e8710a", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2"};
  static const char* kDark[] = {"#6baed6", "#fdae6b", "#74c476", "#bcbddc", "#66e0ee", "#c49c94", "#f7b6d2"};
  const int n = static_cast<int>(std::size(kLight));
  return QColor(dark ? kDark[index % n] : kLight[index % n]);
}

enum Column { kRank, kStrategy, kFamily, kStep, kMfu, kMemory, kComm, kBubble, kCollectives, kColumns };

}  // namespace

StrategiesPanel::StrategiesPanel(QWidget* parent) : QWidget(parent) {
  setObjectName("strategiesPanel");
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(4, 4, 4, 4);
  col->setSpacing(4);

  // One row: the model and its settings, the pod, Search and Cancel, the progress.
  auto* row = new QHBoxLayout;
  row->setSpacing(4);
  subject_ = new QLabel;
  subject_->setObjectName("strategiesSubject");
  subject_->setTextFormat(Qt::PlainText);
  subject_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  settings_ = new QLineEdit;
  settings_->setObjectName("strategiesSettings");
  settings_->setPlaceholderText("settings: layers=4 batch=64 \u2026");
  settings_->setClearButtonEnabled(true);
  settings_->setMinimumWidth(90);
  // The field is narrow beside the pod's controls: its tooltip reads the whole text.
  auto settings_tip = [this] {
    const QString what = "The zoo model's settings the search starts from, as the CLI's --set k=v (space separated; "
                         "empty: the model's defaults)";
    const QString text = settings_->text().trimmed();
    settings_->setToolTip(text.isEmpty() ? what : what + ":\n" + text.split(' ', Qt::SkipEmptyParts).join('\n'));
  };
  settings_tip();
  connect(settings_, &QLineEdit::textChanged, this, settings_tip);
  families_ = new QPushButton;  // a push button's menu indicator is inside its size hint
  families_->setObjectName("strategiesFamilies");
  families_->setMenu(new QMenu(families_));
  families_->setEnabled(false);
  families_->setSizePolicy(QSizePolicy::Minimum, QSizePolicy::Preferred);  // never clipped: the settings field gives way
  chip_ = new QComboBox;
  chip_->setObjectName("strategiesChip");
  chip_->setToolTip("The chip of the pod searched");
  devices_ = new QSpinBox;
  devices_->setObjectName("strategiesDevices");
  devices_->setRange(1, 8192);
  devices_->setValue(8);
  devices_->setSuffix(" devices");
  devices_->setToolTip("Devices in the pod: the search factorises them into mesh axes");
  search_ = new QPushButton("Search");
  search_->setObjectName("strategiesSearch");
  search_->setToolTip("Search the strategies of this model on this pod (in the background)");
  cancel_ = new QPushButton("Cancel");
  cancel_->setObjectName("strategiesCancel");
  cancel_->setEnabled(false);
  progress_ = new QProgressBar;
  progress_->setObjectName("strategiesProgress");
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setTextVisible(true);
  progress_->setFormat("");
  // Short texts ("12/29" while it runs, the stage in the tooltip; "29 done" after) that fit
  // the bar at its minimum width: a longer one wraps inside the bar in a narrow window.
  progress_->setMinimumWidth(progress_->fontMetrics().horizontalAdvance("9999 done") + 24);
  row->addWidget(subject_);
  row->addWidget(settings_, 3);
  row->addWidget(families_);
  row->addWidget(chip_);
  row->addWidget(devices_);
  row->addWidget(search_);
  row->addWidget(cancel_);
  row->addWidget(progress_, 2);
  col->addLayout(row);

  status_ = new ElidingLabel;
  status_->setObjectName("strategiesStatus");
  status_->setWordWrap(false);  // one line, elided (the whole text in its tooltip); errors wrap
  col->addWidget(status_);

  // The table (with the comparison under it) beside the chart.
  model_ = new QStandardItemModel(0, kColumns, this);
  model_->setHorizontalHeaderLabels(
      {"#", "strategy", "family", "step", "MFU", "peak / HBM", "comm", "bubble", "dominant collectives"});
  model_->horizontalHeaderItem(kRank)->setToolTip("Rank by step time; * on the Pareto front of step time vs peak memory");
  model_->horizontalHeaderItem(kStep)->setToolTip("Simulated step time (~ extrapolated from smaller depths; for a "
                                                  "candidate left out: its lower bound)");
  model_->horizontalHeaderItem(kComm)->setToolTip("Communication busy share of the step");
  model_->horizontalHeaderItem(kBubble)->setToolTip("Pipeline bubble share of the step");
  table_ = new QTableView;
  table_->setObjectName("strategiesTable");
  table_->setModel(model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setAlternatingRowColors(true);
  table_->setWordWrap(false);
  table_->setMinimumHeight(50);
  table_->setToolTip("Select a candidate to open it; select two (Ctrl+click) to compare them");
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &StrategiesPanel::onSelectionChanged);

  comparison_ = new QTextBrowser;
  comparison_->setObjectName("strategiesComparison");
  comparison_->setOpenLinks(false);
  comparison_->setMinimumSize(120, 40);
  comparison_->setPlaceholderText("Select two candidates (Ctrl+click) to compare them side by side.");

  chart_ = new QChart;
  chart_->legend()->hide();  // a label below wraps where a narrow chart's legend would clip
  chart_->setMargins(QMargins(2, 2, 2, 2));
  chart_->setMinimumSize(120, 40);  // else its axes' labels and titles set the panel's (and window's) minimum
  chart_view_ = new QChartView(chart_);
  chart_view_->setObjectName("strategiesChart");
  chart_view_->setRenderHint(QPainter::Antialiasing);
  chart_view_->setMinimumSize(160, 40);
  legend_ = new QLabel;
  legend_->setObjectName("strategiesLegend");
  legend_->setTextFormat(Qt::RichText);
  // One line (clipped in a narrow pane; the whole legend is its tooltip): a wrapping legend would
  // make the panel, and so the window, taller.
  legend_->setWordWrap(false);
  legend_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  auto* chart_box = new QWidget;
  auto* chart_col = new QVBoxLayout(chart_box);
  chart_col->setContentsMargins(0, 0, 0, 0);
  chart_col->setSpacing(2);
  chart_col->addWidget(chart_view_, 1);
  chart_col->addWidget(legend_);

  auto* split = new QSplitter(Qt::Horizontal);
  split->setObjectName("strategiesSplit");
  // The chart and the comparison share the right-hand side (the comparison comes forward while
  // two candidates are selected), so the table keeps the whole height.
  side_ = new QTabWidget;
  side_->setObjectName("strategiesSide");
  side_->setDocumentMode(true);
  side_->addTab(chart_box, "Chart");
  side_->addTab(comparison_, "Comparison");
  split->addWidget(table_);
  split->addWidget(side_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({600, 400});
  split->setChildrenCollapsible(false);
  col->addWidget(split, 1);

  connect(search_, &QPushButton::clicked, this, &StrategiesPanel::startSearch);
  connect(settings_, &QLineEdit::returnPressed, this, &StrategiesPanel::startSearch);
  connect(cancel_, &QPushButton::clicked, this, &StrategiesPanel::cancelRequested);
  setSubject(QString(), false, "Open a model of the zoo (File \u25b8 Examples) to search its strategies.");
  updateFamiliesButton();
  rebuildChart();
}

void StrategiesPanel::setFamilies(const QStringList& names, const QStringList& summaries) {
  QMenu* menu = families_->menu();
  menu->clear();
  for (int i = 0; i < names.size(); ++i) {
    QAction* a = menu->addAction(names[i]);
    a->setCheckable(true);
    a->setChecked(true);
    a->setObjectName("family:" + names[i]);
    if (i < summaries.size()) a->setToolTip(summaries[i]);
    connect(a, &QAction::toggled, this, [this, a](bool on) {
      // At least one family stays checked: unchecking the last one checks it again.
      if (!on) {
        bool any = false;
        for (const QAction* b : families_->menu()->actions()) any = any || b->isChecked();
        if (!any) {
          a->setChecked(true);  // toggles again, and updates the button then
          return;
        }
      }
      updateFamiliesButton();
    });
  }
  menu->setToolTipsVisible(true);
  updateFamiliesButton();
}

QStringList StrategiesPanel::selectedFamilies() const {
  QStringList on;
  const auto actions = families_->menu()->actions();
  for (const QAction* a : actions)
    if (a->isChecked()) on << a->text();
  return on.size() == actions.size() ? QStringList() : on;
}

void StrategiesPanel::setSelectedFamilies(const QStringList& names) {
  for (QAction* a : families_->menu()->actions()) {
    const QSignalBlocker block(a);
    a->setChecked(names.isEmpty() || names.contains(a->text()));
  }
  updateFamiliesButton();
}

void StrategiesPanel::updateFamiliesButton() {
  const auto actions = families_->menu()->actions();
  const QStringList on = selectedFamilies();
  families_->setText(on.isEmpty() ? QString("Families: all") : on.size() == 1 ? on.front() : QString("Families: %1 of %2").arg(on.size()).arg(actions.size()));
  families_->setToolTip(takes_settings_ ? QString("The strategy families the search generates candidates from (%1); "
                                                  "a family that does not apply to the model adds none")
                                              .arg(on.isEmpty() ? QString("all") : on.join(", "))
                                        : QString("A module of its own is searched by the integer program (method 2), "
                                                  "not by strategy families"));
  families_->setEnabled(supported_ && takes_settings_ && !running_ && !actions.isEmpty());
}

void StrategiesPanel::setSubject(const QString& model, bool supported, const QString& message, bool takes_settings) {
  supported_ = supported;
  subject_->setText(supported ? model : QString("(no zoo model)"));
  subject_->setToolTip(supported && takes_settings ? QString("The zoo model %1, with the settings beside it").arg(model)
                                                   : message);
  settings_->setEnabled(supported && takes_settings);
  takes_settings_ = takes_settings;
  updateFamiliesButton();
  settings_->setPlaceholderText(takes_settings ? QString("settings: layers=4 batch=64 \u2026")
                                               : QString("no settings: the module is searched as it is"));
  search_->setEnabled(supported && !running_);
  if (!supported) setStatus(message, /*wrap=*/true);
  else if (results_.rows.empty() && !running_)
    setStatus(takes_settings ? QString("Search the strategies of %1: choose the chip and the device count.").arg(model) : message,
              /*wrap=*/!takes_settings);
}

void StrategiesPanel::setChips(const QStringList& chips, const QString& current) {
  const QString keep = chip_->currentText();
  chip_->clear();
  chip_->addItems(chips);
  const QString want = current.isEmpty() ? keep : current;
  const int i = chip_->findText(want);
  if (i >= 0) chip_->setCurrentIndex(i);
}

QString StrategiesPanel::chip() const { return chip_->currentText(); }

void StrategiesPanel::setChip(const QString& chip) {
  const int i = chip_->findText(chip);
  if (i >= 0) chip_->setCurrentIndex(i);
}

int StrategiesPanel::devices() const { return devices_->value(); }
void StrategiesPanel::setDevices(int devices) { devices_->setValue(devices); }
QString StrategiesPanel::settingsText() const { return settings_->text().trimmed(); }
void StrategiesPanel::setSettingsText(const QString& text) { settings_->setText(text); }

void StrategiesPanel::startSearch() {
  if (!supported_ || running_) return;
  emit searchRequested(chip(), devices(), settingsText(), takes_settings_ ? selectedFamilies() : QStringList());
}

void StrategiesPanel::setRunning(bool running) {
  running_ = running;
  search_->setEnabled(supported_ && !running);
  cancel_->setEnabled(running);
  chip_->setEnabled(!running);
  devices_->setEnabled(!running);
  updateFamiliesButton();
  if (running) {
    progress_->setRange(0, 0);  // busy until the first candidate is counted
    progress_->setFormat("");
    progress_->setToolTip("Preparing the candidates");
  } else if (progress_->maximum() == 0) {
    progress_->setRange(0, 1);
    progress_->setValue(0);
  }
}

void StrategiesPanel::setProgress(int done, int total, const QString& stage) {
  if (total <= 0) {
    progress_->setRange(0, 0);
  } else {
    progress_->setRange(0, total);
    progress_->setValue(std::min(done, total));
    progress_->setFormat("%v/%m");
    progress_->setToolTip(QString("%1: %2 of %3 candidates").arg(stage).arg(std::min(done, total)).arg(total));
  }
}

void StrategiesPanel::setStatus(const QString& text, bool wrap) {
  status_->setWordWrap(wrap);
  status_->setFullText(text);
}

void StrategiesPanel::setError(const QString& message) {
  setStatus("The search failed: " + message, /*wrap=*/true);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat("");
  progress_->setToolTip(QString());
}

void StrategiesPanel::setResults(StrategyResults results) {
  results_ = std::move(results);
  selection_order_.clear();
  comparison_->clear();
  side_->setCurrentIndex(0);
  {
    QSignalBlocker block(table_->selectionModel());
    model_->removeRows(0, model_->rowCount());
    const bool dark = IsDarkPalette(palette());
    const QColor muted = palette().color(QPalette::Disabled, QPalette::Text);
    for (size_t i = 0; i < results_.rows.size(); ++i) {
      const StrategyEntry& r = results_.rows[i];
      QList<QStandardItem*> items;
      auto item = [&](const QString& text, bool right = false) {
        auto* it = new QStandardItem(text);
        if (right) it->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        if (!r.simulated || !r.fits) it->setForeground(muted);
        items.append(it);
        return it;
      };
      QStandardItem* rank = item(QString::number(i + 1) + (r.pareto ? "*" : ""), true);
      if (r.pareto) {
        QFont bold = rank->font();
        bold.setBold(true);
        rank->setFont(bold);
      }
      item(r.label)->setToolTip(r.label + " \u2014 " + r.outcome);
      QStandardItem* family = item(r.family);
      const int fi = static_cast<int>(results_.families.indexOf(r.family));
      if (fi >= 0) family->setForeground(FamilyColor(fi, dark));
      if (r.simulated) {
        item((r.extrapolated ? "~" : "") + Q(FormatSeconds(r.step_time_s)), true);
        item(Q(FormatPercent(r.mfu)), true);
        item(Q(FormatBytes(r.peak_bytes)) + " / " + Q(FormatBytes(results_.hbm_bytes)) + (r.fits ? "" : " OVER"), true);
        item(Q(FormatPercent(r.communication_share)), true);
        item(Q(FormatPercent(r.bubble_share)), true);
        item(r.collectives)->setToolTip(r.collectives);
      } else {
        item("\u2265" + Q(FormatSeconds(r.step_time_s)), true)->setToolTip("a lower bound: the candidate was not simulated");
        item("-", true);
        item("\u2265" + Q(FormatBytes(r.peak_bytes)), true);
        item("-", true);
        item("-", true);
        item(r.outcome + (r.collectives.isEmpty() ? "" : ": " + r.collectives))->setToolTip(r.collectives);
      }
      model_->appendRow(items);
    }
  }
  table_->resizeColumnsToContents();
  // The strategy column may take the room; the collectives stretch (the last section).
  table_->setColumnWidth(kStrategy, std::min(table_->columnWidth(kStrategy), 240));
  // One line when there are results to read; when nothing was simulated the summary is the
  // message (why every candidate was left out), so it wraps.
  const bool any_simulated =
      std::any_of(results_.rows.begin(), results_.rows.end(), [](const StrategyEntry& e) { return e.simulated; });
  setStatus(results_.summary, /*wrap=*/!any_simulated);
  progress_->setRange(0, 1);
  progress_->setValue(1);
  progress_->setFormat(QString("%1 done").arg(results_.rows.size()));
  progress_->setToolTip(QString("%1 candidates").arg(results_.rows.size()));
  rebuildChart();
  emit resultsChanged();
}

void StrategiesPanel::rebuildChart() {
  chart_->removeAllSeries();
  for (QAbstractAxis* a : chart_->axes()) {
    chart_->removeAxis(a);
    delete a;
  }
  selected_series_ = nullptr;
  const bool dark = IsDarkPalette(palette());
  double max_t = 0, max_m = results_.hbm_bytes;
  for (const StrategyPoint& p : results_.points) {
    max_t = std::max(max_t, p.step_time_s);
    max_m = std::max(max_m, p.peak_bytes);
  }
  const AxisUnit seconds = SecondsAxisUnit(std::max(max_t, 1e-9));
  const AxisUnit bytes = BytesAxisUnit(std::max(max_m, 1.0));
  time_scale_ = seconds.divisor;
  bytes_scale_ = bytes.divisor;
  auto* x = new QValueAxis;
  x->setTitleText(QString("step (%1)").arg(Q(seconds.unit)));
  x->setRange(0, std::max(1e-9, max_t * 1.08) / time_scale_);
  x->setLabelFormat("%.3g");
  // Memory on a log scale: a small model's candidates sit orders of magnitude under the HBM line.
  double min_m = max_m;
  for (const StrategyPoint& p : results_.points) min_m = std::min(min_m, p.peak_bytes);
  auto* y = new QLogValueAxis;
  y->setBase(10);
  y->setTitleText(QString("peak %1 / device (log)").arg(Q(bytes.unit)));
  y->setRange(std::max(1.0, min_m * 0.5) / bytes_scale_, std::max(2.0, max_m * 2) / bytes_scale_);
  y->setLabelFormat("%g");
  y->setMinorTickCount(-1);
  chart_->addAxis(x, Qt::AlignBottom);
  chart_->addAxis(y, Qt::AlignLeft);
  auto attach = [&](QAbstractSeries* s) {
    chart_->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  };
  auto point = [&](const StrategyPoint& p) { return QPointF(p.step_time_s / time_scale_, p.peak_bytes / bytes_scale_); };
  // One series per family.
  for (int f = 0; f < results_.families.size(); ++f) {
    auto* s = new QScatterSeries;
    s->setName(results_.families[f]);
    s->setMarkerSize(9);
    s->setColor(FamilyColor(f, dark));
    s->setBorderColor(FamilyColor(f, dark).darker(130));
    bool any = false;
    for (const StrategyPoint& p : results_.points)
      if (p.family == f) {
        s->append(point(p));
        any = true;
      }
    if (!any) {
      delete s;
      continue;
    }
    attach(s);
    connect(s, &QScatterSeries::clicked, this, [this, f](const QPointF& at) {
      // The nearest candidate of this family becomes the selection.
      int best = -1;
      double best_d = std::numeric_limits<double>::max();
      for (const StrategyPoint& p : results_.points) {
        if (p.family != f) continue;
        // Relative distances: time on its linear axis, memory on its log axis.
        const double dx = (p.step_time_s / time_scale_ - at.x()) / std::max(1e-12, std::fabs(at.x()) + 1e-12);
        const double dy = std::log10(std::max(1e-12, p.peak_bytes / bytes_scale_)) - std::log10(std::max(1e-12, at.y()));
        const double d = dx * dx + dy * dy;
        if (d < best_d) {
          best_d = d;
          best = p.row;
        }
      }
      if (best >= 0) selectRows({best});
    });
  }
  // The Pareto front, by ascending memory.
  if (!results_.pareto.empty()) {
    auto* front = new QLineSeries;
    front->setName("Pareto front");
    QPen pen(dark ? QColor("#e0e0e0") : QColor("#303030"), 1.5, Qt::DotLine);
    front->setPen(pen);
    front->setPointsVisible(true);
    for (int row : results_.pareto)
      for (const StrategyPoint& p : results_.points)
        if (p.row == row) front->append(point(p));
    attach(front);
  }
  // The HBM capacity.
  if (results_.hbm_bytes > 0) {
    auto* hbm = new QLineSeries;
    hbm->setName(QString("HBM %1").arg(Q(FormatBytes(results_.hbm_bytes))));
    hbm->setPen(QPen(QColor("#d62728"), 2, Qt::DashLine));
    hbm->append(0, results_.hbm_bytes / bytes_scale_);
    hbm->append(std::max(1e-9, max_t * 1.08) / time_scale_, results_.hbm_bytes / bytes_scale_);
    attach(hbm);
  }
  // The selected candidates, ringed.
  selected_series_ = new QScatterSeries;
  selected_series_->setName("selected");
  selected_series_->setMarkerSize(16);
  selected_series_->setColor(Qt::transparent);
  selected_series_->setBorderColor(palette().color(QPalette::Highlight));
  selected_series_->setPen(QPen(palette().color(QPalette::Highlight), 2.5));
  attach(selected_series_);
  // The legend: a swatch per family, the front and the HBM line.
  QStringList entries;
  for (QAbstractSeries* series : chart_->series()) {
    if (series == selected_series_) continue;
    QColor c;
    QString mark = "\u25cf";  // a dot for a family
    if (auto* sc = qobject_cast<QScatterSeries*>(series)) c = sc->color();
    if (auto* line = qobject_cast<QLineSeries*>(series)) {
      c = line->pen().color();
      mark = "\u2504";  // a dashed line
    }
    entries << QString("<span style='color:%1'>%2</span>&nbsp;%3").arg(c.name(), mark, series->name().toHtmlEscaped());
  }
  legend_->setText(entries.join(" &nbsp; "));
  legend_->setToolTip(entries.join("<br>"));
  legend_->setVisible(!results_.points.empty());
  chart_->setTitle(!results_.points.empty() ? QString()
                   : results_.rows.empty() ? QString("Step time vs peak memory (no search yet)")
                                           : QString("Step time vs peak memory (no candidate simulated)"));
  applyPalette();
  updateSelectionMarks();
}

void StrategiesPanel::updateSelectionMarks() {
  if (!selected_series_) return;
  QList<QPointF> pts;
  for (int row : selection_order_)
    for (const StrategyPoint& p : results_.points)
      if (p.row == row) pts.append(QPointF(p.step_time_s / time_scale_, p.peak_bytes / bytes_scale_));
  selected_series_->replace(pts);
}

void StrategiesPanel::selectRows(const std::vector<int>& rows) {
  QItemSelection selection;
  for (int r : rows)
    if (r >= 0 && r < model_->rowCount()) selection.select(model_->index(r, 0), model_->index(r, kColumns - 1));
  QItemSelectionModel* sm = table_->selectionModel();
  {
    QSignalBlocker block(sm);
    sm->clearSelection();
  }
  selection_order_.clear();
  // One at a time, so the order is the given one.
  for (int r : rows) {
    if (r < 0 || r >= model_->rowCount()) continue;
    sm->select(QItemSelection(model_->index(r, 0), model_->index(r, kColumns - 1)), QItemSelectionModel::Select);
  }
  if (!rows.empty() && rows.front() >= 0 && rows.front() < model_->rowCount()) {
    QSignalBlocker block(sm);
    sm->setCurrentIndex(model_->index(rows.front(), 0), QItemSelectionModel::NoUpdate);
    table_->scrollTo(model_->index(rows.front(), 0));
  }
}

void StrategiesPanel::onSelectionChanged() {
  std::vector<int> now;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows()) now.push_back(i.row());
  // Keep the order of selection: the rows still selected, then the new ones.
  std::vector<int> order;
  for (int r : selection_order_)
    if (std::find(now.begin(), now.end(), r) != now.end()) order.push_back(r);
  std::sort(now.begin(), now.end());
  for (int r : now)
    if (std::find(order.begin(), order.end(), r) == order.end()) order.push_back(r);
  const bool changed = order != selection_order_;
  selection_order_ = std::move(order);
  updateSelectionMarks();
  if (!changed) return;
  side_->setCurrentIndex(selection_order_.size() >= 2 ? 1 : 0);
  if (selection_order_.size() == 1) {
    comparison_->clear();
    emit candidateChosen(selection_order_.front());
  } else if (selection_order_.size() >= 2) {
    emit comparisonRequested(selection_order_.front(), selection_order_.back());
  } else {
    comparison_->clear();
  }
}

void StrategiesPanel::setComparison(const StrategyComparison& c) {
  auto esc = [](const QString& s) { return s.toHtmlEscaped(); };
  QString html = "<p>" + esc(c.explanation).replace("\n", "<br>") + "</p>";
  if (!c.lines.empty()) {
    html += "<table cellspacing='0' cellpadding='3' border='1' style='border-collapse:collapse'>";
    html += "<tr><th></th><th align='left'>A: " + esc(c.a_label) + "</th><th align='left'>B: " + esc(c.b_label) + "</th></tr>";
    for (const auto& l : c.lines)
      html += "<tr><td><b>" + esc(l[0]) + "</b></td><td>" + esc(l[1]) + "</td><td>" + esc(l[2]) + "</td></tr>";
    html += "</table>";
  }
  comparison_->setHtml(html);
}

void StrategiesPanel::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) rebuildChart();
}

void StrategiesPanel::applyPalette() {
  const QPalette pal = palette();
  chart_->setBackgroundBrush(pal.color(QPalette::Base));
  chart_->setTitleBrush(pal.color(QPalette::Text));
  chart_->legend()->setLabelColor(pal.color(QPalette::Text));
  for (QAbstractAxis* a : chart_->axes()) {
    a->setLabelsColor(pal.color(QPalette::Text));
    a->setTitleBrush(pal.color(QPalette::Text));
  }
}

}  // namespace shardscope::views
