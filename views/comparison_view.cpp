#include "views/comparison_view.h"

#include <algorithm>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QSplitter>
#include <QTableWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/memory_chart.h"
#include "views/run_display.h"
#include "views/run_history.h"
#include "views/timeline_view.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

QScrollArea* Scrolled(QWidget* w) {
  auto* scroll = new QScrollArea;
  scroll->setWidget(w);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setMinimumHeight(90);
  return scroll;
}

}  // namespace

ComparisonView::ComparisonView(QWidget* parent)
    : QWidget(parent),
      run_a_(new QComboBox),
      run_b_(new QComboBox),
      status_(new QLabel),
      title_(new QLabel),
      timeline_a_(new TimelineWidget),
      timeline_b_(new TimelineWidget),
      chart_(MemoryChart::Create()),
      table_(new QTableWidget(0, kColumnCount)) {
  setObjectName("comparisonView");
  run_a_->setObjectName("compareRunA");
  run_b_->setObjectName("compareRunB");
  for (QComboBox* box : {run_a_, run_b_}) {
    box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    box->setMinimumContentsLength(18);
    box->setToolTip("A run of the history (Simulation view); select two there with Ctrl-click to compare them");
  }
  auto* swap = new QToolButton;
  swap->setText(QString::fromUtf8("\u21C4"));
  swap->setToolTip("Swap A and B");
  status_->setObjectName("comparisonStatus");
  status_->setWordWrap(true);
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(6, 4, 6, 0);
  bar->addWidget(new QLabel("A:"));
  bar->addWidget(run_a_);
  bar->addWidget(swap);
  bar->addWidget(new QLabel("B:"));
  bar->addWidget(run_b_);
  bar->addStretch(1);
  // The verdict on a row of its own, with the whole width.
  auto* status_row = new QHBoxLayout;
  status_row->setContentsMargins(8, 0, 6, 2);
  status_row->addWidget(status_, 1);

  timeline_a_->setObjectName("comparedTimelineA");
  timeline_b_->setObjectName("comparedTimelineB");
  auto* lanes = new QSplitter(Qt::Vertical);
  lanes->setChildrenCollapsible(false);
  lanes->addWidget(Scrolled(timeline_a_));
  lanes->addWidget(Scrolled(timeline_b_));

  table_->setObjectName("runComparison");
  table_->setHorizontalHeaderLabels({"Figure", "Run A", "Run B", "B \u2212 A", "B / A", "Better"});
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->horizontalHeader()->setStretchLastSection(true);
  title_->setWordWrap(true);
  title_->setTextFormat(Qt::RichText);
  auto* figures = new QWidget;
  auto* fcol = new QVBoxLayout(figures);
  fcol->setContentsMargins(4, 0, 4, 0);
  fcol->addWidget(title_);
  fcol->addWidget(table_, 1);
  chart_->setMinimumSize(260, 160);
  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->setChildrenCollapsible(false);
  bottom->addWidget(chart_);
  bottom->addWidget(figures);
  bottom->setStretchFactor(0, 1);
  bottom->setStretchFactor(1, 1);
  bottom->setSizes({1000, 1000});  // half each, whatever the table's own width
  auto* split = new QSplitter(Qt::Vertical);
  split->setChildrenCollapsible(false);
  split->addWidget(lanes);
  split->addWidget(bottom);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(0, 0, 0, 0);
  col->addLayout(bar);
  col->addLayout(status_row);
  col->addWidget(split, 1);

  connect(run_a_, &QComboBox::currentIndexChanged, this, &ComparisonView::onChosen);
  connect(run_b_, &QComboBox::currentIndexChanged, this, &ComparisonView::onChosen);
  connect(swap, &QToolButton::clicked, this, [this] {
    if (compared_) compareRuns(compared_->second, compared_->first);
  });
  // One time scale for both.
  connect(timeline_a_, &TimelineWidget::rangeChanged, this, [this](double a, double b) {
    if (timeline_b_->rangeStart() != a || timeline_b_->rangeEnd() != b) timeline_b_->setRange(a, b);
  });
  connect(timeline_b_, &TimelineWidget::rangeChanged, this, [this](double a, double b) {
    if (timeline_a_->rangeStart() != a || timeline_a_->rangeEnd() != b) timeline_a_->setRange(a, b);
  });
  connect(timeline_a_, &TimelineWidget::eventClicked, this, [this](const QString& name, int) {
    if (timeline_a_->run()) onEventClicked(timeline_a_->run()->id, name);
  });
  connect(timeline_b_, &TimelineWidget::eventClicked, this, [this](const QString& name, int) {
    if (timeline_b_->run()) onEventClicked(timeline_b_->run()->id, name);
  });
  clear();
}

void ComparisonView::setModels(DocumentModel* doc, AnalysisModel* analysis, RunHistory* runs) {
  for (QObject* o : {static_cast<QObject*>(doc_.data()), static_cast<QObject*>(analysis_.data()), static_cast<QObject*>(runs_.data())}) {
    if (o) o->disconnect(this);
  }
  doc_ = doc;
  analysis_ = analysis;
  runs_ = runs;
  if (!doc_ || !runs_) return;
  connect(runs_, &RunHistory::historyReset, this, &ComparisonView::refreshChoosers);
  connect(runs_, &RunHistory::runAdded, this, &ComparisonView::refreshChoosers);
  connect(runs_, &RunHistory::runLabelChanged, this, &ComparisonView::refreshChoosers);
  connect(runs_, &RunHistory::runRemoved, this, [this](qint64 id) {
    if (compared_ && (compared_->first == id || compared_->second == id)) clear();
    refreshChoosers();
  });
  connect(runs_, &RunHistory::runLoaded, this, &ComparisonView::onRunLoaded);
  connect(runs_, &RunHistory::comparisonReady, this, [this](qint64 a, qint64 b) {
    if (compared_ && compared_->first == a && compared_->second == b) displayFigures();
  });
  connect(doc_, &DocumentModel::selectionChanged, this, &ComparisonView::highlightSelection);
  // A new module: what was compared belonged to the old one's session.
  connect(doc_, &DocumentModel::moduleReset, this, &ComparisonView::clear);
  refreshChoosers();
}

void ComparisonView::refreshChoosers() {
  if (!runs_) return;
  updating_ = true;
  for (QComboBox* box : {run_a_, run_b_}) {
    box->clear();
    box->addItem("(choose a run)", QVariant::fromValue<qint64>(0));
    for (const RunOverview& o : runs_->runs()) {
      box->addItem(QString("%1 \u00B7 %2").arg(RunName(o.id), Q(o.label.empty() ? RunModuleName(o.inputs) : o.label)),
                   QVariant::fromValue<qint64>(o.id));
    }
  }
  if (compared_) {
    run_a_->setCurrentIndex(std::max(0, run_a_->findData(QVariant::fromValue<qint64>(compared_->first))));
    run_b_->setCurrentIndex(std::max(0, run_b_->findData(QVariant::fromValue<qint64>(compared_->second))));
  }
  updating_ = false;
}

void ComparisonView::onChosen() {
  if (updating_) return;
  const qint64 a = run_a_->currentData().toLongLong(), b = run_b_->currentData().toLongLong();
  if (a != 0 && b != 0 && a != b) compareRuns(a, b);
}

void ComparisonView::clear() {
  compared_.reset();
  timeline_a_->setRun(nullptr);
  timeline_b_->setRun(nullptr);
  timeline_a_->setTitle(QString());
  timeline_b_->setTitle(QString());
  chart_->clear();
  table_->setRowCount(0);
  title_->clear();
  status_->setText("Choose two runs (A and B), or Ctrl-click two runs in the Simulation view's history.");
  refreshChoosers();
  emit comparisonChanged();
}

bool ComparisonView::compareRuns(int64_t run_a, int64_t run_b) {
  if (!runs_ || !runs_->overview(run_a) || !runs_->overview(run_b) || run_a == run_b) return false;
  compared_ = std::make_pair(run_a, run_b);
  refreshChoosers();
  table_->setRowCount(0);
  title_->setText(QString("<b>A</b> = %1 vs <b>B</b> = %2 \u2026").arg(RunName(run_a), RunName(run_b)));
  status_->setText(QString("Loading %1 and %2\u2026").arg(RunName(run_a), RunName(run_b)));
  timeline_a_->setRun(nullptr);
  timeline_b_->setRun(nullptr);
  chart_->clear();
  runs_->requestComparison(run_a, run_b);
  runs_->requestRun(run_a);  // runLoaded follows (at once when in memory)
  runs_->requestRun(run_b);
  emit comparisonChanged();
  return true;
}

void ComparisonView::onRunLoaded(qint64 run_id) {
  if (!runs_ || !compared_) return;
  if (run_id != compared_->first && run_id != compared_->second) return;
  auto a = runs_->loadedRun(compared_->first);
  auto b = runs_->loadedRun(compared_->second);
  if (!a || !b) return;
  // Both timelines on one time scale, one above the other, and both memory curves overlaid.
  const double span = std::max(a->summary.step_time_s, b->summary.step_time_s);
  timeline_a_->setRun(a);
  timeline_a_->setTitle("A \u00B7 " + RunName(a->id));
  timeline_b_->setRun(b);
  timeline_b_->setTitle("B \u00B7 " + RunName(b->id));
  timeline_a_->setMinimumSpan(span);
  timeline_b_->setMinimumSpan(span);
  for (TimelineWidget* t : {timeline_a_, timeline_b_}) {
    const int64_t id = t->run()->id;
    QPointer<const ComparisonView> self(this);
    t->setOriginResolver([self, id](const QString& name) {
      if (!self || !self->doc_) return QString();
      return self->doc_->qualifiedName(
          self->doc_->instruction(InstructionForRunEvent(self->doc_, self->runs_, self->analysis_, id, name)));
    });
  }
  highlightSelection();
  ShowComparedMemory(chart_, *a, *b, palette());
}

void ComparisonView::displayFigures() {
  if (!runs_ || !runs_->comparison()) return;
  const RunComparison& c = *runs_->comparison();
  auto describe = [](const RunOverview& o) {
    return QString("%1 <small>\u00B7 %2</small>")
        .arg(RunName(o.id).toHtmlEscaped(), Q(o.label.empty() ? RunModuleName(o.inputs) : o.label).toHtmlEscaped());
  };
  title_->setText(QString("<b>A</b> %1<br><b>B</b> %2").arg(describe(c.a), describe(c.b)));
  table_->setRowCount(static_cast<int>(c.figures.size()));
  QColor better_bg = palette().color(QPalette::Highlight);
  better_bg.setAlpha(60);
  for (int r = 0; r < static_cast<int>(c.figures.size()); ++r) {
    const ComparedFigure& f = c.figures[static_cast<size_t>(r)];
    auto item = [&](int col, const QString& text, const QVariant& raw) {
      auto* it = new QTableWidgetItem(text);
      if (raw.isValid()) it->setData(Qt::UserRole, raw);
      if (col != kFigure) it->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table_->setItem(r, col, it);
      return it;
    };
    item(kFigure, Q(f.name), QVariant());
    auto* ia = item(kRunA, FormatFigure(f, f.a), f.a);
    auto* ib = item(kRunB, FormatFigure(f, f.b), f.b);
    item(kDifference, FormatDifference(f), f.difference());
    item(kRatio, f.a != 0 ? QString::fromUtf8("\u00D7%1").arg(f.ratio(), 0, 'f', 3) : QString("\u2013"), f.ratio());
    const int better = BetterRun(f);
    if (better != 0) {
      QTableWidgetItem* winner = better > 0 ? ib : ia;
      QFont bold = winner->font();
      bold.setBold(true);
      winner->setFont(bold);
      winner->setBackground(better_bg);
    }
    item(kBetter, better == 0 ? QString("tie") : better > 0 ? QString("B") : QString("A"), QVariant())
        ->setTextAlignment(Qt::AlignCenter);
  }
  table_->resizeColumnsToContents();
  const int step = BetterRun(c.step_time), memory = BetterRun(c.peak_memory);
  auto verdict = [](int better, const QString& what) {
    if (better == 0) return QString("same %1").arg(what);
    return QString("%1 has the better %2").arg(better > 0 ? "B" : "A", what);
  };
  status_->setText(QString("Comparing %1 and %2: step time B/A \u00D7%3, peak memory B/A \u00D7%4 (%5; %6)")
                       .arg(RunName(c.a.id), RunName(c.b.id))
                       .arg(c.step_time.ratio(), 0, 'f', 3)
                       .arg(c.peak_memory.ratio(), 0, 'f', 3)
                       .arg(verdict(step, "step time"), verdict(memory, "peak memory")));
}

void ComparisonView::highlightSelection() {
  if (!doc_) return;
  const QString name = doc_->qualifiedName(doc_->instruction(doc_->selected()));
  timeline_a_->setHighlightedOrigin(name);
  timeline_b_->setHighlightedOrigin(name);
}

void ComparisonView::onEventClicked(int64_t run_id, const QString& instruction) {
  if (!doc_) return;
  const int64_t id = InstructionForRunEvent(doc_, runs_, analysis_, run_id, instruction);
  if (id < 0) {
    status_->setText(QString("%1 has no instruction in this module: the partitioner inserted it, or the run is of "
                             "another module.").arg(instruction));
    return;
  }
  doc_->select(id);
}

}  // namespace shardscope::views
